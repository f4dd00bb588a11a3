"""The verification cascade: static -> kernel -> model -> speed, stopping at the first failure.

:func:`verify` is what callers use: it runs the static stage here (the candidate is
only parsed) and everything that executes the candidate in an isolated worker
process (:mod:`pytest_kernelopt.worker`), which calls :func:`run_stages`.

Correctness rules (also in the README):

* kernel stage: the compiler kernel's real arguments are recorded from a model
  run on each seed; compiler kernel and candidate run on identical copies, with
  every argument the kernel only writes poisoned first (NaN, or the integer
  dtype's maximum) so unwritten elements show, and a second time pre-filled with
  random values from an unpredictable seed. Every argument is compared
  afterwards, inputs included. NaN/Inf positions must match; finite values must
  agree within ``atol + rtol * |expected|`` (fp32: rtol 1e-4, atol 1e-5 x the
  tensor's largest magnitude). Integer and bool tensors must match exactly.
* model stage: the candidate swapped into the compiled model, on each seed. The
  judge is a float64 eager run of the model: the candidate's max error against it
  may not exceed ``error_factor`` (default 4) times the compiled baseline's error
  plus a floor of 4 ulp of the output dtype times the output's scale. This keeps
  a reordered reduction and rejects fp16/bf16 round trips and TF32 where the
  compiler used fp32. ``allow_reduced_precision`` raises the tolerances to bf16's.
* speed stage: interleaved, L2-flushed, event-timed model runs (and kernel runs),
  median speedup with a 95% order-statistic interval; accepted when the interval
  lies above 1 and the median gain is at least ``min_gain``. Not measured in
  interpreter mode.
"""

from __future__ import annotations

import copy
import hashlib
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .records import SeedErrors, Timing, Verdict


@dataclass
class CascadeOptions:
    seeds: int = 3
    timeout: float = 300.0
    allow_reduced_precision: bool = False
    error_factor: float = 4.0
    min_gain: float = 0.02
    measure_speed: bool = True
    first_seed: int = 1
    min_model_us: float = 20.0


@dataclass
class StageFailure(Exception):
    detail: str
    errors: list[SeedErrors] = field(default_factory=list)


# --- tolerances --------------------------------------------------------------------------

_RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 2e-3, "bfloat16": 1.6e-2}
REDUCED_PRECISION_RTOL = 1.6e-2  # bf16's, with --allow-reduced-precision


