"""Argmax over the last dimension of a 65536 x 32768 fp32 tensor (2^31 elements) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, COLS = (65536, 32768) if LARGE else (32, 128)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.argmax(x, dim=1)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
