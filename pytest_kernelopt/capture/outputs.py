"""A model's outputs as a flat list of tensors: what the verifier compares and a training step returns."""

from __future__ import annotations

import dataclasses
from typing import Any

# What a model may return, in words (the error for anything else names it).
RETURNS = "tensors and Python numbers, in lists, tuples (named ones too), dicts and dataclasses, or None"


class UnsupportedOutput(TypeError):
    """A model returned something :func:`flatten` cannot compare (a string, an object of its own class)."""


def flatten(out: Any) -> list[Any]:
    """Every tensor of ``out`` in a fixed order: list and tuple items in order, dict values by sorted key,
    dataclass fields in declaration order; a Python number as a 0-d tensor; None contributes nothing.
    Anything else raises :class:`UnsupportedOutput`: an output that was silently left out would never be
    compared (a dataclass of outputs once gave the model stage nothing to judge)."""
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if out is None:
        return []
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in flatten(item)]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in flatten(out[key])]
    if dataclasses.is_dataclass(out) and not isinstance(out, type):
        return [t for f in dataclasses.fields(out) for t in flatten(getattr(out, f.name))]
    if isinstance(out, (bool, int, float)):  # ``float(loss)``: compared like a 0-d output
        dtype = torch.bool if isinstance(out, bool) else torch.int64 if isinstance(out, int) else torch.float32
        return [torch.tensor(out, dtype=dtype)]
    raise UnsupportedOutput(f"the model returns an object of type {type(out).__qualname__}, which kernelopt cannot "
                            f"compare (it compares {RETURNS})")
