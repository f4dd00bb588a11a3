"""The Triton kernels of kernelopt's graph rewrites (``graph_rewrites.py``): this package's own code.

A module of its own because Triton resolves a kernel's helpers among its module's globals,
and importing Triton is left until a rewrite runs (interpreter mode must be set first).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def suffix_scan_kernel(x_ptr, y_ptr, R, N, PROD: tl.constexpr, FP64: tl.constexpr,
                       BLOCK_N: tl.constexpr, BLOCK_R: tl.constexpr):
    """x, y: contiguous [M, R, N]. Program (m, column block) scans its columns along R from the end,
    BLOCK_R rows at a time, carrying the sum (or product) of the rows after the block."""
    m = tl.program_id(0).to(tl.int64)
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    base = m * R * N
    acc = tl.float64 if FP64 else tl.float32
    carry = tl.full([BLOCK_N], 1 if PROD else 0, acc)
    for i in range(0, tl.cdiv(R, BLOCK_R)):
        rows = R - (i + 1) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = col_ok[:, None] & (rows >= 0)[None, :]
        offs = base + rows.to(tl.int64)[None, :] * N + cols[:, None]
        x = tl.load(x_ptr + offs, mask=mask, other=1 if PROD else 0).to(acc)
        if PROD:
            y = tl.associative_scan(x, 1, _multiply, reverse=True) * carry[:, None]
            carry = carry * tl.reduce(x, 1, _multiply)
        else:
            y = tl.cumsum(x, 1, reverse=True) + carry[:, None]
            carry = carry + tl.sum(x, 1)
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)
