"""kernelopt's graph rewrites: patterns Inductor compiles into several kernels, done in one.

A rewrite is a post-grad FX pass (Inductor's ``post_grad_custom_pre_pass``) that replaces
a pattern with a call to an operator of this package, whose Triton kernel is written here
(never supplied by a candidate or read from the repository). It runs only under a named
compile setting of the catalogue (``capture/variants.py``, ``rewrites=True``), which
``kernelopt tune`` tries as the model's compile like any other: the whole model against
float64 with the default compile's error as the allowance, then timed against the default
compile. A model it does not pay on keeps its compile.

The one rewrite so far:

* **reverse scans.** ``flip(cumsum(flip(x, D), d), D)`` with ``d`` in ``D`` (a suffix sum;
  likewise ``cumprod``) is a scan that runs from the end of the axis. Inductor's scans
  only run forwards, so it makes two kernels: the scan with the first flip fused into its
  loads, then a copy that flips the result, reading and writing the whole tensor again
  (twice the traffic the operation needs: 49% of the limit on the H200, 2026-12-03). The
  rewrite is one kernel that scans each row from its end, in blocks, with a running carry.
  Flips over other axes cancel, since a scan along ``d`` treats each position on the other
  axes alone.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

__all__ = ["launch_suffix_scan", "rewrite_pass", "rewrites_done", "suffix_scan"]

_done = threading.local()


def rewrites_done() -> int:
    """How many patterns this thread's compiles have rewritten so far (a counter: compare before and after)."""
    return getattr(_done, "count", 0)


def _blocks(programs: int, rows: int, columns: int, element_bytes: int) -> tuple[int, int, int]:
    """(BLOCK_N, BLOCK_R, num_warps) for ``programs`` rows of ``rows`` elements, ``columns`` scanned
    side by side (BLOCK_N 1: the row kernel).

    H200, triton 3.6, 2026-12-03 (``bench/rewrites_gpu.py``): each shape's fastest configuration had
    four warps; rows went fastest in 8 KB blocks (90% of the copy bandwidth at 8192 rows of 16384
    fp32), 32 KB when the rows are too few to fill the GPU (256 rows: 75% against 55%); columns in
    128-row blocks, 32 columns wide (64 x 2048 x 256: 62% of the copy), 16 where 32 would leave
    fewer than 256 programs (4096 x 4096 over the first axis: 128 of them).
    """
    import triton

    if columns == 1:
        per_block = (8192 if programs >= 1024 else 32768) // element_bytes
        return 1, min(triton.next_power_of_2(rows), per_block), 4
    block_n = min(triton.next_power_of_2(columns), 32 if programs * triton.cdiv(columns, 32) >= 256 else 16)
    return block_n, min(triton.next_power_of_2(rows), 128), 4


def launch_suffix_scan(x: Any, dim: int, op: str, *, block_n: int | None = None, block_r: int | None = None,
                       num_warps: int | None = None) -> Any:
    """``flip(cumsum(flip(x, dim), dim), dim)`` (``op="prod"``: cumprod) in one kernel; a new contiguous tensor."""
    import math

    import torch
    import triton

    from . import rewrite_kernels  # imports Triton: only when a rewrite runs

    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y
    dim %= x.dim()
    shape = x.shape
    outer, rows, inner = math.prod(shape[:dim]), shape[dim], math.prod(shape[dim + 1:])
    block_n0, block_r0, warps0 = _blocks(outer, rows, inner, x.element_size())
    block_n, block_r, warps = block_n or block_n0, block_r or block_r0, num_warps or warps0
    flags = dict(PROD=op == "prod", FP64=x.dtype == torch.float64, BLOCK_R=block_r, num_warps=warps)
    if inner == 1:
        rewrite_kernels.suffix_scan_rows[(outer,)](x, y, rows, **flags)
    else:
        rewrite_kernels.suffix_scan_cols[(outer, triton.cdiv(inner, block_n))](x, y, rows, inner, BLOCK_N=block_n,
                                                                              **flags)
    return y


@functools.cache
def suffix_scan() -> Any:
    """The ``kernelopt::suffix_scan(x, dim, op)`` operator (registered on first use)."""
    import torch

    # The schema is written out: this module's annotations are strings (``from __future__``).
    @torch.library.custom_op("kernelopt::suffix_scan", mutates_args=(),
                             schema="(Tensor x, int dim, str kind) -> Tensor")
    def op(x, dim, kind):  # type: ignore[no-untyped-def]
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            # No Triton for this device (a model tuned on a GPU, run on the CPU): what the pattern computed.
            scan = torch.cumsum if kind == "sum" else torch.cumprod
            return scan(x.flip(dim), dim).flip(dim).contiguous()
        return launch_suffix_scan(x, dim, kind)

    @op.register_fake
    def _(x, dim, kind):  # type: ignore[no-untyped-def]
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return torch.ops.kernelopt.suffix_scan.default


def _reverse_scans(graph: Any) -> int:
    """Rewrite every ``rev(scan(rev(x, D), d), D)`` in ``graph``; how many."""
    import torch

    aten, prims = torch.ops.aten, torch.ops.prims
    scans = {aten.cumsum.default: "sum", aten.cumprod.default: "prod"}
    floats = (torch.float16, torch.bfloat16, torch.float32, torch.float64)
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not prims.rev.default:
            continue
        scan = node.args[0]
        if getattr(scan, "op", None) != "call_function" or scan.target not in scans:
            continue
        inner = scan.args[0]
        if getattr(inner, "op", None) != "call_function" or inner.target is not prims.rev.default:
            continue
        source = inner.args[0]
        val, out = source.meta.get("val"), node.meta.get("val")
        if not isinstance(val, torch.Tensor) or not isinstance(out, torch.Tensor) or val.dim() == 0:
            continue
        ndim = val.dim()
        dims, outer_dims = {int(d) % ndim for d in inner.args[1]}, {int(d) % ndim for d in node.args[1]}
        d = int(scan.args[1] if len(scan.args) > 1 else scan.kwargs["dim"]) % ndim
        # The result in the input's dtype (a scan with ``dtype=`` another is left alone), floating only.
        if dims != outer_dims or d not in dims or val.dtype not in floats or out.dtype != val.dtype:
            continue
        fake_mode = getattr(val, "fake_mode", None)
        if fake_mode is None:  # no fake tensor to give the new node its metadata: left as it is
            continue
        target = suffix_scan()
        with graph.inserting_before(node):
            new = graph.call_function(target, (source, d, scans[scan.target]))
        with fake_mode:
            new.meta["val"] = target(val, d, scans[scan.target])
        node.replace_all_uses_with(new)
        graph.erase_node(node)
        count += 1
    if count:
        graph.eliminate_dead_code()
    return count


@functools.cache
def rewrite_pass() -> Any:
    """The post-grad pass that applies every rewrite (one instance: Inductor's caches key on its uuid)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class Rewrites(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            _done.count = rewrites_done() + _reverse_scans(graph)

        def uuid(self) -> Any:
            return get_hash_for_files((__file__,))

    return Rewrites()
