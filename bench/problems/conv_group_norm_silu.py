"""A 3x3 convolution, group norm (32 groups) and SiLU in bfloat16, as a diffusion U-Net's residual
block has them: 16 x 64 x 64 x 64 in, 16 x 128 x 64 x 64 out at KERNELOPT_SIZE=large."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
BATCH, C_IN, C_OUT, SIZE, GROUPS = (16, 64, 128, 64, 32) if LARGE else (2, 4, 8, 6, 4)


class Model(torch.nn.Module):
    def __init__(self, c_in, c_out, groups):
        super().__init__()
        self.conv = torch.nn.Conv2d(c_in, c_out, 3, padding=1)
        self.norm = torch.nn.GroupNorm(groups, c_out)
        with torch.no_grad():  # an affine part as a trained network has it, not the identity
            self.norm.weight.uniform_(0.5, 1.5)
            self.norm.bias.uniform_(-0.3, 0.3)
        self.to(torch.bfloat16)

    def forward(self, x):
        return torch.nn.functional.silu(self.norm(self.conv(x)))


def get_inputs():
    return [torch.randn(BATCH, C_IN, SIZE, SIZE, dtype=torch.bfloat16)]


def get_init_inputs():
    return [C_IN, C_OUT, GROUPS]
