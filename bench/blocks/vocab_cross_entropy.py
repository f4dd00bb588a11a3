"""Cross-entropy over a 128k-entry vocabulary from bfloat16 logits: a language model's loss.

Each row of logits (128,256 classes, 256 KB in bf16) is read for its maximum, its sum of
exponentials and the target's logit: a memory-bound reduction over very wide rows.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

tokens = 8192
vocab = 128256

SHAPES = {
    "t4096": {"tokens": 4096},
    "t8192": {"tokens": 8192},
    "t16384": {"tokens": 16384},
}


class Model(nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), targets)


def get_inputs():
    return [torch.randn(tokens, vocab, dtype=torch.bfloat16) * 2, torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
