"""A GPT-2-style block in bfloat16 with its attention written out, as nanoGPT's and minGPT's non-flash path
write it: the scores scaled, masked with a slice of a causal buffer (``masked_fill(..., -inf)``), a softmax,
a dropout (a no-op in eval), the weighted sum; pre-LayerNorm, GELU MLP.

Inductor's own attention patterns do not match this form (2026-12-06, torch 2.11-2.13): its default compile
writes the batch x heads x tokens x tokens scores, reads them in a softmax kernel that writes the weights,
and reads those in a batched product. kernelopt's attention rewrite (``max-autotune-rewrites``, inference
only) calls torch's fused attention instead.
"""

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
seq_len = 1024
d_model = 768
n_heads = 12
context = 2048

SHAPES = {
    "b16_s1024": {"batch_size": 16, "seq_len": 1024},   # pretraining-style batch
    "b64_s256": {"batch_size": 64, "seq_len": 256},     # short sequences, wide batch
    "b2_s2048": {"batch_size": 2, "seq_len": 2048},     # long context, small batch
}


class Model(nn.Module):
    def __init__(self, d_model: int, n_heads: int, context: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.c_attn = nn.Linear(d_model, 3 * d_model)
        self.c_proj = nn.Linear(d_model, d_model)
        self.attn_dropout = nn.Dropout(0.1)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, c = x.shape
        q, k, v = self.c_attn(self.ln1(x)).split(c, dim=2)
        q, k, v = (z.view(b, t, self.n_heads, c // self.n_heads).transpose(1, 2) for z in (q, k, v))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        att = self.attn_dropout(F.softmax(att, dim=-1))
        y = (att @ v).transpose(1, 2).contiguous().view(b, t, c)
        x = x + self.c_proj(y)
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, n_heads, context]
