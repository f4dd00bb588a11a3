"""A language model's loss as a training step, small: bf16 logits from a projection, cast to float32 and viewed
to rows before the cross-entropy, a padded target ignored; the pattern of the cross-entropy rewrite (rows of
8,192 classes, 16 KB in bf16, which the rewrite reads through the cast: its threshold)."""
import torch
import torch.nn.functional as F

TRAINING = True
VOCAB = 8192


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.head = torch.nn.Linear(16, VOCAB, bias=False).to(torch.bfloat16)

    def forward(self, h, targets):
        logits = self.head(h)
        return F.cross_entropy(logits.float().view(-1, VOCAB), targets.view(-1), ignore_index=-1)


def get_inputs():
    targets = torch.randint(0, VOCAB, (2, 3))
    targets[1, 2] = -1
    return [torch.randn(2, 3, 16, dtype=torch.bfloat16), targets]


def get_init_inputs():
    return []
