"""A long elementwise chain over most unary and binary math functions torch lowers to Triton."""
import torch


class Model(torch.nn.Module):
    def forward(self, x, y):
        a = torch.exp(x) + torch.log(torch.abs(y) + 1) + torch.tanh(x) * torch.erf(y)
        b = torch.sigmoid(a) ** 1.5 + torch.pow(torch.abs(x), y) + torch.sqrt(torch.abs(a)) + torch.rsqrt(y * y + 1)
        c = torch.sign(x) * torch.clamp(b, -2.0, 3.0) + torch.where(x > y, x, y)
        d = torch.sin(c) + torch.cos(x) + torch.floor(y) + torch.ceil(x) + torch.round(c) + torch.trunc(y)
        e = torch.fmod(d, 1.7) + torch.remainder(x, 0.3) + torch.atan2(x, y) + torch.log1p(torch.abs(x))
        f = torch.expm1(y) + torch.reciprocal(y + 3) + torch.hypot(x, y) + torch.lgamma(torch.abs(x) + 1)
        g = torch.log2(torch.abs(y) + 1) + torch.exp2(x) + torch.asin(torch.tanh(y)) + torch.sinh(x)
        h = torch.nan_to_num(torch.log(y)) + torch.isnan(x).float() + torch.isinf(e / x).float()
        return a + b + c + d + e + f + g + h + torch.minimum(x, y) + torch.maximum(x, y) + torch.erfinv(torch.tanh(x) * 0.5)


def get_inputs():
    return [torch.randn(64), torch.randn(64)]


def get_init_inputs():
    return []
