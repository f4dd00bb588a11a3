"""The cascade's stages, in order: the one list that the verifier's loop, its records and the reports read.

A :class:`Stage` is a name, one line on what it checks, where it runs (``parent``: in the
session, before the candidate reaches the worker; ``worker``: :func:`.pipeline.run_check`),
when it applies, and the function that runs it and describes its row. :data:`STAGES` orders
them; the cascade stops at the first failure, and the compiler's kernel stays in place.
Each stage's check lives in a module of its own (``static/``, ``kernel.py``, ``model.py``,
``speed.py``, ``compile_check.py``); the functions here call it and word the row.

Adding a stage: its check in a module of its own, one entry in :data:`STAGES`, its paragraph
in docs/cascade.md. Records carry a stage's name (``StageResult.name``), the worker's
messages are checked against :func:`names`, and the reports order rows by it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from . import compile_check
from . import kernel as kernel_stage
from . import model as model_stage
from . import speed as speed_stage
from .prepared import StageFailure

if TYPE_CHECKING:
    from .prepared import Prepared
    from .protocol import CandidateSource, CheckRequest

# What a stage's function returns: its row's detail, and the figures its StageDone carries
# (``errors``, ``launches``, ``launch_configs``, ``model_timing``, ``kernel_timing``, ``base_timing``). It raises
# StageFailure to reject.
Outcome = tuple[str, dict[str, Any]]


def _always(request: CheckRequest, device: str) -> bool:
    return True


@dataclass(frozen=True)
class Stage:
    """One stage of the cascade."""

    name: str
    checks: str  # what it checks, one line
    where: Literal["parent", "worker"]
    # parent: called with a ParentCheck; worker: with a Check.
    run: Callable[[Any], Outcome]
    # Whether it runs for this check (the request, and the device the worker resolved).
    applies: Callable[[CheckRequest, str], bool] = _always
    # Work after it passed, before the next stage, with no row of its own; False stops the cascade.
    then: Callable[[Check], bool] | None = None
    # A measurement, not a test: it passes as None in the worker and the parent's speed
    # policy (verify/options.py) judges its figures.
    measures: bool = False


@dataclass
class ParentCheck:
    """What a parent stage sees: the session and the candidate texts, before any runs."""

    session: Any  # the VerifySession
    sources: dict[str, CandidateSource]
    compile_variant: str | None = None


@dataclass
class Check:
    """What a worker stage sees: the prepared problem, the request, and what earlier stages left."""

    prepared: Prepared
    request: CheckRequest
    candidates: dict[str, Any] = field(default_factory=dict)  # kernel name -> capture.swap.CandidateKernel
    base: Any = None      # the base revision as compiled (verify/base.py), when it ran cleanly
    base_run: Any = None  # records.BaseRun: what ran at the base revision, for CheckDone


# --- the stages' functions ------------------------------------------------------------

def _static(check: ParentCheck) -> Outcome:
    problems = check.session.static_problems(check.sources)
    if problems:
        raise StageFailure("; ".join(problems))
    if check.compile_variant:
        return (f"no candidate code: {check.compile_variant!r} is a name from the catalogue of compile settings",
                {})
    return "parses; entry point matches; only allowed imports and constructs", {}


def _kernel(check: Check) -> Outcome:
    request = check.request
    assert request.kernel is not None
    rows = kernel_stage.kernel_stage(check.prepared, request.kernel, check.candidates[request.kernel],
                                     request.allow_reduced_precision)
    return (f"{len(rows)} seed(s) and {rows.describe()}: every element of every written argument "
            f"within its allowance against the compiler kernel (the worst at {rows.worst:.2g} of its "
            f"allowance; verify/numerics.py)"), {"errors": list(rows), "launches": rows.launches()}


def _model(check: Check) -> Outcome:
    request, prepared = check.request, check.prepared
    variant = request.compile_variant
    if variant is not None:
        rows = compile_check.compile_stage(prepared, variant, request.error_factor, request.allow_reduced_precision,
                                           request.compile_launch_configs)
        worst = max(rows, key=lambda r: r.candidate_vs_fp64 or 0.0)
        return ((f"{len(rows)} seed(s) and {rows.describe()}: the model compiled as {variant!r} has every "
                 f"output element within its allowance against the reference, the default compile's own error "
                 f"on the same inputs (the worst at {rows.worst:.2g} of its allowance; on the seeds max abs error "
                 f"{worst.candidate_vs_fp64:.3g}, default compile {worst.baseline_vs_fp64:.3g})"),
                {"errors": list(rows), "launches": compile_check.verified_graphs(prepared, variant),
                 "launch_configs": compile_check.timed_configs(prepared, variant)})
    found, offsets = model_stage.model_stage(prepared, check.candidates, request.error_factor,
                                             request.allow_reduced_precision)
    worst = max(found, key=lambda r: r.candidate_vs_fp64 or 0.0)
    ratio = max((r.model_ratio or 0.0) for r in found)
    shifted = ""
    if offsets:
        shifted = ("; and on inputs drawn far from zero against their spread, the worst at " + ", ".join(
            f"{r.model_ratio or 0.0:.2g} ({variant}, max abs error {r.candidate_vs_fp64 or 0.0:.3g}, compiled "
            f"baseline {r.baseline_vs_fp64 or 0.0:.3g})" for variant, r in offsets.items()))
    if prepared.offsets_note:
        shifted += f"; {prepared.offsets_note}"
    # The seeds' figures only in ``errors`` (what reports call the kernel's error): the offset runs' are errors
    # on deliberately ill-conditioned inputs, said here.
    return (f"{len(found)} seed(s): every output element within its allowance against the reference (the "
            f"worst at {ratio:.2g} of its allowance; max abs error {worst.candidate_vs_fp64:.3g}, compiled "
            f"baseline {worst.baseline_vs_fp64:.3g}, scale {worst.scale:.3g}){shifted}"), {"errors": found}


def _open_base(check: Check) -> bool:
    """The base revision (the gate's model item), compiled as production ran it (verify/base.py) and run
    here, on a CPU too: the report says what ran at the base. Its failure, or what it wrote, is said in
    ``base_run`` (weights are put back); a written reference marks this worker corrupted and stops the
    cascade (the worker is replaced)."""
    if not check.request.base_problem:
        return True
    from .base import open_base

    prepared = check.prepared
    compiled, check.base_run = open_base(prepared, check.request.base_problem, check.request.base_kernels)
    written = prepared.restore_weights_if_changed()
    if not prepared.references_intact() or written:
        what = "the verifier's own memory (the reference outputs)" if prepared.corrupted else "the model's weights"
        check.base_run = check.base_run.model_copy(update={"failure": f"running it wrote into {what}"})
    elif check.base_run.failure is None:
        check.base = compiled
    return not prepared.corrupted


def _speed(check: Check) -> Outcome:
    import torch

    request, prepared = check.request, check.prepared
    if request.compile_variant is not None:
        timing = compile_check.compile_speed(prepared, request.compile_variant, request.model_seconds,
                                             request.compile_launch_configs)
        return (f"model, default compile -> {request.compile_variant}: {speed_stage.describe(timing)}",
                {"model_timing": timing})
    model_t, kernel_t = speed_stage.speed_stage(prepared, check.candidates, request.kernel,
                                                request.model_seconds, request.kernel_seconds)
    figures: dict[str, Any] = {"model_timing": model_t, "kernel_timing": kernel_t}
    text = f"model {speed_stage.describe(model_t)}"
    if kernel_t:
        text += f"; kernel {speed_stage.describe(kernel_t)}"
    if check.base is not None:
        try:
            figures["base_timing"] = base_t = speed_stage.base_speed(prepared, check.candidates, check.base,
                                                                     request.model_seconds)
            text += f"; vs base revision {speed_stage.describe(base_t)}"
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if raised_in_candidate(exc):
                raise
            # The candidates were just timed alone without fault: the base's failure, not theirs.
            check.base_run = check.base_run.model_copy(update={"failure": (
                f"timing it side by side failed: {type(exc).__name__}: {first_line(exc)}")})
            text += "; vs base revision: not timed (the base failed)"
    return text, figures


# --- the list --------------------------------------------------------------------------

STATIC = Stage("static", "parses; the entry point takes the kernel's arguments; only allowed imports and constructs "
               "(parsed, never run, in a process of its own)", "parent", _static)
KERNEL = Stage("kernel", "the candidate against the compiler's kernel at every launch of the model, on the same "
               "arguments, every written element judged", "worker", _kernel,
               applies=lambda request, device: request.kernel is not None)
MODEL = Stage("model", "the whole model with the candidates swapped in (or compiled under a setting) against a "
              "float64 reference", "worker", _model, then=_open_base)
SPEED = Stage("speed", "paired, L2-flushed timings of the model (and the kernel alone), judged by the speed policy",
              "worker", _speed, applies=lambda request, device: device == "cuda" and request.measure_speed,
              measures=True)

# The order the cascade runs them in. Parent stages come first: the worker gets the candidate
# only once they passed.
STAGES: tuple[Stage, ...] = (STATIC, KERNEL, MODEL, SPEED)


def names() -> tuple[str, ...]:
    """The stages' names, in order (read at each call: a test may register a stage)."""
    return tuple(s.name for s in STAGES)


def in_parent() -> list[Stage]:
    return [s for s in STAGES if s.where == "parent"]


def in_worker() -> list[Stage]:
    return [s for s in STAGES if s.where == "worker"]


def raised_in_candidate(exc: BaseException) -> bool:
    """Whether a frame of the traceback is candidate code (its file name is set by the loader)."""
    import traceback

    return any(f.filename.startswith("<kernelopt-candidate") for f in traceback.extract_tb(exc.__traceback__))


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
