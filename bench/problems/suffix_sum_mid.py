"""Suffix sums along the middle axis of a 64 x 4096 x 512 fp32 tensor at KERNELOPT_SIZE=large (a scan across rows)."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (64, 4096, 512) if LARGE else (3, 40, 24)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.cumsum(x.flip(1), dim=1).flip(1)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
