"""nn.Conv2d (extern convolution) followed by an extra per-channel bias, ReLU and a scale as a Triton epilogue."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
if LARGE:
    BATCH, C_IN, C_OUT, H, W = 32, 64, 128, 64, 64
else:
    BATCH, C_IN, C_OUT, H, W = 2, 3, 8, 8, 8
KERNEL = 3


class Model(torch.nn.Module):
    def __init__(self, c_in, c_out, kernel, scale):
        super().__init__()
        self.conv = torch.nn.Conv2d(c_in, c_out, kernel, padding=1)
        self.extra_bias = torch.nn.Parameter(0.1 * torch.randn(c_out, 1, 1))
        self.scale = scale

    def forward(self, x):
        y = self.conv(x) + self.extra_bias
        return torch.relu(y) * self.scale


def get_inputs():
    return [torch.randn(BATCH, C_IN, H, W)]


def get_init_inputs():
    return [C_IN, C_OUT, KERNEL, 1.5]
