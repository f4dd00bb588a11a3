"""A GPT-2-style transformer block in bfloat16: pre-LayerNorm, causal self-attention (SDPA), GELU MLP.

Weights are cast to bf16 in ``__init__`` and inputs are drawn in bf16, as a team serving or
training in bf16 runs it. Outside the GEMMs and attention, time goes to the two LayerNorms
fused with residual adds, the bias + GELU epilogue and the head reshapes.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

batch_size = 16
seq_len = 1024
d_model = 768
n_heads = 12

SHAPES = {
    "b16_s1024": {"batch_size": 16, "seq_len": 1024},   # pretraining-style batch
    "b64_s256": {"batch_size": 64, "seq_len": 256},     # short sequences, wide batch
    "b2_s2048": {"batch_size": 2, "seq_len": 2048},     # long context, small batch
}


class Model(nn.Module):
    def __init__(self, d_model: int, n_heads: int):
        super().__init__()
        self.n_heads = n_heads
        self.ln1 = nn.LayerNorm(d_model)
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln2 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, 4 * d_model)
        self.out = nn.Linear(4 * d_model, d_model)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.n_heads
        q, k, v = self.qkv(self.ln1(x)).split(d, dim=-1)
        q, k, v = (z.view(b, t, h, d // h).transpose(1, 2) for z in (q, k, v))
        y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = x + self.proj(y.transpose(1, 2).reshape(b, t, d))
        return x + self.out(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


def get_inputs():
    return [torch.randn(batch_size, seq_len, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, n_heads]
