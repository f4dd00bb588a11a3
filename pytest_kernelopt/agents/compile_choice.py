"""The model's compile settings: ``kernelopt tune``'s first step on a GPU.

Before any kernel is searched, the whole model is compiled under each of Inductor's
settings in the catalogue (``capture/variants.py``'s ``MODEL_VARIANTS``: max-autotune with its
Triton GEMM and convolution templates, and with 2-D tiling; ``--compile-variants`` names others) and each is
checked (``VerifySession.verify_compile``, ``verify/compile_check.py``): every output element, on the
seeded inputs and on one input draw of every kind the kernel stage draws (weights varied on half of
them), against float64 with the default compile's own error on the same inputs as the allowance,
then timed against the default compile, paired, in one session, in the order :func:`order` gives. The fastest that
the speed rule accepts (faster beyond noise, by at least the setting gain) and that holds on a second compile in a
new session (:func:`_second`) becomes ``model.json``'s ``compile`` (``compile_at[shape]``: below);
when none is, a stored choice that no longer wins is removed; committed kernels keep the
compile they were tuned on (:func:`choose`). The kernel search then runs
on that compile: such a setting changes what no kernel swap can (GEMMs as Triton
templates with their epilogues fused, other fusion), and its kernels are tuned in turn.

A problem with SHAPES gets a setting per declared shape, chosen when that shape is tuned, in a session opened at
it (``model.json``'s ``compile_at``): a setting slower at one shape no longer keeps another shape from the setting
that wins there. The trials at a shape spend at most that shape's SHAPE_WEIGHTS share of what is left of the
run's budget for the problem's shapes still to tune (:func:`shape_deadline`). Once a setting is accepted, the
trials after it leave the seconds its check took for its second compile (:func:`_reserve`), which may then use
the rest of the run's budget: a 1.17x max-autotune of a ViT block at batch 64 was thrown away when the trial
after it spent the seconds its confirmation needed (H100, 2026-12-07).
An accepted setting whose worst output element used more than SETTING_HEADROOM of its allowance
(verify/numerics.py) is left for the next: the gate checks the stored setting again on draws of its own. The
choice stores the graphs of its check, so production applies it at that shape's graph inputs alone.

On a CPU nothing is timed: the trials run for correctness only and nothing is stored.
"""

from __future__ import annotations

import math
import time
from contextlib import AbstractContextManager
from datetime import datetime, timezone
from typing import Any, Callable

from ..capture.variants import NOTHING_REWRITTEN, VARIANTS, needless
from ..errors import KerneloptError
from ..measure.text import interval, speedup_text
from ..records import Verdict
from ..runs.records import CompileOutcome, CompileTrial

# A session, entered, at the shape being tuned, opened under the defaults.
Opener = Callable[[], AbstractContextManager[Any]]

# How many of the fastest accepted settings are checked again on a second compile before none is chosen.
CONFIRMED = 2
# A setting whose speedup's interval starts at or above this is chosen without a second compile: the race the
# second compile guards against moved one setting by 15% between two sessions (a bf16 RMSNorm step's
# max-autotune, 1.034x and 0.903x, 2026-12-06); a gain beyond it is the setting's. Spares a compile
# (64 s of a 128k-vocabulary cross-entropy's 262 s tune at three shapes, H100, 2026-12-07).
SURE_GAIN = 1.25


def shape_deadline(run_left: Callable[[], float], weights: dict[str, float], shape: str) -> Callable[[], float]:
    """Seconds left to the compile step at declared ``shape``: of what is left of the run's budget now, the share
    of ``shape``'s weight among the problem's shapes from it on (tune goes through them in declared order); the
    rest stays for those after it, whatever this step's compiles cost (a max-autotune compile of a model with
    GEMMs can take minutes)."""
    names = list(weights)
    rest = sum(weights[s] for s in names[names.index(shape):])
    now = run_left()
    if not math.isfinite(now):
        return run_left
    keep = now * (1.0 - weights[shape] / rest)
    return lambda: run_left() - keep


