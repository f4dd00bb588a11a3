"""Capture: compile a problem with Inductor and open up what it generated.

For every compiled graph (graph breaks make several) Inductor writes one Python
*wrapper* module whose ``call()`` launches Triton kernels through module globals
(``triton_poi_fused_add_0.run(buf0, arg0_1, 1024, stream=...)``) and calls vendor
libraries (``extern_kernels.addmm(...)``). We record every wrapper module Inductor
loads while the model is compiled, then read from it:

* each Triton kernel: its source (the file Inductor wrote), the launch
  configuration it picked, the arguments it is called with (recorded on one real
  run: shape, stride, dtype, the value range of integer tensors) and which of them
  it writes (from ``tl.store``/``tl.atomic_*`` in its source);
* each extern call in ``call()``.

The wrapper's globals are the swap points: :mod:`pytest_kernelopt.capture.swap` replaces a
kernel global with a candidate and puts the original back.
"""

from __future__ import annotations

import ast
import copy
import contextlib
import hashlib
import json
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Iterator

from ..candidate.format import find_kernel_def
from ..errors import CaptureError, ProblemError, UsageError
from ..records import ArgInfo, CaptureSummary, ExternCallInfo, KernelInfo, LaunchConfig
from .launch_configs import first_calls, fixed_at_first_call, point_of
from .problem import Problem, _where
from .training import backward_compiled_with_forward, is_backward_wrapper, is_training, kernel_base_name, step
from .variants import compiling

_KERNEL_DEF = re.compile(r"^(\w+) = async_compile\.triton\('(\w+)'", re.M)
_EXTERN_CALL = re.compile(r"\b(extern_kernels\.\w+|torch\.ops\.\w+\.\w+(?:\.\w+)?|aten\.\w+(?:\.\w+)?)\(")


@dataclass
class KernelHandle:
    """A Triton kernel inside a live wrapper module: where to swap it, and what it is."""

    info: KernelInfo
    module: ModuleType = field(repr=False)
    attr: str
    original: Any = field(repr=False)


@dataclass
class CompiledModel:
    """A problem compiled by Inductor, with its kernels opened up."""

    problem: Problem
    device: str
    model: Any = field(repr=False)
    compiled: Any = field(repr=False)
    graphs: list[ModuleType] = field(repr=False)
    kernels: dict[str, KernelHandle]
    externs: list[ExternCallInfo]
    generation: int = 0
    # Peak device memory of one eager call, inputs and weights included (CUDA only).
    eager_peak_bytes: int | None = None
    # Each graph's inputs as Dynamo passed them to Inductor (launch_signature), sorted: where a compile setting this
    # model was compiled under was verified (the gate compares model.json's compile.graphs with them); None: not read.
    graph_inputs: list[list[str]] | None = None
    # Why Dynamo broke the model's graph or left code to run eagerly, one line each (:func:`_dynamo_breaks`):
    # code past a break is compiled as another graph or not at all, so Inductor generates no kernel for it.
    graph_breaks: list[str] = field(default_factory=list)
    # The first random draw its eager forward made (an ATen op's name, :func:`draws_seen`); None: none.
    # compile_problem(refuse_draws=True), the verifier's, refuses such a model instead.
    draws: str | None = None
    # The stored setting's launch configurations (compile_problem's ``launch_configs``): kernels that launched
    # their listed point, and the listed ones that could not (why, one line each; they raced as Inductor does).
    launches_fixed: int = 0
    launches_refused: list[str] = field(default_factory=list)

    def __call__(self, *inputs: Any) -> Any:
        import torch

        if is_training(self.problem):  # outputs, then every gradient (capture/training.py)
            return step(self.compiled, self.model, self.problem, inputs)
        with torch.no_grad():
            return self.compiled(*inputs)

    def kernel(self, name: str) -> KernelHandle:
        try:
            return self.kernels[name]
        except KeyError:
            known = ", ".join(self.kernels) or "none"
            raise UsageError(f"{self.problem.path}: no Triton kernel named {name!r} (kernels: {known})") from None

    def summary(self) -> CaptureSummary:
        return CaptureSummary(
            model=self.problem.id,
            device=self.device,
            graphs=len(self.graphs),
            kernels=[h.info for h in self.kernels.values()],
            externs=self.externs,
        )


# --- fingerprint and source analysis ---------------------------------------------------

