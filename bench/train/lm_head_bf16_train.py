"""Training step of a language model's head and loss in bfloat16: hidden states (4,096 tokens, 2,048 wide)
through an untied 50,304-entry output projection, then cross-entropy in float32.

The two GEMMs of the backward and the one of the forward are most of the step; the loss reads the 412 MB of
bf16 logits and its backward writes their gradient, the part of the step a kernel can change.
"""

import torch
import torch.nn.functional as F

TRAINING = True
tokens, hidden, vocab = 4096, 2048, 50304


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(hidden, vocab, bias=False).to(torch.bfloat16)

    def forward(self, h: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(self.head(h).float(), targets)


def get_inputs():
    return [torch.randn(tokens, hidden, dtype=torch.bfloat16), torch.randint(0, vocab, (tokens,))]


def get_init_inputs():
    return []
