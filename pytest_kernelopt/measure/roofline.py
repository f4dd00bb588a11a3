"""A whole model's memory limit: the bytes one call must move at the least, at the measured copy bandwidth.

The floor is the model's tensor inputs, parameters and buffers read once and its outputs
written once; at the copy bandwidth measured on the same device (``verify.time_by_kernel``)
that takes a time no implementation can beat. A model's percent of its limit is that time
over the model's own. It is shown only where it bounds the model: where Triton kernels
(memory-bound here) take at least :data:`LIMIT_MIN_TRITON_SHARE` of its GPU time, not where a
GEMM or a convolution (compute-bound) does. ``kernelopt bench`` and the gate's model item use it.
"""

from __future__ import annotations

from typing import Any

LIMIT_MIN_TRITON_SHARE = 0.9


def min_bytes(model: Any, inputs: list[Any], outputs: list[Any]) -> int:
    """Bytes one call must move at the least: tensor inputs, parameters and buffers read once, outputs written once."""
    import torch

    tensors = [*inputs, *model.parameters(), *model.buffers(), *outputs]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def limit_pct(floor_bytes: int, seconds: float, copy_gbps: float) -> float:
    """Percent of the memory limit a call of ``seconds`` reaches."""
    return round(100.0 * floor_bytes / seconds / (copy_gbps * 1e9), 1)
