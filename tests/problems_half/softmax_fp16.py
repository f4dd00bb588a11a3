"""fp16 softmax over rows, after a scale held as an fp16 parameter made in ``__init__``."""
import torch

ROWS, COLS = 8, 64


class Model(torch.nn.Module):
    def __init__(self, cols):
        super().__init__()
        self.scale = torch.nn.Parameter(torch.ones(cols, dtype=torch.float16) + 0.1 * torch.randn(cols).half())

    def forward(self, x):
        return torch.softmax(x * self.scale, dim=-1)


def get_inputs():
    return [torch.randn(ROWS, COLS, dtype=torch.float16)]


def get_init_inputs():
    return [COLS]
