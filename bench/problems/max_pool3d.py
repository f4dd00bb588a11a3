"""3x3x3 max pooling, stride 2, padding 1, over a 16 x 32 x 64 x 64 x 64 fp32 volume at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (16, 32, 64, 64, 64) if LARGE else (2, 3, 7, 8, 9)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.max_pool3d(x, kernel_size=3, stride=2, padding=1)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
