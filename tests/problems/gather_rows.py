"""Embedding-style row lookup with int64 indices (index_select on a learned table) followed by pointwise ops."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
VOCAB, DIM, N_IDX = (32768, 1024, 16384) if LARGE else (32, 32, 64)


class Model(torch.nn.Module):
    def __init__(self, vocab, dim):
        super().__init__()
        self.table = torch.nn.Parameter(torch.randn(vocab, dim))
        self.gain = torch.nn.Parameter(1.0 + 0.1 * torch.randn(dim))

    def forward(self, x, idx):
        rows = torch.index_select(self.table, 0, idx)
        return torch.sigmoid(rows * self.gain) + x


def get_inputs():
    return [torch.randn(N_IDX, DIM), torch.randint(0, VOCAB, (N_IDX,), dtype=torch.int64)]


def get_init_inputs():
    return [VOCAB, DIM]
