"""An elementwise chain: GELU of x plus a broadcast bias, times a scale, on 8192 x 8192 fp32 at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, COLS = (8192, 8192) if LARGE else (4, 80)


class Model(torch.nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.bias = torch.nn.Parameter(torch.randn(cols) * 0.1)

    def forward(self, x):
        return torch.nn.functional.gelu(x + self.bias) * 1.7


def get_inputs():
    return [torch.randn(ROWS, COLS)]


def get_init_inputs():
    return [COLS]
