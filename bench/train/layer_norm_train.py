"""Training step of a LayerNorm with affine weights over 4096 features of 8192 rows, fp32 (default loss)."""

import torch

TRAINING = True
ROWS, FEATURES = 8192, 4096


class Model(torch.nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.norm(x)


def get_inputs():
    return [torch.randn(ROWS, FEATURES)]


def get_init_inputs():
    return [FEATURES]
