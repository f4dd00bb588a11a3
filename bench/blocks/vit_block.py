"""A ViT encoder block in bfloat16, attention written out (no SDPA): pre-LayerNorm, softmax of
scaled query-key products, GELU MLP.

The attention's softmax over 197 tokens and its scaling, the LayerNorms with residual adds and
the bias + GELU epilogue are what Inductor writes Triton for here.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 64
tokens = 197
d_model = 768
n_heads = 12

SHAPES = {
    "b64": {"batch_size": 64},
    "b256": {"batch_size": 256},
}


class Model(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.h = n_heads
        self.ln1, self.ln2 = nn.LayerNorm(d_model), nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.fc1 = nn.Linear(d_model, 4 * d_model)
        self.fc2 = nn.Linear(4 * d_model, d_model)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        hd = d // self.h
        q, k, v = self.qkv(self.ln1(x)).view(b, t, 3, self.h, hd).permute(2, 0, 3, 1, 4)
        attn = torch.softmax((q @ k.transpose(-2, -1)) * hd ** -0.5, dim=-1)
        x = x + self.proj((attn @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.fc2(F.gelu(self.fc1(self.ln2(x))))


def get_inputs():
    return [torch.randn(batch_size, tokens, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, n_heads]
