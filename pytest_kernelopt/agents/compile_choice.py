"""The model's compile settings: ``kernelopt tune``'s first step on a GPU.

Before any kernel is searched, the whole model is compiled under each of Inductor's
settings in the catalogue (``capture/variants.py``'s ``MODEL_VARIANTS``: max-autotune with its
Triton GEMM and convolution templates, and with 2-D tiling; ``--compile-variants`` names others) and each is
checked (``VerifySession.verify_compile``, ``verify/compile_check.py``): every output element, on the
seeded inputs and on one input draw of every kind the kernel stage draws (weights varied on half of
them), against float64 with the default compile's own error on the same inputs as the allowance,
then timed against the default compile, paired, in one session. The fastest that the speed rule accepts (faster
beyond noise, by at least the setting gain) and that holds on a second compile in a new session (:func:`_second`)
becomes ``model.json``'s ``compile``;
when none is, a stored choice that no longer wins is removed; committed kernels keep the
compile they were tuned on (:func:`choose`). The kernel search then runs
on that compile: such a setting changes what no kernel swap can (GEMMs as Triton
templates with their epilogues fused, other fusion), and its kernels are tuned in turn.

A problem with SHAPES gets one setting for all its declared shapes, chosen once (``model.json`` holds one):
each setting is checked at every declared shape, in a session opened at that shape, one shape after
another. Rejected at a shape, an error there, or (on a GPU) slower than the default compile beyond noise
there (the speed policy's ``slower``), it is refused, the trial naming that shape; otherwise its speedup is
the SHAPE_WEIGHTS-weighted geometric mean of the shapes' speedups (its interval: the same mean of their
interval ends), which the speed policy judges as it judges one shape's. An accepted setting whose worst output
element used more than SETTING_HEADROOM of its allowance (verify/numerics.py) is left for the next: the gate
checks the stored setting again on draws of its own. The choice stores the graphs
of every shape's check, so production applies it at each declared shape.

On a CPU nothing is timed: the trials run for correctness only and nothing is stored.
"""

from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import Any, Callable

from ..capture.launch_configs import merged
from ..capture.variants import needless
from ..errors import KerneloptError
from ..measure.rule import SpeedPolicy
from ..measure.stats import SpeedEstimate, geomean
from ..measure.text import interval, speedup_text
from ..records import Timing, Verdict
from ..runs.records import CompileOutcome, CompileShapeTrial, CompileTrial

# A session, entered, for a declared shape (None: the problem declares none), opened under the defaults.
Opener = Callable[[str | None], AbstractContextManager[Any]]

# How many of the fastest accepted settings are checked again on a second compile before none is chosen.
CONFIRMED = 2
# A setting whose speedup's interval starts at or above this is chosen without a second compile: the race the
# second compile guards against moved one setting by 15% between two sessions (a bf16 RMSNorm step's
# max-autotune, 1.034x and 0.903x, 2026-12-06); a gain beyond it is the setting's. Spares a compile of every
# declared shape (64 s of a 128k-vocabulary cross-entropy's 262 s tune at three shapes, H100, 2026-12-07).
SURE_GAIN = 1.25
# A problem with SHAPES: a setting this far behind the fastest one over the shapes checked so far (weighted
# geometric means of their speedups) is not tried at the remaining shapes (it would have to win there by as
# much again); the 128k-vocabulary cross-entropy's max-autotune and 2-D tiling, at 1.10x and 1.03x where its
# rewrites ran 1.86x, took four of its nine trials (48 s).
BEHIND = 0.15


def _trial(variant: str, verdict: Verdict, seconds: float) -> CompileTrial:
    t = verdict.model_timing
    return CompileTrial(variant=variant, status=verdict.status, reason=verdict.reason_for_agents(),
                        seconds=round(seconds, 2),
                        speedup=t.speedup if t else None, ci_low=t.ci_low if t else None,
                        ci_high=t.ci_high if t else None)


