"""Integer arithmetic: floor division, remainder, bitwise ops and shifts, clamps, casts and int reductions."""
import torch


class Model(torch.nn.Module):
    def forward(self, a, b):
        q = torch.div(a, b.abs() + 1, rounding_mode="floor")
        r = torch.remainder(a, 7)
        bits = (a & 0xF) | (b << 2) ^ (a >> 1)
        return q, r, bits, torch.clamp(a, -3, 3), (a * b).sum(1), a.max(0).values, (a.float() / 3).to(torch.int32), ~a


def get_inputs():
    return [torch.randint(-50, 50, (4, 9), dtype=torch.int64), torch.randint(0, 9, (4, 9), dtype=torch.int32)]


def get_init_inputs():
    return []
