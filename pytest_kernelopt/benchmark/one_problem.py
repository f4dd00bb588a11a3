"""The child process of ``kernelopt bench``: every mode of one problem, in this process
(``python -m pytest_kernelopt.benchmark JOB_JSON``, :func:`main`). Whatever fails is recorded
in the problem's result, never raised; steps and the result go to the parent as JSON lines.
"""

from __future__ import annotations

import contextlib
import os
import time
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterator, Literal

from ..errors import KerneloptError, ProblemError
from ..capture.floor import call_floor
from ..measure.roofline import written_bytes
from ..store.production import backend as production_backend
from .records import (
    BASELINE, ERROR_FACTOR_NOTE, PROFILED_RUNS, SEED, BenchJob, ChildMessage, KernelTime, ModeResult, ProblemResult,
)

# The speed rule's word for a mode against the default compile, as bench's column says it.
VS_DEFAULT: dict[str, Literal["faster", "slower", "within noise", "too short to judge"]] = {
    "faster": "faster", "slower": "slower", "same": "within noise", "too short": "too short to judge"}


@dataclass
class _Eager:
    """The eager model where the verifier's reference builder expects the compiled baseline:
    ``build_references`` then judges the eager fp32 outputs against float64."""

    problem: Any
    model: Any
    device: str

    def __call__(self, *inputs: Any) -> Any:
        from ..capture.compiled import draws_seen, random_draws_error
        from ..capture.training import is_training, step

        drawn: list[str] = []
        forward = draws_seen(drawn)
        if is_training(self.problem):  # the training step: outputs, then every gradient
            out = step(lambda *xs: forward(self.model, xs), self.model, self.problem, inputs)
        else:
            out = forward(self.model, inputs)
        if drawn:  # other outputs at every run: nothing to judge a mode by
            raise random_draws_error(self.problem, drawn[0])
        return out


def _as_step(fn: Callable[..., Any], model: Any, problem: Any) -> Callable[..., Any]:
    """``fn`` as a training problem's whole step (forward, loss, backward: capture/training.py), else ``fn``."""
    from ..capture.training import is_training, step

    if not is_training(problem):
        return fn
    return lambda *inputs: step(fn, model, problem, inputs)


def _with_optimizer(fn: Callable[..., Any], model: Any, name: str) -> Callable[..., Any]:
    """A training step ``fn`` (:func:`_as_step`) followed by a ``torch.optim`` step of ``name`` over the model's
    trained parameters, their gradients the step's own (assigned to ``.grad``, never accumulated); torch's
    defaults (learning rate, foreach or fused), one optimizer (and its state) per mode. Returns the step's results."""
    import torch

    from ..capture.training import trained_parameters

    params = trained_parameters(model)
    if not params:
        raise KerneloptError(f"--optimizer {name}: the model has no parameter that requires grad (nothing to step)")
    optimizer = {"sgd": torch.optim.SGD, "adam": torch.optim.Adam}[name](params)

    def call(*inputs: Any) -> Any:
        results = fn(*inputs)
        for p, g in zip(params, results[len(results) - len(params):]):  # the step ends with the parameters' gradients
            p.grad = g
        optimizer.step()
        return results

    return call


@contextlib.contextmanager
def _parameters_kept(model: Any, active: bool) -> Iterator[None]:
    """Put the model's trained parameters back after the block (``active``: an optimizer steps them in it), so
    that every mode is judged, and timed, from the weights the reference ran with."""
    if not active:
        yield
        return
    from ..capture.training import trained_parameters

    saved = [(p, p.detach().clone()) for p in trained_parameters(model)]
    try:
        yield
    finally:
        import torch

        with torch.no_grad():
            for p, value in saved:
                p.copy_(value)


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
    # What pytest_kernelopt.compile() uses; its start-up line is the row's kernels note here.
    backend = production_backend(model_id, kernels_dir, quiet=True)
    return torch.compile(model, backend=backend), backend


def _kernels_note(backend: Any, caught: list[str]) -> tuple[int, str]:
    """How many kernels ran committed versions, and where this mode's speed comes from: the stored
    compile setting, committed versions, both, or neither (then it is default compiled again)."""
    committed = [k for k in backend.kernels if k.runs == "committed"]
    fallbacks = [f"{k.name}: {k.reason}" for k in backend.kernels if k.reason]
    settings = sorted({s for s in backend.settings_applied if s is not None})
    parts = []
    if settings:
        fixed = getattr(backend, "launches_fixed", 0)
        refused = getattr(backend, "launches_refused", [])
        parts.append(f"compile setting {', '.join(settings)} from model.json" + (
            f" ({fixed} kernel(s) at its recorded launch configurations" + (f", {len(refused)} refused" if refused
                                                                             else "") + ")" if fixed or refused
            else ""))
    if committed:
        parts.append(f"{len(committed)} of {len(backend.kernels)} Triton kernel(s) run committed versions: " +
                     ", ".join(f"{k.folder or k.name} v{k.version}" for k in committed))
    if parts:
        note = "speed from " + "; ".join(parts)
        if not committed:
            note += " (no committed kernels in use)"
    else:
        # Its own compile, though: Inductor times launch configurations while compiling, and
        # its pick can differ from default's (cosine_loss on the H200: 0.876x with no kernel).
        note = ("same as default: no compile setting and no committed kernels in use; compiled again, so a "
                "difference from default is Inductor's own launch-configuration race between two compiles")
    if fallbacks:
        note += "; compiler's kernel kept for " + "; ".join(fallbacks)
    elif not parts and caught:
        note += f" ({caught[0].removeprefix(f'kernelopt: model {backend.model}: ')})"
    return len(committed), note