def fingerprint(source: str, name: str | None = None, semantics: dict[str, Any] | None = None) -> str:
    """Hash of the kernel's normalized source and of what it was compiled for: stable across runs and processes.

    Decorators (they carry file paths and backend hashes), comments, formatting and
    the function's own name do not enter it. ``semantics`` (:func:`compile_semantics`
    of the compiler's kernel) does: Inductor writes the same text for a float16 and a
    bfloat16 kernel (torch 2.13), and only its signature tells them apart. A compiler
    kernel's fingerprint is :func:`kernel_fingerprint`, which always passes it.
    """
    node = find_kernel_def(source, name)
    clone = ast.FunctionDef(  # type: ignore[call-arg]  # typeshed has type_params from 3.12; 3.11's ast takes any field
        name="kernel", args=node.args, body=node.body, decorator_list=[], returns=None, type_comment=None, type_params=[]
    )
    normalized = ast.unparse(ast.fix_missing_locations(clone))
    if semantics is not None:
        normalized += "\n# compiled for " + json.dumps(semantics, sort_keys=True, default=repr)
    return hashlib.sha256(normalized.encode()).hexdigest()[:16]


# Inductor's launch metadata that selects among grids of the same ``grid_type`` (torch 2.13 GridExpr subclasses).
_GRID_META = ("grid_type", "fixed_grid", "precomputed_grids", "combo_grid_meta")


def compile_semantics(autotuner: Any) -> dict[str, Any]:
    """What a compiler kernel's text does not say but its meaning depends on (``CachingAutotuner``, torch 2.11-2.13).

    * ``signature``: every argument's Triton type in order (``*fp16`` vs ``*bf16``, ``i32`` vs ``i64``);
    * ``constants``: values Inductor fixed at compile time (``triton_meta['constants']``);
    * ``device``: the device type (``cuda``, ``hip``, ``xpu``, ``cpu`` in interpreter mode);
    * ``numerics``: the compile options that change results (``enable_fp_fusion``, ``disable_ftz``);
    * ``grid``: how Inductor launches it (``grid_type`` and the metadata those grids read).

    Left out, on purpose: the GPU model and compute capability (a store verified on one H200 runs on
    another; the environment records which), divisibility hints (promises about alignment that only
    let the compiler pick faster code), names, file paths and hashes of the backend.
    """
    triton_meta = getattr(autotuner, "triton_meta", None) or {}
    inductor_meta = getattr(autotuner, "inductor_meta", None) or {}
    device = triton_meta.get("device")
    device_type = triton_meta.get("device_type") or getattr(device, "type", None)
    return {
        "signature": [[str(k), str(v)] for k, v in (triton_meta.get("signature") or {}).items()],
        "constants": {str(k): repr(v) for k, v in (triton_meta.get("constants") or {}).items()},
        "device": None if device_type is None else str(device_type),
        "numerics": {k: bool(triton_meta.get(k)) for k in ("enable_fp_fusion", "disable_ftz")},
        "grid": {k: repr(inductor_meta[k]) for k in _GRID_META if inductor_meta.get(k) is not None},
    }


def kernel_fingerprint(autotuner: Any, source: str, function: str) -> str:
    """The fingerprint of a compiler kernel: its text and its :func:`compile_semantics`. Capture and the
    production loader both compute it here, so a version runs only on the compile it was verified on."""
    return fingerprint(source, function, compile_semantics(autotuner))


def _pointer_operand(call: ast.Call) -> ast.AST | None:
    """The pointer of ``tl.load/store/atomic_*(ptr, ...)``, positional or ``pointer=``."""
    if call.args:
        return call.args[0]
    for kw in call.keywords:
        if kw.arg in ("pointer", "ptr"):
            return kw.value
    return None


def _names(node: ast.AST) -> set[str]:
    """The names in ``node``, except under ``tl.load``/``tl.atomic_*`` calls: what those return is a value
    read from memory (an index, say), not a pointer, so ``out_ptr0 + 24 * tl.load(in_ptr0 + x)`` writes
    through ``out_ptr0`` only."""
    found: set[str] = set()
    todo = [node]
    while todo:
        sub = todo.pop()
        if isinstance(sub, ast.Name):
            found.add(sub.id)
        elif (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)
              and (sub.func.attr == "load" or sub.func.attr.startswith("atomic_"))):
            continue
        todo.extend(ast.iter_child_nodes(sub))
    return found