def order(variants: list[str], first: set[str] | frozenset[str] = frozenset(), *, convolutions: bool = False) -> list[str]:
    """The order the trials run in: ``first`` (the settings chosen at the problem's other shapes: the likeliest
    winners, checked before a budget runs out), then ``variants``' own order, except that a setting with the graph
    rewrites (on a model with a pattern they change: the others were skipped) runs before the first one that
    compiles GEMM templates without them. On the two blocks measured with such a pattern the rewrites' setting won
    by far (a 128k-vocabulary cross-entropy: 1.944x against max-autotune's 1.094x, H100), and a trial run after
    max-autotune's minutes-long compile was skipped once the budget ran out (a ViT block's attention written out,
    2026-12-07). On a model with library ``convolutions`` the first setting with templates (max-autotune) runs first
    of all: its template convolutions were the win on every convolutional model measured (a bf16 convnet, H100
    2026-12-07: 1.063x and 1.267x of the default compile where max-autotune-extern made 1.045x and 1.034x, and run
    second it was cut by the shape's budget share: 0.984x of max-autotune; a conv + group norm + SiLU problem, H200
    2026-12-03: 1.039x, the rewrites without templates 0.858x)."""
    rewrites = [v for v in variants if VARIANTS[v].rewrites]
    rest = [v for v in variants if v not in rewrites]
    at = next((i for i, v in enumerate(rest) if VARIANTS[v].templates), len(rest))
    ordered = rest[:at] + rewrites + rest[at:]
    if convolutions and at < len(rest):
        ordered.remove(rest[at])
        ordered.insert(0, rest[at])
    return sorted(ordered, key=lambda v: v not in first)


def _trial(variant: str, verdict: Verdict, seconds: float) -> CompileTrial:
    t = verdict.model_timing
    return CompileTrial(variant=variant, status=verdict.status, reason=verdict.reason_for_agents(),
                        seconds=round(seconds, 2),
                        speedup=t.speedup if t else None, ci_low=t.ci_low if t else None,
                        ci_high=t.ci_high if t else None)


def choose(open_session: Opener, variants: list[str], *, previous: str | None, measured: bool,
           say: Callable[[str], None], ev: Callable[..., Any], shape: str | None = None,
           committed: list[str] | None = None, left: Callable[[], float] | None = None,
           confirm_left: Callable[[], float] | None = None, first: set[str] | None = None,
           into: CompileOutcome | None = None) -> tuple[CompileOutcome, Verdict | None, list[list[str]] | None]:
    """Try each variant against the default compile, in sessions from ``open_session`` (at declared shape
    ``shape``, None for a problem without SHAPES): the outcome, the chosen one's verdict (None when nothing new
    is to be stored) and the graph inputs the checks compiled (capture.launch_signature; None: none recorded).

    ``first``: settings tried before the others (:func:`order`). ``left()``: seconds left to the trials (the run's budget, ``--run-budget-s``, or the shape's share of it;
    None: no budget): once spent, the settings not yet checked are not tried. ``confirm_left()``: seconds left to
    an accepted setting's second compile (default ``left``; tune passes the run's budget).

    ``committed``: kernels with an active version, tuned on ``previous``'s compile. Another
    compile would leave them stale (their fingerprints are that compile's), and the trials
    time each setting against the default compile without them: the choice is then kept,
    and the note says how to change it.

    ``into``: the outcome to fill (the run record's, saved when the run is stopped): each trial is in it as soon
    as it is decided, so a tune stopped during the compile step still records what was measured (nothing is
    chosen then: a setting is chosen only after its second compile).
    """
    # With committed kernels the choice is kept whatever wins (below): no second compile to confirm a winner.
    outcome, verdict, graphs = _choose(open_session, variants, previous=previous, measured=measured, say=say, ev=ev,
                                       shape=shape, left=left, confirm_left=confirm_left or left,
                                       confirm=not committed, first=first or set(), into=into)
    if committed and outcome.chosen != previous:
        wanted = outcome.chosen or "the default compile"
        outcome.note = (f"{outcome.note}; kept {previous or 'the default compile'!r} instead of {wanted!r}: "
                        f"{len(committed)} committed kernel version(s) ({', '.join(committed[:3])}"
                        f"{', ...' if len(committed) > 3 else ''}) were tuned on it and would be stale under "
                        f"another compile; to switch, remove their folders and tune again")
        outcome.chosen = previous
        return outcome, None, graphs
    return outcome, verdict, graphs


