"""A 3x3 convolution, batch norm (inference statistics) and ReLU: a conv with an epilogue."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
BATCH, C_IN, C_OUT, SIZE = (32, 64, 128, 56) if LARGE else (2, 3, 8, 8)


class Model(torch.nn.Module):
    def __init__(self, c_in, c_out):
        super().__init__()
        self.conv = torch.nn.Conv2d(c_in, c_out, 3, padding=1, bias=False)
        self.bn = torch.nn.BatchNorm2d(c_out)
        with torch.no_grad():  # statistics as a trained network has them, not the identity
            self.bn.running_mean.uniform_(-0.5, 0.5)
            self.bn.running_var.uniform_(0.5, 2.0)
            self.bn.weight.uniform_(0.5, 1.5)
            self.bn.bias.uniform_(-0.2, 0.2)

    def forward(self, x):
        return torch.relu(self.bn(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE)]


def get_init_inputs():
    return [C_IN, C_OUT]