def pointer_uses(
    source: str, name: str | None = None, pointers: set[str] | None = None
) -> tuple[set[str], set[str]]:
    """(read, written) kernel arguments: the pointers under ``tl.load`` and ``tl.store``/``tl.atomic_*``.

    A pointer expression may combine several names (``offs + out_ptr0``); every
    pointer argument in it counts. ``pointers`` (the arguments typed ``*dtype`` in
    Inductor's signature) keeps integer arguments used in address arithmetic
    (strides) out; without it every argument in the expression counts. Simple
    aliases (``p = out_ptr0 + offs``, ``bp = tl.make_block_ptr(base=out_ptr0, ...)``)
    are followed.
    """
    node = find_kernel_def(source, name)
    params = {a.arg for a in node.args.args if not (a.annotation and "constexpr" in ast.unparse(a.annotation))}
    if pointers is not None:
        candidates = params & pointers
    else:  # no signature: Inductor and most hand-written kernels name pointers *ptr*
        named = {p for p in params if "ptr" in p}
        candidates = named or params
    alias: dict[str, set[str]] = {}

    def roots(expr: ast.AST) -> set[str]:
        found: set[str] = set()
        for n in _names(expr):
            if n in candidates:
                found.add(n)
            found |= alias.get(n, set())
        return found

    for sub in ast.walk(node):
        if isinstance(sub, ast.Assign) and len(sub.targets) == 1 and isinstance(sub.targets[0], ast.Name):
            found = roots(sub.value)
            if found:
                alias[sub.targets[0].id] = alias.get(sub.targets[0].id, set()) | found
    read: set[str] = set()
    written: set[str] = set()
    for sub in ast.walk(node):
        if not (isinstance(sub, ast.Call) and isinstance(sub.func, ast.Attribute)):
            continue
        fn = sub.func.attr
        if fn not in ("load", "store") and not fn.startswith("atomic_"):
            continue
        operand = _pointer_operand(sub)
        if operand is None:
            continue
        found = roots(operand)
        if fn in ("load",) or fn.startswith("atomic_"):
            read |= found
        if fn in ("store",) or fn.startswith("atomic_"):
            written |= found
    return read, written


def written_args(source: str, name: str | None = None, pointers: set[str] | None = None) -> set[str]:
    """Arguments a kernel writes."""
    return pointer_uses(source, name, pointers)[1]


def extern_calls(wrapper_source: str, graph: int, start: int = 0) -> list[ExternCallInfo]:
    """Vendor-library and aten calls made by a wrapper's ``call()``."""
    # ``call`` is a top-level function or a method of a ``Runner`` class depending on
    # the torch version; scan the module without its kernel sources (triple-quoted)
    # and without the benchmarking helpers at its end.
    body = re.sub(r"'''.*?'''", "", wrapper_source, flags=re.S)
    body = re.split(r"^def (?:get_args|benchmark_compiled_module)\(", body, maxsplit=1, flags=re.M)[0]
    calls = []
    for i, m in enumerate(_EXTERN_CALL.finditer(body)):
        target = m.group(1)
        short = target.split(".")[1] if target.startswith(("extern_kernels", "aten")) else target.split(".")[2]
        calls.append(ExternCallInfo(name=f"{short}_{start + i}", graph=graph, target=target, args=_call_args(body, m.end())))
    return calls


def _call_args(text: str, start: int) -> list[str]:
    """Top-level comma-separated arguments of the call whose ``(`` ends at ``start``."""
    depth, args = 0, []
    current: list[str] = []
    for ch in text[start:]:
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            if depth == 0:
                break
            depth -= 1
        if ch == "," and depth == 0:
            args.append("".join(current).strip())
            current = []
        else:
            current.append(ch)
    if "".join(current).strip():
        args.append("".join(current).strip())
    return args


# --- launch configuration --------------------------------------------------------------

_point = point_of  # a configuration's launch point (capture/launch_configs.py)


def autotuner_fingerprint(autotuner: Any) -> str | None:
    """:func:`kernel_fingerprint` of an Inductor kernel from its autotuner alone (its file and function name); None
    for a kernel with no file (a GEMM template's, whose configuration its template choice fixed at compile time)."""
    filename = getattr(autotuner, "filename", None)
    fn = getattr(autotuner, "fn", None)
    name = getattr(fn, "__name__", None) or getattr(getattr(fn, "fn", None), "__name__", None)
    if not filename or not name:
        return None
    return kernel_fingerprint(autotuner, Path(filename).read_text(), name)


def graph_kernels(modules: Any) -> Iterator[Any]:
    """The Inductor Triton kernels (autotuners) of compiled graphs' wrapper modules (the ones that define ``call``)."""
    for module in modules:
        path = getattr(module, "__file__", None)
        if not path or not callable(getattr(module, "call", None)):
            continue
        for attr, _ in _KERNEL_DEF.findall(Path(path).read_text()):
            autotuner = getattr(module, attr, None)
            if hasattr(autotuner, "triton_meta"):
                yield autotuner


# Where :func:`_recording_races` leaves a kernel's first-call race on its autotuner.
RACE_ATTR = "_kernelopt_race"


def _alternatives(autotuner: Any, chosen: Any) -> list[dict[str, int]]:
    """The launch points of the configurations Inductor compiled besides the one it kept, fastest
    first in Inductor's own first-call race where it was recorded (:func:`_recording_races`).

    The race is brief (the reason the search tries them again), but it tells the near misses from
    the far slower: on the H200 the slowest of them screened at 0.02-0.4x of the pick, and a
    small ``--budget-s`` was spent on them before the closer ones."""
    out: list[dict[str, int]] = []
    kept = _point(chosen)
    # Inductor drops ``configs`` once it has compiled them (torch 2.11-2.13: ``self.configs =
    # None`` after precompiling); each compile result keeps its config.
    compiled = [getattr(r, "config", None) for r in getattr(autotuner, "compile_results", None) or []]
    for cfg in [c for c in compiled if c is not None] or getattr(autotuner, "configs", None) or []:
        try:
            point = _point(cfg)
        except Exception:  # a configuration we cannot read is simply not offered
            continue
        if point and point != kept and point not in out:
            out.append(point)
    race = {tuple(sorted(p.items())): t for p, t in getattr(autotuner, RACE_ATTR, None) or []}
    out.sort(key=lambda p: race.get(tuple(sorted(p.items())), math.inf))  # stable: unraced ones keep their order, last
    return out


