"""3x3 max pooling, stride 2, padding 1, on a 32 x 64 x 256 x 256 fp32 batch at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (32, 64, 256, 256) if LARGE else (2, 3, 11, 13)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.pool = torch.nn.MaxPool2d(kernel_size=3, stride=2, padding=1)

    def forward(self, x):
        return self.pool(x)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
