"""Training step of a GPT-2-style block in bf16 (pre-LayerNorm, causal SDPA attention, GELU MLP, residual adds)
on 8 sequences of 1024 tokens, 768 wide (weights cast in __init__)."""

import torch
import torch.nn.functional as F

TRAINING = True
BATCH, SEQ, WIDTH, HEADS = 8, 1024, 768, 12


class Model(torch.nn.Module):
    def __init__(self, width: int, heads: int):
        super().__init__()
        self.heads = heads
        self.ln1 = torch.nn.LayerNorm(width)
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.ln2 = torch.nn.LayerNorm(width)
        self.fc = torch.nn.Linear(width, 4 * width)
        self.out = torch.nn.Linear(4 * width, width)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, self.heads, d // self.heads).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(BATCH, SEQ, WIDTH, dtype=torch.bfloat16)]


def get_init_inputs():
    return [WIDTH, HEADS]
