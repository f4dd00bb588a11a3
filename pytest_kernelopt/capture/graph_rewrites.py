"""kernelopt's graph rewrites: patterns Inductor compiles into several kernels, done in one.

A rewrite is an FX pass (Inductor's ``post_grad_custom_pre_pass``, or ``pre_grad_custom_pass``
where the pattern is one call before decomposition) that replaces a pattern with a call to an
operator of this package, whose Triton kernel is written here
(never supplied by a candidate or read from the repository). It runs only under a named
compile setting of the catalogue (``capture/variants.py``, ``rewrites=True``), which
``kernelopt tune`` tries as the model's compile like any other: the whole model against
float64 with the default compile's error as the allowance, then timed against the default
compile. A model it does not pay on keeps its compile.

The rewrites:

* **reverse scans.** ``flip(cumsum(flip(x, D), d), D)`` with ``d`` in ``D`` (a suffix sum;
  likewise ``cumprod``) is a scan that runs from the end of the axis. Inductor's scans
  only run forwards, so it makes two kernels: the scan with the first flip fused into its
  loads, then a copy that flips the result, reading and writing the whole tensor again
  (twice the traffic the operation needs: 49% of the limit on the H200, 2026-12-03). The
  rewrite is one kernel that scans each row from its end, in blocks, with a running carry.
  Flips over other axes cancel, since a scan along ``d`` treats each position on the other
  axes alone.
* **group norms.** ``F.group_norm`` (``nn.GroupNorm``) over groups of many elements: Inductor
  makes a split Welford reduction then a normalising kernel, three passes over the tensor
  (54% of the copy bandwidth at 32 x 64 x 128 x 128 fp32, 27% at 16 x 128 x 64 x 64 with 32
  groups; H200, 2026-12-03). The rewrite is one program per group: a group of up to 16 KB is
  read once and kept in registers, a larger one is read twice, the second time backwards so
  that it starts on what is still in L2. Only where batch x groups is at least the GPU's
  multiprocessor count: fewer programs leave it idle.
* **attention written out.** ``softmax(q @ k.transpose(-2, -1) * c [masked], -1) @ v`` writes the
  scores and the weights to memory and reads them back; Inductor's own attention patterns
  (``fx_passes/fuse_attention.py``) miss common forms (nanoGPT's ``masked_fill`` of a sliced causal
  buffer, 2026-12-06). The rewrite calls ``F.scaled_dot_product_attention``: torch's fused kernels,
  nothing of this package's. Inference only (``_attentions`` says why).
* **grouped-query attention.** Key/value heads repeated for fused attention (``repeat_interleave`` over the
  heads, Hugging Face's ``repeat_kv``) are written to memory ``r`` times before attention reads them; the
  rewrite passes the unrepeated heads with ``enable_gqa=True`` (``_grouped_queries``). Inference only.
* **a linear layer's activation.** ``relu(F.linear(x, w, b))`` and the tanh GELU of one (Hugging Face's ``Conv1D``
  and ``gelu_new`` too): Inductor keeps the GEMM a
  library call and writes the activation as a kernel that reads the GEMM's output back and writes it again; the
  rewrite calls ``torch._addmm_activation``, the activation in cuBLASLt's epilogue (``_gemm_activations``). Inference
  only; the GELU on a GPU only.
* wide rows and cross-entropies: see ``_wide_rows`` and ``_cross_entropies``.
"""

from __future__ import annotations

import functools
import os
import threading
from typing import Any

__all__ = ["cross_entropy_rows", "group_norm", "launch_cross_entropy", "launch_cross_entropy_grad", "launch_group_norm",
           "launch_suffix_scan", "launch_wide_rows", "pre_grad_rewrite_pass", "rewrite_pass",
           "rewrites_done", "suffix_scan", "wide_rows"]

_done = threading.local()


def rewrites_done() -> int:
    """How many patterns this thread's compiles have rewritten so far (a counter: compare before and after)."""
    return getattr(_done, "count", 0)


def _floating(dtype: Any) -> bool:
    """Whether the rewrites' kernels take ``dtype`` (the float types: fp16, bf16, fp32, fp64)."""
    import torch

    return dtype in (torch.float16, torch.bfloat16, torch.float32, torch.float64)


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
    def op(x, dim, kind):
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            # No Triton for this device (a model tuned on a GPU, run on the CPU): what the pattern computed.
            scan = torch.cumsum if kind == "sum" else torch.cumprod
            return scan(x.flip(dim), dim).flip(dim).contiguous()
        return launch_suffix_scan(x, dim, kind)

    @op.register_fake
    def _(x, dim, kind):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return torch.ops.kernelopt.suffix_scan.default


