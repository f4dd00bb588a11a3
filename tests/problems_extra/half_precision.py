"""fp16 and bf16 inputs: layer norm, softmax, GELU and a sum reduction in reduced precision."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, h, b):
        ln = F.layer_norm(h, (16,))
        return ln, torch.softmax(b, dim=-1), F.gelu(h) * 2, b.sum(0), h.float().mean() + b.float().amax()


def get_inputs():
    return [torch.randn(4, 16).half(), torch.randn(4, 16).to(torch.bfloat16)]


def get_init_inputs():
    return []
