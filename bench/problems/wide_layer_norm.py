"""LayerNorm without affine weights over 65536 features of 16384 rows, fp32 (2^30 elements), at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, FEATURES = (16384, 65536) if LARGE else (7, 130)


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.nn.functional.layer_norm(x, (FEATURES,), eps=1e-5)


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return []
