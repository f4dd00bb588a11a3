"""A whole model's limit: the time no implementation of one call can beat, from bytes and FLOPs.

Two floors, each a lower bound on a call's time, and the limit is the larger:

* **memory**: the model's tensor inputs, parameters and buffers read once and its outputs
  written once, at the bandwidths measured on the same device (:func:`memory_seconds`): a byte
  read costs what it costs in a kernel that only reads (:func:`read_ceiling_gbps`), a byte
  written the rest of what a copy costs (:func:`copy_ceiling_gbps`), so a copy's floor is the
  copy and a reduction's (which reads far more than it writes, and streams faster than a copy
  on the H200) is that of a read; without a read ceiling, every byte at the copy bandwidth;
* **compute**: the FLOPs of its matrix products and convolutions (counted with torch's own
  formulas, :mod:`torch.utils.flop_counter`, per rate: the operands' dtype, or ``tf32`` for
  float32 work torch lets run on TF32 tensor cores), each rate's at the matrix-product
  rate measured on the same device (:func:`flop_ceiling_tflops`, measured once per machine
  and cached).

A model's percent of its limit is that time over the model's own. It is shown where the two
floors bound the model: where Triton kernels (memory-bound here) take at least
:data:`LIMIT_MIN_TRITON_SHARE` of its GPU time, or where its FLOPs were counted (the rest is
then its GEMMs and convolutions). ``kernelopt bench`` and the gate's model item use it.
"""

from __future__ import annotations

import json
import os
import statistics
from pathlib import Path
from typing import Any, Callable

LIMIT_MIN_TRITON_SHARE = 0.9
# The matrix product the FLOP ceiling is measured with (square, n x n by n x n).
CEILING_N = 8192
COPY_BYTES = 1 << 30  # the copy ceiling's buffer; at most a tenth of free memory


def min_bytes(model: Any, inputs: list[Any], outputs: list[Any]) -> int:
    """Bytes one call must move at the least: tensor inputs, parameters and buffers read once, outputs written once."""
    import torch

    tensors = [*inputs, *model.parameters(), *model.buffers(), *outputs]
    return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))


def written_bytes(outputs: list[Any]) -> int:
    """The part of :func:`min_bytes` a call writes: its tensor outputs, once."""
    import torch

    return sum(t.numel() * t.element_size() for t in outputs if isinstance(t, torch.Tensor))


def memory_seconds(total_bytes: int, copy_gbps: float, written: int | None = None,
                   read_gbps: float | None = None) -> float:
    """The memory floor of ``total_bytes`` moved, ``written`` of them writes (seconds).

    With a read ceiling: reads at the read bandwidth ``R`` (at least the copy's ``C``: a kernel
    that writes nothing cannot stream slower than a copy's reads), and writes at the rate ``W``
    that makes a copy (as many bytes read as written) take exactly its measured time:
    ``1/W = 2/C - 1/R``. Without one (``read_gbps`` or ``written`` None), every byte at ``C``."""
    if read_gbps is None or written is None:
        return total_bytes / (copy_gbps * 1e9)
    read_rate = max(read_gbps, copy_gbps) * 1e9
    write_cost = 2.0 / (copy_gbps * 1e9) - 1.0 / read_rate  # > 0: read_rate >= copy
    written = min(max(written, 0), total_bytes)
    return (total_bytes - written) / read_rate + written * write_cost


def tf32_allowed(convolution: bool) -> bool:
    """Whether torch lets float32 convolutions (cuDNN) or matrix products (cuBLAS) run on TF32 tensor
    cores. Read, never set: the legacy flags (``allow_tf32``) when readable, else the new API's
    ``fp32_precision`` (torch refuses to read the legacy flag once the new one was set)."""
    import torch

    try:
        return bool(torch.backends.cudnn.allow_tf32 if convolution else torch.backends.cuda.matmul.allow_tf32)
    except RuntimeError:
        # torch's CudnnModule replaces the module at import and adds ``conv``; its stubs show the plain module.
        cudnn: Any = torch.backends.cudnn
        chain = ([cudnn.conv, cudnn, torch.backends] if convolution
                 else [torch.backends.cuda.matmul, torch.backends])
        for module in chain:
            precision = getattr(module, "fp32_precision", "none")
            if precision != "none":
                return precision == "tf32"
        return False