def _check(session: Any, variant: str, launch_configs: dict[str, dict[str, int]] | None = None,
           left: Callable[[], float] | None = None) -> tuple[Verdict | None, str | None, float]:
    """(the verdict, or None and the verifier's own error, said and never the variant's fault; seconds).
    ``launch_configs``: the variant's compile launches these (passed only when there are some); ``left``: the
    step's budget, at whose end a check still compiling is stopped (an error naming the budget, not a verdict)."""
    t0 = time.monotonic()
    extra: dict[str, Any] = {"launch_configs": launch_configs} if launch_configs else {}
    budget = left() if left is not None else math.inf
    if math.isfinite(budget):
        extra["budget_s"] = budget
    try:
        return session.verify_compile(variant, **extra), None, time.monotonic() - t0
    except KerneloptError as exc:
        return None, str(exc)[:300], time.monotonic() - t0


def _reserve(left: Callable[[], float] | None, outcome: CompileOutcome, confirm: bool) -> Callable[[], float] | None:
    """What a trial may spend: ``left()`` less, once a setting was accepted (and will be compiled again), the
    seconds the fastest accepted one's check took, kept for its second compile."""
    if left is None or not confirm:
        return left
    accepted = [t for t in outcome.tried if t.status == "accepted" and t.speedup is not None]
    if not accepted:
        return left
    best = max(accepted, key=lambda t: t.speedup or 0.0)
    if best.ci_low is not None and best.ci_low >= SURE_GAIN:
        return left  # chosen without a second compile
    return lambda: left() - best.seconds


