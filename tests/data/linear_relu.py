"""A two-layer MLP in float32, small: a linear layer with a bias, ReLU, a second linear layer; the pattern of the
GEMM-activation rewrite (``capture/graph_rewrites._gemm_activations``: the ReLU in the GEMM's epilogue)."""

import torch


class Model(torch.nn.Module):
    def __init__(self, width: int = 32, hidden: int = 64):
        super().__init__()
        self.mlp = torch.nn.Sequential(torch.nn.Linear(width, hidden), torch.nn.ReLU(), torch.nn.Linear(hidden, width))

    def forward(self, x):
        return x + self.mlp(x)


def get_inputs():
    return [torch.randn(2, 12, 32)]


def get_init_inputs():
    return []
