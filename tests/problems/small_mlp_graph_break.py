"""Three-layer MLP with LayerNorm and a deliberate graph break mid-forward, so torch.compile emits two graphs."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
BATCH, D_IN, D_HIDDEN, D_OUT = (4096, 1024, 4096, 1024) if LARGE else (4, 32, 64, 16)


class Model(torch.nn.Module):
    def __init__(self, d_in, d_hidden, d_out):
        super().__init__()
        self.fc1 = torch.nn.Linear(d_in, d_hidden)
        self.norm = torch.nn.LayerNorm(d_hidden)
        self.fc2 = torch.nn.Linear(d_hidden, d_hidden)
        self.fc3 = torch.nn.Linear(d_hidden, d_out)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = self.norm(h)
        torch._dynamo.graph_break()
        h = torch.nn.functional.silu(self.fc2(h))
        return torch.tanh(self.fc3(h))


def get_inputs():
    return [torch.randn(BATCH, D_IN)]


def get_init_inputs():
    return [D_IN, D_HIDDEN, D_OUT]
