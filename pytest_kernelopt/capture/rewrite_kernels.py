"""The Triton kernels of kernelopt's graph rewrites (``graph_rewrites.py``): this package's own code.

A module of its own because Triton resolves a kernel's helpers among its module's globals,
and importing Triton is left until a rewrite runs (interpreter mode must be set first).

Two suffix-scan kernels, one per layout: rows along the last axis (1-D blocks: a [1, BLOCK]
block carried through the loop failed Triton 3.6's thread-locality pass on the H200), and a
scan across rows with the columns side by side ([BLOCK_R, BLOCK_N] blocks, columns contiguous);
and a group norm, one program per group.
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
    """The activation folded into a group norm's output: 0 none, 1 SiLU, 2 ReLU, 3 GELU (erf), 4 sigmoid."""
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


# What a wide-row kernel computes (its KIND): the row statistic and how each output uses it.
ROW_KINDS = ("softmax", "log_softmax", "l1_normalize", "l2_normalize")


@triton.jit
def _chunk_statistic(x, mask, KIND: tl.constexpr):
    """(m, s, v) of one chunk of a row. Softmax kinds: the chunk's max m, the sum s of exp(x - m)
    (m taken as 0 where the chunk is all -inf) and, for softmax, v = those exponentials (kept for
    the output: one exponential per element); otherwise v = x. The norms: m = 0 and s the sum of
    |x| or of x * x."""
    v = x
    if KIND <= 1:
        m = tl.max(tl.where(mask, x, float("-inf")), 0)
        e = tl.where(mask, tl.exp(x - tl.where(m == float("-inf"), 0, m)), 0)
        s = tl.sum(e, 0)
        if KIND == 0:
            v = e
    elif KIND == 2:
        m = tl.zeros([], tl.float32)
        s = tl.sum(tl.where(mask, tl.abs(x), 0), 0)
    else:
        m = tl.zeros([], tl.float32)
        s = tl.sum(tl.where(mask, x * x, 0), 0)
    return m, s, v


@triton.jit
def _published_statistics(m_ptr, s_ptr, K, KP: tl.constexpr):
    """The K chunk statistics of a row as its programs published them (read through L2: other
    programs wrote them); padded to KP with (-inf, 0)."""
    ks = tl.arange(0, KP)
    live = ks < K
    m_all = tl.load(m_ptr + ks, mask=live, other=float("-inf"), cache_modifier=".cg")
    s_all = tl.load(s_ptr + ks, mask=live, other=0, cache_modifier=".cg")
    return m_all, s_all


@triton.jit
def _apply_row_statistic(v, m_own, m_all, s_all, K, eps, KIND: tl.constexpr, KP: tl.constexpr):
    """Combine the row's chunk statistics (``m_all``, ``s_all``: padded with (-inf, 0)) and apply
    them to this chunk's ``v`` (``_chunk_statistic``; its max ``m_own``): softmax, log-softmax,
    x / max(sum|x|, eps) or x / max(sqrt(sum x^2), eps) (a NaN norm stays NaN)."""
    if KIND <= 1:
        row_max = tl.max(m_all, 0)
        shift = tl.where(row_max == float("-inf"), 0, row_max)
        total = tl.sum(tl.where(tl.arange(0, KP) < K, s_all * tl.exp(m_all - shift), 0), 0)
        if KIND == 0:  # exp(x - row max) / total = exp(x - m_own) * exp(m_own - row max) / total
            y = v * (tl.exp(m_own - row_max) / total)
        else:
            y = v - row_max - tl.log(total)
    else:
        norm = tl.sum(s_all, 0) if KIND == 2 else tl.sqrt(tl.sum(s_all, 0))
        y = v / tl.where(norm < eps, eps, norm)
    return y


# What a wide-row program that stopped waiting adds to its row's counter (``wide_rows``): above any
# count of the row's programs (the launcher keeps a row under this many chunks).
GAVE_UP = 1 << 20
_GAVE_UP = tl.constexpr(GAVE_UP)
# After this many polls a waiting program reads the launch's give-ups, and shares SPIN among them.
_SHARE_AFTER = tl.constexpr(16)


