"""Softmax over rows of a 32768 x 65536 fp32 tensor (2^31 elements in and out) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, COLS = (32768, 65536) if LARGE else (16, 256)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
