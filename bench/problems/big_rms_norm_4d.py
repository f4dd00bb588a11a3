"""RMS normalisation over the feature axis of a (16, 64, 1024, 2048) fp32 tensor (2^31 elements) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (16, 64, 1024, 2048) if LARGE else (2, 8, 8, 16)


class Model(torch.nn.Module):
    def __init__(self, features, eps):
        super().__init__()
        self.eps = eps
        self.features = features

    def forward(self, x):
        rms = torch.sqrt(torch.mean(x * x, dim=1, keepdim=True) + self.eps)
        return x / rms


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return [SHAPE[1], 1e-5]
