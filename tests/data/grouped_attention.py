"""Grouped-query attention as Llama-style blocks write it, in bf16, small: 8 query heads over 2 key/value heads,
the key/value heads repeated with ``repeat_interleave`` before fused causal attention; the pattern of the
grouped-query rewrite (``capture/graph_rewrites._grouped_queries``, inference only)."""

import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def __init__(self, width: int = 64, heads: int = 8, kv_heads: int = 2):
        super().__init__()
        self.heads, self.kv_heads, self.head_dim = heads, kv_heads, width // heads
        self.q = torch.nn.Linear(width, width, bias=False)
        self.kv = torch.nn.Linear(width, 2 * kv_heads * self.head_dim, bias=False)
        self.out = torch.nn.Linear(width, width, bias=False)
        self.to(torch.bfloat16)

    def forward(self, x):
        b, t, c = x.shape
        q = self.q(x).view(b, t, self.heads, self.head_dim).transpose(1, 2)
        k, v = self.kv(x).view(b, t, 2, self.kv_heads, self.head_dim).permute(2, 0, 3, 1, 4)
        repeat = self.heads // self.kv_heads
        k, v = k.repeat_interleave(repeat, dim=1), v.repeat_interleave(repeat, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return self.out(y.transpose(1, 2).reshape(b, t, c))


def get_inputs():
    return [torch.randn(2, 24, 64, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
