"""Chain of pointwise ops (scale, shift, sigmoid, tanh, clamp, mul) that Inductor fuses into one kernel."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
BATCH, DIM = (4096, 4096) if LARGE else (4, 64)


class Model(torch.nn.Module):
    def __init__(self, dim, scale, lo, hi):
        super().__init__()
        self.scale = scale
        self.lo = lo
        self.hi = hi
        self.bias = torch.nn.Parameter(torch.randn(dim) * 0.1)

    def forward(self, x):
        y = x * self.scale + self.bias
        gate = torch.sigmoid(y)
        y = torch.tanh(y) * gate
        y = torch.clamp(y, self.lo, self.hi)
        return y + 0.5 * x


def get_inputs():
    return [torch.randn(BATCH, DIM)]


def get_init_inputs():
    return [DIM, 1.7, -0.6, 0.8]
