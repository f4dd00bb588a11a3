"""3x3 average pooling with stride 2 and a ReLU, on a 32 x 64 x 128 x 128 fp32 batch at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (32, 64, 128, 128) if LARGE else (2, 3, 12, 12)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(torch.nn.functional.avg_pool2d(x, kernel_size=3, stride=2, padding=1))


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
