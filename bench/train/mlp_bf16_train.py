"""Training step of a transformer MLP in bf16: LayerNorm, Linear 1024 -> 4096, GELU, Linear back, residual add,
over 8192 tokens (weights cast in __init__)."""

import torch
import torch.nn.functional as F

TRAINING = True
TOKENS, WIDTH = 8192, 1024


class Model(torch.nn.Module):
    def __init__(self, width: int):
        super().__init__()
        self.norm = torch.nn.LayerNorm(width)
        self.up = torch.nn.Linear(width, 4 * width)
        self.down = torch.nn.Linear(4 * width, width)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.down(F.gelu(self.up(self.norm(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(TOKENS, WIDTH, dtype=torch.bfloat16)]


def get_init_inputs():
    return [WIDTH]
