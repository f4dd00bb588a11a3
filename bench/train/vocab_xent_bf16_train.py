"""Training step of a language model's loss: cross-entropy over a 128k-entry vocabulary from bfloat16 logits
(cast to float32 first, as training scripts write it), a tenth of the tokens padding (``ignore_index``).

The step's gradient is the logits' (the input): each row of 128,256 logits (256 KB in bf16) is read for
the loss and again for its gradient, which is written once: a memory-bound pair of passes over wide rows.
"""

import torch
import torch.nn.functional as F

TRAINING = True
tokens, vocab = 8192, 128256


class Model(torch.nn.Module):
    def forward(self, logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits.float(), targets, ignore_index=-100)


def get_inputs():
    targets = torch.randint(0, vocab, (tokens,))
    targets[torch.rand(tokens) < 0.1] = -100
    return [torch.randn(tokens, vocab, dtype=torch.bfloat16) * 2, targets]


def get_init_inputs():
    return []
