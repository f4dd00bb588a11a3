"""A linear layer, layer norm over its features and GELU: a GEMM whose epilogue is a row reduction."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
ROWS, IN, OUT = (8192, 2048, 2048) if LARGE else (8, 32, 64)


class Model(torch.nn.Module):
    def __init__(self, in_features, out_features):
        super().__init__()
        self.linear = torch.nn.Linear(in_features, out_features)
        self.norm = torch.nn.LayerNorm(out_features)

    def forward(self, x):
        return torch.nn.functional.gelu(self.norm(self.linear(x)))


def get_inputs():
    return [torch.randn(ROWS, IN)]


def get_init_inputs():
    return [IN, OUT]