def flop_rate(func: Any, dtype: Any) -> str:
    """The rate a counted op runs at: its operands' dtype, or ``tf32`` for float32 work torch lets
    run on TF32 tensor cores (:func:`tf32_allowed`: convolutions by cuDNN's setting, on by
    default; matrix products and the rest by cuBLAS's, off by default). The floor must be a
    lower bound: counted at the float32 rate, a TF32 convolution read as 290% of its limit on
    the H200."""
    import torch

    if dtype != torch.float32:
        return str(dtype).removeprefix("torch.")
    return "tf32" if tf32_allowed("convolution" in str(func)) else "float32"


def min_flops(model: Any, inputs: list[Any], grad_inputs: list[int] | None = None) -> dict[str, int] | None:
    """FLOPs of one call's matrix products and convolutions, by the rate they run at (:func:`flop_rate`).
    ``grad_inputs`` (a training step's: the inputs whose gradients it computes): the backward's too, from
    every output that needs a gradient to those inputs and every parameter that requires grad.

    The model runs once on meta tensors (shapes only: no device memory, no device time), its
    parameters and buffers replaced by meta copies, and each ATen op torch's FLOP counter knows
    (``mm``, ``addmm``, ``bmm``, convolutions, attention...) is counted with torch's formula.
    Pointwise work and reductions are not counted (the memory floor bounds those). None when
    the model cannot run on meta tensors (data-dependent Python, ``.item()``): no FLOP floor then.

    ``scaled_dot_product_attention`` is counted as one call (:func:`_attention_flops`), not as what it
    decomposes into on meta tensors: torch's math fallback, which runs half-precision attention as float32
    products over every query-key pair, would count a causal bf16 attention at twice its work and at the
    float32 rate (a GPT-2 block's training step read as 196% of its limit on the H200).
    """
    import torch
    from torch.utils import _pytree as pytree
    from torch.overrides import TorchFunctionMode
    from torch.utils._python_dispatch import TorchDispatchMode
    from torch.utils.flop_counter import flop_registry

    counts: dict[str, int] = {}

    class _Attention(torch.autograd.Function):
        """Attention's output and input gradients as empty meta tensors: counted once, by :class:`_Calls`."""

        @staticmethod
        def forward(ctx: Any, q: Any, k: Any, v: Any) -> Any:
            ctx.like = q, k, v
            return q.new_empty((*q.shape[:-1], v.shape[-1]))

        @staticmethod
        def backward(ctx: Any, grad: Any) -> Any:
            return tuple(torch.empty_like(t) for t in ctx.like)

    class _Calls(TorchFunctionMode):
        def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            if func is not torch.nn.functional.scaled_dot_product_attention:
                return func(*args, **kwargs)
            q, k, v = args[:3]
            causal = bool(kwargs.get("is_causal", args[5] if len(args) > 5 else False))
            backward = torch.is_grad_enabled() and any(t.requires_grad for t in (q, k, v))
            rate = flop_rate("scaled_dot_product_attention", q.dtype)
            counts[rate] = counts.get(rate, 0) + _attention_flops(q.shape, k.shape, v.shape, causal, backward)
            return _Attention.apply(q, k, v)

    class _Count(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            kwargs = kwargs or {}
            out = func(*args, **kwargs)
            formula = flop_registry.get(func._overloadpacket)
            if formula is not None:
                first = next((t for t in pytree.tree_leaves(args) if isinstance(t, torch.Tensor)), None)
                if first is not None:
                    rate = flop_rate(func, first.dtype)
                    counts[rate] = counts.get(rate, 0) + int(formula(*args, **kwargs, out_val=out))
            return out

    def meta(x: Any) -> Any:
        return torch.empty_strided(x.shape, x.stride(), dtype=x.dtype, device="meta") if isinstance(x, torch.Tensor) else x

    # A forward may rebind attributes of its modules (``self.h0 = self.h0.to(x.device)``, a KernelBench LSTM): on
    # meta inputs that would leave a meta tensor in the model. Every module's attributes are put back after.
    attributes = [(m, dict(m.__dict__)) for m in model.modules()]
    try:
        state = {name: meta(t) for name, t in [*model.named_parameters(), *model.named_buffers()]}
        xs = [meta(x) for x in inputs]
        if grad_inputs is None:
            with torch.no_grad(), _Calls(), _Count():
                torch.func.functional_call(model, state, tuple(xs))
        else:
            trained = [state[name].requires_grad_(True) for name, p in model.named_parameters()
                       if p.requires_grad and p.is_floating_point()]
            wrt = [xs[i].requires_grad_(True) for i in grad_inputs] + trained
            with torch.enable_grad(), _Calls(), _Count():
                out = torch.func.functional_call(model, state, tuple(xs))
                needing = [t for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.requires_grad]
                torch.autograd.grad(needing, wrt, grad_outputs=[torch.ones_like(t) for t in needing],
                                    allow_unused=True)
    except Exception:  # noqa: BLE001 - a model that needs real data: no FLOP floor, never an error
        return None
    finally:
        for module, saved in attributes:  # the same objects back (no comparison: == on tensors is elementwise)
            module.__dict__.clear()
            module.__dict__.update(saved)
    return {rate: n for rate, n in counts.items() if n > 0}


def _attention_flops(q: Any, k: Any, v: Any, causal: bool, backward: bool) -> int:
    """The least FLOPs of one attention over shapes ``q`` (..., heads, queries, d), ``k`` and ``v`` (..., kv heads,
    keys, d or d_v; grouped heads share theirs): the two products, query by key and weights by value, over every
    pair a query attends (causal: query ``i`` the first ``i + 1`` keys, torch's top-left alignment), and with
    ``backward`` the four its gradients need at the least (dV, dP, dQ, dK; recomputing the weights is more)."""
    import math

    queries, keys, d, d_v = q[-2], k[-2], q[-1], v[-1]
    if not causal:
        pairs = queries * keys
    elif queries <= keys:
        pairs = queries * (queries + 1) // 2
    else:  # queries past the last key attend every key
        pairs = keys * (keys + 1) // 2 + (queries - keys) * keys
    forward = 2 * math.prod(q[:-2]) * pairs * (d + d_v)
    return forward * (3 if backward else 1)


def floor_seconds(floor_bytes: int, copy_gbps: float, flops: dict[str, int] | None = None,
                  tflops: dict[str, float] | None = None, *, written: int | None = None,
                  read_gbps: float | None = None) -> float | None:
    """The limit of one call: the larger of the memory floor (:func:`memory_seconds`; ``written``
    of the ``floor_bytes`` are writes) and the compute floor (seconds).

    None when a rate with counted FLOPs has no measured ceiling (the compute floor is unknown)."""
    seconds = memory_seconds(floor_bytes, copy_gbps, written, read_gbps)
    compute = 0.0
    for rate_name, n in (flops or {}).items():
        rate = (tflops or {}).get(rate_name)
        if not rate:
            return None
        compute += n / (rate * 1e12)
    return max(seconds, compute)


def limit_pct(floor_bytes: int, seconds: float, copy_gbps: float, flops: dict[str, int] | None = None,
              tflops: dict[str, float] | None = None, *, written: int | None = None,
              read_gbps: float | None = None) -> float | None:
    """Percent of its limit (:func:`floor_seconds`) a call of ``seconds`` reaches."""
    floor = floor_seconds(floor_bytes, copy_gbps, flops, tflops, written=written, read_gbps=read_gbps)
    return None if floor is None else round(100.0 * floor / seconds, 1)


def _cache_file() -> Path:
    root = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(root) / "pytest-kernelopt" / "ceilings.json"


def median_event_seconds(fn: Callable[[], object], runs: int = 10, warmup: int = 3) -> float:
    """Median device time of ``fn`` over ``runs`` calls after ``warmup`` (CUDA events, seconds):
    how the ceilings are measured."""
    import torch

    times = []
    for i in range(warmup + runs):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        end.synchronize()
        if i >= warmup:
            times.append(start.elapsed_time(end) / 1e3)
    return statistics.median(times)


def copy_ceiling_gbps() -> float:
    """Device-to-device copy bandwidth (GB/s, read + write counted), median of 10 timed copies."""
    import torch

    free, _ = torch.cuda.mem_get_info()
    n = max(1 << 24, min(COPY_BYTES, free // 10)) // 2
    src = torch.empty(n, dtype=torch.uint8, device="cuda")
    dst = torch.empty_like(src)
    seconds = median_event_seconds(lambda: dst.copy_(src))
    return 2 * n / seconds / 1e9


def read_ceiling_gbps() -> float:
    """Read bandwidth (GB/s): the fastest of kernels that read a buffer once and write almost nothing
    (ours, :mod:`.read_kernel`, in each of its shapes, and torch's sum), median of 10 timed runs each,
    on the copy's buffer size. A reduction streams faster than a copy (no writes to turn the bus
    around for): at the copy bandwidth alone, a mean read as 101-107% of its limit on the H200."""
    import torch

    from . import read_kernel

    free, _ = torch.cuda.mem_get_info()
    n = max(1 << 24, min(COPY_BYTES, free // 10)) // 4
    src = torch.ones(n, dtype=torch.float32, device="cuda")

    def ours(shape: tuple[int, int, int]) -> float:
        partial = torch.empty(read_kernel.programs(n, shape), dtype=torch.float32, device="cuda")
        return median_event_seconds(lambda: read_kernel.launch(src, partial, shape))

    seconds = [median_event_seconds(lambda: src.sum()), *(ours(shape) for shape in read_kernel.SHAPES)]
    return 4 * n / min(seconds) / 1e9


def _matmul_tflops(rate: str) -> float:
    """An n x n by n x n product at ``rate`` (a dtype, or ``tf32``: float32 with TF32 allowed) on the
    current CUDA device: median of 10 timed (TFLOP/s). Sets torch's TF32 flag: run it in a
    process of its own (:func:`_measure_in_child`)."""
    import torch

    torch.backends.cuda.matmul.allow_tf32 = rate == "tf32"
    dtype = torch.float32 if rate == "tf32" else getattr(torch, rate)
    a = torch.randn(CEILING_N, CEILING_N, device="cuda").to(dtype)
    b = torch.randn(CEILING_N, CEILING_N, device="cuda").to(dtype)
    seconds = median_event_seconds(lambda: torch.mm(a, b))
    return 2.0 * CEILING_N ** 3 / seconds / 1e12


def _measure_in_child(rate: str, timeout: float = 120.0) -> float:
    """:func:`_matmul_tflops` in a fresh Python on the same device: the caller's TF32 settings are
    never touched (torch refuses mixing its two APIs for them, and Inductor reads them)."""
    import sys

    from ..child import child_env, run_child

    code = ("import json, sys\nfrom pytest_kernelopt.measure.roofline import _matmul_tflops\n"
            "print(json.dumps(_matmul_tflops(sys.argv[1])))")
    done = run_child([sys.executable, "-c", code, rate], env=child_env(), timeout=timeout, separate_stdout=True)
    if done.returncode != 0 or done.stdout is None or not done.stdout.text.strip():
        why = "timed out" if done.timed_out else f"exit {done.returncode}"
        raise RuntimeError(f"the {rate} ceiling's child failed ({why}): {done.output_tail}")
    return float(json.loads(done.stdout.text.strip().splitlines()[-1]))


def flop_ceiling_tflops(rates: list[str], measure: Callable[[str], float] | None = None,
                        cache: Path | None = None) -> dict[str, float]:
    """Each rate's matrix-product throughput on this machine's CUDA device (TFLOP/s).

    A rate is a floating dtype, or ``tf32`` (float32 with TF32 allowed; ``float32`` is measured
    with it off), as :func:`min_flops` counts them. Measured once per machine, device, torch
    version and rate, then read from ``$XDG_CACHE_HOME/pytest-kernelopt/ceilings.json``
    (``~/.cache`` by default). A rate that is not floating, or whose product fails here, has
    no ceiling (left out)."""
    import torch

    measure = measure or _measure_in_child
    path = cache or _cache_file()
    try:
        known = json.loads(path.read_text())
        if not isinstance(known, dict):
            known = {}
    except (OSError, ValueError):
        known = {}
    device = torch.cuda.get_device_name() if torch.cuda.is_available() else "cpu"
    out: dict[str, float] = {}
    changed = False
    for rate in rates:
        if rate != "tf32" and not getattr(getattr(torch, rate, None), "is_floating_point", False):
            continue
        key = f"{device} | torch {torch.__version__} | {rate}"
        value = known.get(key)
        if not isinstance(value, (int, float)) or value <= 0:
            try:
                value = round(float(measure(rate)), 1)
            except Exception:  # noqa: BLE001 - the ceiling is extra: no figure rather than no run
                continue
            known[key], changed = value, True
        out[rate] = float(value)
    if changed:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            tmp = path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(known, indent=1, sort_keys=True))
            os.replace(tmp, path)
        except OSError:
            pass  # a read-only home: measured again next time
    return out
