"""Maximum over the middle dimension of a 128 x 4096 x 256 fp32 tensor (a strided reduction) at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
SHAPE = (128, 4096, 256) if LARGE else (3, 20, 8)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.amax(x, dim=1)


def get_inputs():
    return [torch.randn(*SHAPE)]


def get_init_inputs():
    return []
