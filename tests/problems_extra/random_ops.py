"""Random numbers drawn inside the model: dropout in training mode, rand_like and randn_like noise."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        return F.dropout(x, 0.3, training=True), x + torch.rand_like(x), torch.randn_like(x) * 0.0


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return []