def _choose(open_session: Opener, variants: list[str], *, previous: str | None, measured: bool,
            say: Callable[[str], None], ev: Callable[..., Any], shape: str | None, left: Callable[[], float] | None,
            confirm_left: Callable[[], float] | None = None, confirm: bool = True, first: set[str] | None = None,
            into: CompileOutcome | None = None) -> tuple[CompileOutcome, Verdict | None, list[list[str]] | None]:
    outcome = into if into is not None else CompileOutcome()
    outcome.previous, outcome.chosen = previous, previous
    outcome.note = "stopped during the compile step, before a setting was chosen: the previous choice stands"
    at = f" at shape {shape}" if shape is not None else ""
    checked: dict[str, Verdict] = {}
    cut = False  # the budget stopped the trials
    with open_session() as session:
        # Whether a setting could compile otherwise than another is a matter of the model's graph (its extern
        # calls, its patterns); the checks then decide.
        budget = left() if left is not None else None  # a full-size model on a CPU: minutes to open
        opened = session.open(budget_s=budget if budget is not None and budget != float("inf") else None)
        skipped = {v: why for v in variants if (why := needless(v, opened.kernels, opened.externs))}
        for name, why in skipped.items():
            ev("planner", "compile-skip", variant=name, reason=why)
            say(f"{name}: not tried: {why}")
        live = order([v for v in variants if v not in skipped], first or set(),
                     convolutions=any("convolution" in e.target for e in opened.externs))
        dropped: dict[str, str] = {}  # settings found needless by a trial at this shape
        for i, variant in enumerate(live):
            if variant in dropped:
                ev("planner", "compile-skip", variant=variant, reason=dropped[variant])
                say(f"{variant}: not tried{at}: {dropped[variant]}")
                continue
            spend = _reserve(left, outcome, confirm)
            if spend is not None and spend() <= 0:
                kept = " (what is left is kept for the accepted setting's second compile)" if spend is not left else ""
                for name in live[i:]:
                    why = f"not tried{at}: the run's budget (--run-budget-s) for this step is spent{kept}"
                    ev("planner", "compile-skip", variant=name, reason=why)
                    say(f"{name}: {why}")
                cut = True
                break
            say(f"compiling the whole model as {variant!r}{at} and checking it against the default compile")
            verdict, error, seconds = _check(session, variant, left=spend)
            if verdict is None:
                trial = CompileTrial(variant=variant, status="error", reason=error, seconds=round(seconds, 2))
            else:
                checked[variant] = verdict
                trial = _trial(variant, verdict, seconds)
            _said(outcome, _with_headroom(trial, [verdict] if verdict is not None else []), ev, say)
            if VARIANTS[variant].rewrites and NOTHING_REWRITTEN in (trial.reason or ""):
                # The rewrites act on the graph before any setting's lowering: under another mode they find the
                # same nothing (at another shape they may not: some decline by size).
                dropped.update({v: f"{variant!r} found nothing to rewrite here" for v in live[i + 1:]
                                if VARIANTS[v].rewrites})
    graphs = next((v.launches for v in checked.values() if v.launches is not None), None)
    if not measured:
        outcome.note = "interpreter mode: compile settings checked for correctness only; nothing stored"
        return outcome, None, graphs
    accepted = sorted((t for t in outcome.tried if t.status == "accepted" and t.speedup is not None),
                      key=lambda t: t.speedup or 0.0, reverse=True)
    for best in accepted[:CONFIRMED]:
        sure = best.ci_low is not None and best.ci_low >= SURE_GAIN
        if sure:
            say(f"  {best.variant}: not compiled a second time: its speedup's interval starts at "
                f"{best.ci_low:.3f}x, beyond what a compile's own race moves a setting by")
        second: Verdict | None
        if sure or not confirm or (best.variant == previous and confirm_left is not None and confirm_left() <= 0):
            second = checked[best.variant]  # kept, or stored and out of budget
        else:
            second = _second(open_session, best, ev=ev, say=say, left=confirm_left,
                             launch_configs=checked[best.variant].launch_configs)
        if second is None:
            continue
        outcome.chosen = best.variant
        outcome.note = f"{best.variant}: {speedup_text(best.speedup or 0.0)} over the default compile{at}" + (
            f" (95% CI {interval(best.ci_low, best.ci_high)})" if best.ci_low is not None and best.ci_high is not None
            else "") + (f", {speedup_text(best.second_speedup)} on a second compile"
                        if best.second_speedup is not None else "") + (
            "; the run's budget was spent before the others were checked" if cut else "")
        return outcome, second, graphs
    stored = next((t for t in outcome.tried if t.variant == previous and t.status != "error"), None)
    if previous is not None and stored is not None:
        outcome.chosen = None
        outcome.note = (f"the stored {previous!r} is no longer chosen over the default compile{at} "
                        f"({stored.reason or stored.status}): back to the defaults")
    elif previous is not None:
        outcome.note = f"the stored {previous!r} was not tried again: kept"
    elif cut:
        outcome.note = "the run's budget (--run-budget-s) was spent before the compile settings were all checked"
    else:
        outcome.note = f"no compile setting was faster than the default compile{at} beyond noise"
    return outcome, None, graphs


