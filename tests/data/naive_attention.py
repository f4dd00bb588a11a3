"""Causal self-attention written out, as minGPT and nanoGPT's non-flash path write it, in bf16, small:
the scores masked with a slice of a causal buffer, a softmax, a dropout that does nothing, the weighted sum;
the pattern of the attention rewrite (``capture/graph_rewrites._attentions``, inference only)."""
import math

import torch
import torch.nn.functional as F



class Model(torch.nn.Module):
    def __init__(self, width: int = 32, heads: int = 4, context: int = 32):
        super().__init__()
        self.qkv = torch.nn.Linear(width, 3 * width)
        self.proj = torch.nn.Linear(width, width)
        self.dropout = torch.nn.Dropout(0.0)
        self.heads = heads
        self.register_buffer("bias", torch.tril(torch.ones(context, context)).view(1, 1, context, context))
        self.to(torch.bfloat16)

    def forward(self, x):
        b, t, c = x.shape
        q, k, v = (z.view(b, t, self.heads, c // self.heads).transpose(1, 2) for z in self.qkv(x).split(c, dim=2))
        att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
        att = att.masked_fill(self.bias[:, :, :t, :t] == 0, float("-inf"))
        y = self.dropout(F.softmax(att, dim=-1)) @ v
        return self.proj(y.transpose(1, 2).contiguous().view(b, t, c))


def get_inputs():
    return [torch.randn(2, 24, 32, dtype=torch.bfloat16)]


def get_init_inputs():
    return []
