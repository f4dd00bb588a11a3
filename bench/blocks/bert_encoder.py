"""A BERT-style encoder layer in bfloat16: separate query/key/value projections, attention written out
with an additive padding mask built from an integer attention mask, post-LayerNorm after each residual
add, GELU feed-forward.

Written 2026-12-07 as a held-out block: no rewrite or search rule was made after reading it. Outside the
GEMMs, time goes to the masked softmax (and the mask's broadcast), the two add + LayerNorm pairs and the
bias + GELU epilogue.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 32
seq_len = 512
d_model = 768
n_heads = 12

SHAPES = {
    "b32_s512": {"batch_size": 32, "seq_len": 512},   # fine-tuning at the full length
    "b128_s128": {"batch_size": 128, "seq_len": 128},  # short classification inputs, wide batch
}


class Model(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.h = n_heads
        self.q, self.k, self.v = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.out = nn.Linear(d_model, d_model)
        self.ln_attn, self.ln_ffn = nn.LayerNorm(d_model, eps=1e-12), nn.LayerNorm(d_model, eps=1e-12)
        self.up, self.down = nn.Linear(d_model, 4 * d_model), nn.Linear(4 * d_model, d_model)
        self.to(torch.bfloat16)

    def heads(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        return x.view(b, t, self.h, d // self.h).transpose(1, 2)

    def forward(self, x: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        q, k, v = self.heads(self.q(x)), self.heads(self.k(x)), self.heads(self.v(x))
        bias = (1.0 - attention_mask[:, None, None, :].to(x.dtype)) * -10000.0
        scores = q @ k.transpose(-1, -2) / (d // self.h) ** 0.5 + bias
        context = (F.softmax(scores, dim=-1) @ v).transpose(1, 2).reshape(b, t, d)
        x = self.ln_attn(x + self.out(context))
        return self.ln_ffn(x + self.down(F.gelu(self.up(x))))


def get_inputs():
    lengths = torch.randint(seq_len // 4, seq_len + 1, (batch_size,))
    mask = (torch.arange(seq_len)[None, :] < lengths[:, None]).to(torch.int64)  # 1: a token, 0: padding
    return [torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16), mask]


def get_init_inputs():
    return [d_model, n_heads]
