"""A model's outputs as a flat list of tensors: what the verifier compares and a training step returns."""

from __future__ import annotations

from typing import Any


def flatten(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in flatten(item)]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in flatten(out[key])]
    if isinstance(out, (bool, int, float)):  # ``float(loss)``: compared like a 0-d output
        dtype = torch.bool if isinstance(out, bool) else torch.int64 if isinstance(out, int) else torch.float32
        return [torch.tensor(out, dtype=dtype)]
    return []