def launch_config(autotuner: Any, interpreted: bool) -> LaunchConfig:
    """The configuration the kernel runs with: after autotuning, the winner."""
    from torch._inductor.runtime.triton_heuristics import GridExpr

    if interpreted or not getattr(autotuner, "launchers", None):
        cfg = autotuner.configs[0]  # what Inductor's interpreter path launches with
    else:
        cfg = autotuner.launchers[0].config
    meta = autotuner.triton_meta
    # Inductor compiles with device asserts for indirect indexing (``debug``) and without
    # Triton's integer-overflow checks; a dump launched with Triton's defaults compiled a
    # different binary (H200, torch 2.11: 32 instead of 38 registers for an index_select
    # kernel, 0.99x as fast). Spell out what Inductor passes (torch 2.11-2.13:
    # ``CachingAutotuner._create_compile_meta`` / ``_create_compile_options``).
    options: dict[str, Any] = {}
    if not interpreted:
        inductor = getattr(autotuner, "inductor_meta", {}) or {}
        options["debug"] = bool(inductor.get("assert_indirect_indexing", True)) and not inductor.get("is_hip", False)
        options["sanitize_overflow"] = False
    if "enable_fp_fusion" in meta:
        options["enable_fp_fusion"] = bool(meta["enable_fp_fusion"])
    if meta.get("launch_pdl"):
        options["launch_pdl"] = True
    if meta.get("disable_ftz"):
        options["enable_reflect_ftz"] = False
    # The grid written with the block sizes' names (``-((xnumel) // -(XBLOCK))``), not
    # Inductor's folded numbers, so a candidate that changes XBLOCK launches the right
    # number of programs. Grid kinds that need numbers get them.
    named = copy.copy(cfg)
    named.kwargs = {k: k for k in cfg.kwargs}
    try:
        grid = GridExpr.from_meta(autotuner.inductor_meta, named)
    except Exception:
        grid = GridExpr.from_meta(autotuner.inductor_meta, cfg)
    compiled = getattr(autotuner, "compile_results", None) or getattr(autotuner, "configs", None) or []
    return LaunchConfig(
        compiled_configs=None if interpreted else (len(compiled) or None),  # the interpreter benchmarks nothing
        alternatives=[] if interpreted else _alternatives(autotuner, cfg),
        kwargs={k: int(v) for k, v in cfg.kwargs.items()},
        num_warps=getattr(cfg, "num_warps", None),
        num_stages=getattr(cfg, "num_stages", None),
        options=options,
        grid=[_cdiv(str(grid.x_grid)), _cdiv(str(grid.y_grid)), _cdiv(str(grid.z_grid))],
        grid_prefix=[_cdiv(line) for line in grid.prefix],
    )


def _cdiv(expr: str) -> str:
    """Inductor's ceiling division ``-((n) // -(B))`` spelled ``triton.cdiv(n, B)`` where it is that simple."""
    return re.sub(r"-\(\(([\w.]+)\) // -\(([\w.]+)\)\)", r"triton.cdiv(\1, \2)", expr)


def describe_value(name: str, value: Any, written: bool) -> ArgInfo:
    import torch

    if isinstance(value, torch.Tensor):
        info = ArgInfo(
            name=name, kind="tensor", written=written, shape=list(value.shape), stride=list(value.stride()),
            dtype=str(value.dtype).removeprefix("torch."),
        )
        if not value.is_floating_point() and not value.is_complex() and value.numel() and value.dtype != torch.bool:
            info.min, info.max = int(value.min()), int(value.max())
        return info
    for kind, typ in (("bool", bool), ("int", int), ("float", float)):
        if isinstance(value, typ):
            return ArgInfo(name=name, kind=kind, value=value)
    if value is None:
        return ArgInfo(name=name, kind="none")
    return ArgInfo(name=name, kind="other")


# --- launch signatures -----------------------------------------------------------------
# What a stored version was verified at, launch by launch, and what production compares
# before it runs one: per argument, a tensor's dtype, shape and stride; an integer's value
# (Inductor passes sizes as integers: a dynamic-shape kernel's ``xnumel``, ``ks0``); anything
# else its type. Recorded as text in the manifest, compared as tuples in production.

_TENSOR_TEXT = re.compile(r"(\w+) \(((?:-?\d+, )*-?\d*,?)\) \(((?:-?\d+, )*-?\d*,?)\)")