def choose(open_at: Opener, variants: list[str], *, previous: str | None, measured: bool,
           say: Callable[[str], None], ev: Callable[..., Any], shapes: dict[str, float] | None = None,
           policy: SpeedPolicy | None = None, committed: list[str] | None = None,
           left: Callable[[], float] | None = None,
           into: CompileOutcome | None = None) -> tuple[CompileOutcome, dict[str | None, Verdict]]:
    """Try each variant against the default compile; the outcome and the chosen one's verdicts (per declared
    shape; the key None for a problem without SHAPES; empty when nothing new is to be stored).

    ``open_at(shape)``: a session at that declared shape, opened under the defaults; ``shapes``: the declared
    shapes and their SHAPE_WEIGHTS (None or empty: the problem declares none); ``policy``: the speed rule
    that combines the shapes' timings (the session's own judges one shape's); ``left()``: seconds left to the
    run's budget (``--run-budget-s``; None: no budget): once spent, the settings not yet checked are not tried
    (a max-autotune compile of a model with GEMMs can take minutes).

    ``committed``: kernels with an active version, tuned on ``previous``'s compile. Another
    compile would leave them stale (their fingerprints are that compile's), and the trials
    time each setting against the default compile without them: the choice is then kept,
    and the note says how to change it.

    ``into``: the outcome to fill (the run record's, saved when the run is stopped): each trial is in it as soon
    as it is decided, so a tune stopped during the compile step still records what was measured (nothing is
    chosen then: a setting is chosen only after its second compile).
    """
    # With committed kernels the choice is kept whatever wins (below): no second compile to confirm a winner.
    outcome, verdicts = _choose(open_at, variants, previous=previous, measured=measured, say=say, ev=ev,
                                shapes=shapes or {}, policy=(policy or SpeedPolicy()).for_settings(), left=left,
                                confirm=not committed, into=into)
    if committed and outcome.chosen != previous:
        wanted = outcome.chosen or "the default compile"
        outcome.note = (f"{outcome.note}; kept {previous or 'the default compile'!r} instead of {wanted!r}: "
                        f"{len(committed)} committed kernel version(s) ({', '.join(committed[:3])}"
                        f"{', ...' if len(committed) > 3 else ''}) were tuned on it and would be stale under "
                        f"another compile; to switch, remove their folders and tune again")
        outcome.chosen = previous
        return outcome, {}
    return outcome, verdicts


def _check(session: Any, variant: str, launch_configs: dict[str, dict[str, int]] | None = None,
           left: Callable[[], float] | None = None) -> tuple[Verdict | None, str | None, float]:
    """(the verdict, or None and the verifier's own error, said and never the variant's fault; seconds).
    ``launch_configs``: the variant's compile launches these (passed only when there are some); ``left``: the
    run's budget, at whose end a check still compiling is stopped (an error naming the budget, not a verdict)."""
    t0 = time.monotonic()
    extra: dict[str, Any] = {"launch_configs": launch_configs} if launch_configs else {}
    budget = left() if left is not None else math.inf
    if math.isfinite(budget):
        extra["budget_s"] = budget
    try:
        return session.verify_compile(variant, **extra), None, time.monotonic() - t0
    except KerneloptError as exc:
        return None, str(exc)[:300], time.monotonic() - t0


