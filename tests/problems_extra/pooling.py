"""2-d max pooling (with indices), average pooling and adaptive average pooling over an NCHW tensor."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x):
        mx, idx = F.max_pool2d(x, 3, stride=2, padding=1, return_indices=True)
        return mx, idx, F.avg_pool2d(x, 2), F.adaptive_avg_pool2d(x, 1), F.max_pool1d(x.flatten(2), 4)


def get_inputs():
    return [torch.randn(2, 3, 8, 8)]


def get_init_inputs():
    return []
