"""The read ceiling's kernel: every byte of a buffer read once, almost nothing written.

Imported only where the read ceiling is measured (:func:`.roofline.read_ceiling_gbps`, CUDA), so
importing :mod:`.roofline` never needs Triton (a CPU-only gate may run where Triton is not installed)."""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

BLOCK = 2048  # float32 elements a program loads per step (8 KiB)
STEPS = 8  # steps per program: 64 KiB read by each, one float written


@triton.jit
def read_all(src, partial, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(STEPS):
        offs = (pid * STEPS + i) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(src + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
    tl.store(partial + pid, tl.sum(acc, axis=0))


def launch(src: Any, partial: Any) -> None:
    """Read all of ``src`` (float32, 1-D); ``partial`` gets one sum per program (:func:`programs` of them)."""
    read_all[(programs(src.numel()),)](src, partial, src.numel(), BLOCK=BLOCK, STEPS=STEPS, num_warps=8)


def programs(n: int) -> int:
    return triton.cdiv(n, BLOCK * STEPS)