def _choose(open_at: Opener, variants: list[str], *, previous: str | None, measured: bool,
            say: Callable[[str], None], ev: Callable[..., Any], shapes: dict[str, float],
            policy: SpeedPolicy, left: Callable[[], float] | None,
            confirm: bool = True, into: CompileOutcome | None = None) -> tuple[CompileOutcome, dict[str | None, Verdict]]:
    outcome = into if into is not None else CompileOutcome()
    outcome.previous, outcome.chosen = previous, previous
    outcome.note = "stopped during the compile step, before a setting was chosen: the previous choice stands"
    total = sum(shapes.values())
    weights: dict[str | None, float] = {s: w / total for s, w in shapes.items()} if shapes else {None: 1.0}
    first, last = list(weights)[0], list(weights)[-1]
    checked: dict[str, dict[str | None, Verdict]] = {v: {} for v in variants}
    rows: dict[str, list[CompileShapeTrial]] = {v: [] for v in variants}
    live = list(variants)
    cut: str | None = None  # the shape at which the run's budget stopped the trials ("" without SHAPES)

    def spent(shape: str | None) -> bool:
        """The run's budget is spent: every setting not yet decided is not tried (said once each)."""
        nonlocal cut, live
        if left is None or left() > 0:
            return False
        at = f" at shape {shape}" if shape is not None else ""
        for name in live:
            why = f"not tried{at}: the run's budget (--run-budget-s) is spent"
            ev("planner", "compile-skip", variant=name, reason=why)
            say(f"{name}: {why}")
        cut, live = shape or "", []
        return True

    for shape, weight in weights.items():
        if not live or spent(shape):
            break
        with open_at(shape) as session:
            if shape == first:
                # Whether a setting could compile otherwise than another is a matter of the model's graph (its
                # extern calls, its patterns), asked at the first shape; the checks at every shape then decide.
                opened = session.open()
                skipped = {v: why for v in live if (why := needless(v, opened.kernels, opened.externs))}
                for name, why in skipped.items():
                    ev("planner", "compile-skip", variant=name, reason=why)
                    say(f"{name}: not tried: {why}")
                live = [v for v in live if v not in skipped]
            for variant in list(live):
                at = f" at shape {shape}" if shape is not None else ""
                if spent(shape):
                    break
                say(f"compiling the whole model as {variant!r}{at} and checking it against the default compile")
                verdict, error, seconds = _check(session, variant, left=left)
                if shape is None:  # a problem without SHAPES: the session's verdict is the trial
                    trial = (_trial(variant, verdict, seconds) if verdict is not None else
                             CompileTrial(variant=variant, status="error", reason=error, seconds=round(seconds, 2)))
                    if verdict is not None:
                        checked[variant][None] = verdict
                    _said(outcome, _with_headroom(trial, checked[variant]), ev, say)
                    continue
                if verdict is not None:
                    checked[variant][shape] = verdict
                row = _row(shape, weight, verdict, error, seconds)
                rows[variant].append(row)
                ev("planner", "compile-trial-shape", **row.model_dump(), variant=variant)
                say(f"  {variant} at {shape}: {row.status}" + (
                    f", {speedup_text(row.speedup, row.ci_low, row.ci_high)} over the default compile"
                    if row.speedup is not None else "") + (f" ({row.reason})" if row.reason and row.status in (
                        "rejected", "error") else ""))
                timings = {s: v.model_timing for s, v in checked[variant].items() if s is not None}
                trial = combine(variant, rows[variant], timings, policy=policy, measured=measured)
                if trial.refused_at is not None or shape == last:
                    live.remove(variant)
                    _said(outcome, _with_headroom(trial, checked[variant]), ev, say)
        if measured and shape is not None and shape != last:
            _drop_the_far_behind(live, rows, checked, policy, shape, outcome, ev, say)
    order = {v: i for i, v in enumerate(variants)}
    outcome.tried.sort(key=lambda t: order.get(t.variant, len(order)))
    if not measured:
        outcome.note = "interpreter mode: compile settings checked for correctness only; nothing stored"
        return outcome, {}
    accepted = sorted((t for t in outcome.tried if t.status == "accepted" and t.speedup is not None),
                      key=lambda t: t.speedup or 0.0, reverse=True)
    for best in accepted[:CONFIRMED]:
        sure = best.ci_low is not None and best.ci_low >= SURE_GAIN
        if sure:
            say(f"  {best.variant}: not compiled a second time: its speedup's interval starts at "
                f"{best.ci_low:.3f}x, beyond what a compile's own race moves a setting by")
        if sure or not confirm or (best.variant == previous and left is not None and left() <= 0):
            second: dict[str | None, Verdict] | None = checked[best.variant]  # kept, or stored and out of budget
        else:
            timed = merged(v.launch_configs for v in checked[best.variant].values())
            second = _second(open_at, best, weights, policy=policy, ev=ev, say=say, left=left, launch_configs=timed)
        if second is None:
            continue
        outcome.chosen = best.variant
        over = "over the default compile" + (" (weighted over the declared shapes)" if shapes else "")
        outcome.note = f"{best.variant}: {speedup_text(best.speedup or 0.0)} {over}" + (
            f" (95% CI {interval(best.ci_low, best.ci_high)})" if best.ci_low is not None and best.ci_high is not None
            else "") + (f", {speedup_text(best.second_speedup)} on a second compile"
                        if best.second_speedup is not None else "") + (
            "; the run's budget was spent before the others were checked" if cut is not None else "")
        return outcome, second
    stored = next((t for t in outcome.tried if t.variant == previous and t.status != "error"), None)
    if previous is not None and stored is not None:
        outcome.chosen = None
        outcome.note = (f"the stored {previous!r} is no longer chosen over the default compile "
                        f"({stored.reason or stored.status}): back to the defaults")
    elif previous is not None:
        outcome.note = f"the stored {previous!r} was not tried again: kept"
    elif cut is not None:
        outcome.note = "the run's budget (--run-budget-s) was spent before the compile settings were all checked"
    else:
        outcome.note = "no compile setting was faster than the default compile beyond noise"
    return outcome, {}