@triton.jit
def wide_rows(x_ptr, y_ptr, m_ptr, s_ptr, count_ptr, ROWS, N, K, eps, KIND: tl.constexpr, PHASE: tl.constexpr,
              CHUNK: tl.constexpr, KP: tl.constexpr, SPIN: tl.constexpr):
    """x, y: contiguous [ROWS, N]; each row is split into K chunks of CHUNK elements, chunk c of
    a row handled by the programs with id % K == c, which walk rows pid // K, + programs / K, ...

    PHASE 0 (one kernel, the GPU): a program reads its chunk once and keeps it in registers,
    publishes the chunk's statistic (``_chunk_statistic``, m_ptr/s_ptr [ROWS, K]), counts itself
    in at count_ptr[row] (count_ptr: ROWS + 1 zeros), polls that count for the row's K chunks,
    combines them and writes its chunk of output: the row is read once however wide, where a
    two-pass kernel reads it twice, the second time from DRAM once the rows in flight outgrow L2.
    ``wide_rows_retry`` follows it.

    No program waits without bound. CUDA promises neither that a grid's programs run at once nor
    in which order they start: another stream's kernels, MPS or green contexts can hold the
    multiprocessors that a row's other programs need, and those start only once a waiting program
    ends. So a program polls at most SPIN times, and past 16 polls at most SPIN / (1 + the launch's
    give-ups so far) (where the GPU is held, the rows after the first few wait 16 polls, not SPIN);
    if its row is still short, it
    leaves its chunk's output unwritten, adds GAVE_UP to the row's counter and 1 to count_ptr[ROWS]
    (the give-ups), and goes on. It had published its chunk and counted itself in first, so the
    row's other programs see it arrive; once the kernel ends every statistic is published, and
    ``wide_rows_retry`` writes the rows marked GAVE_UP from them: the same values, by the same code.
    (Not Triton's cooperative launch, ``launch_cooperative_grid=True``: it fails a grid that cannot
    all run at once rather than deadlock, but takes a persistent grid of at most that many programs,
    slower than a program per chunk on most shapes of the H200 sweep (``_wide_rows_launch``), and
    would still need a fallback where it fails.)

    PHASE 1 then PHASE 2 (two launches, for rows in more chunks than the GPU runs at once): the
    statistics, then the output from them, reading x again. Triton's interpreter runs programs one
    after another: PHASE 0 runs there too, every program of a row but its last giving up.
    """
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    chunk = pid % K
    idx = chunk * CHUNK + tl.arange(0, CHUNK)
    mask = idx < N
    first, step = pid // K, programs // K
    for i in range(0, tl.cdiv(ROWS - first, step)):
        row = first + i * step
        base = row.to(tl.int64) * N
        x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(tl.float32)
        m, s, v = _chunk_statistic(x, mask, KIND)  # PHASE 2: as PHASE 1 stored them
        if PHASE == 1:
            tl.store(m_ptr + row * K + chunk, m)
            tl.store(s_ptr + row * K + chunk, s)
        if PHASE == 0:
            # As 32-bit integers: the same exchange on the GPU, and one Triton 3.7's interpreter has.
            words = tl.pointer_type(tl.int32)
            tl.atomic_xchg((m_ptr + row * K + chunk).to(words), m.to(tl.int32, bitcast=True), sem="relaxed")
            tl.atomic_xchg((s_ptr + row * K + chunk).to(words), s.to(tl.int32, bitcast=True), sem="relaxed")
            tl.debug_barrier()
            tl.atomic_add(count_ptr + row, 1, sem="release")
            arrived = tl.atomic_add(count_ptr + row, 0, sem="acquire") % _GAVE_UP
            limit = tl.full([], SPIN, tl.int32)
            polls = 0
            while (arrived < K) & (polls < limit):
                arrived = tl.atomic_add(count_ptr + row, 0, sem="acquire") % _GAVE_UP
                polls += 1
                # Read while waiting anyway, off the critical path: the same load on every program's
                # path (in a version that also read whole rows in the kernel) measured 0.73-0.81x of
                # the unbounded kernel on the H200, about one L2 round trip more a program.
                if polls == _SHARE_AFTER:
                    limit = SPIN // (1 + tl.load(count_ptr + ROWS, volatile=True))
            tl.debug_barrier()
            if arrived < K:
                tl.atomic_add(count_ptr + row, _GAVE_UP, sem="relaxed")
                tl.atomic_add(count_ptr + ROWS, 1, sem="relaxed")
            else:
                m_all, s_all = _published_statistics(m_ptr + row * K, s_ptr + row * K, K, KP)
                y = _apply_row_statistic(v, m, m_all, s_all, K, eps, KIND, KP)
                tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)
        if PHASE == 2:
            m_all, s_all = _published_statistics(m_ptr + row * K, s_ptr + row * K, K, KP)
            y = _apply_row_statistic(v, m, m_all, s_all, K, eps, KIND, KP)
            tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def wide_rows_retry(x_ptr, y_ptr, m_ptr, s_ptr, count_ptr, ROWS, N, K, eps, KIND: tl.constexpr,
                    CHUNK: tl.constexpr, KP: tl.constexpr, BLOCK_ROWS: tl.constexpr):
    """After ``wide_rows``' PHASE 0, on the same stream: program p reads the counters of rows
    p * BLOCK_ROWS, ... and writes every chunk of each row marked GAVE_UP (a program of it stopped
    waiting) from the published statistics, as PHASE 2 does; where no program gave up (the usual
    case), one load a program."""
    first = tl.program_id(0) * BLOCK_ROWS
    rows = first + tl.arange(0, BLOCK_ROWS)
    if tl.max(tl.load(count_ptr + rows, mask=rows < ROWS, other=0), 0) >= _GAVE_UP:
        for row in range(first, tl.minimum(first + BLOCK_ROWS, ROWS)):
            if tl.load(count_ptr + row) >= _GAVE_UP:
                base = tl.cast(row, tl.int64) * N  # the loop variable: a Python int in the interpreter
                m_all, s_all = _published_statistics(m_ptr + row * K, s_ptr + row * K, K, KP)
                for chunk in range(0, K):
                    idx = chunk * CHUNK + tl.arange(0, CHUNK)
                    mask = idx < N
                    x = tl.load(x_ptr + base + idx, mask=mask, other=0).to(tl.float32)
                    m, s, v = _chunk_statistic(x, mask, KIND)
                    y = _apply_row_statistic(v, m, m_all, s_all, K, eps, KIND, KP)
                    tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=mask)