def _group_norm_launch(group: int, element_bytes: int) -> tuple[int, int, bool]:
    """(BLOCK, num_warps, eviction hints) for groups of ``group`` elements; one pass where BLOCK >= group.

    H200, triton 3.6, 2026-12-03 (``bench/rewrites_gpu.py --only group-norms``): one pass, with
    32 elements a thread, won on groups of 16 KB (8192 bf16: 2.63x max-autotune, against 1.87x
    for two passes) and lost on groups of 64 KB (16384 fp32: 1.17-1.21x, two passes 1.30x). Two
    passes in blocks of 8192 with 16 warps and the eviction hints were within 3% of the fastest
    configuration on every larger group (131072 fp32 1.097x, bf16 1.550x; 40960 fp32 with SiLU 1.304x).
    """
    import triton

    if group * element_bytes <= 16384:
        block = triton.next_power_of_2(group)
        return block, min(16, max(1, block // 1024)), False
    return 8192, 16, True


# The activations a group norm's kernel applies to its output (the kernel's ACT is the index).
ACTIVATIONS = ("none", "silu", "relu", "gelu", "sigmoid")


def _activate(y: Any, act: str) -> Any:
    """Activation ``act`` in torch (the operator where Triton cannot run)."""
    import torch

    fn = {"none": lambda t: t, "silu": torch.nn.functional.silu, "relu": torch.relu,
          "gelu": torch.nn.functional.gelu, "sigmoid": torch.sigmoid}[act]
    return fn(y)


def launch_group_norm(x: Any, groups: int, weight: Any, bias: Any, eps: float, act: str = "none", *,
                      block: int | None = None, num_warps: int | None = None, evict: bool | None = None) -> Any:
    """``act(F.group_norm(x, groups, weight, bias, eps))`` in one kernel; a new contiguous tensor."""
    import math

    import torch

    from . import rewrite_kernels  # imports Triton: only when a rewrite runs

    x = x.contiguous()
    y = torch.empty_like(x, memory_format=torch.contiguous_format)
    if x.numel() == 0:
        return y
    n, c = x.shape[0], x.shape[1]
    hw = math.prod(x.shape[2:])
    group = c // groups * hw
    block0, warps0, evict0 = _group_norm_launch(group, x.element_size())
    block = block or block0
    rewrite_kernels.group_norm[(n * groups,)](
        x, weight if weight is not None else x, bias if bias is not None else x, y, group, hw, groups, float(eps),
        HAS_W=weight is not None, HAS_B=bias is not None, FP64=x.dtype == torch.float64, ONE_PASS=group <= block,
        EVICT=evict0 if evict is None else evict, ACT=ACTIVATIONS.index(act), BLOCK=block,
        num_warps=num_warps or warps0)
    return y


@functools.cache
def group_norm() -> Any:
    """The ``kernelopt::group_norm(x, groups, weight, bias, eps, act)`` operator (registered on first use)."""
    import torch

    @torch.library.custom_op("kernelopt::group_norm", mutates_args=(),
                             schema="(Tensor x, int groups, Tensor? weight, Tensor? bias, float eps, str act) -> Tensor")
    def op(x, groups, weight, bias, eps, act):
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return _activate(torch.nn.functional.group_norm(x, groups, weight, bias, eps), act).contiguous()
        return launch_group_norm(x, groups, weight, bias, eps, act)

    @op.register_fake
    def _(x, groups, weight, bias, eps, act):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return torch.ops.kernelopt.group_norm.default


def _wide_rows_launch(n: int, multiprocessors: int) -> tuple[int, int]:
    """(CHUNK, num_warps) for rows of ``n`` elements: each program holds CHUNK of a row, 64 a thread,
    in at most ``multiprocessors`` programs a row (so that, on a GPU not shared, they can all run at once).

    H200, triton 3.6, 2026-12-03 (``bench/wide_rows_gpu.py --sweep``, 40 configurations on 8 shapes):
    8192 elements in 4 warps, one program per chunk of every row, was the fastest or within 10% of
    it on the shapes of 128 KB rows or wider (1.04-1.32x max-autotune); persistent grids of 1, 2
    or 4 programs per multiprocessor were slower on most shapes, chunks of 2048 slower on all. It
    lost on 64 KB rows (0.94x) and where Inductor already ran at the copy's speed (an fp32 L2 norm
    of 128 KB rows 0.918x, an fp16 L1 norm of 256 KB rows 0.755x): tune's whole-model trial decides.
    """
    import triton

    chunk = min(triton.next_power_of_2(n), 8192)
    while triton.cdiv(n, chunk) > max(multiprocessors, 1) and chunk < 65536:
        chunk *= 2
    return chunk, max(1, min(16, chunk // 2048))


def launch_wide_rows(x: Any, kind: str, eps: float = 0.0, *, chunk: int | None = None, num_warps: int | None = None,
                     programs: int | None = None, one_kernel: bool | None = None, spin: int | None = None) -> Any:
    """Softmax, log-softmax, L1 or L2 normalisation (``rewrite_kernels.ROW_KINDS``; the norms divide
    by max(norm, eps)) of each row along ``x``'s last axis, each row read once by programs that share
    it; a new contiguous tensor.

    ``programs``: how many programs walk the rows (a multiple of the chunks per row; default one per
    chunk of every row). ``one_kernel`` (default: on a GPU whose multiprocessors outnumber a row's
    chunks): the one-kernel form, in which a program waits for its row's other programs at most
    ``spin`` polls (default ``WIDE_ROW_SPIN``), and a second launch writes the chunks of programs
    that stopped waiting; otherwise the two-launch form (``wide_rows``' PHASE 1, 2: the row read twice).
    """
    return _wide_rows_run(x, kind, eps, chunk=chunk, num_warps=num_warps, programs=programs,
                          one_kernel=one_kernel, spin=spin)[0]


def _wide_rows_run(x: Any, kind: str, eps: float = 0.0, *, chunk: int | None = None, num_warps: int | None = None,
                   programs: int | None = None, one_kernel: bool | None = None,
                   spin: int | None = None) -> tuple[Any, Any]:
    """``launch_wide_rows``, and the one-kernel form's counters (None for two launches): int32
    [rows + 1], each row's programs (plus ``rewrite_kernels.GAVE_UP`` for each that stopped waiting),
    then how many programs stopped waiting (their chunks written by ``wide_rows_retry``)."""
    import torch
    import triton

    from . import rewrite_kernels  # imports Triton: only when a rewrite runs

    x = x.contiguous()
    y = torch.empty_like(x)
    if x.numel() == 0:
        return y, None
    n = x.shape[-1]
    rows = x.numel() // n
    multiprocessors = _multiprocessors(x.device)
    chunk0, warps0 = _wide_rows_launch(n, multiprocessors or 1 << 20)
    chunk = chunk or chunk0
    k = triton.cdiv(n, chunk)
    programs = programs or rows * k
    if programs % k:
        raise ValueError(f"{programs} programs do not split into groups of {k} (the chunks of a row)")
    m = torch.empty(rows * k, device=x.device, dtype=torch.float32)
    s = torch.empty_like(m)
    flags = dict(KIND=rewrite_kernels.ROW_KINDS.index(kind), CHUNK=chunk, KP=triton.next_power_of_2(k),
                 SPIN=WIDE_ROW_SPIN if spin is None else spin, num_warps=num_warps or warps0)
    if one_kernel is None:
        # Speed, not safety (no program waits without bound): a row in more chunks than the GPU has
        # multiprocessors would leave most of its programs to the retry. The interpreter runs
        # programs one after another: all but a row's last would.
        one_kernel = os.environ.get("TRITON_INTERPRET") != "1" and k <= (multiprocessors or k)
    if not one_kernel or k * rewrite_kernels.GAVE_UP >= 2**31:  # a row's give-ups must fit its int32 counter
        for phase in (1, 2):
            rewrite_kernels.wide_rows[(programs,)](x, y, m, s, m, rows, n, k, float(eps), PHASE=phase, **flags)
        return y, None
    count = torch.zeros(rows + 1, device=x.device, dtype=torch.int32)  # zeroed per launch: nothing carries over
    rewrite_kernels.wide_rows[(programs,)](x, y, m, s, count, rows, n, k, float(eps), PHASE=0, **flags)
    del flags["SPIN"]
    rewrite_kernels.wide_rows_retry[(triton.cdiv(rows, _RETRY_ROWS),)](x, y, m, s, count, rows, n, k, float(eps),
                                                                       BLOCK_ROWS=_RETRY_ROWS, **flags)
    return y, count


# Rows whose counters one ``wide_rows_retry`` program reads (one vector load where none gave up).
_RETRY_ROWS = 1024


_GROUP_NORM_ARGS = ("input", "num_groups", "weight", "bias", "eps")


def _multiprocessors(device: Any) -> int:
    """How many multiprocessors ``device`` has (0 where it is no CUDA device)."""
    import torch

    if device.type != "cuda" or not torch.cuda.is_available():
        return 0
    return torch.cuda.get_device_properties(device).multi_processor_count


def _activation_of(node: Any) -> tuple[Any, str] | None:
    """(the node, the activation's name) where ``node``'s one user applies an activation of
    ``ACTIVATIONS`` to it and nothing else (None otherwise)."""
    import torch

    F = torch.nn.functional
    if len(node.users) != 1:
        return None
    user = next(iter(node.users))
    if user.op not in ("call_function", "call_method") or not user.args or user.args[0] is not node:
        return None
    if user.op == "call_function":
        act = {F.silu: "silu", F.relu: "relu", torch.relu: "relu", F.gelu: "gelu", torch.sigmoid: "sigmoid",
               F.sigmoid: "sigmoid"}.get(user.target)
    else:
        act = {"relu": "relu", "sigmoid": "sigmoid"}.get(user.target)
    options = [*user.args[1:], *user.kwargs.values()]
    if act is None or len(options) > 1:
        return None
    if act == "gelu":  # the exact GELU only
        return (user, act) if options in ([], ["none"]) and set(user.kwargs) <= {"approximate"} else None
    # ``inplace`` writes the group norm's output, which has no other user: the same values.
    return (user, act) if all(isinstance(o, bool) for o in options) and set(user.kwargs) <= {"inplace"} else None


def _replace(graph: Any, node: Any, target: Any, args: tuple, kwargs: dict[str, Any] | None = None) -> None:
    """Put a call of ``target`` on ``args`` in ``node``'s place in ``graph`` (its metadata, its users)."""
    with graph.inserting_before(node):
        new = graph.call_function(target, args, kwargs or {})
    new.meta.update(node.meta)
    node.replace_all_uses_with(new)
    graph.erase_node(node)


def _group_norms(graph: Any) -> int:
    """Rewrite every ``F.group_norm`` call of ``graph`` (Dynamo's graph, before autograd) that
    the kernel serves: a floating tensor of three or more dimensions, constant groups and eps,
    no gradient being recorded, and at least as many groups as the GPU has multiprocessors; with
    the activation its one user applies, if any (``ACTIVATIONS``: else Inductor would have fused
    it into its normalising kernel, and the rewrite would cost a pass more); how many."""
    import torch

    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.nn.functional.group_norm:
            continue
        bound = dict(zip(_GROUP_NORM_ARGS, node.args)) | dict(node.kwargs)
        x, groups, eps = bound.get("input"), bound.get("num_groups"), bound.get("eps", 1e-5)
        weight, bias = bound.get("weight"), bound.get("bias")
        example = _example(x)
        if not isinstance(groups, int) or isinstance(groups, bool) or groups <= 0 \
                or not isinstance(eps, (int, float)) or example is None:
            continue
        if example.dim() < 3 or not _floating(example.dtype) or example.shape[1] % groups:
            continue
        params = [_example(p) for p in (weight, bias) if p is not None]
        if any(p is None or p.dtype != example.dtype for p in params):
            continue
        # The operator has no backward: a graph that records gradients keeps Inductor's group norm.
        if torch.is_grad_enabled() and any(t.requires_grad for t in (example, *params)):
            continue
        if example.shape[0] * groups < _multiprocessors(example.device):
            continue
        folded = _activation_of(node)
        last, act = folded if folded else (node, "none")
        _replace(graph, last, group_norm(), (x, groups, weight, bias, float(eps), act))
        if last is not node:
            graph.erase_node(node)
        count += 1
    return count


@functools.cache
def wide_rows() -> Any:
    """The ``kernelopt::wide_rows(x, kind, eps)`` operator (registered on first use): ``kind`` of
    ``rewrite_kernels.ROW_KINDS`` along the last axis; the norms divide by max(norm, eps)."""
    import torch

    @torch.library.custom_op("kernelopt::wide_rows", mutates_args=(), schema="(Tensor x, str kind, float eps) -> Tensor")
    def op(x, kind, eps):
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return _row_reference(x, kind, eps).contiguous()
        return launch_wide_rows(x, kind, eps)

    @op.register_fake
    def _(x, kind, eps):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    return torch.ops.kernelopt.wide_rows.default


def _row_reference(x: Any, kind: str, eps: float = 0.0) -> Any:
    """What ``kernelopt::wide_rows`` computes, in torch (where Triton cannot run; the tests' reference)."""
    import torch

    if kind == "softmax":
        return torch.softmax(x, -1)
    if kind == "log_softmax":
        return torch.log_softmax(x, -1)
    norm = x.abs().sum(-1, keepdim=True) if kind == "l1_normalize" else torch.linalg.vector_norm(x, 2, -1, keepdim=True)
    return x / (norm.clamp_min(eps) if eps else norm)


# Rows at least this wide go to the wide-row kernel; narrower ones Inductor holds on chip or
# re-reads from L2 (see ``_wide_rows_launch``).
WIDE_ROW_BYTES = 128 * 1024
# How many times a wide-row program polls for its row's other programs before it stops waiting
# (``rewrite_kernels.wide_rows``; shared among a launch's give-ups): in a normal run the
# last of a row's programs starts within about one program's time (tens of microseconds; a poll is
# an L2 round trip, under a microsecond), far inside the bound.
WIDE_ROW_SPIN = 1024


def _arg(node: Any, index: int, name: str, default: Any = None) -> Any:
    """Argument ``name`` of a call ``node``, given by position ``index`` or keyword."""
    return node.args[index] if len(node.args) > index else node.kwargs.get(name, default)


def _last_axis(dim: Any, ndim: int) -> bool:
    """Whether ``dim`` (an int, or a one-element list or tuple) names the last of ``ndim`` axes."""
    if isinstance(dim, (list, tuple)) and len(dim) == 1:
        dim = dim[0]
    return isinstance(dim, int) and not isinstance(dim, bool) and ndim > 0 and dim % ndim == ndim - 1


def _example(node: Any) -> Any:
    """The example tensor Dynamo recorded for ``node`` (None where there is none)."""
    import torch

    value = getattr(node, "meta", {}).get("example_value")
    return value if isinstance(value, torch.Tensor) else None


def _call(node: Any, functions: tuple, method: str) -> bool:
    """Whether ``node`` calls one of ``functions`` or the tensor method ``method``."""
    return getattr(node, "op", None) == "call_function" and node.target in functions \
        or getattr(node, "op", None) == "call_method" and node.target == method


def _softmax_kind(node: Any) -> tuple[Any, str, float] | None:
    """(input, kind, 0.0) where ``node`` is a softmax or log-softmax over the last axis in the input's dtype."""
    import torch

    F = torch.nn.functional
    for kind, functions in (("softmax", (torch.softmax, F.softmax, torch.special.softmax)),
                            ("log_softmax", (torch.log_softmax, F.log_softmax, torch.special.log_softmax))):
        if _call(node, functions, kind):
            x, dim = _arg(node, 0, "input"), _arg(node, 1, "dim")
            dtype = _arg(node, 3 if node.target in (F.softmax, F.log_softmax) else 2, "dtype")
            example = _example(x)
            if example is not None and dtype in (None, example.dtype) and _last_axis(dim, example.dim()):
                return x, kind, 0.0
    return None


def _norm_of(node: Any, x: Any) -> str | None:
    """"l1_normalize" or "l2_normalize" where ``node`` is x's L1 or L2 norm over the last axis, kept as
    an axis of one (``sum(abs(x), -1, keepdim=True)``, ``vector_norm(x, 2, -1, keepdim=True)``,
    ``norm(x, p=2, dim=-1, keepdim=True)``); None otherwise."""
    import torch

    example = _example(x)
    if example is None:
        return None
    ndim = example.dim()
    if _call(node, (torch.sum,), "sum"):
        inner = _arg(node, 0, "input")
        if _call(inner, (torch.abs,), "abs") and _arg(inner, 0, "input") is x and len(inner.args) + len(inner.kwargs) == 1 \
                and _last_axis(_arg(node, 1, "dim"), ndim) and _arg(node, 2, "keepdim", False) is True \
                and _arg(node, 3, "dtype") is None:
            return "l1_normalize"
    if _call(node, (torch.linalg.vector_norm,), "") and _arg(node, 0, "x") is x:
        order, dim, keep = _arg(node, 1, "ord", 2), _arg(node, 2, "dim"), _arg(node, 3, "keepdim", False)
        if order in (1, 2) and _last_axis(dim, ndim) and keep is True and _arg(node, 4, "dtype") is None:
            return "l1_normalize" if order == 1 else "l2_normalize"
    if _call(node, (torch.norm,), "norm") and _arg(node, 0, "input") is x:
        order, dim, keep = _arg(node, 1, "p", "fro"), _arg(node, 2, "dim"), _arg(node, 3, "keepdim", False)
        if order in (1, 2) and _last_axis(dim, ndim) and keep is True and _arg(node, 4, "out") is None \
                and _arg(node, 5, "dtype") is None:
            return "l1_normalize" if order == 1 else "l2_normalize"
    return None


def _normalize_kind(node: Any) -> tuple[Any, str, float] | None:
    """(input, kind, eps) where ``node`` divides a tensor by its L1 or L2 norm over the last axis
    (``x / norm``, or ``F.normalize(x, p, dim=-1)``, which divides by max(norm, eps))."""
    import operator

    import torch

    F = torch.nn.functional
    if getattr(node, "op", None) == "call_function" and node.target is F.normalize:
        x, order, dim, eps = _arg(node, 0, "input"), _arg(node, 1, "p", 2.0), _arg(node, 2, "dim", 1), _arg(node, 3, "eps", 1e-12)
        example = _example(x)
        if example is not None and order in (1, 2) and _last_axis(dim, example.dim()) \
                and isinstance(eps, (int, float)) and eps >= 0 and _arg(node, 4, "out") is None:
            return x, "l1_normalize" if order == 1 else "l2_normalize", float(eps)
        return None
    if not (_call(node, (operator.truediv, torch.div, torch.true_divide), "div")
            and len(node.args) == 2 and not node.kwargs):
        return None
    x, norm = node.args
    kind = _norm_of(norm, x) if hasattr(norm, "op") else None
    return (x, kind, 0.0) if kind else None


def _wide_rows(graph: Any) -> int:
    """Rewrite every softmax, log-softmax and L1/L2 normalisation over the last axis of ``graph``
    (Dynamo's graph, before autograd) whose rows are wide (``WIDE_ROW_BYTES``): a contiguous float16,
    bfloat16 or float32 tensor, no gradient being recorded, a row in at most as many chunks as the
    GPU has multiprocessors; how many."""
    import torch

    count = 0
    for node in list(graph.nodes):
        if node.op not in ("call_function", "call_method"):
            continue
        found = _softmax_kind(node) or _normalize_kind(node)
        if found is None:
            continue
        x, kind, eps = found
        example, out = _example(x), _example(node)
        if example is None or out is None or example.dtype not in (torch.float16, torch.bfloat16, torch.float32) \
                or out.dtype != example.dtype or out.shape != example.shape or not example.is_contiguous():
            continue
        if torch.is_grad_enabled() and example.requires_grad:
            continue
        n = example.shape[-1]
        multiprocessors = _multiprocessors(example.device)
        chunk, _ = _wide_rows_launch(n, multiprocessors)
        if n * example.element_size() < WIDE_ROW_BYTES or -(-n // chunk) > multiprocessors:
            continue
        _replace(graph, node, wide_rows(), (x, kind, eps))
        count += 1
    if count:
        graph.eliminate_dead_code()
    return count


# Cross-entropy rows at least this wide go to ``kernelopt::cross_entropy_rows``. On an H100
# (2026-12-06, ``bench/cross_entropy_gpu.py``) Inductor's default compile of a bf16 loss split
# the rows' reduction and read them twice: 41-51% of the read's limit on rows of 16-250 KB,
# the operator 93-100%; the narrowest rows measured were 16 KB (8,192 bf16 classes).
CROSS_ENTROPY_ROW_BYTES = 16 * 1024
# Elements a cross-entropy program reads at a time (``rewrite_kernels.cross_entropy_stats``, ``_grad``),
# and its warps: within 1% of the best of blocks of 2048-8192 and 4-16 warps on an H100 (2026-12-06).
_CE_BLOCK, _CE_WARPS = 4096, 8


def _cross_entropy_split(rows: int, n: int, multiprocessors: int, block: int) -> int:
    """How many programs share each row in ``cross_entropy_stats``: one, unless the rows are fewer than
    four programs a multiprocessor, then enough to fill them (at most a block each)."""
    wanted = -(-4 * max(multiprocessors, 1) // max(rows, 1))
    return max(1, min(wanted, -(-n // block)))


def launch_cross_entropy(x: Any, target: Any, ignore_index: int, label_smoothing: float = 0.0, *,
                         block: int | None = None, split: int | None = None,
                         num_warps: int | None = None) -> tuple[Any, Any]:
    """Each row's cross-entropy loss over the logits ``x`` (2-D) for the class ``target[row]`` (0 where
    it is ``ignore_index``, NaN where it is out of range; with torch's ``label_smoothing``) and its
    statistics [rows, 2] (the maximum, the log of the sum of exp(x - maximum)), float32 (float64 for
    float64 logits): every logit read once, ``split`` programs a row."""
    import torch
    import triton

    from . import rewrite_kernels  # imports Triton: only when a rewrite runs

    x, target = x.contiguous(), target.contiguous()
    rows, n = x.shape
    out = torch.float64 if x.dtype == torch.float64 else torch.float32
    loss = torch.empty(rows, device=x.device, dtype=out)
    stats = torch.empty(rows, 2, device=x.device, dtype=out)
    if rows == 0:
        return loss, stats
    block = block or _CE_BLOCK
    k = split or _cross_entropy_split(rows, n, _multiprocessors(x.device), block)
    chunk = triton.cdiv(triton.cdiv(n, k), block) * block
    k = triton.cdiv(n, chunk)
    smooth = label_smoothing != 0
    m, s, sx = torch.empty(3, rows * k, device=x.device, dtype=out)  # sx: read with label smoothing only
    fp64 = out == torch.float64
    rewrite_kernels.cross_entropy_stats[(rows * k,)](x, m, s, sx, n, k, CHUNK=chunk, SUM_X=smooth, FP64=fp64,
                                                     BLOCK=block, num_warps=num_warps or _CE_WARPS)
    block_r = 32
    rewrite_kernels.cross_entropy_finish[(triton.cdiv(rows, block_r),)](
        x, target, m, s, sx, loss, stats, rows, n, k, ignore_index, float(label_smoothing), SUM_X=smooth, FP64=fp64,
        KP=triton.next_power_of_2(k), BLOCK_R=block_r)
    return loss, stats


def launch_cross_entropy_grad(x: Any, target: Any, stats: Any, grad: Any, ignore_index: int, label_smoothing: float = 0.0,
                              *, block: int | None = None, num_warps: int | None = None) -> Any:
    """The gradient over the logits ``x`` of ``launch_cross_entropy``'s losses (incoming ``grad``, one a
    row; ``stats`` as it returned them), in ``x``'s dtype: every logit read once, written once."""
    import torch
    import triton

    from . import rewrite_kernels

    x = x.contiguous()
    dx = torch.empty_like(x)
    if x.numel() == 0:
        return dx
    rows, n = x.shape
    block = block or _CE_BLOCK
    rewrite_kernels.cross_entropy_grad[(rows, triton.cdiv(n, block))](
        x, target.contiguous(), stats.contiguous(), grad.contiguous(), dx, n, ignore_index, float(label_smoothing),
        FP64=x.dtype == torch.float64, BLOCK=block, num_warps=num_warps or _CE_WARPS)
    return dx


def _cross_entropy_reference(x: Any, target: Any, ignore_index: int, label_smoothing: float = 0.0) -> tuple[Any, Any]:
    """What ``kernelopt::cross_entropy_rows`` computes, in torch (where Triton cannot run; the tests' reference)."""
    import torch

    x = x.double() if x.dtype == torch.float64 else x.float()
    top = x.amax(1)
    shift = torch.where(top == float("-inf"), torch.zeros_like(top), top)
    log_sum = torch.log(torch.exp(x - shift[:, None]).sum(1))
    valid = target != ignore_index
    inside = (target >= 0) & (target < x.shape[1])
    picked = x.gather(1, target.clamp(0, max(x.shape[1] - 1, 0)).long()[:, None])[:, 0]
    nan = torch.full_like(top, float("nan"))
    nll = (shift - picked) + log_sum
    if label_smoothing:
        nll = (1 - label_smoothing) * nll + label_smoothing * ((shift - x.mean(1)) + log_sum)
    loss = torch.where(valid, torch.where(inside, nll, nan), torch.zeros_like(top))
    return loss, torch.stack([shift, log_sum], 1)


def _cross_entropy_grad_reference(x: Any, target: Any, stats: Any, grad: Any, ignore_index: int,
                                  label_smoothing: float = 0.0) -> Any:
    """What ``kernelopt::cross_entropy_rows_grad`` computes, in torch."""
    import torch

    acc = torch.float64 if x.dtype == torch.float64 else torch.float32
    g = torch.where(target != ignore_index, grad.to(acc), torch.zeros((), dtype=acc, device=x.device))
    p = torch.exp((x.to(acc) - stats[:, :1].to(acc)) - stats[:, 1:].to(acc)) - label_smoothing / x.shape[1]
    onehot = torch.arange(x.shape[1], device=x.device)[None, :] == target[:, None]
    return (p * g[:, None] - torch.where(onehot, g[:, None] * (1 - label_smoothing), 0)).to(x.dtype)


@functools.cache
def cross_entropy_rows() -> Any:
    """The ``kernelopt::cross_entropy_rows(x, target, ignore_index, label_smoothing) -> (loss, stats)`` operator and its
    backward, ``kernelopt::cross_entropy_rows_grad`` (registered on first use): the forward reads
    each logit once and keeps two numbers a row (``launch_cross_entropy``; the statistics are not
    differentiable); the backward reads the logits once more and writes their gradient."""
    import torch

    @torch.library.custom_op("kernelopt::cross_entropy_rows", mutates_args=(),
                             schema="(Tensor x, Tensor target, int ignore_index, float label_smoothing) -> (Tensor, Tensor)")
    def op(x, target, ignore_index, label_smoothing):
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return _cross_entropy_reference(x, target, ignore_index, label_smoothing)
        return launch_cross_entropy(x, target, ignore_index, label_smoothing)

    @op.register_fake
    def _(x, target, ignore_index, label_smoothing):
        out = torch.float64 if x.dtype == torch.float64 else torch.float32
        return x.new_empty(x.shape[0], dtype=out), x.new_empty(x.shape[0], 2, dtype=out)

    @torch.library.custom_op("kernelopt::cross_entropy_rows_grad", mutates_args=(),
                             schema="(Tensor x, Tensor target, Tensor stats, Tensor grad, int ignore_index, "
                                    "float label_smoothing) -> Tensor")
    def grad_op(x, target, stats, grad, ignore_index, label_smoothing):
        if x.device.type != "cuda" and os.environ.get("TRITON_INTERPRET") != "1":
            return _cross_entropy_grad_reference(x, target, stats, grad, ignore_index, label_smoothing)
        return launch_cross_entropy_grad(x, target, stats, grad, ignore_index, label_smoothing)

    @grad_op.register_fake
    def _(x, target, stats, grad, ignore_index, label_smoothing):
        return torch.empty_like(x, memory_format=torch.contiguous_format)

    def setup_context(ctx, inputs, output):
        x, target, ignore_index, label_smoothing = inputs
        ctx.save_for_backward(x, target, output[1])
        ctx.mark_non_differentiable(output[1])
        ctx.ignore_index, ctx.label_smoothing = ignore_index, label_smoothing

    def backward(ctx, grad, _):
        x, target, stats = ctx.saved_tensors
        if grad is None:
            grad = torch.zeros_like(stats[:, 0])
        return grad_op(x, target, stats, grad, ctx.ignore_index, ctx.label_smoothing), None, None, None

    op.register_autograd(backward, setup_context=setup_context)
    return torch.ops.kernelopt.cross_entropy_rows.default


def _cross_entropy_call(x: Any, target: Any, reduction: str, ignore_index: int, label_smoothing: float, dtype: Any) -> Any:
    """What the rewrite puts in place of ``F.cross_entropy(x, target, ...)``: the rows' losses from
    ``kernelopt::cross_entropy_rows``, reduced as torch does (the mean over the rows whose target is not
    ``ignore_index``), in ``dtype``."""
    loss = cross_entropy_rows()(x, target, ignore_index, label_smoothing)[0]
    if reduction == "mean":
        loss = loss.sum() / (target != ignore_index).sum()
    elif reduction == "sum":
        loss = loss.sum()
    return loss.to(dtype)


_CROSS_ENTROPY_ARGS = ("input", "target", "weight", "size_average", "ignore_index", "reduce", "reduction",
                       "label_smoothing")


def _is_upcast(node: Any) -> bool:
    """Whether ``node`` casts a half-precision tensor to float32 (``x.float()``, ``x.to(torch.float32)``,
    ``x.to(dtype=torch.float32)``, ``x.type(torch.float32)``; ``copy`` and ``non_blocking`` change no value)."""
    import torch

    if getattr(node, "op", None) != "call_method":
        return False
    if node.target == "float":
        if len(node.args) != 1 or node.kwargs:
            return False
    elif node.target in ("to", "type"):
        dtype = node.args[1] if len(node.args) == 2 else node.kwargs.get("dtype")
        if dtype is not torch.float32 or len(node.args) > 2 or len(node.args) == 2 and "dtype" in node.kwargs \
                or set(node.kwargs) - {"dtype", "copy", "non_blocking"}:
            return False
    else:
        return False
    source = _example(node.args[0])
    return source is not None and source.dtype in (torch.float16, torch.bfloat16)


def _reshape_args(node: Any) -> tuple | None:
    """The shape arguments of ``node`` where it is ``t.view(...)`` / ``t.reshape(...)`` by constant sizes."""
    if getattr(node, "op", None) != "call_method" or node.target not in ("view", "reshape") or node.kwargs:
        return None
    sizes = node.args[1:]
    if len(sizes) == 1 and isinstance(sizes[0], (tuple, list)):
        sizes = tuple(sizes[0])
    ok = sizes and all(isinstance(n, int) and not isinstance(n, bool) for n in sizes)
    return tuple(sizes) if ok else None


def _through_upcast(x: Any) -> tuple[Any, list[tuple], Any] | None:
    """Where the logits ``x`` are a half-precision tensor cast to float32 (``_is_upcast``), then perhaps
    viewed or reshaped by constant sizes (``logits.float().view(-1, classes)``), each step used only on the
    way to the loss: (the half-precision tensor's node, the sizes to reshape it by, in order, the
    example tensor of the result); None otherwise. The operator reads that tensor and computes in
    float32: the cast's values, without the float32 copy."""
    shapes: list[tuple] = []
    at = x
    while (sizes := _reshape_args(at)) is not None and len(at.users) == 1:
        shapes.append(sizes)
        at = at.args[0]
    if not _is_upcast(at) or len(at.users) != 1:
        return None
    shapes.reverse()
    example = _example(at.args[0])
    for sizes in shapes:
        try:
            example = example.reshape(sizes)
        except RuntimeError:  # not a shape this tensor takes: left as it is
            return None
    return at.args[0], shapes, example


def _reshaped(graph: Any, before: Any, source: Any, shapes: list[tuple]) -> Any:
    """``source`` reshaped by each of ``shapes`` in turn, in nodes put before ``before``."""
    example = _example(source)
    for sizes in shapes:
        example = example.reshape(sizes)
        with graph.inserting_before(before):
            source = graph.call_method("reshape", (source, *sizes))
        source.meta["example_value"] = example
    return source


def _cross_entropies(graph: Any) -> int:
    """Rewrite every ``F.cross_entropy(x, target)`` of ``graph`` (Dynamo's graph, before autograd) over
    wide rows (``CROSS_ENTROPY_ROW_BYTES``): 2-D contiguous float logits, a class index a row, no class
    weights (label smoothing as torch computes it); a cast of half-precision logits to float32 just before (perhaps
    then reshaped) is read through (``_through_upcast``). Gradients may be recorded: the operator has
    its backward. How many."""
    import torch

    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not torch.nn.functional.cross_entropy:
            continue
        bound = dict(zip(_CROSS_ENTROPY_ARGS, node.args)) | dict(node.kwargs)
        x, target = bound.get("input"), bound.get("target")
        ignore_index, reduction = bound.get("ignore_index", -100), bound.get("reduction", "mean")
        smoothing = bound.get("label_smoothing", 0.0)
        if any(bound.get(name) is not None for name in ("weight", "size_average", "reduce")) \
                or not isinstance(smoothing, (int, float)) or isinstance(smoothing, bool) or not 0 <= smoothing <= 1 \
                or reduction not in ("mean", "sum", "none") \
                or not isinstance(ignore_index, int) or isinstance(ignore_index, bool):
            continue
        logits, labels, out = _example(x), _example(target), _example(node)
        if logits is None or labels is None or out is None or logits.dim() != 2 or labels.dim() != 1 \
                or labels.dtype not in (torch.int64, torch.int32) or labels.shape[0] != logits.shape[0] \
                or logits.dtype not in (torch.float16, torch.bfloat16, torch.float32) or not logits.is_contiguous():
            continue
        upcast = _through_upcast(x)
        read = upcast[2] if upcast else logits
        if not read.is_contiguous() or logits.shape[1] * read.element_size() < CROSS_ENTROPY_ROW_BYTES:
            continue
        source = _reshaped(graph, node, *upcast[:2]) if upcast else x
        _replace(graph, node, _cross_entropy_call, (source, target, reduction, ignore_index, float(smoothing), out.dtype))
        count += 1
    if count:
        graph.eliminate_dead_code()
    return count


def _matmul_of(node: Any) -> tuple[Any, Any] | None:
    """(a, b) where ``node`` is ``a @ b`` (``torch.matmul``, ``Tensor.matmul``, ``torch.bmm``, ``Tensor.bmm``)."""
    import operator

    import torch

    if (_call(node, (operator.matmul, torch.matmul, torch.bmm), "matmul") or _call(node, (), "bmm")) \
            and len(node.args) == 2 and not node.kwargs:
        return node.args[0], node.args[1]
    return None


def _einsum_terms(node: Any) -> tuple[list[str], list[str], list[str], Any, Any] | None:
    """(labels of a, of b, of the output, a, b) where ``node`` is ``torch.einsum(equation, a, b)`` (or with
    ``[a, b]``) of an explicit equation; an ellipsis counts as one label. None otherwise."""
    import re

    import torch

    if getattr(node, "op", None) != "call_function" or node.target is not torch.einsum or node.kwargs \
            or not node.args or not isinstance(node.args[0], str):
        return None
    operands = node.args[1:]
    if len(operands) == 1 and isinstance(operands[0], (list, tuple)):
        operands = tuple(operands[0])
    equation = node.args[0].replace(" ", "")
    if len(operands) != 2 or not all(hasattr(t, "op") for t in operands) or equation.count("->") != 1:
        return None
    inputs, output = equation.split("->")
    terms = inputs.split(",")
    if len(terms) != 2:
        return None
    parsed = [re.findall(r"\.\.\.|[A-Za-z]", t) for t in (*terms, output)]
    if any("".join(labels) != term or len(set(labels)) != len(labels)
           for labels, term in zip(parsed, (*terms, output))):
        return None
    return parsed[0], parsed[1], parsed[2], operands[0], operands[1]


def _einsum_product(node: Any, *, transposed: bool) -> tuple[Any, Any] | None:
    """(a, b) where ``node`` is an einsum that is ``a @ b`` over the last two axes (``"bhij,bhjd->bhid"``), or with
    ``transposed``, ``a @ b.transpose(-2, -1)`` (``"bhid,bhjd->bhij"``): the same leading (batch) labels in both
    operands and the output, the contracted label in neither output axis."""
    terms = _einsum_terms(node)
    if terms is None:
        return None
    a, b, out, x, y = terms
    if not len(a) == len(b) == len(out) >= 3 or not a[:-2] == b[:-2] == out[:-2]:
        return None
    i, j = out[-2:]
    contracted = a[-1]
    wanted_b = [j, contracted] if transposed else [contracted, j]
    if a[-2] != i or b[-2:] != wanted_b or contracted in out or "..." in (i, j, contracted):
        return None
    return x, y


def _untransposed(node: Any) -> Any:
    """``k`` where ``node`` swaps the last two axes of ``k`` (``k.transpose(-2, -1)``, ``k.transpose(2, 3)``
    of a 4-D tensor, ``torch.transpose``); None otherwise."""
    import torch

    if not _call(node, (torch.transpose,), "transpose") or len(node.args) != 3 or node.kwargs:
        return None
    k, a, b = node.args
    example = _example(k)
    if example is None or not all(isinstance(d, int) and not isinstance(d, bool) for d in (a, b)):
        return None
    ndim = example.dim()
    return k if ndim >= 2 and {a % ndim, b % ndim} == {ndim - 2, ndim - 1} else None


def _scaled(node: Any) -> tuple[Any, float] | None:
    """(x, factor) where ``node`` is ``x * c``, ``c * x`` or ``x / c`` for a positive number ``c``."""
    import operator

    import torch

    if len(getattr(node, "args", ())) != 2 or node.kwargs:
        return None
    a, b = node.args
    number = (int, float)
    if _call(node, (operator.mul, torch.mul), "mul"):
        x, c = (a, b) if isinstance(b, number) else (b, a)
        factor = c
    elif _call(node, (operator.truediv, torch.div, torch.true_divide), "div") and isinstance(b, number) and b:
        x, factor = a, 1 / b
    else:
        return None
    ok = isinstance(factor, number) and not isinstance(factor, bool) and 0 < factor < float("inf") \
        and hasattr(x, "op")
    return (x, float(factor)) if ok else None


def _masked_out(node: Any) -> tuple[Any, Any] | None:
    """(x, mask) where ``node`` is ``x.masked_fill(mask, -inf)`` (``torch.masked_fill``) with a boolean mask."""
    import torch

    if not _call(node, (torch.masked_fill,), "masked_fill") or len(node.args) != 3 or node.kwargs:
        return None
    x, mask, value = node.args
    example = _example(mask)
    if value != float("-inf") or example is None or example.dtype != torch.bool:
        return None
    return x, mask


def _where_masked(node: Any) -> tuple[Any, Any, str] | None:
    """(x, mask, kind) where ``node`` is ``torch.where(mask, x, -inf)`` (kind "keep": True attends) or
    ``torch.where(mask, -inf, x)`` (kind "fill", as ``x.masked_fill(mask, -inf)``) with a boolean mask."""
    import torch

    if not _call(node, (torch.where,), "") or len(node.args) != 3 or node.kwargs:
        return None
    mask, a, b = node.args
    example = _example(mask) if hasattr(mask, "op") else None
    if example is None or example.dtype != torch.bool:
        return None
    if b == float("-inf") and hasattr(a, "op"):
        return a, mask, "keep"
    if a == float("-inf") and hasattr(b, "op"):
        return b, mask, "fill"
    return None


def _plus_mask(node: Any) -> tuple[Any, Any] | None:
    """(x, mask) where ``node`` is ``x + mask`` for a floating tensor ``mask`` (an additive attention mask)."""
    import operator

    import torch

    if not _call(node, (operator.add, torch.add), "add") or len(node.args) != 2 or node.kwargs:
        return None
    x, mask = node.args
    example = _example(mask) if hasattr(mask, "op") else None
    return (x, mask) if example is not None and _floating(example.dtype) and hasattr(x, "op") else None


def _float32_softmax_of_half(node: Any) -> Any:
    """``s`` where ``node`` is a float32 softmax over the last axis of a half-precision ``s``: of its cast
    (``softmax(s.float(), -1)``, the cast with no other user) or with ``dtype=torch.float32``
    (``F.softmax(s, dim=-1, dtype=torch.float32)``, as Hugging Face's eager attention writes it)."""
    import torch

    found = _softmax_kind(node)
    if found is not None and found[1] == "softmax" and _is_upcast(found[0]) and len(found[0].users) == 1:
        return found[0].args[0]
    F = torch.nn.functional
    if not _call(node, (torch.softmax, F.softmax, torch.special.softmax), "softmax"):
        return None
    x, dim = _arg(node, 0, "input"), _arg(node, 1, "dim")
    dtype = _arg(node, 3 if node.target is F.softmax else 2, "dtype")
    example = _example(x) if hasattr(x, "op") else None
    if example is None or dtype is not torch.float32 or example.dtype not in (torch.float16, torch.bfloat16) \
            or not _last_axis(dim, example.dim()):
        return None
    return x


def _softmax_input(p: Any, dtype: Any) -> Any:
    """``s`` where ``p`` is ``softmax(s, -1)`` in ``dtype``, or, for half-precision ``dtype``, a float32
    softmax of ``s`` (``_float32_softmax_of_half``) cast back (``.type_as(q)``, ``.to(dtype)``: Llama's
    reference code, Hugging Face's eager attention); each step with no other user. None otherwise."""
    if _call(p, (), "type_as") and len(p.args) == 2 or _call(p, (), "to") and len(p.args) == 2 and p.args[1] is dtype:
        inner = p.args[0]
        if hasattr(inner, "op") and len(inner.users) == 1 and _example(p) is not None and _example(p).dtype == dtype:
            return _float32_softmax_of_half(inner)
        return None
    found = _softmax_kind(p)
    example = _example(p)
    if found is None or found[1] != "softmax" or example is None or example.dtype != dtype:
        return None
    return found[0]


def _no_dropout(node: Any) -> Any:
    """``p`` where ``node`` is a dropout of ``p`` that changes nothing (``F.dropout(p, 0.0)``, or with
    ``training=False``: ``nn.Dropout`` in eval mode); None otherwise."""
    import torch

    F = torch.nn.functional
    if getattr(node, "op", None) != "call_function" or node.target is not F.dropout:
        return None
    bound = dict(zip(("input", "p", "training", "inplace"), node.args)) | dict(node.kwargs)
    p, training = bound.get("p", 0.5), bound.get("training", True)
    return bound.get("input") if (p == 0 or training is False) and bound.get("inplace", False) is False else None


def _fake(function: Any, *examples: Any) -> Any:
    """``function`` of the example tensors ``examples`` under their fake mode (None where they have none)."""
    mode = getattr(examples[0], "fake_mode", None)
    if mode is None:
        return None
    with mode:
        return function(*examples)


def _attention_parts(node: Any) -> tuple[Any, Any, Any, Any, str, float] | None:
    """(q, k, v, mask, kind, scale) where ``node`` is attention written out: ``softmax(s, -1) @ v`` with
    ``s = q @ k.transpose(-2, -1)`` (either product perhaps an einsum: ``_einsum_product``), perhaps scaled by a
    positive number, perhaps masked: ``masked_fill(m, -inf)`` (kind "fill", in any order with the scale),
    ``torch.where(m, s, -inf)`` (kind "keep", likewise; ``where(m, -inf, s)`` is a fill) or ``+ m`` after the
    scale (kind "add"); the softmax perhaps in float32 of a half-precision ``s`` cast back (``_softmax_input``), perhaps through a dropout that
    does nothing; each step used only on the way (the weights are not returned). mask None where there is none."""
    operands = _matmul_of(node) or _einsum_product(node, transposed=False)
    if operands is None:
        return None
    p, v = operands
    if not hasattr(p, "op") or len(p.users) != 1 or _example(v) is None:
        return None
    if (kept := _no_dropout(p)) is not None:
        p = kept
        if not hasattr(p, "op") or len(p.users) != 1:
            return None
    at = _softmax_input(p, _example(v).dtype)
    mask, kind, scale = None, "", 1.0
    for _ in range(3):  # a mask and a scale, then the scores' product
        if not hasattr(at, "op") or len(at.users) != 1:
            return None
        if mask is None and (masked := _masked_out(at)) is not None:
            (at, mask), kind = masked, "fill"
        elif mask is None and (chosen := _where_masked(at)) is not None:
            at, mask, kind = chosen
        elif mask is None and scale == 1.0 and (added := _plus_mask(at)) is not None:  # added after any scale
            (at, mask), kind = added, "add"
        elif scale == 1.0 and (scaled := _scaled(at)) is not None:
            at, scale = scaled
        else:
            break
    if (scores := _einsum_product(at, transposed=True)) is not None:  # ``at`` checked above: one user
        return scores[0], scores[1], v, mask, kind, scale
    scores = _matmul_of(at)
    if scores is None or (k := _untransposed(scores[1])) is None:
        return None
    return scores[0], k, v, mask, kind, scale


def _attentions(graph: Any) -> int:
    """Rewrite attention written out (``_attention_parts``) over 4-D float tensors of one dtype (or 3-D ones, batch
    and heads in one axis as ``torch.bmm`` takes them: run as one batch of that many heads) as
    ``F.scaled_dot_product_attention`` (a filled boolean mask's complement, or an added mask, as its
    ``attn_mask``; the product's scale as its ``scale``): torch's fused attention, which never writes the
    scores, where Inductor's own attention patterns miss (nanoGPT's ``masked_fill`` of a sliced causal
    buffer, among others). No gradient recorded: the fused backward returned NaN on the verifier's
    large-magnitude draws where the written-out form stays finite (below). How many.

    Why not in training (CPU, torch 2.13, 2026-12-06): the fused backward recomputes the weights from the
    row's log-sum-exp, a float32 number as large as the scores; where the scores reach ~1e9 (rows shifted
    or scaled by the ``offset`` and ``mixed`` draws, float32 and bfloat16) its rounding, hundreds, exceeds
    the range of exp, and the gradients are NaN; the written-out softmax subtracts the row's maximum
    exactly. The inference forward passed the same draws."""
    import torch

    F = torch.nn.functional
    count = 0
    for node in list(graph.nodes):
        if node.op not in ("call_function", "call_method"):
            continue
        parts = _attention_parts(node)
        if parts is None:
            continue
        q, k, v, mask, kind, scale = parts
        qe, ke, ve, out = _example(q), _example(k), _example(v), _example(node)
        if any(e is None for e in (qe, ke, ve, out)) or not qe.dim() == ke.dim() == ve.dim() in (3, 4) \
                or torch.is_grad_enabled() and any(e is not None and e.requires_grad
                                                   for e in (qe, ke, ve, _example(mask) if mask is not None else None)) \
                or not qe.dtype == ke.dtype == ve.dtype == out.dtype \
                or qe.dtype not in (torch.float16, torch.bfloat16, torch.float32) \
                or qe.shape[:-2] != ke.shape[:-2] or ke.shape[:-2] != ve.shape[:-2] \
                or qe.shape[-1] != ke.shape[-1] or ke.shape[-2] != ve.shape[-2] \
                or tuple(out.shape) != (*qe.shape[:-1], ve.shape[-1]):
            continue
        kwargs: dict[str, Any] = {"scale": scale}
        if mask is not None:
            me = _example(mask)
            try:
                fits = torch.broadcast_shapes(me.shape, (*qe.shape[:-1], ke.shape[-2])) == (*qe.shape[:-1], ke.shape[-2])
            except RuntimeError:
                fits = False
            if not fits or kind == "add" and me.dtype != qe.dtype:  # SDPA adds a mask of the query's dtype
                continue
            if kind == "fill":
                with graph.inserting_before(node):
                    mask = graph.call_function(torch.logical_not, (mask,))  # SDPA's boolean mask: True attends
                mask.meta["example_value"] = _fake(torch.logical_not, me)
            kwargs["attn_mask"] = mask
        if qe.dim() == 3:  # (batch x heads, tokens, features): one batch of that many heads for the fused kernels
            with graph.inserting_before(node):
                q, k, v = (graph.call_method("unsqueeze", (t, 0)) for t in (q, k, v))
                fused = graph.call_function(F.scaled_dot_product_attention, (q, k, v), kwargs)
            for t, e in ((q, qe), (k, ke), (v, ve)):
                t.meta["example_value"] = _fake(lambda x: x.unsqueeze(0), e)
            fused.meta["example_value"] = _fake(lambda x: x.unsqueeze(0), out)
            _replace(graph, node, torch.squeeze, (fused, 0))
        else:
            _replace(graph, node, F.scaled_dot_product_attention, (q, k, v), kwargs)
        count += 1
    if count:
        graph.eliminate_dead_code()
    return count


def _repeated_heads(node: Any) -> tuple[Any, int] | None:
    """(x, r) where ``node`` repeats each head of a 4-D ``x`` (batch, heads, tokens, features) ``r`` times in place
    (head ``j`` of the result is head ``j // r`` of ``x``): ``x.repeat_interleave(r, dim=1)`` (or ``torch.`` or
    ``dim=-3``), or Hugging Face's ``repeat_kv``, ``x[:, :, None].expand(b, h, r, t, d).reshape(b, h * r, t, d)``
    (``unsqueeze(2)`` for the indexing; ``view`` or ``flatten(1, 2)`` for the reshape). None otherwise."""
    import operator

    import torch

    out = _example(node)
    if out is None or out.dim() != 4:
        return None
    expanded_example = None  # repeat_kv's 5-D intermediate
    if _call(node, (torch.repeat_interleave,), "repeat_interleave"):
        x, r = _arg(node, 0, "input"), _arg(node, 1, "repeats")
        if set(node.kwargs) - {"input", "repeats", "dim", "output_size"} or _arg(node, 2, "dim") not in (1, -3):
            return None
    else:
        merged = node
        if _call(merged, (torch.flatten,), "flatten"):
            if tuple(merged.args[1:]) != (1, 2) or merged.kwargs:
                return None
        elif not _call(merged, (torch.reshape,), "reshape") and not _call(merged, (), "view"):
            return None
        expanded = merged.args[0] if merged.args else None
        if expanded is None or not _call(expanded, (), "expand") or len(expanded.users) != 1:
            return None
        inserted = expanded.args[0]
        if getattr(inserted, "op", None) not in ("call_function", "call_method") or len(inserted.users) != 1:
            return None
        if _call(inserted, (operator.getitem,), "__getitem__"):
            index = inserted.args[1]
            full = slice(None, None, None)
            if not isinstance(index, tuple) or index[:3] != (full, full, None) \
                    or any(i not in (full, Ellipsis) for i in index[3:]):
                return None
        elif not (_call(inserted, (torch.unsqueeze,), "unsqueeze") and tuple(inserted.args[1:]) in ((2,), (-3,))):
            return None
        x, expanded_example = inserted.args[0], _example(expanded)
        if expanded_example is None or expanded_example.dim() != 5:
            return None
        r = expanded_example.shape[2]
    source = _example(x) if hasattr(x, "op") else None
    if source is None or source.dim() != 4 or not isinstance(r, int) or isinstance(r, bool) or r < 2:
        return None
    if tuple(out.shape) != (source.shape[0], source.shape[1] * r, *source.shape[2:]):
        return None
    if expanded_example is not None and tuple(expanded_example.shape) != (*source.shape[:2], r, *source.shape[2:]):
        return None
    return x, r


def _grouped_queries(graph: Any) -> int:
    """Rewrite ``F.scaled_dot_product_attention(q, k', v')`` whose keys and values are heads repeated in place
    (``_repeated_heads``, the same count for both, used by nothing else) as the call on the unrepeated ``k`` and
    ``v`` with ``enable_gqa=True``: grouped-query attention, whose flash kernel reads each key/value head once for
    its group of query heads, where the repeat writes every head ``r`` times to memory first (and attention reads
    them back). Only where flash attention takes the call on a GPU (half precision, no ``attn_mask``, a head
    dimension of at most 256, a multiple of 8; sm80 or later): elsewhere ``enable_gqa`` runs the math backend.
    Inference only, as the attention rewrite (no gradient recorded). How many."""
    import torch

    F = torch.nn.functional
    count = 0
    for node in list(graph.nodes):
        if node.op != "call_function" or node.target is not F.scaled_dot_product_attention or len(node.args) < 3 \
                or _arg(node, 3, "attn_mask") is not None or _arg(node, 7, "enable_gqa", False) is not False:
            continue
        q, keys, values = node.args[:3]
        key = _repeated_heads(keys) if hasattr(keys, "op") and len(keys.users) == 1 else None
        value = _repeated_heads(values) if hasattr(values, "op") and len(values.users) == 1 else None
        qe = _example(q) if hasattr(q, "op") else None
        if qe is None or key is None or value is None or key[1] != value[1] or qe.dim() != 4:
            continue
        (k, r), (v, _) = key, value
        ke, ve = _example(k), _example(v)
        if ke.shape[1] * r != qe.shape[1] or ve.shape[1] != ke.shape[1] \
                or torch.is_grad_enabled() and any(e.requires_grad for e in (qe, ke, ve)):
            continue
        if qe.device.type == "cuda" and not (
                qe.dtype in (torch.float16, torch.bfloat16) and qe.dtype == ke.dtype == ve.dtype
                and qe.shape[-1] <= 256 and qe.shape[-1] % 8 == 0
                and torch.cuda.is_available() and torch.cuda.get_device_capability(qe.device) >= (8, 0)):
            continue
        args, kwargs = (q, k, v, *node.args[3:7]), {**node.kwargs, "enable_gqa": True}
        _replace(graph, node, F.scaled_dot_product_attention, args, kwargs)
        count += 1
    if count:
        graph.eliminate_dead_code()
    return count


def _library_gemm(node: Any) -> tuple[Any, Any] | None:
    """(the GEMM call, the node the activation reads) where ``node`` is a linear layer's output: ``F.linear(x, w, b)``
    (``nn.Linear``), or ``torch.addmm(b, x, w)`` (Hugging Face's ``Conv1D``) viewed as the rows' shape or not, with a
    bias, each read by nothing else; None otherwise."""
    import torch

    F = torch.nn.functional
    if getattr(node, "op", None) == "call_function" and node.target is F.linear:
        fits = _arg(node, 2, "bias") is not None and len(node.args) + len(node.kwargs) == 3
        return (node, node) if fits else None
    gemm = node
    if _call(node, (torch.reshape,), "view") or _call(node, (torch.reshape,), "reshape"):
        gemm = node.args[0]
        if len(getattr(gemm, "users", ())) != 1:
            return None
    fits = getattr(gemm, "op", None) == "call_function" and gemm.target is torch.addmm and len(gemm.args) == 3 \
        and not gemm.kwargs
    return (gemm, node) if fits else None


def _pointwise(node: Any) -> bool:
    """Whether ``node`` is one of the arithmetic steps a GELU is written out with (``0.5 * x * (1 + tanh(...))``),
    on tensors and Python numbers only."""
    import operator

    import torch

    functions = (operator.mul, operator.add, operator.sub, operator.truediv, operator.pow, operator.neg,
                 torch.mul, torch.add, torch.sub, torch.div, torch.pow, torch.tanh, torch.neg)
    return (_call(node, functions, "") or node.op == "call_method" and node.target in
            ("mul", "add", "sub", "div", "pow", "tanh", "neg")) and not node.kwargs \
        and all(hasattr(a, "op") or isinstance(a, (int, float)) and not isinstance(a, bool) for a in node.args)


def _written_tanh_gelu(y: Any) -> list[Any] | None:
    """The nodes, in graph order, of a tanh GELU written out on ``y`` (Hugging Face's ``gelu_new``, GPT-2's
    ``0.5 * x * (1 + tanh(sqrt(2 / pi) * (x + 0.044715 * x ** 3)))``, in any arrangement): every reader of ``y`` and
    of what they compute is arithmetic on ``y`` and numbers, with one result read outside, and that result is the tanh
    GELU of ``y`` (evaluated in float64 on numbers from -30 to 30, within 1e-9). None otherwise."""
    import torch

    F = torch.nn.functional
    example = _example(y)
    if example is None or not example.is_floating_point():
        return None
    members, grown = {y}, True
    while grown and len(members) <= 32:
        grown = False
        for node in list(members):
            for user in node.users:
                if user not in members and _pointwise(user) and all(a in members for a in user.all_input_nodes):
                    members.add(user)
                    grown = True
    inner = [n for n in y.graph.nodes if n in members and n is not y]
    outside = [n for n in inner if any(u not in members for u in n.users)]
    if len(members) > 32 or len(outside) != 1 or outside[0] is not inner[-1] \
            or any(u not in members for u in y.users) or any(not n.users for n in inner) \
            or not any(_call(n, (torch.tanh,), "tanh") for n in inner) \
            or any(getattr(_example(n), "dtype", None) != example.dtype for n in inner):
        return None
    t = torch.cat([torch.linspace(-10, 10, 4001, dtype=torch.float64),
                   torch.tensor([-30.0, -1e-4, 0.0, 1e-4, 30.0], dtype=torch.float64)])
    values = {y: t}
    try:
        for n in inner:
            args = [values.get(a, a) if hasattr(a, "op") else a for a in n.args]
            values[n] = n.target(*args) if n.op == "call_function" else getattr(args[0], n.target)(*args[1:])
        error = (values[inner[-1]] - F.gelu(t, approximate="tanh")).abs() / (1 + t.abs())
    except (TypeError, RuntimeError, ValueError):
        return None
    return inner if error.shape == t.shape and float(error.max()) <= 1e-9 else None


def _gemm_activation(node: Any) -> tuple[Any, list[Any], bool] | None:
    """(the GEMM call, the activation's nodes in graph order, whether GELU) where ``node`` is a linear layer's
    output (``_library_gemm``) that only ReLU or the tanh-approximated GELU reads (``F.relu``, ``F.gelu(...,
    approximate="tanh")``, or the tanh GELU written out: ``_written_tanh_gelu``); None otherwise."""
    import torch

    F = torch.nn.functional
    found = _library_gemm(node)
    if found is None:
        return None
    gemm, y = found
    if len(y.users) == 1:
        act = next(iter(y.users))
        options = [*act.args[1:], *act.kwargs.values()]
        if act.args and act.args[0] is y:
            if _call(act, (F.gelu,), "") and options == ["tanh"] and set(act.kwargs) <= {"approximate"}:
                return gemm, [act], True  # F.gelu(y, approximate="tanh"), nn.GELU("tanh")
            if _call(act, (F.relu, torch.relu), "relu") and len(options) <= 1 \
                    and all(isinstance(o, bool) for o in options) and set(act.kwargs) <= {"inplace"}:
                return gemm, [act], False  # in place on an output nothing else reads: the same values
    written = _written_tanh_gelu(y)
    return (gemm, written, True) if written else None


def _gemm_activations(graph: Any) -> int:
    """Rewrite a linear layer's ReLU or tanh GELU (``_gemm_activation``: ``nn.Linear`` then ``nn.ReLU`` or
    ``nn.GELU("tanh")``, a GPT-2 MLP's first layer; Hugging Face's ``Conv1D`` then ``gelu_new``) as
    ``torch._addmm_activation``, the GEMM with the bias and the activation in its epilogue (cuBLASLt's): Inductor
    keeps the GEMM a library call and writes the activation as a Triton kernel that reads the GEMM's output back and
    writes it again (a GPT-2 block's GELU kernel: 11% of its GPU time at the copy limit, H100 2026-12-07). The
    epilogue computes on the float32 accumulator, so the output is rounded once, not twice. The GELU only on a GPU
    (on a CPU the op's GELU is the exact one) and in half precision (cuBLASLt's tanh may be an approximate one, "close
    but not bit-exact" by public reports: below a half type's rounding, not below float32's; not measured here), the
    exact GELU never (the epilogue's is the tanh form). The ReLU is exact in any float type. x, w and b of one float
    type, at least two rows and columns, sizes known (not symbolic: the reshapes are written with them); inference
    only (no gradient recorded). How many."""
    import math

    import torch

    F = torch.nn.functional
    count = 0
    for node in list(graph.nodes):
        if getattr(node, "_erased", False):  # an activation an earlier match removed
            continue
        found = _gemm_activation(node)
        if found is None:
            continue
        gemm, act, gelu = found
        linear = gemm.target is F.linear
        if linear:
            x, w, b = (_arg(gemm, i, name) for i, name in enumerate(("input", "weight", "bias")))
        else:
            b, x, w = gemm.args
        xe, we, be = (_example(v) if hasattr(v, "op") else None for v in (x, w, b))
        if xe is None or we is None or be is None or xe.dtype not in (torch.float16, torch.bfloat16, torch.float32) \
                or not xe.dtype == we.dtype == be.dtype or we.dim() != 2 or be.dim() != 1 or xe.dim() < 2 \
                or (not linear and xe.dim() != 2) or xe.device != we.device \
                or not all(isinstance(d, int) for d in (*xe.shape, *we.shape, *be.shape)):
            continue
        k, n = (we.shape[1], we.shape[0]) if linear else (we.shape[0], we.shape[1])
        if xe.shape[-1] != k or be.shape[0] != n or math.prod(xe.shape[:-1]) < 2 or k < 2 or n < 2 \
                or gelu and (xe.device.type != "cuda" or xe.dtype == torch.float32) \
                or torch.is_grad_enabled() and any(e.requires_grad for e in (xe, we, be)):
            continue
        if linear:
            rows = math.prod(xe.shape[:-1])
            with graph.inserting_before(gemm):
                flat = graph.call_method("reshape", (x, rows, k))
                turned = graph.call_method("t", (w,))
                product = graph.call_function(torch._addmm_activation, (b, flat, turned), {"use_gelu": gelu})
                out = graph.call_method("reshape", (product, *xe.shape[:-1], n))
            out.meta.update(gemm.meta)
        else:  # Conv1D: the GEMM is already on rows; its view, if any, now views the activated output
            with graph.inserting_before(gemm):
                product = graph.call_function(torch._addmm_activation, (b, x, w), {"use_gelu": gelu})
            product.meta.update(gemm.meta)
            out = node if node is not gemm else product
            gemm.replace_all_uses_with(product)
        act[-1].replace_all_uses_with(out)
        for step in reversed(act):
            graph.erase_node(step)
        graph.erase_node(gemm)
        count += 1
    return count


def _pre_grad_rewrites(graph: Any) -> int:
    """The rewrites matched before decomposition (attention first: its softmax is not a wide-row one, and the fused
    attention it makes may then read grouped keys and values; group norms, wide rows, cross-entropies, a linear
    layer's activation); how many."""
    return _attentions(graph) + _grouped_queries(graph) + _group_norms(graph) + _wide_rows(graph) \
        + _cross_entropies(graph) + _gemm_activations(graph)


def _reverse_scans(graph: Any) -> int:
    """Rewrite every ``rev(scan(rev(x, D), d), D)`` in ``graph``; how many."""
    import torch

    aten, prims = torch.ops.aten, torch.ops.prims
    scans = {aten.cumsum.default: "sum", aten.cumprod.default: "prod"}
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
        if dims != outer_dims or d not in dims or not _floating(val.dtype) or out.dtype != val.dtype:
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


def _counted(rewrite: Any) -> Any:
    """A custom graph pass that applies ``rewrite`` (graph -> how many) and counts what it did
    (``rewrites_done``); its uuid is this file's hash (Inductor's caches key on it)."""
    from torch._inductor.custom_graph_pass import CustomGraphPass, get_hash_for_files

    class Rewrites(CustomGraphPass):
        def __call__(self, graph: Any) -> None:
            _done.count = rewrites_done() + rewrite(graph)

        def uuid(self) -> Any:
            return get_hash_for_files((__file__,))

    return Rewrites()


@functools.cache
def rewrite_pass() -> Any:
    """The post-grad pass that applies the rewrites matched after decomposition (reverse scans; one instance)."""
    return _counted(_reverse_scans)


@functools.cache
def pre_grad_rewrite_pass() -> Any:
    """The pre-grad pass that applies the rewrites matched before decomposition (attention, group norms, wide rows,
    cross-entropies; one instance)."""
    return _counted(_pre_grad_rewrites)
