"""The model's compile settings: ``kernelopt tune``'s first step on a GPU.

Before any kernel is searched, the whole model is compiled under each of Inductor's
settings in the catalogue (``capture/variants.py``'s ``MODEL_VARIANTS``: max-autotune with its
Triton GEMM and convolution templates, and with 2-D tiling; ``--compile-variants`` names others) and each is
checked (``VerifySession.verify_compile``, ``verify/compile_check.py``): every output element, on the
seeded inputs and on one input draw of every kind the kernel stage draws (weights varied on half of
them), against float64 with the default compile's own error on the same inputs as the allowance,
then timed against the default compile, paired, in one session. The fastest that the speed rule accepts (faster
beyond noise, by at least the model-level gain) becomes ``model.json``'s ``compile``;
when none is, a stored choice that no longer wins is removed; committed kernels keep the
compile they were tuned on (:func:`choose`). The kernel search then runs
on that compile: such a setting changes what no kernel swap can (GEMMs as Triton
templates with their epilogues fused, other fusion), and its kernels are tuned in turn.

On a CPU nothing is timed: the trials run for correctness only and nothing is stored.
"""

from __future__ import annotations

import time
from datetime import datetime, timezone
from typing import Any, Callable

from ..errors import KerneloptError
from ..measure.text import interval, speedup_text
from ..records import Verdict
from ..runs.records import CompileOutcome, CompileTrial


def _trial(variant: str, verdict: Verdict, seconds: float) -> CompileTrial:
    t = verdict.model_timing
    return CompileTrial(variant=variant, status=verdict.status, reason=verdict.reason_for_agents(),
                        seconds=round(seconds, 2),
                        speedup=t.speedup if t else None, ci_low=t.ci_low if t else None,
                        ci_high=t.ci_high if t else None)


def choose(session: Any, variants: list[str], *, previous: str | None, measured: bool,
           say: Callable[[str], None], ev: Callable[..., Any],
           committed: list[str] | None = None) -> tuple[CompileOutcome, Verdict | None]:
    """Try each variant in ``session`` (opened under the defaults); the outcome and the chosen one's verdict.

    ``committed``: kernels with an active version, tuned on ``previous``'s compile. Another
    compile would leave them stale (their fingerprints are that compile's), and the trials
    time each setting against the default compile without them: the choice is then kept,
    and the note says how to change it.
    """
    outcome, verdict = _choose(session, variants, previous=previous, measured=measured, say=say, ev=ev)
    if committed and outcome.chosen != previous:
        wanted = outcome.chosen or "the default compile"
        outcome.note = (f"{outcome.note}; kept {previous or 'the default compile'!r} instead of {wanted!r}: "
                        f"{len(committed)} committed kernel version(s) ({', '.join(committed[:3])}"
                        f"{', ...' if len(committed) > 3 else ''}) were tuned on it and would be stale under "
                        f"another compile; to switch, remove their folders and tune again")
        outcome.chosen = previous
        return outcome, None
    return outcome, verdict


def _choose(session: Any, variants: list[str], *, previous: str | None, measured: bool,
            say: Callable[[str], None], ev: Callable[..., Any]) -> tuple[CompileOutcome, Verdict | None]:
    outcome = CompileOutcome(previous=previous, chosen=previous)
    verdicts: dict[str, Verdict] = {}
    for variant in variants:
        say(f"compiling the whole model as {variant!r} and checking it against the default compile")
        t0 = time.monotonic()
        try:
            verdict = session.verify_compile(variant)
        except KerneloptError as exc:  # the verifier's own failure: said, never the variant's fault
            outcome.tried.append(CompileTrial(variant=variant, status="error", reason=str(exc)[:300],
                                              seconds=round(time.monotonic() - t0, 2)))
            ev("planner", "compile-trial", variant=variant, status="error", reason=str(exc)[:300])
            continue
        trial = _trial(variant, verdict, time.monotonic() - t0)
        outcome.tried.append(trial)
        verdicts[variant] = verdict
        ev("planner", "compile-trial", **trial.model_dump(exclude={"variant"}), variant=variant)
        say(f"  {variant}: {trial.status}" + (f", {speedup_text(trial.speedup, trial.ci_low, trial.ci_high)} over "
                                              f"the default compile" if trial.speedup is not None else "")
            + (f" ({trial.reason})" if trial.reason and trial.status == "rejected" else ""))
    if not measured:
        outcome.note = "interpreter mode: compile settings checked for correctness only; nothing stored"
        return outcome, None
    accepted = [t for t in outcome.tried if t.status == "accepted" and t.speedup is not None]
    if accepted:
        best = max(accepted, key=lambda t: t.speedup or 0.0)
        outcome.chosen = best.variant
        outcome.note = f"{best.variant}: {speedup_text(best.speedup or 0.0)} over the default compile" + (
            f" (95% CI {interval(best.ci_low, best.ci_high)})" if best.ci_low is not None and best.ci_high is not None
            else "")
        return outcome, verdicts[best.variant]
    if previous is not None and previous in verdicts:
        outcome.chosen = None
        outcome.note = (f"the stored {previous!r} is no longer faster than the default compile "
                        f"({verdicts[previous].reason or verdicts[previous].status}): back to the defaults")
    elif previous is not None:
        outcome.note = f"the stored {previous!r} was not tried again: kept"
    else:
        outcome.note = "no compile setting was faster than the default compile beyond noise"
    return outcome, None


def record(store: Any, model: str, outcome: CompileOutcome, verdict: Verdict | None) -> None:
    """Write ``model.json``'s choice when it changed (or its evidence, when the same one won again)."""
    from ..store import CompileChoice

    if outcome.chosen == outcome.previous and verdict is None:
        return  # kept as it is
    if outcome.chosen is None:
        if outcome.previous is not None:
            store.save_compile(model, None)
            outcome.stored = True
        return
    if verdict is None:
        return
    worst = max((e.model_ratio or 0.0 for e in verdict.errors), default=None)
    store.save_compile(model, CompileChoice(
        variant=outcome.chosen, measured=datetime.now(timezone.utc), environment=verdict.environment,
        timing=verdict.model_timing, worst_ratio=worst, seeds=list(verdict.seeds), graphs=verdict.launches))
    outcome.stored = True