def _eps(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def compare_tensors(expected: Any, actual: Any, rtol: float, what: str) -> tuple[float, float]:
    """Check ``actual`` against ``expected`` (kernel stage); returns (max abs, max rel) error.

    Raises StageFailure naming ``what`` and the first offending index.
    """
    import torch

    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        raise StageFailure(f"{what}: shape/dtype changed ({actual.dtype}{list(actual.shape)})")
    if not expected.dtype.is_floating_point:
        diff = expected != actual
        if bool(diff.any()):
            idx = tuple(int(i) for i in diff.nonzero()[0])
            raise StageFailure(f"{what}: differs at {list(idx)}: expected {expected[idx].item()}, got {actual[idx].item()}")
        return 0.0, 0.0
    e, a = expected.double(), actual.double()
    for name, test in (("NaN", torch.isnan), ("Inf", torch.isinf)):
        mismatch = test(e) != test(a)
        if bool(mismatch.any()):
            idx = tuple(int(i) for i in mismatch.nonzero()[0])
            raise StageFailure(f"{what}: {name} at {list(idx)} in one output only (expected {e[idx].item()}, got {a[idx].item()}); "
                               f"{int(mismatch.sum())} element(s)")
    inf = torch.isinf(e)
    if bool((e[inf] != a[inf]).any()):
        raise StageFailure(f"{what}: Inf of the wrong sign")
    finite = torch.isfinite(e)
    if not bool(finite.any()):
        return 0.0, 0.0
    e, a = e[finite], a[finite]
    scale = float(e.abs().max())
    atol = rtol * 0.1 * max(scale, 1e-30)
    err = (a - e).abs()
    allowed = atol + rtol * e.abs()
    bad = err > allowed
    max_abs = float(err.max())
    max_rel = float((err / (e.abs() + atol)).max())
    if bool(bad.any()):
        raise StageFailure(f"{what}: {int(bad.sum())} of {e.numel()} element(s) differ beyond rtol={rtol:g}: "
                           f"max abs error {max_abs:.3g}, max rel error {max_rel:.3g}")
    return max_abs, max_rel


# --- kernel stage ------------------------------------------------------------------------

def record_calls(compiled: Any, name: str, inputs: list[Any]) -> list[tuple[Any, ...]]:
    """The arguments of every launch of kernel ``name`` in one model run, cloned before the launch."""
    import torch

    from .swap import swapped

    handle = compiled.kernel(name)
    calls: list[tuple[Any, ...]] = []

    class Recorder:
        def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
            calls.append(tuple(a.clone() if isinstance(a, torch.Tensor) else a for a in args))
            return handle.original.run(*args, stream=stream, **kwargs)

    with swapped(compiled, {name: Recorder()}):
        compiled(*inputs)
    return calls


def _prefill(t: Any, mode: str, fills: dict[int, Any], index: int) -> None:
    """Fill an output-only argument before a launch.

    ``nan``: NaN (floats) or the dtype's maximum (integers), so unwritten elements show.
    ``random``: values drawn from an unpredictable seed, the same for the compiler
    kernel and the candidate: a candidate cannot recognise the harness by its fill
    (for instance skip its work when the output is not NaN).
    """
    import torch

    if mode == "nan":
        if t.dtype.is_floating_point:
            t.fill_(float("nan"))
        elif t.dtype == torch.bool:
            t.fill_(True)
        else:
            t.fill_(torch.iinfo(t.dtype).max)
        return
    if index not in fills:
        gen = torch.Generator().manual_seed(int.from_bytes(os.urandom(8), "little") >> 1)
        if t.dtype.is_floating_point:
            fills[index] = torch.randn(t.shape, generator=gen).to(t.dtype)
        elif t.dtype == torch.bool:
            fills[index] = torch.randint(0, 2, t.shape, generator=gen).bool()
        else:
            fills[index] = torch.randint(-100, 100, t.shape, generator=gen).to(t.dtype)
    t.copy_(fills[index])


def _stream(device: str) -> Any:
    import torch

    return torch.cuda.current_stream().cuda_stream if device == "cuda" else None


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def kernel_stage(compiled: Any, name: str, candidate: Any, seeds: list[int], rtol_override: float | None) -> list[SeedErrors]:
    import torch

    handle = compiled.kernel(name)
    infos = handle.info.args
    poison = [a.written and not a.read for a in infos]
    results = []
    for seed in seeds:
        calls = record_calls(compiled, name, compiled.problem.make_inputs(seed, compiled.device))
        if not calls:
            raise StageFailure(f"kernel {name} was not launched by the model on seed {seed}")
        worst_abs, worst_rel = 0.0, 0.0
        for call, mode in [(call, mode) for call in calls for mode in ("nan", "random")]:
            runs = []
            fills: dict[int, Any] = {}
            for kernel in (handle.original, candidate):
                args = [a.clone() if isinstance(a, torch.Tensor) else a for a in call]
                for i, a in enumerate(args):
                    if isinstance(a, torch.Tensor) and i < len(poison) and poison[i]:
                        _prefill(a, mode, fills, i)
                try:
                    kernel.run(*args, stream=_stream(compiled.device))
                    _sync(compiled.device)
                except Exception as exc:
                    if kernel is handle.original:
                        raise
                    raise StageFailure(f"candidate raised on seed {seed}: {type(exc).__name__}: {_first_line(exc)}") from exc
                runs.append(args)
            for i, (expected, actual) in enumerate(zip(*runs)):
                if not isinstance(expected, torch.Tensor):
                    continue
                label = infos[i].name if i < len(infos) else f"argument {i}"
                label += "" if mode == "nan" else " (outputs pre-filled with random values)"
                role = "written" if i < len(infos) and infos[i].written else "read-only"
                rtol = rtol_override or _RTOL.get(str(expected.dtype).removeprefix("torch."), 1e-4)
                try:
                    max_abs, max_rel = compare_tensors(expected, actual, rtol, f"seed {seed}, {role} argument {label}")
                except StageFailure as failure:
                    if role == "read-only":
                        failure.detail += " (the candidate wrote into an argument the compiler kernel only reads)"
                    raise
                worst_abs, worst_rel = max(worst_abs, max_abs), max(worst_rel, max_rel)
        results.append(SeedErrors(seed=seed, kernel_max_abs=worst_abs, kernel_max_rel=worst_rel))
    return results


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""


# --- model stage -------------------------------------------------------------------------

def flatten(out: Any) -> list[Any]:
    import torch

    if isinstance(out, torch.Tensor):
        return [out]
    if isinstance(out, (list, tuple)):
        return [t for item in out for t in flatten(item)]
    if isinstance(out, dict):
        return [t for key in sorted(out) for t in flatten(out[key])]
    return []


def float64_model(model: Any) -> Any | None:
    try:
        return copy.deepcopy(model).double()
    except Exception:
        return None


def reference64(model64: Any, inputs: list[Any]) -> list[Any] | None:
    import torch

    if model64 is None:
        return None
    try:
        with torch.no_grad():
            return flatten(model64(*[x.double() if x.is_floating_point() else x for x in inputs]))
    except Exception:
        return None


def _max_err(a: Any, ref: Any) -> float:
    import torch

    a, ref = a.double(), ref.double()
    finite = torch.isfinite(ref) & torch.isfinite(a)
    return float((a[finite] - ref[finite]).abs().max()) if bool(finite.any()) else 0.0


def model_stage(
    compiled: Any, replacements: dict[str, Any], seeds: list[int], error_factor: float, reduced_precision: bool,
    model64: Any,
) -> list[SeedErrors]:
    import torch

    from .swap import swapped

    results = []
    for seed in seeds:
        inputs = compiled.problem.make_inputs(seed, compiled.device)
        with torch.no_grad():
            eager = flatten(compiled.model(*inputs))
        base = [t.clone() for t in flatten(compiled(*inputs))]
        try:
            with swapped(compiled, replacements):
                cand = [t.clone() for t in flatten(compiled(*inputs))]
                _sync(compiled.device)
        except Exception as exc:
            raise StageFailure(f"model raised with the candidate on seed {seed}: {type(exc).__name__}: {_first_line(exc)}") from exc
        ref = reference64(model64, inputs) or eager
        if len(cand) != len(base):
            raise StageFailure(f"seed {seed}: the model returned {len(cand)} tensors instead of {len(base)}")
        row = SeedErrors(seed=seed, vs_eager=0.0, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0, scale=0.0)
        for k, (c, b, e, r) in enumerate(zip(cand, base, eager, ref)):
            what = f"seed {seed}, output {k}"
            if c.shape != b.shape or c.dtype != b.dtype:
                raise StageFailure(f"{what}: shape/dtype changed")
            if not c.dtype.is_floating_point:
                if not torch.equal(c, b):
                    raise StageFailure(f"{what}: integer output differs from the compiled baseline")
                continue
            for label, test in (("NaN", torch.isnan), ("Inf", torch.isinf)):
                if not torch.equal(test(c), test(b)):
                    raise StageFailure(f"{what}: {label} positions differ from the compiled baseline")
            err_c, err_b = _max_err(c, r), _max_err(b, r)
            finite = torch.isfinite(r)
            scale = float(r.double()[finite].abs().max()) if bool(finite.any()) else 0.0
            eps = 2.0**-8 if reduced_precision else _eps(c.dtype)
            allowed = error_factor * err_b + 4 * eps * scale + 1e-30
            row.vs_eager = max(row.vs_eager or 0.0, _max_err(c, e))
            row.candidate_vs_fp64 = max(row.candidate_vs_fp64 or 0.0, err_c)
            row.baseline_vs_fp64 = max(row.baseline_vs_fp64 or 0.0, err_b)
            row.scale = max(row.scale or 0.0, scale)
            if err_c > allowed:
                raise StageFailure(
                    f"{what}: error against float64 {err_c:.3g} exceeds {error_factor:g} x the compiled baseline's "
                    f"{err_b:.3g} + floor (allowed {allowed:.3g})",
                    errors=[row],
                )
        results.append(row)
    return results


# --- speed stage -------------------------------------------------------------------------

def _steps(prepare_a: Callable[[], None], run_a: Callable[[], object], cleanup_a: Callable[[], None],
           prepare_b: Callable[[], None], run_b: Callable[[], object], cleanup_b: Callable[[], None]) -> tuple[Any, Any, str]:
    """Timing steps for A and B: CUDA-graph replays when both capture, else eager calls."""
    from .timing import graphed

    a = graphed(prepare_a, run_a, cleanup_a)
    b = graphed(prepare_b, run_b, cleanup_b) if a is not None else None
    if a is not None and b is not None:
        return a, b, "cuda-graph"
    return (prepare_a, run_a, cleanup_a), (prepare_b, run_b, cleanup_b), "eager"


def speed_stage(compiled: Any, replacements: dict[str, Any], kernel: str | None, seed: int) -> tuple[Timing, Timing | None]:
    """Model (and kernel) time, baseline vs candidate, paired and interleaved."""
    from .swap import restore, swap
    from .timing import paired_timings

    inputs = compiled.problem.make_inputs(seed, compiled.device)
    nothing: Callable[[], None] = lambda: None

    def swap_in() -> None:
        for name, rep in replacements.items():
            swap(compiled, name, rep)

    def swap_out() -> None:
        for name in replacements:
            restore(compiled, name)

    run_model = lambda: compiled(*inputs)  # noqa: E731
    a, b, method = _steps(nothing, run_model, nothing, swap_in, run_model, swap_out)
    model = _timing(paired_timings(a, b), method)
    kernel_timing = None
    if kernel is not None:
        import torch

        handle = compiled.kernel(kernel)
        call = record_calls(compiled, kernel, inputs)[0]
        args = [x.clone() if isinstance(x, torch.Tensor) else x for x in call]
        rep = replacements[kernel]
        # The stream is read at call time: under graph capture it is the capture stream.
        a, b, method = _steps(nothing, lambda: handle.original.run(*args, stream=_stream(compiled.device)), nothing,
                              nothing, lambda: rep.run(*args, stream=_stream(compiled.device)), nothing)
        kernel_timing = _timing(paired_timings(a, b), method)
    return model, kernel_timing


MIN_MODEL_US = 20.0


def measurable(t: Timing, min_model_us: float = MIN_MODEL_US) -> bool:
    """Whether a model time is long enough to judge speed.

    On the H200 a 5.7 us model (softmax_rows, small shapes) measured its unedited
    dump 1.036x faster, 95% CI [1.028, 1.044], as CUDA-graph replays: at that scale
    sub-microsecond differences between builds of the same kernel decide, not the
    kernel's work. Below the floor the speed stage does not decide.
    """
    return t.baseline_ms * 1e3 >= min_model_us


def judge_speed(t: Timing, min_gain: float, min_model_us: float = MIN_MODEL_US) -> tuple[bool | None, str]:
    """(faster?, why not): None when the model is too short to judge."""
    if not measurable(t, min_model_us):
        return None, (f"too short to judge: the model runs in {t.baseline_ms * 1e3:.1f} us "
                      f"(floor {min_model_us:g} us)")
    if t.ci_low > 1.0 and t.speedup >= 1.0 + min_gain:
        return True, ""
    return False, f"not faster beyond noise (needs the CI above 1 and a gain of at least {min_gain:.0%})"


def base_speed(base: Any, compiled: Any, replacements: dict[str, Any], seed: int) -> Timing:
    """The problem at the base revision (compiled) against this one with its replacements."""
    from .swap import restore, swap
    from .timing import paired_timings

    base_inputs = base.problem.make_inputs(seed, base.device)
    inputs = compiled.problem.make_inputs(seed, compiled.device)

    def swap_in() -> None:
        for name, rep in replacements.items():
            swap(compiled, name, rep)

    a, b, method = _steps(lambda: None, lambda: base(*base_inputs), lambda: None,
                          swap_in, lambda: compiled(*inputs), lambda: restore(compiled))
    return _timing(paired_timings(a, b), method)


def _timing(est: Any, method: str) -> Timing:
    return Timing(baseline_ms=est.baseline_ms, candidate_ms=est.candidate_ms, speedup=est.speedup,
                  ci_low=est.ci_low, ci_high=est.ci_high, pairs=est.pairs, method=method)


# --- orchestration -----------------------------------------------------------------------

def environment(device: str) -> Any:
    import platform

    import torch
    import triton

    from .records import Environment

    env = Environment(device=device, torch=torch.__version__, triton=triton.__version__, python=platform.python_version())
    if device == "cuda":
        env.gpu = torch.cuda.get_device_name()
        env.cuda = torch.version.cuda
        try:
            import subprocess

            out = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=10)
            env.driver = out.stdout.strip().splitlines()[0] if out.returncode == 0 and out.stdout.strip() else None
        except (OSError, subprocess.SubprocessError):
            env.driver = None
    return env


def sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def verify(problem: Path, kernel: str, candidate: Path, device: str, options: CascadeOptions) -> Verdict:
    """Run the whole cascade on one candidate. Never raises for a bad candidate: rejects it."""
    from .errors import UsageError
    from .worker import WorkerRequest, run_worker

    try:
        source = Path(candidate).read_text()
    except OSError as exc:
        raise UsageError(f"{candidate}: cannot read candidate ({exc.strerror})") from exc
    started = time.monotonic()
    verdict = Verdict(model=Path(problem).stem, kernel=kernel, candidate=str(candidate), candidate_sha256=sha256(source),
                      status="rejected")
    # The worker runs the static stage before it imports the candidate, after it has
    # checked the kernel name (an unknown name is bad input, exit 2, whatever the file).
    seeds = list(range(options.first_seed, options.first_seed + options.seeds))
    request = WorkerRequest(
        problem=str(Path(problem).resolve()), device=device, kernel=kernel,
        replacements={kernel: str(Path(candidate).resolve())}, seeds=seeds,
        allow_reduced_precision=options.allow_reduced_precision, error_factor=options.error_factor,
        min_gain=options.min_gain, measure_speed=options.measure_speed, min_model_us=options.min_model_us,
    )
    result = run_worker(request, timeout=options.timeout, verdict=verdict)
    result.wall_seconds = time.monotonic() - started
    return result