def _drop_the_far_behind(live: list[str], rows: dict[str, list[CompileShapeTrial]],
                         checked: dict[str, dict[str | None, Verdict]], policy: SpeedPolicy, shape: str,
                         outcome: CompileOutcome, ev: Callable[..., Any], say: Callable[[str], None]) -> None:
    """After a declared shape: the live settings more than BEHIND slower than the fastest over the shapes checked
    so far are decided now (status ``correct``, the reason naming both), not tried at the remaining shapes."""
    running = {v: geomean([r.speedup for r in rows[v] if r.speedup is not None],
                          [r.weight for r in rows[v] if r.speedup is not None])
               for v in live if rows[v] and all(r.speedup is not None for r in rows[v])}
    if len(running) < 2:
        return
    leader = max(running, key=lambda v: running[v])
    for variant, speed in running.items():
        if speed >= running[leader] * (1.0 - BEHIND):
            continue
        timings = {s: v.model_timing for s, v in checked[variant].items() if s is not None}
        trial = combine(variant, rows[variant], timings, policy=policy, measured=True)
        trial.status = "correct"
        trial.reason = (f"not tried after shape {shape}: {speed:.3f}x over the default compile at the shapes "
                        f"checked, {1.0 - speed / running[leader]:.0%} behind {leader!r} ({running[leader]:.3f}x)")
        live.remove(variant)
        _said(outcome, _with_headroom(trial, checked[variant]), ev, say)


