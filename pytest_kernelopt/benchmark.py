"""``kernelopt bench``: eager, torch.compile modes and the committed kernels, measured side by side.

Usage::

    kernelopt bench PROBLEM.py [PROBLEM.py ...] [--modes eager,default,max-autotune-no-cudagraphs,kernelopt]
                    [--json OUT] [--device auto|cuda|cpu] [--kernels-dir DIR] [--config PYPROJECT]
                    [--seconds S] [--timeout S]

Modes (``--modes``, comma-separated, ``default`` required: speedups are relative to it):

* ``eager``: the ``nn.Module`` as written;
* ``default``: ``torch.compile(model)`` (Inductor, default mode);
* ``max-autotune-no-cudagraphs``: ``torch.compile(model, mode="max-autotune-no-cudagraphs")``;
* ``kernelopt``: the production path, ``torch.compile(model, backend=pytest_kernelopt.backend(model_id,
  kernels_dir))`` (what ``pytest_kernelopt.compile`` does): Inductor's default compile with the store's
  active, non-stale committed kernels swapped in. With nothing committed it runs exactly the compiler's
  kernels; the ``kernelopt`` column says so.

Each problem runs in a child process of its own (``python -m pytest_kernelopt.benchmark JOB``), so a
problem that fails to import, compile or run, runs out of memory or crashes the process is one error
row and the others go on; its GPU memory is freed when the process ends. In the child, for one model
instance (weights drawn under seed 0; every mode shares them):

1. **Reference.** Inputs drawn under seed 1 on the device (:meth:`Problem.make_inputs`); the eager
   model and a float64 copy of it run, exactly as the verifier builds its reference
   (:func:`pytest_kernelopt.verify.model.build_references`: float64 on the GPU, else on the CPU, else
   no float64 reference and correctness is not judged).
2. **Build and check each mode.** The first call compiles; ``compile_seconds`` is its wall time
   (Dynamo, Inductor, autotuning and one run; Inductor's on-disk caches are used as they are, so a
   second bench of the same problem, or a mode whose graph an earlier mode compiled, is faster). Its
   outputs are judged against the reference by the verifier's one numerics rule
   (:mod:`pytest_kernelopt.verify.numerics`, through :func:`~pytest_kernelopt.verify.model.judge_output`),
   the ``default`` compile standing where the verifier puts the compiled baseline (it is built first,
   and the reference's envelope rebased on its outputs; the eager model's when it fails): per element,
   error against float64 at most 4x the default compile's own envelope; NaN/Inf only where it has them;
   integer outputs equal to its. A mode that fails to build or run is an error in its row; the
   problem fails when ``default`` does.
3. **Timing (CUDA only).** All modes that built are timed in one loop
   (:func:`pytest_kernelopt.measure.timing.interleaved_timings`): warm-up rounds untimed, then rounds in
   which every mode runs once, the order rotated by one each round (A B C, B C A, C A B, ...), an L2
   flush (a write of twice the L2's size) before every run, each run between two CUDA events, one
   synchronize at the end; the number of rounds sized to about ``--seconds`` (30 to 400). The runs are
   CUDA-graph replays of each mode when every mode can be captured (:func:`~pytest_kernelopt.measure.timing.graphed`:
   GPU time, host launch cost excluded), else plain calls for all modes; ``method`` says which.
   Per mode: the median time with its 95% order-statistic interval, and the speedup over ``default``
   as the median of the per-round ratios ``default / mode`` with its 95% interval
   (:func:`pytest_kernelopt.measure.stats.mode_estimates`), called faster, slower, within noise or
   too short to judge by the verifier's one :class:`~pytest_kernelopt.verify.options.SpeedPolicy`.
4. **Triton share (CUDA only).** The default mode runs 5 times (plain calls) under ``torch.profiler``
   (CUDA activity): GPU time in kernels named ``triton_*`` against everything else (cuBLAS/cuDNN,
   aten kernels, copies).

The table (stdout) has one row per problem and mode, and at the bottom the geometric mean of each
mode's speedup over ``default`` across the problems that were timed without error. ``--json OUT``
writes :class:`BenchResult` (``schema_version``, ``kind: "kernelopt-bench"``) with every figure.
A rich progress bar runs on stderr.

In interpreter mode (no CUDA device, or ``--device cpu``) the references, compile times and
correctness checks run; speed is not measured: no timings, no speedups, no geometric means.

Exit codes: 0 the bench ran (some problems may be error rows, some modes incorrect: a bench reports,
it does not gate); 2 bad input (a missing file, bad ``--modes`` or option, bad settings: one line
``kernelopt: error: ...``) or every problem failed; 130 interrupted.

Running it on the H200 (the figures for the README)::

    make install                      # or: python -m venv .venv && .venv/bin/pip install -e .
    export KERNELOPT_SIZE=large       # GPU-sized shapes of the bundled examples
    .venv/bin/kernelopt bench tests/problems/*.py \\
        --modes eager,default,max-autotune-no-cudagraphs,kernelopt --json out/bench/examples.json
    # public KernelBench problem files, unchanged, at their full shapes:
    .venv/bin/kernelopt bench /path/to/KernelBench/level1/*.py --json out/bench/level1.json --timeout 1800
    # cold compile times: an empty Inductor cache
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) .venv/bin/kernelopt bench ...

Nothing else should run on the GPU meanwhile; record the date, GPU, torch and triton versions
(``environment`` in the JSON) with the table.
"""

