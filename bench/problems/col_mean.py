"""Mean over the first dimension (a column reduction) of a 16384 x 4096 fp32 tensor at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, COLS = (16384, 4096) if LARGE else (64, 48)


class Model(torch.nn.Module):
    def forward(self, x):
        return x.mean(dim=0)


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return []
