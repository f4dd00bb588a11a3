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


@triton.jit
def _welford_combine(mean_a, m2_a, n_a, mean_b, m2_b, n_b):
    n = n_a + n_b
    delta = mean_b - mean_a
    frac = tl.where(n == 0, 0.0, n_b / tl.where(n == 0, 1.0, n))
    return mean_a + delta * frac, m2_a + m2_b + delta * delta * n_a * frac, n


@triton.jit
def group_norm_kernel(x_ptr, w_ptr, b_ptr, y_ptr, GROUP, HW, GROUPS, CG, eps,
                      HAS_W: tl.constexpr, HAS_B: tl.constexpr, REVERSE: tl.constexpr, BLOCK: tl.constexpr):
    """x, y: contiguous [N, C, HW...]; program n * GROUPS + g normalises group g of sample n, its
    GROUP = C / GROUPS * HW elements contiguous. Pass 1: Welford statistics per lane, combined. Pass 2:
    normalised, scaled by the channel's weight and bias; REVERSE walks it backwards, so that it reads
    first what pass 1 read last (still in L2)."""
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * GROUP
    lanes = tl.arange(0, BLOCK)
    mean = tl.zeros([BLOCK], tl.float32)
    m2 = tl.zeros([BLOCK], tl.float32)
    count = tl.zeros([BLOCK], tl.float32)
    for start in range(0, GROUP, BLOCK):
        idx = start + lanes
        mask = idx < GROUP
        x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(tl.float32)
        new_count = count + tl.where(mask, 1.0, 0.0)
        delta = x - mean
        mean = tl.where(mask, mean + delta / tl.where(mask, new_count, 1.0), mean)
        m2 = tl.where(mask, m2 + delta * (x - mean), m2)
        count = new_count
    g_mean, g_m2, g_count = tl.reduce((mean, m2, count), 0, _welford_combine)
    rstd = tl.rsqrt(g_m2 / g_count + eps)
    channel0 = (pid % GROUPS) * CG
    blocks = tl.cdiv(GROUP, BLOCK)
    for i in range(0, blocks):
        start = ((blocks - 1 - i) if REVERSE else i) * BLOCK
        idx = start + lanes
        mask = idx < GROUP
        x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(tl.float32)
        y = (x - g_mean) * rstd
        if HAS_W or HAS_B:
            channel = channel0 + idx // HW
            if HAS_W:
                y = y * tl.load(w_ptr + channel, mask=mask, other=1).to(tl.float32)
            if HAS_B:
                y = y + tl.load(b_ptr + channel, mask=mask, other=0).to(tl.float32)
        tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)