def _arg_text(value: Any) -> str:
    import torch

    if isinstance(value, torch.Tensor):
        return f"{str(value.dtype).removeprefix('torch.')} {tuple(value.shape)} {tuple(value.stride())}"
    if isinstance(value, bool):
        return "bool"
    if type(value) is int:  # exactly: launch_key reads other ints (enums, numpy) as "other"
        return f"int {value}"
    if isinstance(value, float):
        return "float"
    if value is None:
        return "none"
    return f"other {type(value).__name__}"


def launch_signature(args: Any) -> list[str]:
    """One launch's arguments as the store records them: ``["float16 (4, 16) (16, 1)", "int 64", "float"]``."""
    return [_arg_text(a) for a in args]


def launch_key(args: Any) -> tuple[Any, ...]:
    """One launch's arguments as production compares them (equal to :func:`signature_key` of its signature)."""
    from torch import Tensor

    return tuple((a.shape, a.stride(), a.dtype) if isinstance(a, Tensor)
                 else ("int", a) if type(a) is int else _arg_text(a) for a in args)


def signature_key(signature: list[str]) -> tuple[Any, ...]:
    """:func:`launch_key` of the launch whose :func:`launch_signature` is ``signature``; ValueError when one
    of its entries is not one that function writes (a manifest is data from a repository)."""
    import torch

    key: list[Any] = []
    for text in signature:
        tensor = _TENSOR_TEXT.fullmatch(text)
        if tensor:
            dtype = getattr(torch, tensor.group(1), None)
            if not isinstance(dtype, torch.dtype):
                raise ValueError(f"unknown dtype in launch signature entry {text!r}")
            shape, stride = (tuple(int(n) for n in g.replace(",", " ").split()) for g in tensor.group(2, 3))
            key.append((torch.Size(shape), stride, dtype))
        elif re.fullmatch(r"int -?\d{1,30}", text):
            key.append(("int", int(text[4:])))
        elif text in ("bool", "float", "none") or re.fullmatch(r"other \w{1,100}", text):
            key.append(text)
        else:
            raise ValueError(f"launch signature entry {text!r} is not a tensor's 'dtype (shape) (stride)', "
                             f"'int <value>', 'float', 'bool' or 'none'")
    return tuple(key)


# --- compiling -------------------------------------------------------------------------

@contextlib.contextmanager
def fresh_races() -> Iterator[None]:
    """Inductor's kernels with every launch configuration it compiles, not an earlier compile's pick.

    Inductor remembers the winner of a kernel's first-call race on disk (its local
    autotune cache, keyed by the kernel's source and configurations) and later compiles on
    that machine build that one configuration only: the capture then saw one configuration
    where a fresh machine races several, and tune neither tried the others nor pinned the
    pick (seen on the H200: a pooling kernel's 2 configurations captured as 1 after an earlier
    compile). A compile that is timed against another reads none either: the pick would be
    whichever compile raced the kernel first on this machine, such as one of tune's harvest
    children racing beside three others. The race still runs and still writes its winner back.
    Every compile kernelopt times or captures runs under this (capture, the verifier's other
    compile, bench's modes); production's does not (Inductor's own behaviour).

    Its reach: the cache is read where a kernel is loaded, and this patches this process (a
    kernel loaded here, one loaded from the FX graph cache included). A kernel compiled in
    Inductor's compile worker processes reads it there, which this does not reach. Turning
    ``autotune_local_cache`` off would (Inductor writes it into each kernel's metadata), but it
    also turns off the remembered GEMM template timings, so a gate run would autotune a stored
    max-autotune setting's GEMMs again each time (up to minutes): not done.
    """
    try:
        from torch._inductor.runtime.autotune_cache import AutotuneCache
    except ImportError:  # a torch without the cache: nothing to bypass
        yield
        return
    from unittest import mock

    with mock.patch.object(AutotuneCache, "read_best", lambda self, inductor_meta, configs: None):
        yield


@contextlib.contextmanager
def _recording_races() -> Iterator[None]:
    """Keep each kernel's first-call race on its autotuner: Inductor's time for every configuration
    it compiled (``CachingAutotuner.benchmark_all_configs``, torch 2.11-2.13), as launch points."""
    try:
        from torch._inductor.runtime.triton_heuristics import CachingAutotuner
    except ImportError:  # another torch: no race recorded, the alternatives keep Inductor's order
        yield
        return
    original = CachingAutotuner.benchmark_all_configs

    def benchmark_all_configs(self: Any, *args: Any, **kwargs: Any) -> Any:
        timings = original(self, *args, **kwargs)
        try:
            setattr(self, RACE_ATTR, [(_point(launcher.config), float(t)) for launcher, t in timings.items()])
        except Exception:  # noqa: BLE001 - the order is a hint; never a reason to fail a compile
            pass
        return timings

    from unittest import mock

    with mock.patch.object(CachingAutotuner, "benchmark_all_configs", benchmark_all_configs):
        yield