@triton.jit
def cross_entropy_stats(x_ptr, m_ptr, s_ptr, sx_ptr, N, K, CHUNK: tl.constexpr, SUM_X: tl.constexpr,
                        FP64: tl.constexpr, BLOCK: tl.constexpr):
    """x: contiguous [ROWS, N] logits; program p reads chunk p % K (CHUNK elements, BLOCK at a time)
    of row p // K once and stores its maximum and its sum of exp(x - maximum) at m_ptr[p], s_ptr[p]
    (a NaN reaches the sum; an all -inf chunk stores (-inf, 0)), and with SUM_X (label smoothing)
    the sum of its logits at sx_ptr[p]."""
    pid = tl.program_id(0)
    row, chunk = pid // K, pid % K
    base = row.to(tl.int64) * N
    acc = tl.float64 if FP64 else tl.float32
    m = tl.full([], float("-inf"), acc)
    s = tl.zeros([], acc)
    sx = tl.zeros([], acc)
    for start in range(chunk * CHUNK, tl.minimum(chunk * CHUNK + CHUNK, N), BLOCK):
        idx = start + tl.arange(0, BLOCK)
        x = tl.load(x_ptr + base + idx, mask=idx < N, other=float("-inf")).to(acc)
        new = tl.maximum(m, tl.max(x, 0))
        shift = tl.where(new == float("-inf"), 0, new)
        s = s * tl.exp(m - shift) + tl.sum(tl.exp(x - shift), 0)
        m = new
        if SUM_X:
            sx += tl.sum(tl.where(idx < N, x, 0), 0)
    tl.store(m_ptr + pid, m)
    tl.store(s_ptr + pid, s)
    if SUM_X:
        tl.store(sx_ptr + pid, sx)


