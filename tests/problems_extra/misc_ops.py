"""Odds and ends: frexp, integer powers, one_hot, triangular masks, randint, scatter_reduce amax, index_put accumulate."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x, n, idx):
        mantissa, exponent = torch.frexp(x)
        powers = n ** 3 + torch.pow(n, 2)
        hot = F.one_hot(idx, 8).sum(0)
        tri = torch.tril(x.reshape(4, 4)) - torch.triu(x.reshape(4, 4), 1)
        noise = torch.randint_like(n, 0, 10)
        amax = x.new_zeros(8).scatter_reduce(0, idx, x, reduce="amax", include_self=False)
        acc = x.new_zeros(8).index_put((idx,), x, accumulate=True)
        return mantissa, exponent, powers, hot, tri, noise * 0, amax, acc


def get_inputs():
    return [torch.randn(16), torch.randint(-4, 4, (16,)), torch.randint(0, 8, (16,))]


def get_init_inputs():
    return []
