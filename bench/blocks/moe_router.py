"""A mixture-of-experts router for a bfloat16 model: gate logits and the softmax over experts in
float32 (as routers compute them: bf16 logits would tie), top-2 selection, renormalised weights
and the dense dispatch mask.

After the gate's GEMM, the work is a softmax over 64 experts per token, a top-k, a
renormalisation and a scatter: small rows, many tokens.
"""

import torch
import torch.nn as nn
import torch.nn.functional as F

tokens = 16384
d_model = 2048
experts = 64
top_k = 2

SHAPES = {
    "t4096": {"tokens": 4096},
    "t16384": {"tokens": 16384},
    "t65536": {"tokens": 65536},
}


class Model(nn.Module):
    def __init__(self, d_model: int, experts: int, top_k: int):
        super().__init__()
        self.top_k = top_k
        self.gate = nn.Linear(d_model, experts, bias=False)
        self.to(torch.bfloat16)

    def forward(self, x: torch.Tensor):
        probs = torch.softmax(F.linear(x.float(), self.gate.weight.float()), dim=-1)
        weights, chosen = probs.topk(self.top_k, dim=-1)
        weights = weights / weights.sum(dim=-1, keepdim=True)
        dispatch = torch.zeros_like(probs).scatter(-1, chosen, weights)
        return dispatch.to(x.dtype), chosen


def get_inputs():
    return [torch.randn(tokens, d_model, dtype=torch.bfloat16)]


def get_init_inputs():
    return [d_model, experts, top_k]
