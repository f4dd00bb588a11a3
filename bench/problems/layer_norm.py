"""LayerNorm (with affine weights) over the last 4096 features of 8192 rows, fp32, at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, FEATURES = (8192, 4096) if LARGE else (6, 40)


class Model(torch.nn.Module):
    def __init__(self, features):
        super().__init__()
        self.norm = torch.nn.LayerNorm(features)

    def forward(self, x):
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES]
