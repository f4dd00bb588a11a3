"""Smooth L1 (Huber) loss between two 64M-element fp32 tensors, mean-reduced, at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
N = (1 << 26) if LARGE else 3000


class Model(torch.nn.Module):
    def forward(self, prediction, target):
        return torch.nn.functional.smooth_l1_loss(prediction, target, beta=0.5)


def get_inputs():
    return [torch.randn(N), torch.randn(N)]


def get_init_inputs():
    return []
