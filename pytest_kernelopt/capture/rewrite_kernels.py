"""The Triton kernels of kernelopt's graph rewrites (``graph_rewrites.py``): this package's own code.

A module of its own because Triton resolves a kernel's helpers among its module's globals,
and importing Triton is left until a rewrite runs (interpreter mode must be set first).

Two suffix-scan kernels, one per layout: rows along the last axis (1-D blocks: a [1, BLOCK]
block carried through the loop failed Triton 3.6's thread-locality pass on the H200), and a
scan across rows with the columns side by side ([BLOCK_R, BLOCK_N] blocks, columns contiguous);
a group norm, one program per group; and pooling (max and average, 1-D to 3-D), one tile of
outputs per program.
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
def _affine(y, w_ptr, b_ptr, channel, mask, HAS_W: tl.constexpr, HAS_B: tl.constexpr):
    if HAS_W:
        y = y * tl.load(w_ptr + channel, mask=mask, other=1).to(y.dtype)
    if HAS_B:
        y = y + tl.load(b_ptr + channel, mask=mask, other=0).to(y.dtype)
    return y


@triton.jit
def _activation(y, ACT: tl.constexpr):
    """The activation folded into a rewrite's output: 0 none, 1 SiLU, 2 ReLU, 3 GELU (erf), 4 sigmoid."""
    if ACT == 1:
        y = y / (1 + tl.exp(-y))
    elif ACT == 2:
        y = tl.where(y < 0, 0, y)  # NaN stays NaN, as in torch (``tl.maximum`` would drop it)
    elif ACT == 3:
        y = 0.5 * y * (1 + tl.erf(y * 0.7071067811865476))
    elif ACT == 4:
        y = 1 / (1 + tl.exp(-y))
    return y


