"""Mean squared error between two 64M-element fp32 tensors (a full reduction to a scalar) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
N = (1 << 26) if LARGE else 1000


class Model(torch.nn.Module):
    def forward(self, prediction, target):
        return torch.mean((prediction - target) ** 2)


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