@triton.jit
def cross_entropy_finish(x_ptr, t_ptr, m_ptr, s_ptr, sx_ptr, loss_ptr, stats_ptr, ROWS, N, K, ignore_index, smoothing,
                         SUM_X: tl.constexpr, FP64: tl.constexpr, KP: tl.constexpr, BLOCK_R: tl.constexpr):
    """Each row's maximum and log of the sum of exp(x - maximum), from its K chunk statistics
    (``cross_entropy_stats``), at stats_ptr[row, 0:2], and its loss, (maximum - x[row, target]) + log
    sum (as Inductor's log-softmax rounds it: the log-sum-exp as one number loses the maximum's
    low bits): 0 where the target is ``ignore_index``, NaN where it is out of range (no read
    outside the row). With SUM_X, label smoothing ``smoothing`` (torch's): (1 - smoothing) times
    that plus smoothing times the mean over classes of -log softmax, (maximum - mean x) + log sum."""
    rows = tl.program_id(0) * BLOCK_R + tl.arange(0, BLOCK_R)
    live = rows < ROWS
    ks = tl.arange(0, KP)
    acc = tl.float64 if FP64 else tl.float32
    where = rows[:, None].to(tl.int64) * K + ks[None, :]
    both = live[:, None] & (ks < K)[None, :]
    m = tl.load(m_ptr + where, mask=both, other=float("-inf"))
    s = tl.load(s_ptr + where, mask=both, other=0)
    top = tl.max(m, 1)
    shift = tl.where(top == float("-inf"), 0, top)
    total = tl.sum(tl.where(both, s * tl.exp(m - shift[:, None]), 0), 1)
    log_sum = tl.log(tl.where(live, total, 1))
    t = tl.load(t_ptr + rows, mask=live, other=ignore_index).to(tl.int64)
    valid = t != ignore_index
    inside = (t >= 0) & (t < N)
    picked = tl.load(x_ptr + rows.to(tl.int64) * N + t, mask=live & valid & inside, other=0).to(acc)
    nll = (shift - picked) + log_sum
    if SUM_X:
        mean_x = tl.sum(tl.load(sx_ptr + where, mask=both, other=0), 1) / N
        nll = (1 - smoothing) * nll + smoothing * ((shift - mean_x) + log_sum)
    loss = tl.where(valid, tl.where(inside, nll, float("nan")), 0)
    tl.store(loss_ptr + rows, loss.to(loss_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + 2 * rows, shift.to(stats_ptr.dtype.element_ty), mask=live)
    tl.store(stats_ptr + 2 * rows + 1, log_sum.to(stats_ptr.dtype.element_ty), mask=live)


@triton.jit
def cross_entropy_grad(x_ptr, t_ptr, stats_ptr, g_ptr, dx_ptr, N, ignore_index, smoothing, FP64: tl.constexpr,
                       BLOCK: tl.constexpr):
    """The gradient of ``cross_entropy_finish``'s losses over the logits, block (row, program 1):
    dx = g * (softmax(x) - (1 - smoothing) at the target - smoothing / N), where g is the row's
    incoming gradient; a row whose target is ``ignore_index`` has none."""
    row = tl.program_id(0).to(tl.int64)
    idx = tl.program_id(1) * BLOCK + tl.arange(0, BLOCK)
    mask = idx < N
    acc = tl.float64 if FP64 else tl.float32
    x = tl.load(x_ptr + row * N + idx, mask=mask, other=0).to(acc)
    shift = tl.load(stats_ptr + 2 * row).to(acc)
    log_sum = tl.load(stats_ptr + 2 * row + 1).to(acc)
    t = tl.load(t_ptr + row).to(tl.int64)
    g = tl.where(t == ignore_index, 0, tl.load(g_ptr + row).to(acc))
    p = tl.exp((x - shift) - log_sum) - smoothing / N
    dx = p * g - tl.where(idx == t, g * (1 - smoothing), 0)
    tl.store(dx_ptr + row * N + idx, dx.to(dx_ptr.dtype.element_ty), mask=mask)
