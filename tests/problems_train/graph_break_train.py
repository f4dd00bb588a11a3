"""A training step across a graph break, the same kernels on both sides: four graphs, names repeated."""

import torch

TRAINING = True


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.ones(64))

    def forward(self, x):
        y = torch.sin(x * self.w) * 2.0
        torch._dynamo.graph_break()
        return torch.sin(y * self.w) * 2.0


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []
