"""The read ceiling's kernel: every byte of a buffer read once, almost nothing written.

Imported only where the read ceiling is measured (:func:`.roofline.read_ceiling_gbps`, CUDA), so
importing :mod:`.roofline` never needs Triton (a CPU-only gate may run where Triton is not installed).

Two shapes of the same kernel are timed (:data:`SHAPES`) and the faster counts: 64 KiB a program
in 8 KiB steps, and 256 KiB a program in 16 KiB steps, the shape of a kernel that read a
vocabulary's bf16 logits, one 256 KB row a program, at 104% of the first shape's ceiling on an H100
(2026-12-06).
"""

from __future__ import annotations

from typing import Any

import triton
import triton.language as tl

# (float32 elements a program loads per step, steps per program, warps): one float written per program.
SHAPES = ((2048, 8, 8), (4096, 16, 8))


@triton.jit
def read_all(src, partial, n, BLOCK: tl.constexpr, STEPS: tl.constexpr):
    pid = tl.program_id(0)
    acc = tl.zeros([BLOCK], dtype=tl.float32)
    for i in range(STEPS):
        offs = (pid * STEPS + i) * BLOCK + tl.arange(0, BLOCK)
        acc += tl.load(src + offs, mask=offs < n, other=0.0, eviction_policy="evict_first")
    tl.store(partial + pid, tl.sum(acc, axis=0))


def launch(src: Any, partial: Any, shape: tuple[int, int, int]) -> None:
    """Read all of ``src`` (float32, 1-D) in programs of ``shape`` (of :data:`SHAPES`); ``partial`` gets
    one sum per program (:func:`programs` of them)."""
    block, steps, warps = shape
    read_all[(programs(src.numel(), shape),)](src, partial, src.numel(), BLOCK=block, STEPS=steps, num_warps=warps)


def programs(n: int, shape: tuple[int, int, int]) -> int:
    return triton.cdiv(n, shape[0] * shape[1])