from __future__ import annotations

import contextlib
import os
import select
import signal
import subprocess
import sys
import tempfile
import time
import warnings
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from pydantic import Field

from .errors import KerneloptError, UsageError
from .records import SCHEMA_VERSION, Environment, Record, dump_json

MODES = ("eager", "default", "max-autotune-no-cudagraphs", "kernelopt")
BASELINE = "default"
KIND = "kernelopt-bench"
SEED = 1  # the verifier's first seed
PROFILED_RUNS = 5
EXIT_GRACE_SECONDS = 60.0  # after its result, how long a child may take to exit
ERROR_FACTOR_NOTE = ("per element, error vs float64 at most 4x the default compile's own envelope (verify/numerics.py: "
                     "its absolute excess over 4 ulp, plus 4 ulp of the element)")

Mode = Literal["eager", "default", "max-autotune-no-cudagraphs", "kernelopt"]


def parse_modes(text: str) -> list[str]:
    """``--modes``: known names, comma-separated, no repeats, ``default`` among them (ValueError otherwise)."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ValueError(f"expected a comma-separated list of modes ({','.join(MODES)}), not {text!r}")
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise ValueError(f"unknown mode {unknown[0]!r} (known: {', '.join(MODES)})")
    if len(set(names)) != len(names):
        raise ValueError(f"a mode is named twice in {text!r}")
    if BASELINE not in names:
        raise ValueError(f"{text!r} must include {BASELINE}: every speedup is relative to it")
    return names


# --- records ---------------------------------------------------------------------------

class ModeResult(Record):
    """One mode of one problem. Figures not measured (or not reached) are None."""

    mode: Mode
    error: str | None = None  # the mode could not be built or run
    # Wall time of the first call: compile (Dynamo, Inductor, autotuning) plus one run. None for eager.
    compile_seconds: float | None = None
    # Against the reference (float64 eager), over all outputs: max |out - ref|, max |ref|, their ratio.
    max_abs_error: float | None = None
    scale: float | None = None
    relative_error: float | None = None
    # max over outputs of (error + the reference's rounding residue) / allowed error: <= 1 passes.
    error_vs_allowed: float | None = None
    correct: bool | None = None  # None: not judged (no float64 reference, or the mode failed)
    correctness_detail: str | None = None
    # Speed (CUDA): median time and its 95% CI (microseconds), speedup over default (paired, 95% CI).
    median_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    samples: int | None = None
    # The verifier's speed policy on that speedup: faster, slower, within noise, or too short to judge.
    vs_default: Literal["faster", "slower", "within noise", "too short to judge"] | None = None
    # kernelopt: how many Triton kernels ran a committed version, and what the loader said.
    committed_kernels: int | None = None
    kernels_note: str | None = None
    # Why this mode was not run although asked for (max-autotune on a CPU); not an error.
    skipped: str | None = None


class KernelTime(Record):
    """GPU time of one kernel name in the default mode, per model run."""

    name: str
    us: float
    launches: int
    triton: bool


class ProblemResult(Record):
    problem: str  # the file as given on the command line, resolved
    model: str
    status: Literal["ok", "error"] = "ok"
    error: str | None = None  # what failed, and in which step
    device: str | None = None
    kernels_dir: str | None = None
    seed: int = SEED
    reference: Literal["float64", "eager"] | None = None
    reference_note: str | None = None
    modes: list[ModeResult] = Field(default_factory=list)
    speed_measured: bool = False
    method: Literal["cuda-graph", "eager"] | None = None
    method_note: str | None = None  # why plain calls (a mode that cannot be captured)
    rounds: int | None = None
    # Default mode under torch.profiler: GPU time per run in triton_* kernels and in the rest.
    triton_us: float | None = None
    other_us: float | None = None
    triton_share: float | None = None
    kernels: list[KernelTime] = Field(default_factory=list)
    peak_gib: float | None = None
    wall_seconds: float = 0.0
    environment: Environment | None = None

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)


class Geomean(Record):
    mode: Mode
    speedup: float  # geometric mean over ``problems`` of the mode's speedup over default
    problems: int


class BenchSettings(Record):
    modes: list[Mode]
    device: str  # as requested (auto, cuda, cpu)
    seconds: float
    timeout: float | None
    seed: int = SEED


class BenchResult(Record):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["kernelopt-bench"] = KIND
    created: datetime
    settings: BenchSettings
    environment: Environment | None = None  # of the first problem that got as far as the device
    speed_measured: bool = False
    correctness_rule: str = ERROR_FACTOR_NOTE
    problems: list[ProblemResult]
    geomeans: list[Geomean] = Field(default_factory=list)

    @property
    def failed(self) -> list[ProblemResult]:
        return [p for p in self.problems if p.status == "error"]


class BenchJob(Record):
    """What the parent asks one child process to do."""

    problem: str
    modes: list[Mode]
    device: str
    kernels_dir: str
    seconds: float


class ChildMessage(Record):
    """A line from the child: a step it started, or its result (the last line)."""

    event: Literal["step", "result"]
    text: str | None = None
    result: ProblemResult | None = None


def geomeans(problems: list[ProblemResult], modes: list[str]) -> list[Geomean]:
    """Per mode (default excepted): the geometric mean of its speedups over the problems timed without error."""
    from .measure.stats import geomean

    out = []
    for mode in modes:
        if mode == BASELINE:
            continue
        values = [m.speedup for p in problems if p.status == "ok" and p.speed_measured
                  for m in [p.mode(mode)] if m is not None and m.speedup is not None]
        if values:
            out.append(Geomean(mode=mode, speedup=geomean(values), problems=len(values)))  # type: ignore[arg-type]
    return out


# --- the child: one problem, every mode ------------------------------------------------

@dataclass
class _Eager:
    """The eager model where the verifier's reference builder expects the compiled baseline:
    ``build_references`` then judges the eager fp32 outputs against float64."""

    problem: Any
    model: Any
    device: str

    def __call__(self, *inputs: Any) -> Any:
        return self.model(*inputs)


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0][:300]}" if text else type(exc).__name__


@contextlib.contextmanager
def _own_wrapper_modules() -> Iterator[None]:
    """Compile with no cached wrapper module to hand out, and hand out none compiled here.

    Inductor's ``PyCodeCache.load_by_key_path`` hands out the module it loaded before
    for the same generated file when it is loaded without extra attributes (read in
    torch 2.13's source; in a default-then-kernelopt compile on torch 2.13 the modules
    were distinct anyway). Default and kernelopt compile the same graph; if they shared
    the wrapper module, the kernelopt backend's swap (it replaces the module's kernel
    globals) would also change what ``default`` runs. Clearing that cache before and
    after each mode's compile rules that out.
    """
    from torch._inductor.codecache import PyCodeCache

    cache = getattr(PyCodeCache, "modules_no_attr", None)
    if isinstance(cache, dict):
        cache.clear()
    try:
        yield
    finally:
        if isinstance(cache, dict):
            cache.clear()


def _build(mode: str, model: Any, model_id: str, kernels_dir: str) -> tuple[Callable[..., Any], Any]:
    """The callable for ``mode`` (compiled lazily by its first call) and the kernelopt backend, if any."""
    import torch

    if mode == "eager":
        return model, None
    if mode == "default":
        return torch.compile(model), None
    if mode == "max-autotune-no-cudagraphs":
        return torch.compile(model, mode="max-autotune-no-cudagraphs"), None
    import pytest_kernelopt

    # What pytest_kernelopt.compile() uses; its start-up line is the row's kernels note here.
    backend = pytest_kernelopt.backend(model_id, kernels_dir, quiet=True)
    return torch.compile(model, backend=backend), backend


def _kernels_note(backend: Any, caught: list[str]) -> tuple[int, str]:
    committed = [k for k in backend.kernels if k.runs == "committed"]
    fallbacks = [f"{k.name}: {k.reason}" for k in backend.kernels if k.reason]
    if committed:
        note = f"{len(committed)} of {len(backend.kernels)} Triton kernel(s) run committed versions: " + \
               ", ".join(f"{k.name} v{k.version}" for k in committed)
    else:
        # Its own compile, though: Inductor times launch configurations while compiling, and
        # its pick can differ from default's (cosine_loss on the H200: 0.876x with no kernel).
        note = ("same as default: no committed kernels in use; compiled again, so a difference from default is "
                "Inductor's own launch-configuration race between two compiles")
    if fallbacks:
        note += "; compiler's kernel kept for " + "; ".join(fallbacks)
    elif not committed and caught:
        note += f" ({caught[0].removeprefix(f'kernelopt: model {backend.model}: ')})"
    return len(committed), note


def _check(row: ModeResult, outputs: list[Any], reference: list[Any], kind: str, baseline: str) -> None:
    """Judge one mode's outputs by the one numerics rule (:mod:`pytest_kernelopt.verify.numerics`), as the
    verifier's model stage judges a candidate: against float64, within ``error_factor`` x ``baseline``'s
    own error envelope (the default compile's, once it ran)."""
    from .verify.model import judge_output
    from .verify.numerics import NumericsRule
    from .verify.prepared import StageFailure

    if len(outputs) != len(reference):
        row.correct, row.correctness_detail = False, f"{len(outputs)} outputs instead of {len(reference)}"
        return
    rule = NumericsRule()
    worst, scale, ratio = 0.0, 0.0, 0.0
    failure = None
    for k, (out, ref) in enumerate(zip(outputs, reference)):
        try:
            judged = judge_output(out, ref, rule, f"output {k}", baseline=baseline)
        except StageFailure as exc:
            judged = getattr(exc, "judgement", None)
            if judged is None:  # a shape, dtype, integer or NaN/Inf pattern: no figures to report
                row.correct, row.correctness_detail = False, exc.detail
                return
            failure = failure or exc.detail
        if judged is None:
            continue
        worst, scale = max(worst, judged.max_abs), max(scale, ref.scale)
        ratio = max(ratio, judged.worst_ratio)
    row.max_abs_error, row.scale = worst, scale
    row.relative_error = worst / scale if scale > 0 else (0.0 if worst == 0 else None)
    if kind != "float64":
        row.correctness_detail = "not judged: no float64 reference (errors are against the fp32 eager model)"
        return
    row.error_vs_allowed = ratio  # the worst element's error as a fraction of its allowance
    row.correct = failure is None
    if failure:
        row.correctness_detail = f"{failure} ({ERROR_FACTOR_NOTE})"


def _sync(device: str) -> None:
    import torch

    if device == "cuda":
        torch.cuda.synchronize()


def _time_modes(result: ProblemResult, fns: dict[str, Callable[..., Any]], inputs: list[Any], seconds: float) -> None:
    """Interleaved, L2-flushed, event-timed rounds over every mode that built; graph replays if all capture."""
    import torch

    from .measure.stats import mode_estimates
    from .measure.timing import graphed, interleaved_timings

    nothing: Callable[[], None] = lambda: None
    calls = {mode: (lambda fn=fn: fn(*inputs)) for mode, fn in fns.items()}
    steps: dict[str, Any] = {}
    for mode, call in calls.items():
        step = graphed(nothing, call, nothing)
        if step is None:
            result.method_note = f"{mode} cannot be captured as a CUDA graph: every mode timed as plain calls"
            break
        steps[mode] = step
    if len(steps) == len(calls):
        result.method = "cuda-graph"
    else:
        steps.clear()
        torch.cuda.empty_cache()
        steps = {mode: (nothing, call, nothing) for mode, call in calls.items()}
        result.method = "eager"
    names = list(steps)
    times = interleaved_timings([steps[m] for m in names], target_seconds=seconds)
    del steps
    record_timings(result, mode_estimates(dict(zip(names, times)), BASELINE))


def record_timings(result: ProblemResult, estimates: dict[str, Any]) -> None:
    """Each mode's figures from :func:`~pytest_kernelopt.measure.stats.mode_estimates`, judged by the speed policy."""
    from .records import Timing
    from .verify.options import SpeedPolicy

    policy = SpeedPolicy()
    for mode, est in estimates.items():
        row = result.mode(mode)
        assert row is not None
        row.median_us, row.ci_low_us, row.ci_high_us = est.median_ms * 1e3, est.ci_low_ms * 1e3, est.ci_high_ms * 1e3
        row.speedup, row.samples = est.vs_baseline.speedup, est.samples
        row.speedup_ci_low, row.speedup_ci_high = est.vs_baseline.ci_low, est.vs_baseline.ci_high
        if mode != BASELINE:
            v = est.vs_baseline
            timing = Timing(baseline_ms=v.baseline_ms, candidate_ms=v.candidate_ms, speedup=v.speedup,
                            ci_low=v.ci_low, ci_high=v.ci_high, pairs=v.pairs, method=result.method or "eager")
            faster, _ = policy.judge(timing)
            row.vs_default = ("too short to judge" if faster is None else "faster" if faster
                              else "slower" if policy.slower(timing) else "within noise")
    result.rounds = next(iter(estimates.values())).samples
    result.speed_measured = True


def _profile(result: ProblemResult, fn: Callable[..., Any], inputs: list[Any]) -> None:
    """GPU time per run of the default mode by kernel name: ``triton_*`` against the rest."""
    from .measure.device_time import device_times

    by_name = device_times(lambda: fn(*inputs), PROFILED_RUNS)
    kernels = [KernelTime(name=name, us=sum(us) / PROFILED_RUNS, launches=round(len(us) / PROFILED_RUNS),
                          triton=name.startswith("triton_")) for name, us in by_name.items()]
    kernels.sort(key=lambda k: -k.us)
    result.kernels = kernels
    result.triton_us = sum(k.us for k in kernels if k.triton)
    result.other_us = sum(k.us for k in kernels if not k.triton)
    total = result.triton_us + result.other_us
    result.triton_share = result.triton_us / total if total > 0 else None


def bench_problem(job: BenchJob, step: Callable[[str], None]) -> ProblemResult:
    """Every mode of one problem, in this process. Whatever fails is recorded in the result, never raised."""
    started = time.monotonic()
    path = Path(job.problem)
    result = ProblemResult(problem=str(path), model=path.stem, kernels_dir=job.kernels_dir,
                           modes=[ModeResult(mode=m) for m in job.modes])
    where = "loading the problem"
    try:
        from .config import resolve_device
        from .capture.problem import load_problem

        step(where)
        device = result.device = resolve_device(job.device)  # before anything imports triton
        import torch

        from .verify.model import build_references, flatten
        from .verify.pipeline import environment
        from .verify.prepared import Prepared

        torch.set_grad_enabled(False)  # inference only: the kernelopt backend swaps inference graphs
        result.environment = environment(device)
        problem = load_problem(path)
        result.model = problem.id
        model = problem.build_model(device)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()

        where = "running the eager model and its float64 copy"
        step(where)
        try:
            refs, kind, note = build_references(Prepared(compiled=_Eager(problem, model, device), device=device,
                                                         seeds=[SEED], references={}))
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise KerneloptError(f"the model fails in eager mode: {_short(exc)}") from exc
        result.reference, result.reference_note = kind, note  # type: ignore[assignment]
        reference = refs[SEED].outputs

        fns: dict[str, Callable[..., Any]] = {}
        judged_against = "the eager model"
        # ``default`` first: once it ran, its own error against float64 is the envelope every mode is
        # judged by (the gate's rule: the compiled baseline's error, times the factor).
        for row in sorted(result.modes, key=lambda r: r.mode != BASELINE):
            where = f"building {row.mode}" if row.mode == "eager" else f"compiling {row.mode}"
            step(where)
            inputs = problem.make_inputs(SEED, device)
            try:
                with _own_wrapper_modules(), warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always")
                    fn, backend = _build(row.mode, model, problem.id, job.kernels_dir)
                    first = time.perf_counter()
                    outputs = flatten(fn(*inputs))  # fresh tensors: nothing here reuses output buffers
                    _sync(device)
                    seconds = time.perf_counter() - first
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:
                if device == "cpu" and row.mode.startswith("max-autotune"):
                    # Seen with torch 2.13 on a CPU: max-autotune's C++ GEMM templates fail to build or
                    # import (CppTemplate hint_override, "Failed to import ..."); pointwise graphs compile.
                    row.skipped = (f"max-autotune is not available for CPU Triton in torch "
                                   f"{torch.__version__.split('+')[0]}; skipped ({_short(exc)})")
                    continue
                row.error = f"{'running' if row.mode == 'eager' else 'compiling or running'} failed: {_short(exc)}"
                continue
            if row.mode != "eager":
                row.compile_seconds = seconds
            if backend is not None:
                from .store.production import KerneloptWarning

                messages = [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]
                row.committed_kernels, row.kernels_note = _kernels_note(backend, messages)
            del inputs
            if row.mode == BASELINE and kind == "float64" and len(outputs) == len(reference):
                from .verify.model import rebase

                for out, ref in zip(outputs, reference):
                    rebase(ref, out)
                judged_against = "the default compile"
            _check(row, outputs, reference, kind, judged_against)
            del outputs
            fns[row.mode] = fn
        del refs, reference  # the reference is not needed for timing: free its memory first

        baseline = result.mode(BASELINE)
        assert baseline is not None
        if baseline.error is not None:
            where = "compiling default"
            raise KerneloptError(f"the default compile failed ({baseline.error}): no speedups to report")
        if device == "cuda":
            inputs = problem.make_inputs(SEED, device)
            where = "timing"
            step(f"timing {len(fns)} mode(s), interleaved")
            _time_modes(result, fns, inputs, job.seconds)
            where = "profiling default"
            step(where)
            _profile(result, fns[BASELINE], inputs)
            result.peak_gib = torch.cuda.max_memory_allocated() / float(1 << 30)
    except KerneloptError as exc:
        result.status, result.error = "error", f"{where}: {exc}"
    except Exception as exc:  # noqa: BLE001 - a user's model: any failure is its row, never the whole run
        import torch

        if isinstance(exc, torch.OutOfMemoryError):
            result.status, result.error = "error", f"{where}: out of GPU memory ({_short(exc)})"
        else:
            result.status, result.error = "error", f"{where}: {_short(exc)}"
    result.wall_seconds = time.monotonic() - started
    return result


def _child(argv: list[str]) -> int:
    """``python -m pytest_kernelopt.benchmark JOB_JSON``: one problem; JSON lines on stdout."""
    # The protocol keeps the real stdout; whatever the model prints goes to stderr.
    proto = os.fdopen(os.dup(1), "w", buffering=1)
    os.dup2(2, 1)
    warnings.filterwarnings("ignore", message="Could not find an active CPU backend")

    def send(message: ChildMessage) -> None:
        proto.write(message.model_dump_json() + "\n")

    job = BenchJob.model_validate_json(argv[0])
    result = bench_problem(job, lambda text: send(ChildMessage(event="step", text=text)))
    send(ChildMessage(event="result", result=result))
    proto.close()
    return 0


# --- the parent: one child per problem -------------------------------------------------

def _child_env() -> dict[str, str]:
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[1])  # importable from a checkout that is not installed
    env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    return env