def _second(open_at: Opener, trial: CompileTrial, weights: dict[str | None, float], *, policy: SpeedPolicy,
            ev: Callable[..., Any], say: Callable[[str], None], left: Callable[[], float] | None,
            launch_configs: dict[str, dict[str, int]] | None = None) -> dict[str | None, Verdict] | None:
    """``trial``'s setting checked again, at every shape, each in a new session: the verdicts when it is accepted
    there too (and within SETTING_HEADROOM on these draws), else None, ``trial`` then marked ``correct`` with why.

    A setting's gain over the default compile is two compiles' launch-configuration races as much as the setting
    (each compile times its kernels' configurations once, briefly, and keeps the winner): on an H100 the same
    setting of one training step measured 0.984x in one tune and 1.027x [1.026, 1.027] in another, and a bf16
    RMSNorm step's max-autotune 1.034x in one session and 0.903x in the next (2026-12-06). So the second compile
    launches what the first trial ran (``launch_configs``: kernel fingerprint -> point, its verdicts'), and what
    it confirms is those configurations, which ``model.json`` then records and every later compile launches; a
    kernel the first did not record races in both."""
    variant = trial.variant

    def refuse(why: str) -> None:
        trial.status, trial.reason = "correct", f"not confirmed on a second compile: {why}"
        ev("planner", "compile-second", variant=variant, confirmed=False, reason=why)
        say(f"  {variant}: {trial.reason}")

    if left is not None and left() <= 0:
        refuse("the run's budget (--run-budget-s) was spent before it")
        return None
    say(f"checking {variant!r} again on a second compile (a new session: both compiles race afresh)")
    verdicts: dict[str | None, Verdict] = {}
    rows: list[CompileShapeTrial] = []
    for shape, weight in weights.items():
        try:
            with open_at(shape) as session:
                verdict, error, seconds = _check(session, variant, launch_configs, left)
        except KerneloptError as exc:  # the session itself failed to open: the verifier's, never the setting's
            verdict, error, seconds = None, str(exc)[:300], 0.0
        if verdict is None or verdict.status == "rejected":
            cut = verdict is None and left is not None and left() <= 0  # stopped at the run's budget
            refuse(f"{'not finished' if cut else 'the verifier failed' if verdict is None else 'rejected'}"
                   f"{f' at shape {shape}' if shape is not None else ''}: "
                   f"{error if verdict is None else verdict.reason_for_agents()}")
            return None
        verdicts[shape] = verdict
        if shape is not None:
            rows.append(_row(shape, weight, verdict, error, seconds))
    if None in verdicts:
        again = _trial(variant, verdicts[None], 0.0)
    else:
        timings = {s: v.model_timing for s, v in verdicts.items() if s is not None}
        again = combine(variant, rows, timings, policy=policy, measured=True)
    again = _with_headroom(again, verdicts)
    trial.second_speedup, trial.second_ci_low, trial.second_ci_high = again.speedup, again.ci_low, again.ci_high
    if again.status != "accepted":
        refuse((f"{speedup_text(again.speedup, again.ci_low, again.ci_high)} over the default compile there"
                if again.speedup is not None else "not timed") + (f" ({again.reason})" if again.reason else ""))
        return None
    ev("planner", "compile-second", variant=variant, confirmed=True, speedup=again.speedup, ci_low=again.ci_low,
       ci_high=again.ci_high)
    say(f"  {variant}: confirmed, {speedup_text(again.speedup or 0.0, again.ci_low, again.ci_high)} on a second "
        f"compile")
    return verdicts


def _row(shape: str, weight: float, verdict: Verdict | None, error: str | None, seconds: float) -> CompileShapeTrial:
    """One shape's check as the trial records it: the verdict's, or the verifier's own error."""
    if verdict is None:
        return CompileShapeTrial(shape=shape, weight=round(weight, 6), status="error", reason=error,
                                 seconds=round(seconds, 2))
    t = verdict.model_timing
    return CompileShapeTrial(shape=shape, weight=round(weight, 6), status=verdict.status,
                             reason=verdict.reason_for_agents(), seconds=round(seconds, 2),
                             speedup=t.speedup if t else None, ci_low=t.ci_low if t else None,
                             ci_high=t.ci_high if t else None)


def _with_headroom(trial: CompileTrial, verdicts: dict[str | None, Verdict]) -> CompileTrial:
    """``trial`` with its worst element's share of the allowance over ``verdicts`` (its checks); an accepted one
    that used more than SETTING_HEADROOM of it is not chosen: the gate's own draws would fail it now and then."""
    from ..verify.numerics import SETTING_HEADROOM

    ratios = [e.model_ratio for v in verdicts.values() for e in v.errors if e.model_ratio is not None]
    trial.worst_ratio = max(ratios) if ratios else None
    if trial.status == "accepted" and trial.worst_ratio is not None and trial.worst_ratio > SETTING_HEADROOM:
        trial.status = "correct"
        trial.reason = (f"within its allowance, but its worst output element used {trial.worst_ratio:.0%} of it (a "
                        f"setting is chosen at {SETTING_HEADROOM:.0%} or less: the gate checks it again on draws of "
                        f"its own, and one near its allowance fails some of them)")
    return trial


def _said(outcome: CompileOutcome, trial: CompileTrial, ev: Callable[..., Any], say: Callable[[str], None]) -> None:
    """A variant's trial, once decided: in the outcome, the trace and the log."""
    outcome.tried.append(trial)
    ev("planner", "compile-trial", **trial.model_dump(exclude={"variant"}), variant=trial.variant)
    say(f"  {trial.variant}: {trial.status}" + (
        f", {speedup_text(trial.speedup, trial.ci_low, trial.ci_high)} over the default compile"
        + (" (weighted over the declared shapes)" if trial.shapes else "") if trial.speedup is not None else "")
        + (f" ({trial.reason})" if trial.reason and trial.status != "accepted" else ""))