@contextlib.contextmanager
def _record_wrapper_modules() -> Iterator[list[ModuleType]]:
    """Collect the modules Inductor loads from generated code while the block runs."""
    from torch._inductor.codecache import PyCodeCache

    loaded: list[ModuleType] = []
    original = PyCodeCache.__dict__["load_by_key_path"]

    def load_by_key_path(cls: Any, *args: Any, **kwargs: Any) -> ModuleType:
        module = original.__func__(cls, *args, **kwargs)
        loaded.append(module)
        return module

    from unittest import mock

    # A patch for the compile (restored after it); its signature is wider than the original's.
    with mock.patch.object(PyCodeCache, "load_by_key_path", classmethod(load_by_key_path)):
        yield loaded


@contextlib.contextmanager
def _record_kernel_args() -> Iterator[dict[int, tuple[Any, ...]]]:
    """First-call arguments of every Triton kernel launched while the block runs, by kernel id."""
    seen: dict[int, tuple[Any, ...]] = {}

    def record(autotuner: Any, args: tuple[Any, ...]) -> None:
        # Describe the inputs before the launch and the outputs' layout; values of written arguments are not needed.
        seen[id(autotuner)] = tuple(describe_value("", a, False) for a in args)

    with first_calls(record):
        yield seen


def compile_problem(
    problem: Problem, device: str, seed: int = 0, variant: str | None = None, reset: bool = True,
    inputs: list[Any] | None = None, measure_eager_peak: bool = False, refuse_draws: bool = False,
    launch_configs: dict[str, dict[str, int]] | None = None,
) -> CompiledModel:
    """Compile ``problem`` for ``device`` in inference mode (a training problem: its training step, with
    forward and backward graphs, :mod:`.training`) and open up every graph.

    ``device`` must come from :func:`pytest_kernelopt.config.resolve_device` (which
    switches on interpreter mode for ``cpu``). ``reset`` clears Dynamo's caches
    first; pass False to keep an earlier compiled model of this process working.
    ``inputs`` (default: drawn under ``seed``) are what the model is compiled and
    captured with. ``measure_eager_peak`` records the eager call's peak device memory
    (inputs and weights included) in ``eager_peak_bytes``; reset torch's peak
    counter before drawing the inputs for that figure to mean anything. ``variant``: a
    name from :mod:`.variants` (Inductor's settings for this compile; None: the defaults).
    ``refuse_draws``: a model whose eager forward draws random numbers is the problem's error
    (:func:`random_draws_error`) before anything compiles (the verifier's; listing its kernels is fine).
    ``launch_configs``: the stored setting's launch configurations (``model.json``'s ``compile.launch_configs``,
    :mod:`.launch_configs`): each kernel listed launches its point from its first call, raced no more.
    """

    import torch
    import torch._dynamo

    global _generation
    if reset:
        torch._dynamo.reset()
        _generation += 1
    model = problem.build_model(device)
    if inputs is None:
        inputs = problem.make_inputs(seed, device)
    # Eager first: a model that is broken by itself gets its own error and line,
    # not Dynamo's fake-tensor message.

    training = is_training(problem)
    try:
        drawn: list[str] = []
        forward = draws_seen(drawn)
        if training:
            step(lambda *xs: forward(model, xs), model, problem, inputs)
        else:
            with torch.no_grad():
                forward(model, inputs)
        eager_peak = int(torch.cuda.max_memory_allocated()) if measure_eager_peak and device == "cuda" else None
        if drawn and refuse_draws:
            raise random_draws_error(problem, drawn[0])
    except (torch.OutOfMemoryError, ProblemError):
        raise
    except Exception as exc:
        raise ProblemError(problem.path, f"the model fails in eager mode{_where(exc, problem.path)}: "
                                         f"{type(exc).__name__}: {_first_line(exc)}") from exc

    graph_inputs: set[tuple[str, ...]] = set()
    inputs_seen: set[tuple[str, ...]] | None = graph_inputs
    try:
        compiled = torch.compile(model, backend=_recording_inductor(graph_inputs))
    except AttributeError:  # a torch without the wrapper class: Inductor as torch.compile names it, inputs not read
        compiled, inputs_seen = torch.compile(model, backend="inductor"), None
    breaks_before = _dynamo_breaks()
    try:
        with compiling(variant), fresh_races(), _recording_races(), _record_wrapper_modules() as loaded, \
                _record_kernel_args() as seen, fixed_at_first_call(launch_configs, autotuner_fingerprint) as fixed, \
                (backward_compiled_with_forward() if training else torch.no_grad()):
            if training:  # the backward runs too: its kernels' arguments are recorded on this call
                step(compiled, model, problem, inputs)
            else:
                compiled(*inputs)
    except (ProblemError, CaptureError):
        raise
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        raise ProblemError(problem.path, f"compiling or running the model failed: {type(exc).__name__}: "
                                         f"{_first_line(exc)}") from exc
    # Wrapper modules define ``call``; kernel modules do not. (``async_compile`` is
    # deleted from the wrapper once its kernels are ready, so it cannot be the test.)
    graphs = [m for m in loaded if callable(getattr(m, "call", None)) and getattr(m, "__file__", None)]
    kernels: dict[str, KernelHandle] = {}
    externs: list[ExternCallInfo] = []
    interpreted = device == "cpu"
    for index, module in enumerate(graphs):
        assert module.__file__ is not None  # graphs holds modules with a file
        source = Path(module.__file__).read_text()
        externs += extern_calls(source, index, start=len(externs))
        backward = is_backward_wrapper(source)
        for attr, kernel_name in _KERNEL_DEF.findall(source):
            autotuner = getattr(module, attr)
            if not hasattr(autotuner, "triton_meta"):
                raise CaptureError(f"{problem.path}: kernel {attr} is a {type(autotuner).__name__}, not an Inductor Triton kernel")
            kernel_source = read_kernel_source(autotuner, module, attr)
            base = kernel_base_name(attr, backward)
            name = base if base not in kernels else f"{base}__g{index}"
            cfg = launch_config(autotuner, interpreted)
            signature = autotuner.triton_meta.get("signature", {})
            pointers = {k for k, v in signature.items() if str(v).startswith("*")} or None
            reads, writes = pointer_uses(kernel_source, kernel_name, pointers)
            arg_names = [a for a in autotuner.fn.arg_names if a not in cfg.kwargs]
            kept = set(getattr(autotuner, "mutated_arg_names", None) or ())
            observed = seen.get(id(autotuner), ())
            args = []
            for i, arg in enumerate(arg_names):
                info = observed[i].model_copy(update={"name": arg}) if i < len(observed) else ArgInfo(name=arg)
                info.read, info.written = arg in reads, arg in writes
                info.kept = info.written and arg in kept
                if info.written:  # recorded before the launch: the range of garbage
                    info.min = info.max = None
                args.append(info)
            info = KernelInfo(
                name=name, function=kernel_name, graph=index, args=args, launch=cfg, source=kernel_source,
                fingerprint=kernel_fingerprint(autotuner, kernel_source, kernel_name), backward=backward,
                training=training,
            )
            kernels[name] = KernelHandle(info=info, module=module, attr=attr, original=autotuner)
    return CompiledModel(
        problem=problem, device=device, model=model, compiled=compiled, graphs=graphs, kernels=kernels, externs=externs,
        generation=_generation, eager_peak_bytes=eager_peak, draws=drawn[0] if drawn else None,
        graph_breaks=[reason for reason, n in _dynamo_breaks().items() if n > breaks_before.get(reason, 0)],
        launches_fixed=fixed.fixed, launches_refused=fixed.refused,
        graph_inputs=None if inputs_seen is None else [list(g) for g in sorted(inputs_seen)],
    )


