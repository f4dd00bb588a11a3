"""Data movement: cat, transpose and permute copies, flip, roll, repeat, pad, narrow and strided slices."""
import torch
import torch.nn.functional as F


class Model(torch.nn.Module):
    def forward(self, x, y):
        c = torch.cat([x, y * 2], dim=1)
        t = x.transpose(0, 1).contiguous() + 1
        p = x.reshape(2, 3, 4).permute(2, 0, 1).contiguous() * 3
        return c, t, p, torch.flip(x, [0]) - 1, torch.roll(x, 2, 1) * 2, x.repeat(2, 1) + 1, F.pad(x, (1, 2), value=0.5) * 2, torch.stack([x, y]) + 1


def get_inputs():
    return [torch.randn(6, 4), torch.randn(6, 4)]


def get_init_inputs():
    return []
