"""Training step of a scaled softmax over 8192 columns of 8192 bf16 rows (attention-probability sized)."""

import torch

TRAINING = True
ROWS, COLUMNS = 8192, 8192


class Model(torch.nn.Module):
    def __init__(self, columns: int):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(columns, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(x * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLUMNS, dtype=torch.bfloat16)]


def get_init_inputs():
    return [COLUMNS]