def _last_lines(path: Path, count: int = 3) -> str:
    from .verify.worker import tail_lines

    return tail_lines(path, count)


def run_problem(job: BenchJob, timeout: float | None, on_step: Callable[[str], None]) -> ProblemResult:
    """Run one problem in a child process; a child that dies, hangs or breaks the protocol is an error row."""
    path = Path(job.problem)
    last_step = "starting"
    with tempfile.TemporaryDirectory(prefix="kernelopt-bench-") as folder:
        stderr_path = Path(folder) / "stderr.txt"
        with open(stderr_path, "wb") as err:
            proc = subprocess.Popen([sys.executable, "-m", "pytest_kernelopt.benchmark", job.model_dump_json()],
                                    stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=err, env=_child_env(),
                                    start_new_session=True)
        assert proc.stdout is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        buffer, result = b"", None
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
                    return ProblemResult(problem=str(path), model=path.stem, status="error",
                                         error=f"timed out after {timeout:g} s while {last_step}")
                ready, _, _ = select.select([proc.stdout], [], [], 1.0 if left is None else min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                buffer += chunk
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        message = ChildMessage.model_validate_json(line)
                    except ValueError:
                        continue  # not ours: a stray write to the protocol descriptor
                    if message.event == "step" and message.text:
                        last_step = message.text
                        on_step(message.text)
                    elif message.event == "result":
                        result = message.result
                if result is not None:
                    break
            try:
                code = proc.wait(timeout=EXIT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                code = None  # the result came; a process that does not exit is not the problem's fault
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)  # the child, if still there, and anything it left behind
            proc.wait()
            proc.stdout.close()
        if result is not None:
            return result
        assert code is not None
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        tail = _last_lines(stderr_path)
        return ProblemResult(problem=str(path), model=path.stem, status="error",
                             error=f"the benchmark process died ({how}) while {last_step}" + (f": {tail}" if tail else ""))


def run_bench(jobs: list[BenchJob], settings: BenchSettings, *, quiet: bool = False) -> BenchResult:
    """Each job in its own child process, one after another, with a progress bar on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    problems: list[ProblemResult] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=quiet) as bar:
        task = bar.add_task("bench", total=len(jobs))
        for job in jobs:
            name = Path(job.problem).stem
            bar.update(task, description=f"{name}: starting")
            result = run_problem(job, settings.timeout, lambda text: bar.update(task, description=f"{name}: {text}"))
            problems.append(result)
            bar.advance(task)
            if not quiet:
                outcome = f"error: {result.error}" if result.status == "error" else "done"
                console.print(f"{name}: {outcome} ({result.wall_seconds:.1f} s)", markup=False, highlight=False)
    measured = any(p.speed_measured for p in problems)
    env = next((p.environment for p in problems if p.environment is not None), None)
    return BenchResult(created=datetime.now(timezone.utc), settings=settings, environment=env,
                       speed_measured=measured, problems=problems, geomeans=geomeans(problems, settings.modes))


# --- the table -------------------------------------------------------------------------

def _us(m: ModeResult) -> str:
    if m.median_us is None:
        return "-"
    return f"{m.median_us:.1f} [{m.ci_low_us:.1f}, {m.ci_high_us:.1f}]"


def _x(m: ModeResult) -> str:
    if m.speedup is None:
        return "-"
    judged = f" {m.vs_default}" if m.vs_default else ""
    return f"{m.speedup:.3f}x [{m.speedup_ci_low:.3f}, {m.speedup_ci_high:.3f}]{judged}"


def _error(m: ModeResult) -> str:
    mark = {True: "ok", False: "FAIL", None: "-"}[m.correct]
    rel = f"{m.relative_error:.1e}" if m.relative_error is not None else "-"
    return f"{rel} {mark}"


def bench_table(result: BenchResult) -> Any:
    from rich.table import Table

    speed = "" if result.speed_measured else "; speed not measured (interpreter mode or no timings)"
    table = Table(title=f"kernelopt bench: speedup = default / mode, medians with 95% CIs{speed}")
    for col in ("problem", "mode", "median us [95% CI]", "vs default [95% CI]", "error/scale", "compile s",
                "Triton share", "notes"):
        table.add_column(col, overflow="fold")
    for p in result.problems:
        rows = p.modes if p.modes else []
        if p.status == "error" and not any(m.compile_seconds is not None or m.correct is not None for m in rows):
            table.add_row(p.model, "-", "-", "-", "-", "-", "-", f"ERROR {p.error}", end_section=True)
            continue
        for i, m in enumerate(rows):
            notes = []
            if i == 0 and p.status == "error":
                notes.append(f"ERROR {p.error}")
            if m.error:
                notes.append(m.error)
            elif m.skipped:
                notes.append(m.skipped)
            elif m.correct is False and m.correctness_detail:
                notes.append(m.correctness_detail)
            if m.mode == BASELINE and p.method:
                notes.append(f"{p.method} timing, {p.rounds} rounds")
                if p.method_note:
                    notes.append(p.method_note)
            if m.mode == "kernelopt" and m.kernels_note:
                notes.append(m.kernels_note)
            if i == 0 and p.reference == "eager":
                notes.append(f"no float64 reference: {p.reference_note}")
            share = f"{p.triton_share:.0%}" if m.mode == BASELINE and p.triton_share is not None else ""
            table.add_row(p.model if i == 0 else "", m.mode, _us(m), _x(m), _error(m),
                          f"{m.compile_seconds:.1f}" if m.compile_seconds is not None else "-", share,
                          "; ".join(notes), end_section=i == len(rows) - 1)
    for i, g in enumerate(result.geomeans):
        table.add_row("geomean" if i == 0 else "", g.mode, "", f"{g.speedup:.3f}x", "", "", "",
                      f"over {g.problems} problem(s) timed without error")
    return table


def print_bench(result: BenchResult) -> None:
    from rich.console import Console

    (Console() if sys.stdout.isatty() else Console(width=200)).print(bench_table(result))
    if not result.speed_measured:
        print("speed not measured: no CUDA device (interpreter mode); correctness and compile times only")


def write_json(result: BenchResult, path: Path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_json(result))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the JSON result ({exc.strerror or exc})") from exc


if __name__ == "__main__":  # pragma: no cover - the child process
    raise SystemExit(_child(sys.argv[1:]))