def combine(variant: str, rows: list[CompileShapeTrial], timings: dict[str, Timing | None], *,
            policy: SpeedPolicy, measured: bool) -> CompileTrial:
    """A variant's trial from its checks at the declared shapes so far (``rows``, in order; ``timings``: each
    shape's timing against the default compile, None where none was taken).

    Refused (``refused_at``) at the first shape where it was rejected or the verifier failed, or, ``measured``,
    where the speed policy finds it slower beyond noise. Otherwise, once every shape is in: accepted when the
    policy finds the SHAPE_WEIGHTS-weighted geometric mean of the shapes' speedups faster (every shape must be
    long enough to judge), else correct.
    """
    trial = CompileTrial(variant=variant, status="correct", seconds=round(sum(r.seconds for r in rows), 2),
                         shapes=list(rows))
    for row in rows:
        timing = timings.get(row.shape)
        if row.status in ("rejected", "error"):
            trial.status, trial.refused_at, trial.reason = row.status, row.shape, f"at shape {row.shape}: {row.reason}"
            return trial
        if measured and policy.slower(timing):
            assert timing is not None
            trial.refused_at = row.shape
            trial.reason = (f"slower than the default compile beyond noise at shape {row.shape}: "
                            f"{speedup_text(timing.speedup, timing.ci_low, timing.ci_high)}")
            return trial
    found = [(row, t) for row in rows if (t := timings.get(row.shape)) is not None]
    if not measured or not rows or len(found) < len(rows):
        return trial
    for row, t in found:
        if not policy.measurable(t):
            trial.reason = f"at shape {row.shape}: {policy.judge(t)[1]}"
            return trial
    w = [row.weight for row, _ in found]

    def mean(field: str) -> float:
        return geomean([getattr(t, field) for _, t in found], w)

    estimate = SpeedEstimate(speedup=mean("speedup"), ci_low=mean("ci_low"), ci_high=mean("ci_high"),
                             pairs=min(t.pairs for _, t in found), baseline_ms=mean("baseline_ms"),
                             candidate_ms=mean("candidate_ms"))
    faster, why = policy.judge(estimate)
    trial.speedup, trial.ci_low, trial.ci_high = estimate.speedup, estimate.ci_low, estimate.ci_high
    trial.status = "accepted" if faster else "correct"
    trial.reason = None if faster else f"weighted over the declared shapes: {why}"
    return trial


def record(store: Any, model: str, outcome: CompileOutcome, verdicts: dict[str | None, Verdict],
           training: bool = False) -> None:
    """Write ``model.json``'s choice when it changed (or its evidence, when the same one won again): of a problem
    with SHAPES, the graphs of every declared shape's check (production applies it at each) and each shape's
    timing; ``training``, the pass the checks ran (production applies it to that pass's graphs only)."""
    from ..store import CompileChoice

    if outcome.chosen == outcome.previous and not verdicts:
        return  # kept as it is
    if outcome.chosen is None:
        if outcome.previous is not None:
            store.save_compile(model, None)
            outcome.stored = True
        return
    if not verdicts:
        return
    checks = list(verdicts.values())
    shaped = None not in verdicts
    worst = max((e.model_ratio or 0.0 for v in checks for e in v.errors), default=None)
    recorded = [v.launches for v in checks if v.launches is not None]
    graphs = list({tuple(g): list(g) for launches in recorded for g in launches}.values()) if recorded else None
    store.save_compile(model, CompileChoice(
        variant=outcome.chosen, measured=datetime.now(timezone.utc), environment=checks[0].environment,
        timing=None if shaped else checks[0].model_timing, worst_ratio=worst,
        seeds=list(dict.fromkeys(s for v in checks for s in v.seeds)), graphs=graphs, training=training,
        shape_timings={s: v.model_timing for s, v in verdicts.items() if s is not None} if shaped else None,
        launch_configs=merged(v.launch_configs for v in checks)))
    outcome.stored = True
