"""GroupNorm with 8 groups over a 32 x 64 x 128 x 128 fp32 batch (each group 8 channels x 128 x 128 = 131072 elements, 512 KB) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (32, 64, 128, 128) if LARGE else (2, 8, 5, 6)


class Model(torch.nn.Module):
    def __init__(self, groups, channels):
        super().__init__()
        self.norm = torch.nn.GroupNorm(groups, channels)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return [4 if not LARGE else 8, SHAPE[1]]
