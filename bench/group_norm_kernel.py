"""A candidate kernel for a group-norm rewrite, measured by ``bench/rewrites_gpu.py --only group-norms``.

Not part of the package: a rewrite ships only once it has won on a GPU somewhere, and this one
has not been run on one yet (written 2026-12-03 when the session's device time was spent). Where
Inductor compiles ``nn.GroupNorm`` over large groups (8 channels x 128 x 128) as a split
Welford reduction then a normalising pass (three passes over the tensor, 51-54% of the memory
limit on the H200), this is one program per group: Welford statistics per lane, combined, then
the normalisation read backwards so that it first reads what the statistics read last, which
may still be in L2. ``group_norm_pass`` is the rewrite it would be (Inductor's pre-grad custom
pass, matching ``torch.nn.functional.group_norm`` calls), for ``bench/variants_gpu.py``'s
``group-norm-rewrite`` variants: if it wins, it moves into ``graph_rewrites.py``.
"""

from __future__ import annotations

import functools
from typing import Any

import triton
import triton.language as tl


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


def launch_group_norm(x: Any, groups: int, weight: Any, bias: Any, eps: float, *, block: int | None = None,
                      num_warps: int | None = None, reverse: bool = True) -> Any:
    """``torch.nn.functional.group_norm(x, groups, weight, bias, eps)`` in one kernel; a new contiguous tensor."""
    import math

    import torch

    x = x.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.numel() == 0:
        return y
    n, c = x.shape[0], x.shape[1]
    hw = math.prod(x.shape[2:])
    group = c // groups * hw
    group_norm_kernel[(n * groups,)](
        x, weight if weight is not None else x, bias if bias is not None else x, y, group, hw, groups, c // groups,
        float(eps), HAS_W=weight is not None, HAS_B=bias is not None, REVERSE=reverse, BLOCK=block or 2048,
        num_warps=num_warps or 8)
    return y


@functools.cache
def group_norm_op() -> Any:
    """``kernelopt_bench::group_norm(x, groups, weight, bias, eps)``: the kernel as an operator (registered on first use)."""
    import torch

    @torch.library.custom_op("kernelopt_bench::group_norm", mutates_args=(),
                             schema="(Tensor x, int groups, Tensor? weight, Tensor? bias, float eps) -> Tensor")
    def op(x, groups, weight, bias, eps):  # type: ignore[no-untyped-def]
        return launch_group_norm(x, groups, weight, bias, eps)

    @op.register_fake
    def _(x, groups, weight, bias, eps):  # type: ignore[no-untyped-def]
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return torch.ops.kernelopt_bench.group_norm.default


_GROUP_NORM_ARGS = ("input", "num_groups", "weight", "bias", "eps")


def group_norm_pass(graph: Any) -> None:
    """Inductor pre-grad pass (``pre_grad_custom_pass``): each ``F.group_norm`` of a floating tensor of
    three or more dimensions, with a constant group count and eps, becomes ``group_norm_op()``."""
    import torch

    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.nn.functional.group_norm:
            continue
        bound = dict(zip(_GROUP_NORM_ARGS, node.args)) | dict(node.kwargs)
        x, groups = bound.get("input"), bound.get("num_groups")
        eps = bound.get("eps", 1e-5)
        example = getattr(x, "meta", {}).get("example_value")
        if not isinstance(groups, int) or not isinstance(eps, (int, float)) or not isinstance(example, torch.Tensor) \
                or example.dim() < 3 or not example.is_floating_point() or example.shape[1] % groups:
            continue
        with graph.inserting_before(node):
            new = graph.call_function(group_norm_op(), (x, groups, bound.get("weight"), bound.get("bias"), float(eps)))
        new.meta.update(node.meta)
        node.replace_all_uses_with(new)
        graph.erase_node(node)
