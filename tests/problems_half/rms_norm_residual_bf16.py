"""bf16 RMSNorm with a residual add: weights cast in ``__init__``, inputs drawn in bf16."""
import torch

ROWS, HIDDEN = 8, 64


class Model(torch.nn.Module):
    def __init__(self, hidden, eps):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(1.0 + 0.1 * torch.randn(hidden))
        self.to(torch.bfloat16)

    def forward(self, x, residual):
        h = x + residual
        inv_rms = torch.rsqrt(h.float().pow(2).mean(dim=-1, keepdim=True) + self.eps)
        return (h.float() * inv_rms).to(torch.bfloat16) * self.weight


def get_inputs():
    return [torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16), torch.randn(ROWS, HIDDEN, dtype=torch.bfloat16)]


def get_init_inputs():
    return [HIDDEN, 1e-6]
