"""A Llama-style decoder block in bfloat16: RMSNorm, rotary position embedding, grouped-query
attention (SDPA), SwiGLU MLP.

Outside the GEMMs and attention: the two RMSNorms with their residual adds, the rotary
rotation of queries and keys, the key/value head repeat and the SiLU-times-gate product.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 4
seq_len = 2048
d_model = 2048
n_heads = 16
n_kv_heads = 4
ffn = 5632
max_seq = 4096

SHAPES = {
    "b4_s2048": {"batch_size": 4, "seq_len": 2048},     # prefill
    "b16_s512": {"batch_size": 16, "seq_len": 512},
    "b64_s128": {"batch_size": 64, "seq_len": 128},     # many short requests
}


class RMSNorm(nn.Module):
    def __init__(self, d: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        return (x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)).to(x.dtype) * self.weight


def rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    return x * cos + torch.cat((-x2, x1), dim=-1) * sin


class Model(nn.Module):
    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int, ffn: int, max_seq: int):
        super().__init__()
        self.h, self.kv, self.hd = n_heads, n_kv_heads, d_model // n_heads
        self.norm1, self.norm2 = RMSNorm(d_model), RMSNorm(d_model)
        self.wq = nn.Linear(d_model, d_model, bias=False)
        self.wkv = nn.Linear(d_model, 2 * n_kv_heads * self.hd, bias=False)
        self.wo = nn.Linear(d_model, d_model, bias=False)
        self.gate = nn.Linear(d_model, ffn, bias=False)
        self.up = nn.Linear(d_model, ffn, bias=False)
        self.down = nn.Linear(ffn, d_model, bias=False)
        inv = 1.0 / (10000 ** (torch.arange(0, self.hd, 2).float() / self.hd))
        angles = torch.outer(torch.arange(max_seq).float(), inv)
        angles = torch.cat((angles, angles), dim=-1)
        self.register_buffer("cos", angles.cos(), persistent=False)
        self.register_buffer("sin", angles.sin(), persistent=False)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        n = self.norm1(x)
        q = self.wq(n).view(b, t, self.h, self.hd).transpose(1, 2)
        k, v = self.wkv(n).view(b, t, 2, self.kv, self.hd).permute(2, 0, 3, 1, 4)
        cos, sin = self.cos[:t], self.sin[:t]
        q, k = rotate(q, cos, sin), rotate(k, cos, sin)
        k = k.repeat_interleave(self.h // self.kv, dim=1)
        v = v.repeat_interleave(self.h // self.kv, dim=1)
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.wo(y.transpose(1, 2).reshape(b, t, d))
        n = self.norm2(x)
        return x + self.down(F.silu(self.gate(n)) * self.up(n))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, n_heads, n_kv_heads, ffn, max_seq]