def _recording_inductor(seen: set[tuple[str, ...]]) -> Any:
    """The backend ``torch.compile(backend="inductor")`` makes (torch's own wrapper class, so Dynamo treats it as
    Inductor), adding each graph's inputs to ``seen`` as it compiles."""
    import torch

    class Recording(torch._TorchCompileInductorWrapper):
        def __call__(self, model_: Any, inputs_: Any, *args: Any, **kwargs: Any) -> Any:
            seen.add(tuple(launch_signature(inputs_)))
            return super().__call__(model_, inputs_, *args, **kwargs)

    return Recording(None, None, None)


def _dynamo_breaks() -> dict[str, int]:
    """Dynamo's counts of graph breaks and of constructs it does not support (``torch._dynamo.utils.counters``,
    torch 2.11-2.15), by the first line of each reason; {} where this torch keeps them elsewhere."""
    try:
        from torch._dynamo.utils import counters

        found: dict[str, int] = {}
        for group in ("graph_break", "unimplemented"):
            for reason, n in counters[group].items():
                line = str(reason).strip().splitlines()[0][:200] if str(reason).strip() else "(no reason given)"
                found[line] = found.get(line, 0) + int(n)
        return found
    except Exception:  # noqa: BLE001 - a note for the user, never a failure
        return {}


def graphs_compiled() -> int | None:
    """How many graphs Dynamo has compiled in this process so far (``counters["stats"]["unique_graphs"]``,
    torch 2.11-2.15); None where this torch keeps the count elsewhere."""
    try:
        from torch._dynamo.utils import counters

        return int(counters["stats"]["unique_graphs"])
    except Exception:  # noqa: BLE001 - a check of ours, never the model's failure
        return None