# The default compile's error on an output, as a fraction of the output's scale, above which bench says the
# envelope every mode is judged within is suspect: a correct compile of normal draws is off by about a
# rounding step (bf16 ~0.4%), unless the model makes a discrete choice that rounding can flip (a top-k router).
# Seen: 49% on an embedding gradient, from an interpreter fault (2026-12-06).
BASELINE_SUSPECT = 0.1


def _suspect_baseline(reference: list[Any], names: list[str] | None) -> str | None:
    """What to say where the default compile's own error on an output (``rebase``'s ``baseline_err``) exceeds
    ``BASELINE_SUSPECT`` of its scale (the worst such output); None otherwise."""
    worst, name = 0.0, ""
    for k, ref in enumerate(reference):
        if not ref.floating or not ref.scale > 0:
            continue
        share = ref.baseline_err / ref.scale
        if share > worst:
            worst, name = share, names[k] if names else f"output {k}"
    if worst <= BASELINE_SUSPECT:
        return None
    return (f"the default compile's own error on {name} is {worst:.0%} of its scale against float64: every mode "
            f"is judged within that envelope, so large errors there pass (a compiler or interpreter fault, or a "
            f"discrete choice such as a top-k that rounding flips)")


def _check(row: ModeResult, outputs: list[Any], reference: list[Any], kind: str, baseline: str,
           names: list[str] | None = None) -> None:
    """Judge one mode's outputs by the one numerics rule (:mod:`pytest_kernelopt.verify.numerics`), as the
    verifier's model stage judges a candidate: against float64, within ``error_factor`` x ``baseline``'s
    own error envelope (the default compile's, once it ran)."""
    from ..verify.model import judge_output
    from ..verify.numerics import NumericsRule
    from ..verify.prepared import StageFailure

    if len(outputs) != len(reference):
        row.correct, row.correctness_detail = False, f"{len(outputs)} outputs instead of {len(reference)}"
        return
    rule = NumericsRule(whole_compile=True)  # a mode is a whole compile: it may round intermediates
    worst, scale, ratio = 0.0, 0.0, 0.0
    failure = None
    for k, (out, ref) in enumerate(zip(outputs, reference)):
        try:
            judged = judge_output(out, ref, rule, names[k] if names else f"output {k}", baseline=baseline)
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

    from ..measure.stats import mode_estimates
    from ..measure.timing import graphed, interleaved_timings

    def nothing() -> None:
        pass

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
    from ..measure.rule import SpeedPolicy

    policy = SpeedPolicy()
    for mode, est in estimates.items():
        row = result.mode(mode)
        assert row is not None
        row.median_us, row.ci_low_us, row.ci_high_us = est.median_ms * 1e3, est.ci_low_ms * 1e3, est.ci_high_ms * 1e3
        row.speedup, row.samples = est.vs_baseline.speedup, est.samples
        row.speedup_ci_low, row.speedup_ci_high = est.vs_baseline.ci_low, est.vs_baseline.ci_high
        if mode != BASELINE:
            row.vs_default = VS_DEFAULT[policy.verdict(est.vs_baseline)]
    result.rounds = next(iter(estimates.values())).samples
    result.speed_measured = True


def _profile(result: ProblemResult, fn: Callable[..., Any], inputs: list[Any]) -> None:
    """GPU time per run of the default mode by kernel name: ``triton_*`` against the rest."""
    from ..measure.device_time import device_times

    by_name = device_times(lambda: fn(*inputs), PROFILED_RUNS)
    kernels = [KernelTime(name=name, us=sum(us) / PROFILED_RUNS, launches=round(len(us) / PROFILED_RUNS),
                          triton=name.startswith("triton_")) for name, us in by_name.items()]
    kernels.sort(key=lambda k: -k.us)
    result.kernels = kernels
    result.triton_us = sum(k.us for k in kernels if k.triton)
    result.other_us = sum(k.us for k in kernels if not k.triton)
    total = result.triton_us + result.other_us
    result.triton_share = result.triton_us / total if total > 0 else None


