"""Activation functions: GELU (exact and tanh), SiLU, Mish, Softplus, ELU, SELU, hardswish and friends."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        return (
            F.gelu(x),
            F.gelu(x, approximate="tanh"),
            F.silu(x) + F.mish(x),
            F.softplus(x, beta=2.0) + F.elu(x) + F.selu(x) + F.celu(x),
            F.hardswish(x) + F.hardsigmoid(x) + F.leaky_relu(x, 0.1) + F.hardtanh(x) + F.relu6(x) + F.softsign(x),
            F.logsigmoid(x) + F.tanhshrink(x) + F.hardshrink(x) + F.prelu(x, x.new_full((1,), 0.25)),
        )


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
