"""Training step of a small MLP block: Linear -> LayerNorm -> GELU -> Linear (default loss)."""

import torch
import torch.nn as nn

TRAINING = True


class Model(nn.Module):
    def __init__(self, features: int, hidden: int):
        super().__init__()
        self.up = nn.Linear(features, hidden)
        self.norm = nn.LayerNorm(hidden)
        self.down = nn.Linear(hidden, features)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.down(torch.nn.functional.gelu(self.norm(self.up(x))))


def get_inputs():
    return [torch.randn(8, 16)]


def get_init_inputs():
    return [16, 32]
