"""Mean cross-entropy loss over float logits and int64 class targets (log-softmax, gather, mean reduction)."""
import os

import torch

LARGE = os.environ.get("KERNELOPT_SIZE", "small") == "large"
BATCH, CLASSES = (8192, 4096) if LARGE else (16, 64)


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()

    def forward(self, logits, targets):
        return torch.nn.functional.cross_entropy(logits, targets, reduction="mean")


def get_inputs():
    return [torch.randn(BATCH, CLASSES), torch.randint(0, CLASSES, (BATCH,), dtype=torch.int64)]


def get_init_inputs():
    return []
