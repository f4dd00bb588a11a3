"""The worker's side of a verification session: a problem prepared once, then each check's stages.

The stages and their order are :data:`.stages.STAGES` (static, kernel, model, speed);
:func:`run_check` runs those that belong in the worker, in that order, and stops at the
first failure. They run against a :class:`Prepared` problem: compiled once, the
compiled baseline's outputs and the float64 reference computed once per seed, and
checksums of everything a candidate may only read (inputs, weights). Many candidates
are then checked against it.
"""

from __future__ import annotations

import math
import time
from typing import Any, Callable

from ..records import StageResult
from . import model as model_stage
from . import stages
from .prepared import GIB, Prepared, StageFailure, VerifierOutOfMemory, offset_runs, out_of_memory, weight_sums
from .protocol import CheckDone, CheckRequest, Opened, OpenRequest, StageDone, StageStarted
from .stages import Check, Outcome, Stage, first_line, raised_in_candidate

__all__ = ["Prepared", "StageFailure", "VerifierOutOfMemory", "healthy", "open_problem", "run_check", "run_stage"]


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
    from ..capture.compiled import graphs_compiled, recompiled_error
    from ..config import resolve_device
    from ..capture.problem import load_problem
    from ..capture.floor import call_floor
    from .tensors import input_checksums

    started = time.monotonic()
    device = resolve_device(request.device)
    problem = load_problem(request.problem, shape=request.shape)
    seeds = list(request.seeds)
    try:
        # The eager model's own peak, measured with nothing else of ours on the device.
        _reset_peak()
        first = problem.make_inputs(seeds[0], device)
        drawn = input_checksums(first)  # before anything runs on them; a second draw below must match
        compiled = compile_problem(problem, device, inputs=first, measure_eager_peak=True, variant=request.variant,
                                   launch_configs=request.launch_configs, refuse_draws=True)
        eager_peak = compiled.eager_peak_bytes
        # Read here, after the model ran at these shapes in its own dtypes (a training step records the incoming
        # gradients it started from; the float64 reference's, below, are wider); the outputs' writes below.
        reads = call_floor(problem, compiled.model, first, 0)
        del first
        _PeakTracker.stage()
        prepared = Prepared(compiled=compiled, device=device, seeds=seeds, references={}, variant=request.variant,
                            min_flops=reads.flops, offsets=offset_runs(seeds))
        for seed in prepared.model_seeds:
            inputs = prepared.inputs(seed)
            prepared.integrity[seed] = input_checksums(inputs)
            del inputs
        problem.check_reproducible(seeds[0], drawn, prepared.integrity[seeds[0]])
        compiled_before = graphs_compiled()  # the baseline runs every seed's draw: it must not compile again
        prepared.references, kind, note = model_stage.build_references(prepared)
        if compiled_before is not None and graphs_compiled() != compiled_before:
            raise recompiled_error(problem)
        first_seed = prepared.references[seeds[0]].outputs
        written = sum(math.prod(out.shape) * out.dtype.itemsize for out in first_seed)
        floor = reads.writing(written)
        prepared.weights = weight_sums(compiled.model)
        prepared.seal_references()
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(exc, "preparing the problem") from exc
    summary = compiled.summary()
    opened = Opened(
        device=device, graphs=summary.graphs, kernels=summary.kernels, externs=summary.externs,
        environment=environment(device), seconds=time.monotonic() - started, reference=kind, reference_note=note,
        eager_peak_bytes=eager_peak, peak_bytes=_PeakTracker.stage(), min_bytes=floor.bytes,
        min_written_bytes=floor.written, min_flops=floor.flops, graph_breaks=compiled.graph_breaks,
        launches_fixed=compiled.launches_fixed, launches_refused=compiled.launches_refused,
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
    """The worker's stages (:data:`.stages.STAGES`) for one candidate, or a set of committed kernels."""
    import gc

    prepared.begin_check(request.entropy)  # fresh per check: nothing of an earlier check predicts this one
    check = Check(prepared=prepared, request=request)
    _run_stages(check, emit)  # an exception here (out of memory, our own bug) is the verifier's, sent as a Failure
    check.candidates.clear()
    check.base = None
    gc.collect()  # graphs and launch records of the speed stage hold device memory through reference cycles
    emit(CheckDone(peak_bytes=_PeakTracker.overall or None, base=check.base_run))


def _run_stages(check: Check, emit: Callable[[Any], None]) -> None:
    """Each worker stage that applies, in order, until one fails or a stage's ``then`` stops the cascade."""
    request = check.request
    todo = [s for s in stages.in_worker() if s.applies(request, check.prepared.device)]
    if not todo or not _load_candidates(check, todo[0], emit):
        return
    for stage in todo:
        if not run_stage(check, stage, emit) or (stage.then is not None and not stage.then(check)):
            return


def _load_candidates(check: Check, first: Stage, emit: Callable[[Any], None]) -> bool:
    """Compile each candidate's text; one that fails to load fails the first stage (its row says why)."""
    from ..candidate import load_candidate_source
    from ..capture.swap import CandidateKernel

    for name, cand in check.request.replacements.items():
        try:
            module = load_candidate_source(cand.source, cand.label, cand.sha256)
            check.candidates[name] = CandidateKernel(module, label=cand.label)
        except Exception as exc:
            def fail(_: Check, exc: Exception = exc, label: str = cand.label) -> Outcome:
                raise StageFailure(f"{label}: {type(exc).__name__}: {first_line(exc)}")
            run_stage(check, first, emit, run=fail)
            return False
    return True


def run_stage(check: Check, stage: Stage, emit: Callable[[Any], None],
              run: Callable[[Check], Outcome] | None = None) -> bool:
    """One stage (``run`` in place of its function): StageStarted, then its row in a StageDone, whatever
    the candidate did. Whether the cascade goes on. A candidate's exception, or a device it broke, fails
    the stage; a write into the weights or the references fails it whatever it said."""
    import torch

    emit(StageStarted(stage=stage.name))
    _reset_peak()
    t0 = time.monotonic()
    figures: dict[str, Any] = {}
    try:
        detail, figures = (run or stage.run)(check)
        passed: bool | None = None if stage.measures else True
    except StageFailure as failure:
        detail, passed = failure.detail, False
        figures = {"errors": failure.errors}
    except torch.OutOfMemoryError as exc:
        raise out_of_memory(exc, f"{stage.name} stage") from exc
    except Exception as exc:
        if raised_in_candidate(exc):
            detail, passed = f"the candidate raised: {type(exc).__name__}: {first_line(exc)}", False
        elif not healthy(check.prepared):  # the candidate broke the device: its failure
            detail, passed = f"the device failed after the candidate ran: {type(exc).__name__}: {first_line(exc)}", False
        else:
            raise
    prepared = check.prepared
    if prepared.restore_weights_if_changed() and passed is not False:
        detail, passed = "the candidate wrote into the model's weights, which it may only read", False
    if not prepared.references_intact():  # whatever the stage said: the judge itself was written to
        detail, passed = ("the candidate wrote into the verifier's own memory (the reference outputs); "
                          "this worker is replaced"), False
    peak = _PeakTracker.stage()
    result = StageResult(name=stage.name, passed=passed, detail=detail, seconds=time.monotonic() - t0,
                         peak_gib=None if peak is None else round(peak / GIB, 3))
    emit(StageDone(result=result, peak_bytes=peak, **figures))
    return passed is not False