def _limits(result: ProblemResult) -> None:
    """Each timed mode's percent of the model's limit, memory and FLOPs (see ModeResult.limit_pct)."""
    from ..measure.roofline import (
        LIMIT_MIN_TRITON_SHARE,
        copy_ceiling_gbps,
        flop_ceiling_tflops,
        limit_pct,
        read_ceiling_gbps,
    )

    if not result.min_bytes or result.triton_share is None:
        return
    if result.triton_share < LIMIT_MIN_TRITON_SHARE and not result.min_flops:
        return  # the rest of its time is work neither floor counts
    result.copy_ceiling_gbps = round(copy_ceiling_gbps(), 1)
    try:
        result.read_ceiling_gbps = round(read_ceiling_gbps(), 1)
    except Exception:  # noqa: BLE001 - the read ceiling refines the floor: without it, every byte at the copy's rate
        result.read_ceiling_gbps = None
    if result.min_flops:
        result.flop_ceilings_tflops = flop_ceiling_tflops(sorted(result.min_flops))
    for row in result.modes:
        if row.median_us:
            row.limit_pct = limit_pct(result.min_bytes, row.median_us * 1e-6, result.copy_ceiling_gbps,
                                      result.min_flops, result.flop_ceilings_tflops,
                                      written=result.min_written_bytes, read_gbps=result.read_ceiling_gbps)


def bench_problem(job: BenchJob, step: Callable[[str], None]) -> ProblemResult:
    """Every mode of one problem, in this process. Whatever fails is recorded in the result, never raised."""
    started = time.monotonic()
    path = Path(job.problem)
    result = ProblemResult(problem=str(path), model=path.stem, kernels_dir=job.kernels_dir,
                           modes=[ModeResult(mode=m) for m in job.modes])
    where = "loading the problem"
    try:
        from ..config import resolve_device
        from ..capture.problem import load_problem

        step(where)
        device = result.device = resolve_device(job.device)  # before anything imports triton
        import torch

        from ..verify.model import build_references, flatten
        from ..verify.pipeline import environment
        from ..verify.prepared import Prepared

        # Inference: no gradients recorded. A training step turns them on inside itself (capture/training.py).
        torch.set_grad_enabled(False)
        result.environment = environment(device)
        problem = load_problem(path, shape=job.shape)  # a problem with SHAPES: the job's shape, else its first
        result.model = problem.id
        result.shape = problem.shape
        if job.shape is None and len(problem.shapes) > 1:
            result.declared_shapes = list(problem.shapes)  # the parent benches the others next
        from ..capture.compiled import fresh_races
        from ..capture.training import is_training, output_names

        training = result.training = is_training(problem)  # then every mode runs and is timed as the whole step
        optimizer = result.optimizer = job.optimizer if training else None  # stepped inside every mode's step
        model = problem.build_model(device)
        if device == "cuda":
            torch.cuda.reset_peak_memory_stats()

        where = "running the eager model and its float64 copy"
        step(where)
        from ..verify.tensors import input_checksums

        drawn = input_checksums(problem.make_inputs(SEED, device))  # every mode's draw must be this one
        try:
            refs, kind, note = build_references(Prepared(compiled=_Eager(problem, model, device), device=device,
                                                         seeds=[SEED], references={}))
        except (torch.OutOfMemoryError, ProblemError):  # a ProblemError says what it is (a model that writes its state)
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
            step(f"building {row.mode}" if row.mode == "eager" else f"compiling {row.mode}")
            where = f"drawing {row.mode}'s inputs"
            inputs = problem.make_inputs(SEED, device)
            problem.check_reproducible(SEED, drawn, input_checksums(inputs))
            where = f"building {row.mode}" if row.mode == "eager" else f"compiling {row.mode}"
            try:
                # Each mode races its kernels' launch configurations itself (fresh_races): a pick Inductor
                # remembered on this machine (a tune's harvest children, racing side by side) would carry over.
                with _own_wrapper_modules(), warnings.catch_warnings(record=True) as caught, \
                        _parameters_kept(model, optimizer is not None), fresh_races():
                    warnings.simplefilter("always")
                    fn, backend = _build(row.mode, model, problem.id, job.kernels_dir)
                    fn = _as_step(fn, model, problem)
                    if optimizer is not None:
                        fn = _with_optimizer(fn, model, optimizer)
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
                from ..store.production import KerneloptWarning

                messages = [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]
                row.committed_kernels, row.kernels_note = _kernels_note(backend, messages)
                row.compile_setting = next((s for s in backend.settings_applied if s is not None), None)
            if row.mode == BASELINE:  # a step's: its gradients and incoming gradients, its backward's FLOPs too
                floor = call_floor(problem, model, inputs, written_bytes(outputs))
                result.min_bytes, result.min_written_bytes, result.min_flops = floor.bytes, floor.written, floor.flops
            names = output_names(problem, model, inputs, len(outputs))
            del inputs
            if row.mode == BASELINE and kind == "float64" and len(outputs) == len(reference):
                from ..verify.model import rebase

                for out, ref in zip(outputs, reference):
                    rebase(ref, out)
                judged_against = "the default compile"
                result.baseline_note = _suspect_baseline(reference, names)
            _check(row, outputs, reference, kind, judged_against, names)
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
            where = "measuring the copy bandwidth"
            step(where)
            del inputs
            _limits(result)
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


def main(argv: list[str]) -> int:
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
