"""The cascade's stage order, and the worker's side of a verification session.

Stages run in order and stop at the first failure; the compiler's kernel stays in
place whenever a candidate fails:

1. ``static`` (:mod:`.static`, in the parent: the candidate is parsed, never run);
2. ``kernel`` (:mod:`.kernel`): the candidate against the compiler's kernel on the
   model's real arguments, every argument compared;
3. ``model`` (:mod:`.model`): the whole model with the candidate swapped in,
   against a float64 reference;
4. ``speed`` (:mod:`.speed`, GPU only): paired, L2-flushed timings of the model
   (and the kernel alone); the parent judges them with the one speed policy.

Stages 2-4 run here, in the worker, against a :class:`Prepared` problem: compiled
once, the compiled baseline's outputs and the float64 reference computed once per
seed, and checksums of everything a candidate may only read (inputs, weights).
Many candidates are then checked against it.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ..records import StageResult
from . import compile_check
from . import kernel as kernel_stage
from . import model as model_stage
from . import speed as speed_stage
from .prepared import GIB, Prepared, StageFailure, VerifierOutOfMemory, out_of_memory, weight_sums
from .protocol import CheckDone, CheckRequest, Opened, OpenRequest, StageDone, StageStarted

__all__ = ["STAGES", "Prepared", "StageFailure", "VerifierOutOfMemory", "healthy", "open_problem", "run_check"]

STAGES = ("static", "kernel", "model", "speed")


def _peak() -> int | None:
    import torch

    return int(torch.cuda.max_memory_allocated()) if torch.cuda.is_available() else None


def _reset_peak() -> None:
    import torch

    if torch.cuda.is_available():
        torch.cuda.reset_peak_memory_stats()


class _PeakTracker:
    """The verifier's overall peak survives the per-stage resets of torch's counter."""

    overall = 0

    @classmethod
    def stage(cls) -> int | None:
        peak = _peak()
        if peak is not None:
            cls.overall = max(cls.overall, peak)
        return peak


def environment(device: str) -> Any:
    import platform

    import torch
    import triton

    from ..records import Environment

    env = Environment(device=device, torch=torch.__version__, triton=triton.__version__, python=platform.python_version())
    if device == "cuda":
        env.gpu = torch.cuda.get_device_name()
        env.cuda = torch.version.cuda
        from ..child import child_env, run_child

        try:
            out = run_child(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"], env=child_env(),
                            timeout=10, separate_stdout=True)
            text = out.stdout.text.strip() if out.stdout is not None and out.returncode == 0 else ""
            env.driver = text.splitlines()[0] if text else None
        except OSError:
            env.driver = None
    return env


def open_problem(request: OpenRequest) -> tuple[Prepared, Opened]:
    """Compile the problem once and prepare every seed (inputs, baseline, reference)."""
    import torch

    from ..capture import compile_problem
    from ..config import resolve_device
    from ..capture.problem import load_problem
    from ..measure.roofline import min_bytes, min_flops
    from .tensors import input_checksums

    started = time.monotonic()
    device = resolve_device(request.device)
    problem = load_problem(request.problem, shape=request.shape)
    seeds = list(request.seeds)
    try:
        # The eager model's own peak, measured with nothing else of ours on the device.
        _reset_peak()
        first = problem.make_inputs(seeds[0], device)
        compiled = compile_problem(problem, device, inputs=first, measure_eager_peak=True, variant=request.variant)
        eager_peak = compiled.eager_peak_bytes
        floor = min_bytes(compiled.model, first, [])  # inputs, parameters, buffers; outputs below
        flops = min_flops(compiled.model, first)
        del first
        _PeakTracker.stage()
        prepared = Prepared(compiled=compiled, device=device, seeds=seeds, references={}, variant=request.variant,
                            min_flops=flops)
        for seed in seeds:
            inputs = prepared.inputs(seed)
            prepared.integrity[seed] = input_checksums(inputs)
            del inputs
        prepared.references, kind, note = model_stage.build_references(prepared)
        first_seed = prepared.references[seeds[0]].outputs
        floor += sum(math.prod(out.shape) * out.dtype.itemsize for out in first_seed)
        prepared.weights = weight_sums(compiled.model)
        prepared.seal_references()
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(exc, "preparing the problem") from exc
    summary = compiled.summary()
    opened = Opened(
        device=device, graphs=summary.graphs, kernels=summary.kernels, externs=summary.externs,
        environment=environment(device), seconds=time.monotonic() - started, reference=kind, reference_note=note,
        eager_peak_bytes=eager_peak, peak_bytes=_PeakTracker.stage(), min_bytes=floor,
        min_flops=flops,
    )
    return prepared, opened


def healthy(prepared: Prepared) -> bool:
    """Whether this worker may judge again: its references are intact and the device still
    works (an illegal access poisons the CUDA context)."""
    if prepared.corrupted:
        return False
    if prepared.device != "cuda":
        return True
    import torch

    try:
        torch.cuda.synchronize()
        torch.ones(1, device="cuda").add_(1).item()
        return True
    except Exception:  # any CUDA error here means the context is gone
        return False


def run_check(prepared: Prepared, request: CheckRequest, emit: Callable[[Any], None]) -> None:
    """Stages 2-4 for one candidate (or a set of committed kernels), in order."""
    import torch

    from ..candidate import load_candidate_source
    from ..capture.swap import CandidateKernel

    candidates: dict[str, Any] = {}
    prepared.begin_check(request.entropy)  # fresh per check: nothing of an earlier check predicts this one

    def stage(name: str, fn: Callable[[], tuple[str, dict[str, Any]]]) -> bool:
        emit(StageStarted(stage=name))
        _reset_peak()
        t0 = time.monotonic()
        figures: dict[str, Any] = {}
        try:
            detail, figures = fn()
            passed: bool | None = True if name != "speed" else None
        except StageFailure as failure:
            detail, passed = failure.detail, False
            figures = {"errors": failure.errors}
        except torch.OutOfMemoryError as exc:
            raise out_of_memory(exc, f"{name} stage") from exc
        except Exception as exc:
            if _raised_in_candidate(exc):
                detail, passed = f"the candidate raised: {type(exc).__name__}: {_first_line(exc)}", False
            elif not healthy(prepared):  # the candidate broke the device: its failure
                detail, passed = f"the device failed after the candidate ran: {type(exc).__name__}: {_first_line(exc)}", False
            else:
                raise
        if prepared.restore_weights_if_changed() and passed is not False:
            detail, passed = "the candidate wrote into the model's weights, which it may only read", False
        if not prepared.references_intact():  # whatever the stage said: the judge itself was written to
            detail, passed = ("the candidate wrote into the verifier's own memory (the reference outputs); "
                              "this worker is replaced"), False
        peak = _PeakTracker.stage()
        result = StageResult(name=name, passed=passed, detail=detail, seconds=time.monotonic() - t0,
                             peak_gib=None if peak is None else round(peak / GIB, 3))
        emit(StageDone(result=result, peak_bytes=peak, **figures))
        return passed is not False

    def compile_stages(variant: str) -> None:
        from ..capture.training import refuse

        refuse(prepared.compiled.problem, "compile settings (a compile variant)")  # the verifier's limit, not a verdict

        def model() -> tuple[str, dict[str, Any]]:
            rows = compile_check.compile_stage(prepared, variant, request.error_factor,
                                               request.allow_reduced_precision)
            worst = max(rows, key=lambda r: r.candidate_vs_fp64 or 0.0)
            return ((f"{len(rows)} seed(s) and {rows.describe()}: the model compiled as {variant!r} has every "
                     f"output element within its allowance against the reference, the default compile's own error "
                     f"on the same inputs (the worst at {rows.worst:.2g} of its allowance; on the seeds max abs error "
                     f"{worst.candidate_vs_fp64:.3g}, default compile {worst.baseline_vs_fp64:.3g})"),
                    {"errors": list(rows), "launches": compile_check.verified_graphs(prepared, variant)})
        if not stage("model", model) or prepared.device != "cuda" or not request.measure_speed:
            return

        def speed() -> tuple[str, dict[str, Any]]:
            timing = compile_check.compile_speed(prepared, variant, request.model_seconds)
            return f"model, default compile -> {variant}: {speed_stage.describe(timing)}", {"model_timing": timing}
        stage("speed", speed)

    def stages() -> None:
        if request.compile_variant is not None:
            compile_stages(request.compile_variant)
            return
        for name, cand in request.replacements.items():
            try:
                module = load_candidate_source(cand.source, cand.label, cand.sha256)
                candidates[name] = CandidateKernel(module, label=cand.label)
            except Exception as exc:
                def fail(exc: Exception = exc, label: str = cand.label) -> tuple[str, dict[str, Any]]:
                    raise StageFailure(f"{label}: {type(exc).__name__}: {_first_line(exc)}")
                stage("kernel" if request.kernel else "model", fail)
                return
        if (kernel_name := request.kernel) is not None:
            def kernel() -> tuple[str, dict[str, Any]]:
                rows = kernel_stage.kernel_stage(prepared, kernel_name, candidates[kernel_name],
                                                 request.allow_reduced_precision)
                return (f"{len(rows)} seed(s) and {rows.describe()}: every element of every written argument "
                        f"within its allowance against the compiler kernel (the worst at {rows.worst:.2g} of its "
                        f"allowance; verify/numerics.py)"), {"errors": list(rows), "launches": rows.launches()}
            if not stage("kernel", kernel):
                return

        def model() -> tuple[str, dict[str, Any]]:
            rows = model_stage.model_stage(prepared, candidates, request.error_factor, request.allow_reduced_precision)
            worst = max(rows, key=lambda r: r.candidate_vs_fp64 or 0.0)
            ratio = max((r.model_ratio or 0.0) for r in rows)
            return (f"{len(rows)} seed(s): every output element within its allowance against the reference (the "
                    f"worst at {ratio:.2g} of its allowance; max abs error {worst.candidate_vs_fp64:.3g}, compiled "
                    f"baseline {worst.baseline_vs_fp64:.3g}, scale {worst.scale:.3g})"), {"errors": rows}
        if not stage("model", model):
            return
        base = None
        if request.base_problem:  # compiled and run here, on a CPU too: the report says what ran at the base
            base = open_base(request.base_problem, request.base_kernels)
            if prepared.corrupted:
                return  # the base wrote into the verifier's memory: said as the base's failure; worker replaced
        if prepared.device != "cuda" or not request.measure_speed:
            return

        def speed() -> tuple[str, dict[str, Any]]:
            model_t, kernel_t = speed_stage.speed_stage(prepared, candidates, request.kernel,
                                                        request.model_seconds, request.kernel_seconds)
            figures: dict[str, Any] = {"model_timing": model_t, "kernel_timing": kernel_t}
            text = f"model {speed_stage.describe(model_t)}"
            if kernel_t:
                text += f"; kernel {speed_stage.describe(kernel_t)}"
            if base is not None:
                try:
                    figures["base_timing"] = base_t = speed_stage.base_speed(prepared, candidates, base,
                                                                             request.model_seconds)
                    text += f"; vs base revision {speed_stage.describe(base_t)}"
                except torch.OutOfMemoryError:
                    raise
                except Exception as exc:
                    if _raised_in_candidate(exc):
                        raise
                    # The candidates were just timed alone without fault: the base's failure, not theirs.
                    base_run[0] = base_run[0].model_copy(update={"failure": (
                        f"timing it side by side failed: {type(exc).__name__}: {_first_line(exc)}")})
                    text += "; vs base revision: not timed (the base failed)"
            return text, figures
        stage("speed", speed)

    base_run: list[Any] = [None]  # what ran at the base revision (records.BaseRun), for CheckDone

    def open_base(problem: str, kernels_dir: str | None) -> Any:
        """The base revision compiled as production ran it (verify/base.py); None when it failed or wrote
        into what the verifier holds (said in ``base_run``; weights are put back, a written reference marks
        this worker corrupted)."""
        from .base import open_base as compile_base

        compiled, base_run[0] = compile_base(prepared, problem, kernels_dir)
        written = prepared.restore_weights_if_changed()
        if not prepared.references_intact() or written:
            what = "the verifier's own memory (the reference outputs)" if prepared.corrupted else "the model's weights"
            base_run[0] = base_run[0].model_copy(update={"failure": f"running it wrote into {what}"})
            return None
        return compiled if base_run[0].failure is None else None

    stages()  # an exception here (out of memory, our own bug) is the verifier's, sent as a Failure
    candidates.clear()
    import gc

    gc.collect()  # graphs and launch records of the speed stage hold device memory through reference cycles
    emit(CheckDone(peak_bytes=_PeakTracker.overall or None, base=base_run[0]))


def _raised_in_candidate(exc: BaseException) -> bool:
    """Whether a frame of the traceback is candidate code (its file name is set by the loader)."""
    import traceback

    return any(f.filename.startswith("<kernelopt-candidate") for f in traceback.extract_tb(exc.__traceback__))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""