def _second(open_session: Opener, trial: CompileTrial, *, ev: Callable[..., Any], say: Callable[[str], None],
            left: Callable[[], float] | None,
            launch_configs: dict[str, dict[str, int]] | None = None) -> Verdict | None:
    """``trial``'s setting checked again in a new session: the verdict when it is accepted there too (and within
    SETTING_HEADROOM on these draws), else None, ``trial`` then marked ``correct`` with why.

    A setting's gain over the default compile is two compiles' launch-configuration races as much as the setting
    (each compile times its kernels' configurations once, briefly, and keeps the winner): on an H100 the same
    setting of one training step measured 0.984x in one tune and 1.027x [1.026, 1.027] in another, and a bf16
    RMSNorm step's max-autotune 1.034x in one session and 0.903x in the next (2026-12-06). So the second compile
    launches what the first trial ran (``launch_configs``: kernel fingerprint -> point, its verdict's), and what
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
    try:
        with open_session() as session:
            verdict, error, _ = _check(session, variant, launch_configs, left)
    except KerneloptError as exc:  # the session itself failed to open: the verifier's, never the setting's
        verdict, error = None, str(exc)[:300]
    if verdict is None or verdict.status == "rejected":
        cut = verdict is None and left is not None and left() <= 0  # stopped at the run's budget
        refuse(f"{'not finished' if cut else 'the verifier failed' if verdict is None else 'rejected'}: "
               f"{error if verdict is None else verdict.reason_for_agents()}")
        return None
    again = _with_headroom(_trial(variant, verdict, 0.0), [verdict])
    trial.second_speedup, trial.second_ci_low, trial.second_ci_high = again.speedup, again.ci_low, again.ci_high
    if again.status != "accepted":
        refuse((f"{speedup_text(again.speedup, again.ci_low, again.ci_high)} over the default compile there"
                if again.speedup is not None else "not timed") + (f" ({again.reason})" if again.reason else ""))
        return None
    ev("planner", "compile-second", variant=variant, confirmed=True, speedup=again.speedup, ci_low=again.ci_low,
       ci_high=again.ci_high)
    say(f"  {variant}: confirmed, {speedup_text(again.speedup or 0.0, again.ci_low, again.ci_high)} on a second "
        f"compile")
    return verdict


def _with_headroom(trial: CompileTrial, verdicts: list[Verdict]) -> CompileTrial:
    """``trial`` with its worst element's share of the allowance over ``verdicts`` (its checks); an accepted one
    that used more than SETTING_HEADROOM of it is not chosen: the gate's own draws would fail it now and then."""
    from ..verify.numerics import SETTING_HEADROOM

    ratios = [e.model_ratio for v in verdicts for e in v.errors if e.model_ratio is not None]
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
        if trial.speedup is not None else "")
        + (f" ({trial.reason})" if trial.reason and trial.status != "accepted" else ""))


def record(store: Any, model: str, outcome: CompileOutcome, verdict: Verdict | None, *, training: bool = False,
           shape: str | None = None, graphs: list[list[str]] | None = None) -> None:
    """Write ``model.json``'s choice when it changed (or its evidence, when the same one won again): at declared
    shape ``shape``, that shape's (``compile_at``; ``graphs``: the shape's graph inputs, which a setting stored for
    every shape before per-shape choices no longer covers); ``training``, the pass the check ran (production applies
    it to that pass's graphs only)."""
    from ..store import CompileChoice

    if outcome.chosen == outcome.previous and verdict is None:
        return  # kept as it is
    if outcome.chosen is None:
        if outcome.previous is not None:
            store.save_compile(model, None, shape, graphs=graphs)
            outcome.stored = True
        return
    if verdict is None:
        return
    worst = max((e.model_ratio or 0.0 for e in verdict.errors), default=None)
    store.save_compile(model, CompileChoice(
        variant=outcome.chosen, measured=datetime.now(timezone.utc), environment=verdict.environment,
        timing=verdict.model_timing, worst_ratio=worst, seeds=list(dict.fromkeys(verdict.seeds)),
        graphs=verdict.launches, training=training, launch_configs=verdict.launch_configs), shape, graphs=graphs)
    outcome.stored = True
