"""masked_fill, where, logical ops on bool tensors, any/all reductions and comparisons."""
import torch


class Model(torch.nn.Module):
    def forward(self, x, m):
        filled = x.masked_fill(m, -1e4)
        both = torch.logical_and(x > 0, m)
        either = torch.logical_or(x < -1, m) ^ (x > 2)
        return filled, both, ~either, (x > 0).any(1), m.all(0), torch.where(m, x, torch.zeros_like(x)), (x == x.round()).sum()


def get_inputs():
    return [torch.randn(5, 7), torch.rand(5, 7) > 0.5]


def get_init_inputs():
    return []
