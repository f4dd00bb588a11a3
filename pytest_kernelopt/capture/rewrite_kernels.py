"""The Triton kernels of kernelopt's graph rewrites (``graph_rewrites.py``): this package's own code.

A module of its own because Triton resolves a kernel's helpers among its module's globals,
and importing Triton is left until a rewrite runs (interpreter mode must be set first).

Two suffix-scan kernels, one per layout: rows along the last axis (1-D blocks: a [1, BLOCK]
block carried through the loop failed Triton 3.6's thread-locality pass on the H200), and a
scan across rows with the columns side by side ([BLOCK_R, BLOCK_N] blocks, columns contiguous).
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def _multiply(a, b):
    return a * b


@triton.jit
def suffix_scan_rows(x_ptr, y_ptr, R, PROD: tl.constexpr, FP64: tl.constexpr, BLOCK_R: tl.constexpr):
    """x, y: contiguous [M, R]. Program m scans row m from its end, BLOCK_R elements at a time,
    carrying the sum (or product) of the elements after the block."""
    base = tl.program_id(0).to(tl.int64) * R
    acc = tl.float64 if FP64 else tl.float32
    carry = tl.full([], 1 if PROD else 0, acc)
    for i in range(0, tl.cdiv(R, BLOCK_R)):
        idx = R - (i + 1) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = idx >= 0
        x = tl.load(x_ptr + base + idx, mask=mask, other=1 if PROD else 0).to(acc)
        if PROD:
            y = tl.associative_scan(x, 0, _multiply, reverse=True) * carry
            carry = carry * tl.reduce(x, 0, _multiply)
        else:
            y = tl.cumsum(x, 0, reverse=True) + carry
            carry = carry + tl.sum(x, 0)
        tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def suffix_scan_cols(x_ptr, y_ptr, R, N, PROD: tl.constexpr, FP64: tl.constexpr,
                     BLOCK_R: tl.constexpr, BLOCK_N: tl.constexpr):
    """x, y: contiguous [M, R, N]. Program (m, column block) scans its BLOCK_N columns along R
    from the end, BLOCK_R rows at a time, carrying each column's sum (or product) after the block."""
    base = tl.program_id(0).to(tl.int64) * R * N
    cols = tl.program_id(1) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    acc = tl.float64 if FP64 else tl.float32
    carry = tl.full([BLOCK_N], 1 if PROD else 0, acc)
    for i in range(0, tl.cdiv(R, BLOCK_R)):
        rows = R - (i + 1) * BLOCK_R + tl.arange(0, BLOCK_R)
        mask = (rows >= 0)[:, None] & col_ok[None, :]
        offs = base + rows.to(tl.int64)[:, None] * N + cols[None, :]
        x = tl.load(x_ptr + offs, mask=mask, other=1 if PROD else 0).to(acc)
        if PROD:
            y = tl.associative_scan(x, 0, _multiply, reverse=True) * carry[None, :]
            carry = carry * tl.reduce(x, 0, _multiply)
        else:
            y = tl.cumsum(x, 0, reverse=True) + carry[None, :]
            carry = carry + tl.sum(x, 0)
        tl.store(y_ptr + offs, y.to(y_ptr.dtype.element_ty), mask=mask)

