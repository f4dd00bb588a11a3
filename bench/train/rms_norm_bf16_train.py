"""Training step of an RMSNorm (Llama-style: statistics in fp32, weight in bf16) over 4096 features of 16384 rows."""

import torch

TRAINING = True
ROWS, FEATURES = 16384, 4096


class Model(torch.nn.Module):
    def __init__(self, features: int):
        super().__init__()
        self.weight = torch.nn.Parameter(torch.ones(features, dtype=torch.bfloat16))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        xf = x.float()
        y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + 1e-6)
        return self.weight * y.to(x.dtype)


def get_inputs():
    return [torch.randn(ROWS, FEATURES, dtype=torch.bfloat16)]


def get_init_inputs():
    return [FEATURES]