@triton.jit
def group_norm(x_ptr, w_ptr, b_ptr, y_ptr, GROUP, HW, GROUPS, eps, HAS_W: tl.constexpr, HAS_B: tl.constexpr,
               FP64: tl.constexpr, ONE_PASS: tl.constexpr, EVICT: tl.constexpr, ACT: tl.constexpr,
               BLOCK: tl.constexpr):
    """x, y: contiguous [N, C, *spatial] with HW spatial elements per channel; program n * GROUPS + g
    normalises group g of sample n, its GROUP = C / GROUPS * HW elements contiguous, and applies
    each channel's weight and bias, then activation ACT (``_activation``).

    ONE_PASS (GROUP <= BLOCK): the group is read once and held in registers (mean, corrected once,
    then the variance about it). Otherwise two passes: Welford statistics per lane, combined; then the
    normalisation, walking the group backwards so that it first reads what the statistics read
    last (likely still in L2). EVICT asks L2 to keep the first pass's lines and drop the second's.
    """
    pid = tl.program_id(0)
    base = pid.to(tl.int64) * GROUP
    channel0 = (pid % GROUPS) * (GROUP // HW)
    acc = tl.float64 if FP64 else tl.float32
    lanes = tl.arange(0, BLOCK)
    if ONE_PASS:
        mask = lanes < GROUP
        x = tl.load(x_ptr + base + lanes, mask=mask, other=0).to(acc)
        mean = tl.sum(x, 0) / GROUP
        mean += tl.sum(tl.where(mask, x - mean, 0), 0) / GROUP  # the sum's rounding, corrected (a large mean)
        centred = tl.where(mask, x - mean, 0)
        rstd = 1 / tl.sqrt(tl.sum(centred * centred, 0) / GROUP + eps)
        y = _activation(_affine(centred * rstd, w_ptr, b_ptr, channel0 + lanes // HW, mask, HAS_W, HAS_B), ACT)
        tl.store(y_ptr + base + lanes, y.to(y_ptr.dtype.element_ty), mask=mask)
    else:
        mean = tl.zeros([BLOCK], acc)
        m2 = tl.zeros([BLOCK], acc)
        count = tl.zeros([BLOCK], acc)
        for start in range(0, GROUP, BLOCK):
            idx = start + lanes
            mask = idx < GROUP
            if EVICT:
                x = tl.load(x_ptr + base + idx, mask=mask, other=0, eviction_policy="evict_last").to(acc)
            else:
                x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(acc)
            count += tl.where(mask, 1, 0).to(acc)
            delta = x - mean
            mean += tl.where(mask, delta / tl.maximum(count, 1), 0)
            m2 += tl.where(mask, delta * (x - mean), 0)
        g_mean, g_m2, g_count = tl.reduce((mean, m2, count), 0, _welford_combine)
        rstd = 1 / tl.sqrt(g_m2 / g_count + eps)
        blocks = tl.cdiv(GROUP, BLOCK)
        for i in range(0, blocks):
            idx = (blocks - 1 - i) * BLOCK + lanes
            mask = idx < GROUP
            if EVICT:
                x = tl.load(x_ptr + base + idx, mask=mask, other=0, eviction_policy="evict_first").to(acc)
            else:
                x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(acc)
            y = _activation(_affine((x - g_mean) * rstd, w_ptr, b_ptr, channel0 + idx // HW, mask, HAS_W, HAS_B), ACT)
            if EVICT:
                tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask, eviction_policy="evict_first")
            else:
                tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def _max_nan(a, b):
    """The larger of a and b, NaN where either is (torch's pooling propagates NaN; ``tl.maximum`` drops it)."""
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def pool(x_ptr, y_ptr, D, H, W, OD, OH, OW, divisor,
         KD: tl.constexpr, KH: tl.constexpr, KW: tl.constexpr, SD: tl.constexpr, SH: tl.constexpr,
         SW: tl.constexpr, PD: tl.constexpr, PH: tl.constexpr, PW: tl.constexpr, QMIN: tl.constexpr,
         QMAX: tl.constexpr, SP: tl.constexpr, MAX: tl.constexpr, INCLUDE_PAD: tl.constexpr,
         OVERRIDE: tl.constexpr, FP64: tl.constexpr, ACT: tl.constexpr, FLAT: tl.constexpr,
         BLOCK_H: tl.constexpr, BLOCK_W: tl.constexpr):
    """x: contiguous [P, D, H, W], y: contiguous [P, OD, OH, OW]; max (MAX) or average pooling with
    windows KD x KH x KW, strides SD x SH x SW, padding PD x PH x PW, dilation 1 (2-D pooling is
    D = KD = SD = 1). Program (p * OD + od, row block, column block) makes a BLOCK_H x BLOCK_W tile
    of output slice od of plane p, then activation ACT (``_activation``).

    FLAT (SP == SW, a power of two): along a row the window's taps are not loaded one by one
    (KW strided loads): input column ``SW * ow - PW + kw`` is ``SW * (ow + q) + r`` with
    ``kw - PW = SW * q + r``, so for each q in QMIN..QMAX one contiguous run of BLOCK_W * SW
    elements at ``SW * (ow + q)`` brings every tap of that q (a vectorised load), reshaped to
    [BLOCK_H, BLOCK_W, SW] and reduced along its last axis (taps outside the window masked).
    Otherwise one [BLOCK_H, BLOCK_W] load per tap, strided by SW. Averages divide as torch does: by the
    window clipped to the padded input (INCLUDE_PAD), by its elements inside the input, or by
    ``divisor`` (OVERRIDE).
    """
    pid = tl.program_id(0)
    od = pid % OD
    plane = pid // OD
    acc_t = tl.float64 if FP64 else tl.float32
    oh = tl.program_id(1) * BLOCK_H + tl.arange(0, BLOCK_H)
    ow = tl.program_id(2) * BLOCK_W + tl.arange(0, BLOCK_W)
    x_base = x_ptr + plane.to(tl.int64) * D * H * W
    if MAX:
        acc = tl.full([BLOCK_H, BLOCK_W], float("-inf"), acc_t)
    else:
        acc = tl.zeros([BLOCK_H, BLOCK_W], acc_t)
    run = tl.arange(0, BLOCK_W * SP)
    r = run % SP
    for kd in tl.static_range(KD):
        d_in = od * SD - PD + kd
        d_ok = (d_in >= 0) & (d_in < D)
        for kh in tl.static_range(KH):
            h_in = oh * SH - PH + kh
            h_ok = (h_in >= 0) & (h_in < H) & (oh < OH) & d_ok
            row = (d_in * H + h_in) * W
            if FLAT:
                for q in tl.static_range(QMIN, QMAX + 1):
                    tap = q * SW + r + PW  # the window's column of each lane
                    col = (tl.program_id(2) * BLOCK_W + q) * SW + run
                    mask = h_ok[:, None] & ((col >= 0) & (col < W) & (tap >= 0) & (tap < KW))[None, :]
                    v = tl.load(x_base + row[:, None] + col[None, :], mask=mask,
                                other=float("-inf") if MAX else 0).to(acc_t)
                    v = tl.reshape(v, [BLOCK_H, BLOCK_W, SP])
                    if MAX:
                        acc = _max_nan(acc, tl.reduce(v, 2, _max_nan))
                    else:
                        acc += tl.sum(v, 2)
            else:
                for kw in tl.static_range(KW):
                    col = ow * SW - PW + kw
                    mask = h_ok[:, None] & ((col >= 0) & (col < W))[None, :]
                    v = tl.load(x_base + row[:, None] + col[None, :], mask=mask,
                                other=float("-inf") if MAX else 0).to(acc_t)
                    if MAX:
                        acc = _max_nan(acc, v)
                    else:
                        acc += v
    if not MAX:
        if OVERRIDE:
            acc = acc / divisor
        else:
            d0 = od * SD - PD
            h0 = oh * SH - PH
            w0 = ow * SW - PW
            d1 = tl.minimum(d0 + KD, D + PD)
            h1 = tl.minimum(h0 + KH, H + PH)
            w1 = tl.minimum(w0 + KW, W + PW)
            if INCLUDE_PAD:
                count = (d1 - d0) * (h1 - h0)[:, None] * (w1 - w0)[None, :]
            else:
                count = (tl.minimum(d1, D) - tl.maximum(d0, 0)) \
                    * (tl.minimum(h1, H) - tl.maximum(h0, 0))[:, None] \
                    * (tl.minimum(w1, W) - tl.maximum(w0, 0))[None, :]
            acc = acc / tl.maximum(count, 1).to(acc_t)  # lanes past the output: any divisor
    y = _activation(acc, ACT)
    out = (pid.to(tl.int64) * OH + oh[:, None]) * OW + ow[None, :]
    tl.store(y_ptr + out, y.to(y_ptr.dtype.element_ty), mask=(oh < OH)[:, None] & (ow < OW)[None, :])
