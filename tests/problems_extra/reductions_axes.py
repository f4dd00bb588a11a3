"""Sums, means, products and extrema over each axis of a 3-d tensor, and over two axes at once."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return (
            x.sum(0),
            x.mean(1),
            x.amax(2),
            x.amin(1, keepdim=True),
            torch.prod(x * 0.5 + 1.0, 2),
            x.sum((0, 2)),
        )


def get_inputs():
    return [torch.randn(4, 6, 8)]


def get_init_inputs():
    return []