def recompiled_error(problem: Problem) -> ProblemError:
    """The problem's error for a compiled model that compiled again for another input draw: its graph
    specialises on input values (or sizes), so its kernels differ from one draw to the next (a kernel captured on
    one draw is not launched on another) and none can be verified or stored. Names Dynamo's reason (the guard
    that failed, with the line of the model it guards) where this torch records one."""
    reason = ""
    try:
        from torch._dynamo import guard_failures

        failed = [str(r).strip() for reasons in guard_failures.values() for r in reasons if str(r).strip()]
        if failed:
            reason = " (Dynamo: " + " ".join(failed[-1].splitlines()[0].split())[:240] + ")"
    except Exception:  # noqa: BLE001 - the reason is extra
        pass
    return ProblemError(problem.path, f"the compiled model compiled again for another input draw{reason}: its "
                                      "graph specialises on what the draws change (a Python number from `.item()`, a "
                                      "float input, a size get_inputs() varies), so its kernels differ from one input "
                                      "to the next and none can be verified or stored; keep such values tensors (a branch "
                                      "on one as `torch.where(cond, a, b)`; "
                                      "torch._dynamo.config.capture_scalar_outputs = True in the problem file "
                                      "keeps an `.item()` used in arithmetic in the graph, never one branched on), "
                                      "and draw one shape per declared SHAPES entry")


def draws_random(func: Any, args: Any, kwargs: Any) -> bool:
    """Whether a call of an op torch tags ``nondeterministic_seeded`` draws anything: not where its probability
    argument (``dropout_p`` of the fused attentions, ``p`` of the dropouts) is the number 0, nor a dropout called
    with ``train=False``. A training step's fused attention (``_scaled_dot_product_cudnn_attention`` on an H100,
    torch 2.11) carries the tag whatever its ``dropout_p``; at 0 it computes the same outputs at every run."""
    schema = func._schema.arguments
    given = {a.name: a.default_value for a in schema if a.has_default_value()}  # what a call leaves out
    given.update(zip((a.name for a in schema), args))
    given.update(kwargs or {})
    if given.get("train", True) is False:
        return False
    for name in ("dropout_p", "p"):
        if name in given:
            value = given[name]
            return not (isinstance(value, (int, float)) and not isinstance(value, bool) and value == 0)
    return True


def draws_seen(drawn: list[str]) -> Callable[[Any, Any], Any]:
    """A runner of a model's forward, ``forward(model, inputs)``, that appends to ``drawn`` the name of each random
    draw inside it: an ATen op torch tags ``nondeterministic_seeded`` (dropout with training=True, rand_like,
    bernoulli, multinomial...). A training step's incoming gradients, drawn outside the forward, are not its."""
    import torch
    from torch.utils._python_dispatch import TorchDispatchMode

    class _Draws(TorchDispatchMode):
        def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
            if torch.Tag.nondeterministic_seeded in func.tags and draws_random(func, args, kwargs):
                drawn.append(str(func.overloadpacket.__name__))
            return func(*args, **(kwargs or {}))

    def forward(model: Any, xs: Any) -> Any:
        with _Draws():
            return model(*xs)

    return forward


def random_draws_error(problem: Problem, op: str) -> ProblemError:
    """The problem's error for a model that draws random numbers when it runs (``op``, :func:`draws_seen`): it
    computes other outputs at every run, so nothing of it can be judged against float64 or an earlier run, and
    every candidate would pass or fail by chance."""
    return ProblemError(problem.path, f"the model draws random numbers when it runs ({op}: dropout with training=True, "
                                      "rand_like, bernoulli...): its outputs differ at every run, so no kernel of it "
                                      "can be judged. Draw them in get_inputs() and pass them in (a noise or mask "
                                      "input), or leave dropout to eval()")


def read_kernel_source(autotuner: Any, wrapper: Any, attr: str) -> str:
    """The source of Inductor kernel ``attr`` of wrapper module ``wrapper``: its file, which Inductor
    records on the kernel, except on GEMM and convolution template kernels (``triton_tem_*``,
    max-autotune, torch 2.11: found on the H200, 2026-12-03, where tune failed on a convolution);
    for those, the source the wrapper passes to ``async_compile.triton``."""
    if autotuner.filename:
        return Path(autotuner.filename).read_text()
    for node in ast.parse(Path(wrapper.__file__).read_text()).body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and getattr(node.targets[0], "id", None) == attr \
                and isinstance(node.value, ast.Call) and len(node.value.args) >= 2 \
                and isinstance(node.value.args[1], ast.Constant) and isinstance(node.value.args[1].value, str):
            return node.value.args[1].value
    raise CaptureError(f"kernel {attr}: Inductor recorded no file for it, and its wrapper {wrapper.__file__} "
                       f"does not pass its source to async_compile.triton")


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else type(exc).__name__


# Bumped by every compile that resets Dynamo: a CompiledModel from an earlier
# generation would be recompiled on its next call, so swapping into it has no effect.
_generation = 0


def is_current(compiled: CompiledModel) -> bool:
    return compiled.generation == _generation
