"""Linear layers (extern GEMMs) with fused epilogues: bias + residual + dropout-free scaling, attention scores."""
import torch


class Model(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.q = torch.nn.Linear(dim, dim)
        self.k = torch.nn.Linear(dim, dim)

    def forward(self, x):
        q, k = self.q(x), self.k(x)
        scores = torch.softmax(q @ k.transpose(-1, -2) / dim_scale(q), dim=-1)
        return scores @ x + torch.tanh(q) * k


def dim_scale(t):
    return t.shape[-1] ** 0.5


def get_inputs():
    return [torch.randn(2, 6, 8)]


def get_init_inputs():
    return [8]
