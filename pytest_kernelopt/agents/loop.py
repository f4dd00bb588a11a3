"""The tuning loop: Profiler -> Planner -> (Coder -> Reviewer -> Benchmarker)* -> store.

Per problem: the model's compile settings are chosen (``compile_choice.py``) and one
verification session opens (the problem compiled once). The Profiler measures the
compiled model in that session and the Planner orders its kernels. Only when it
searches one does Nsight Compute read counters (where it runs: they classify the
kernels searched) and the Coder prepare (the search backend harvests Inductor's
alternatives in child processes); on a GPU the session closes meanwhile, so no GPU
memory is held beside those children, and opens again: a tune that searches nothing
pays for neither. Per kernel,
the active committed version (if any, and not stale) is judged first and becomes
the starting point; then the Coder proposes candidates round after round, the
Reviewer stops what need not run, and the Benchmarker (the session) judges the
rest (``benchmarker.py``). A kernel's search ends when the Coder has nothing new, its
budget is spent, or the run's budget or the backend's cost limit is reached.

What is stored, per kernel and then for the model's kernels together (near misses
combined, varying compiler picks pinned), is the keeper's decision (``keeper.py``). On
a CPU (interpreter mode) speed is not measured and nothing is stored. Every store
write is atomic and ``run.json`` is rewritten after each kernel, so Ctrl-C keeps what
was accepted and leaves no half-written file.
"""

from __future__ import annotations

import math
import time
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict, field_validator

from .. import settings
from ..errors import BudgetSpent, KerneloptError
from ..records import KernelInfo
from ..verify.options import VerifyOptions
from .benchmarker import Benchmarker, KernelState, score
from .coder import Coder
from .keeper import Keeper
from .planner import LIMIT_PCT, PlanItem, limit_pct, plan
from ..runs.records import CoderContext, KernelOutcome, ProblemOutcome, Proposal
from ..runs.trace import RunDir
from .ui import UI

__all__ = ["UI", "TuneOptions", "Tuner"]

# A training problem's tuning run says this once (run.json's ``notes``, the trace, the log).
REWRITES_DECLINE = ("training step: of kernelopt's graph rewrites only the cross-entropy's has a backward (the others "
                    "decline where gradients are recorded: capture/graph_rewrites.py; compile settings, the rewrites' "
                    "among them, are tried on a GPU only); forward and backward kernels are tuned, each judged on "
                    "the whole step, gradients included")


class TuneOptions(BaseModel):
    """How a tuning run goes: built once by its caller (``kernelopt tune``, the gate's ``--kernelopt-tune``)
    and handed down whole, to the :class:`Tuner` and as JSON to ``--workers`` children."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    device: str
    # Defaults shared with the command line and the gate come from ..settings (one definition).
    budget_s: float = settings.field("budget_s")  # device seconds per kernel
    run_budget_s: float | None = settings.field("run_budget_s")  # device seconds for the whole run
    max_rounds: int = 50
    min_share: float = settings.field("min_share")  # MIN_SHARE, the Planner's
    kernels: list[str] | None = None  # only these kernels (names)
    # How every candidate is verified (seeds, a pinned --seed, timeout, the speed policy): the caller's
    # options whole, never rebuilt from some of their fields here.
    verify: VerifyOptions = VerifyOptions()
    ncu: bool = True
    # Exploration times each candidate briefly (seconds of paired timing, model and kernel);
    # the best few are then confirmed with the verifier's full-length timing, which alone
    # decides what is stored (the winner of many short races is biased upwards).
    screen_seconds: float = 0.25
    # Store the fastest configuration measured for kernels whose compiler pick varies between
    # compiles (Inductor timed several configurations at the first call); see keeper.Keeper._pin.
    pin: bool = True
    confirm: int = 2
    # The model-level compile settings tried first (capture/variants.py names); None: the
    # catalogue's MODEL_VARIANTS on a GPU, none on a CPU; []: keep model.json's choice as it is.
    compile_variants: list[str] | None = None

    @field_validator("verify")
    @classmethod
    def _never_exact(cls, verify: VerifyOptions) -> VerifyOptions:
        # Tune stores kernels: a pinned --seed only adds its seeds to fresh ones (VerifyOptions.session_seeds).
        if verify.exact:
            raise ValueError("tune stores kernels: its seeds are never an exact replay (exact=False)")
        return verify


class Tuner:
    def __init__(self, options: TuneOptions, coder: Coder, store: Any, run: RunDir, ui: UI | None = None, *,
                 session_factory: Callable[..., Any] | None = None):
        """``session_factory(problem, device, options, progress=...)``: the Benchmarker (default VerifySession)."""
        self.options = options
        self.session_factory = session_factory
        self.coder = coder
        self.store = store
        self.run = run
        self.ui = ui or UI()
        self.started = time.monotonic()
        self.stop_reason: str | None = None
        self._variant: str | None = None  # the current problem's compile settings (for the Coder's context)
        self._share = 1.0  # of budget_s per kernel: the current declared shape's (SHAPE_WEIGHTS), else all
        # At a declared shape: seconds left to its share of the run's budget (compile_choice.shape_deadline), for its
        # compile step and its kernel search alike; and why that share ended the shape's search (not the run).
        self._shape_left: Callable[[], float] | None = None
        self._shape_stop: str | None = None

    # --- budgets -----------------------------------------------------------------------

    def _run_left(self) -> float:
        if self.options.run_budget_s is None:
            return float("inf")
        return self.options.run_budget_s - (time.monotonic() - self.started)

    def _left(self) -> float:
        """Seconds left to the work at hand: the run's budget, at a declared shape that shape's share of it (so that
        a shape's kernel search leaves the shapes after it their compile trials: on an H100, 2026-12-07, a 3-shape
        router's first shape spent 122 of the run's 152 s, 60 of them harvesting and searching kernels of 1-2% of
        its time, and the other two shapes' trials were stopped by the budget)."""
        run = self._run_left()
        return min(run, self._shape_left()) if self._shape_left is not None else run

    def _out_of_budget(self, state: KernelState, estimate: float) -> str | None:
        if self.coder.stopped:
            return self.coder.stopped
        budget = self.options.budget_s * self._share  # a declared shape's share of it (SHAPE_WEIGHTS)
        if state.spent + estimate > budget:
            left = f", the next candidate's checks expected to take {estimate:.0f} s more" if state.spent < budget else ""
            return f"kernel budget: {state.spent:.0f} of {budget:g} s spent{left}"
        if estimate > self._left():
            return self._spent()
        return None

    def _run_spent(self) -> str:
        budget = self.options.run_budget_s
        return f"run budget: {budget:g} s spent" if budget is not None else "run budget spent"

    def _spent(self) -> str:
        """What ran out: the run's budget, or the declared shape's share of it."""
        if self._shape_left is None or self._run_left() <= 0:
            return self._run_spent()
        return ("this shape's share of the run budget (--run-budget-s, by SHAPE_WEIGHTS) spent: the rest is kept "
                "for the problem's other shapes")

    def _end_run_if_spent(self) -> None:
        """A kernel's search stopped on a budget: where the run's is spent too (or the backend stopped), the run
        ends, saying which; where a declared shape's share is spent, that shape's search ends (not the kernel's
        budget, which ends only the kernel)."""
        if self.coder.stopped or self._run_left() <= 0:
            self.stop_reason = self.coder.stopped or self._run_spent()
        elif self._left() <= 0:
            self._shape_stop = self._spent()

    # --- one problem --------------------------------------------------------------------

    def tune_problem(self, problem_path: Path, shape: str | None = None, share: float = 1.0) -> ProblemOutcome:
        """Tune one problem; of a problem with SHAPES, at ``shape`` (None: its first), each kernel's budget
        ``share`` of ``budget_s`` (tune() splits it by the problem's SHAPE_WEIGHTS), storing in
        ``<kernel>@<shape>/``."""
        from ..capture.problem import load_problem
        from ..capture.training import is_training
        from ..verify import VerifySession
        from . import compile_choice
        from .profiler import build_profile, ncu_counters

        t0 = time.monotonic()
        problem = load_problem(problem_path, shape=shape)
        shape, self._share = problem.shape, share
        self._shape_stop = None
        self._shape_left = (compile_choice.shape_deadline(self._run_left, problem.shape_weights, shape)
                            if shape is not None else None)
        at: dict[str, Any] = {"shape": shape} if shape is not None else {}  # sessions and the coder, at the shape
        model = problem.id
        outcome = ProblemOutcome(model=model, problem=str(problem.path), device=self.options.device,
                                 speed_measured=self.options.device == "cuda", shape=shape,
                                 training=is_training(problem))
        self.run.record.problems.append(outcome)
        ev = lambda role, event, **data: self.run.event(role, event, model=model, **data)  # noqa: E731
        ev("run", "problem", problem=str(problem.path), training=outcome.training)
        if outcome.training:  # said once per problem, in the log, the trace and run.json
            self._note(outcome, REWRITES_DECLINE, ev)
        try:
            full_options = self.options.verify
            factory = self.session_factory or VerifySession
            variant = self._variant = self._compile_step(problem, outcome, factory, full_options, ev)
            if self._shape_left is not None and self._left() <= 0:
                # The shape's share went to its compile step: no session is opened for a search that could check no
                # candidate (a session on the chosen setting took 18 s a shape of a Llama block, H100, 2026-12-07).
                self._end_run_if_spent()
                self._note(outcome, f"kernel search not started: {self.stop_reason or self._shape_stop}", ev)
                return outcome
            # The chosen setting's launch configurations (model.json): the search works on the compile that was timed.
            fixed: dict[str, Any] = {"launch_configs": c} if (c := self._launch_configs(model, variant, shape)) else {}
            cuda = self.options.device == "cuda"
            note = ("interpreter mode: no timing; shares are shares of bytes moved" if not cuda else
                    "Nsight Compute not run (--no-ncu): roofline estimate" if not self.options.ncu else
                    "Nsight Compute not run: no kernel is searched (its counters choose a searched kernel's "
                    "strategies): roofline estimate")
            options = full_options.model_copy(update={"model_seconds": self.options.screen_seconds,
                                                      "kernel_seconds": self.options.screen_seconds})

            def open_session() -> tuple[Any, Any]:
                session = stack.enter_context(factory(problem.path, self.options.device, options,
                                                      progress=self.ui.message, variant=variant, **at, **fixed))
                left = self._left()  # the run's budget (a shape's share of it) bounds the opening too
                opened = session.open(budget_s=left if left != float("inf") else None)
                ev("benchmarker", "opened", seconds=round(opened.seconds, 2), kernels=len(opened.kernels),
                   isolation=getattr(session, "isolation", None))
                return session, opened

            with ExitStack() as stack:
                session, opened = open_session()
                if self.run.record.environment is None:
                    self.run.record.environment = opened.environment
                if not opened.kernels:
                    targets = sorted({e.target for e in opened.externs})
                    outcome.note = ("no Triton kernels to tune: Inductor generated none"
                                    + (f"; the model runs {len(opened.externs)} extern call(s) ({', '.join(targets)}), "
                                       "which kernelopt leaves alone" if targets else "")
                                    + (f"; Dynamo broke its graph ({'; '.join(opened.graph_breaks)}), and what runs "
                                       "eagerly gets no kernel" if opened.graph_breaks else ""))
                    ev("planner", "stop", reason=outcome.note)
                    self.ui.message(f"{model}: {outcome.note}")
                    return outcome
                try:
                    profiled = session.profile()
                except KerneloptError as exc:  # measuring is ours: fall back to bytes, say why
                    from ..verify.protocol import Profiled

                    ev("profiler", "error", error=str(exc))
                    profiled, note = Profiled(measured=False), f"profiling failed ({exc}); shares from bytes moved"
                profile = build_profile(model, self.options.device, opened.kernels, profiled, None, note)
                if profile.swap_bound is not None:
                    self.ui.message(f"{model}: Triton kernels {profile.triton_share or 0.0:.0%} of the model's GPU time; "
                                    f"each at its memory limit, the model would run at most {profile.swap_bound:.3f}x "
                                    f"faster (roofline estimate)")
                def planned(profile: Any) -> list[PlanItem]:
                    return plan(profile, min_share=self.options.min_share, only=self.options.kernels,
                                min_gain=full_options.speed.min_gain)

                items = planned(profile)
                searched = [i.kernel for i in items if i.skip is None]
                if searched and self._left() <= 0:
                    # Spent in the compile step or the session's start: no counters, harvest or second session
                    # for kernels no candidate of which could be checked (each row says so).
                    self._end_run_if_spent()
                    searched = []
                # Nsight Compute's counters only classify the kernels searched (their strategies; what is searched
                # comes from the session's timing): read where a kernel is searched, with the session closed.
                counted = bool(searched) and cuda and self.options.ncu and profiled.measured
                if searched and (counted or self._prepare_closes_session()):
                    # Nsight Compute's child and the Coder's preparation (the harvest's children compile and
                    # benchmark on the GPU) run with no GPU memory held: the session closes and opens again on the
                    # same compile.
                    stack.close()
                    if counted:
                        self.ui.message(f"{model}: reading Nsight Compute counters")
                        ncu_started = time.monotonic()
                        counters, note = ncu_counters(problem.path, timeout=min(600.0, self._left()),
                                                      variant=variant, shape=shape, **fixed)
                        ev("profiler", "ncu", kernels=len(counters or {}), note=note,
                           seconds=round(time.monotonic() - ncu_started, 2))
                        profile = build_profile(model, self.options.device, opened.kernels, profiled, counters, note)
                        items = planned(profile)  # the same kernels searched, classified by the counters
                    self._prepare(problem.path, searched, at, ev)
                    before = opened.kernels
                    session, opened = open_session()
                    _same_kernels(before, opened.kernels)
                else:  # nothing searched (no counters, nothing to harvest), or a CPU: the session stays open
                    self._prepare(problem.path, searched, at, ev)
                outcome.profile = profile
                self.run.save_profile(profile, shape)
                ev("profiler", "profile", triton_share=profile.triton_share, model_gpu_us=profile.model_gpu_us,
                   swap_bound=profile.swap_bound,
                   kernels=[k.model_dump(include={"kernel", "bottleneck", "share", "roofline_pct", "source"})
                            for k in profile.kernels])
                self.ui.problem(model, sum(1 for i in items if i.skip is None))
                bench = Benchmarker(session, full_options, self.run, self.ui, shape)
                keeper = Keeper(self.store, self.coder, bench, self.ui, device=self.options.device,
                                confirm=self.options.confirm, pin=self.options.pin, run_left=self._left,
                                shape=shape, policy=full_options.speed,
                                launch_fixed=frozenset(fixed.get("launch_configs") or ()))
                stored: dict[str, str] = {}
                tuned: dict[str, tuple[KernelState, KernelOutcome, str | None]] = {}
                searched_as: dict[str, str] = {}  # fingerprint -> the first kernel of it searched at this shape
                for item in items:
                    ev("planner", "plan", kernel=item.kernel, strategies=item.strategies, skip=item.skip)
                    info = session.kernel_info(item.kernel)
                    if stopped := self.stop_reason or self._shape_stop:  # at an earlier kernel: this row says so
                        outcome.kernels.append(KernelOutcome(
                            kernel=item.kernel, fingerprint=info.fingerprint, profile=item.profile,
                            skipped=item.skip or f"not reached: {stopped}", backward=info.backward))
                        continue
                    if item.skip is not None:
                        result = KernelOutcome(kernel=item.kernel, fingerprint=info.fingerprint, profile=item.profile,
                                               skipped=item.skip, backward=info.backward)
                        outcome.kernels.append(result)
                        if item.at_limit:
                            # Not searched, but where this compile's pick is one of a race, the next compile
                            # may lose it (H200: one pooling model's default compile about 51 us in one run,
                            # 308 us in another): the pin pass decides (keeper.Keeper._pin).
                            tuned[item.kernel] = (_fresh_state(info, model), result, None)
                        continue
                    state = _fresh_state(info, model)
                    first = searched_as.setdefault(info.fingerprint, item.kernel)
                    twin = (first, *tuned[first][::2]) if first != item.kernel and first in tuned else None
                    try:
                        result, source, state = self._tune_kernel(bench, keeper, model, info, item, state, twin)
                    except KeyboardInterrupt:  # the run record keeps what this kernel tried before Ctrl-C
                        outcome.kernels.append(_interrupted(info, item, state))
                        raise
                    outcome.kernels.append(result)
                    tuned[item.kernel] = (state, result, source)
                    if source is not None:
                        stored[item.kernel] = source
                    self.run.save()
                    self.ui.kernel_done(result)
                if self.options.device == "cuda":
                    keeper.finish_model(model, outcome, tuned, stored, ev, self.stop_reason or self._shape_stop)
        except BudgetSpent as exc:  # opening a session outlasted the budget (a large model on a CPU): not an error
            self._end_run_if_spent()
            self._shape_stop = self._shape_stop or (None if self.stop_reason else self._spent())
            self._note(outcome, f"kernel search not started: {exc} ({self.stop_reason or self._shape_stop})", ev)
        except KerneloptError as exc:
            outcome.error = str(exc)
            ev("run", "error", error=str(exc))
            self.ui.message(f"{model}: {exc}")
        finally:
            outcome.seconds = round(time.monotonic() - t0, 2)
            self._shape_left = None
            self.run.save()
        return outcome

    # --- the Coder's preparation ----------------------------------------------------------

    def _prepare_closes_session(self) -> bool:
        """Whether the session closes while the Coder prepares: on a GPU, where the Coder says its preparation
        uses the device (``Coder.prepare_uses_device``; a coder that does not say is assumed to)."""
        if self.options.device != "cuda":
            return False
        uses = getattr(self.coder, "prepare_uses_device", None)
        return True if uses is None else bool(uses(self.options.device))

    def _prepare(self, problem: Path, kernels: list[str], at: dict[str, Any], ev: Callable[..., Any]) -> None:
        """The Coder's preparation for the kernels the plan searches (the search backend's harvest; none when it
        searches none)."""
        left = self._left()  # the harvest's children are stopped where the run's budget (the shape's share) ends
        bounded: dict[str, Any] = {"budget_s": max(1.0, left)} if kernels and math.isfinite(left) else {}
        self.coder.prepare(problem, self.options.device, kernels, **at, **bounded)
        harvested = getattr(self.coder, "harvested", None)
        if harvested is not None and kernels:
            ev("coder", "harvest", kernels=len(harvested.kernels), errors=harvested.errors,
               seconds=harvested.seconds, wall_seconds=harvested.wall_seconds, jobs=harvested.jobs)

    # --- the model's compile settings ----------------------------------------------------

    def _note(self, outcome: ProblemOutcome, note: str, ev: Callable[..., Any]) -> None:
        """``note`` in the problem's record (``notes``), the trace and the log."""
        outcome.notes.append(note)
        ev("planner", "note", note=note)
        self.ui.message(f"{outcome.model}: {note}")

    def _compile_step(self, problem: Any, outcome: ProblemOutcome, factory: Callable[..., Any],
                      options: Any, ev: Callable[..., Any]) -> str | None:
        """The compile the kernels are tuned on: model.json's, or the best of this run's trials.

        A problem with SHAPES chooses per declared shape, here at the one being tuned (its own ``compile_at``
        entry), spending at most that shape's share of the run's budget (``compile_choice.shape_deadline``)."""
        from ..capture.shapes import split_name
        from ..capture.variants import MODEL_VARIANTS
        from . import compile_choice

        model, shape = problem.id, problem.shape
        previous = self.store.compile_variant(model, shape) if self.store is not None else None
        variants = self.options.compile_variants
        if variants is None:
            variants = list(MODEL_VARIANTS) if self.options.device == "cuda" else []
        if not variants:
            if previous is not None:
                outcome.compile = compile_choice.CompileOutcome(previous=previous, chosen=previous,
                                                                note=f"model.json's {previous!r}")
            return previous
        elsewhere: set[str] = set()
        if shape is not None and self.store is not None:
            # The settings chosen at the problem's other shapes go first (compile_choice.order): a ViT block's
            # max-autotune, chosen at batch 64, was stopped at batch 256 behind a slower setting (H100, 2026-12-07).
            try:
                elsewhere = {c.variant for c in self.store.compile_choices(model)}
            except KerneloptError:
                pass
        # Kernels with an active version at this shape were tuned on its compile.
        committed = [k for k in self.store.kernel_names(model) if split_name(k)[1] == shape
                     and (m := self.store.manifest(model, k)) is not None and m.active is not None
                     ] if self.store is not None else []
        at = f" at shape {shape}" if shape is not None else ""
        self.ui.message(f"{model}: choosing the model's compile settings{at} ({', '.join(variants)})")

        def open_session() -> Any:
            where: dict[str, Any] = {"shape": shape} if shape is not None else {}
            return factory(problem.path, self.options.device, options, progress=self.ui.message, **where)

        left = self._left  # at a declared shape, its share of the run's budget (set by tune_problem)
        # The run record holds the outcome while it is filled: a run stopped during the trials keeps them.
        outcome.compile = compile_choice.CompileOutcome()
        chosen, verdict, graphs = compile_choice.choose(
            open_session, variants, previous=previous, measured=self.options.device == "cuda",
            say=lambda text: self.ui.message(f"{model}: {text}"), ev=ev, shape=shape, committed=committed,
            left=left, confirm_left=self._run_left, first=elsewhere, into=outcome.compile)
        outcome.compile = chosen
        if self.run.record.environment is None and verdict is not None:  # a run whose searches are all skipped
            self.run.record.environment = verdict.environment
        if self.options.device == "cuda" and self.store is not None:
            from ..capture.training import is_training

            compile_choice.record(self.store, model, chosen, verdict, training=is_training(problem), shape=shape,
                                  graphs=graphs)
        ev("planner", "compile", chosen=chosen.chosen, previous=previous, stored=chosen.stored, note=chosen.note)
        self.ui.message(f"{model}: compile{at}: {chosen.note}")
        self.run.save()
        return chosen.chosen

    def _launch_configs(self, model: str, variant: str | None, shape: str | None) -> dict[str, dict[str, int]] | None:
        """The launch configurations stored with ``variant`` when it is model.json's setting at ``shape`` (None:
        none)."""
        if variant is None or self.store is None:
            return None
        try:
            choice = self.store.compile_choice(model, shape)
        except KerneloptError:
            return None
        return choice.launch_configs if choice is not None and choice.variant == variant else None

    # --- one kernel ---------------------------------------------------------------------

    def _tune_kernel(self, bench: Benchmarker, keeper: Keeper, model: str, info: KernelInfo,
                     item: PlanItem, state: KernelState,
                     twin: tuple[str, KernelState, str | None] | None = None,
                     ) -> tuple[KernelOutcome, str | None, KernelState]:
        """Search ``info`` and keep its best; ``twin``: (name, search state, stored source) of a kernel of the same
        fingerprint searched before at this shape (Inductor writes one text twice, e.g. a model's two add +
        LayerNorm kernels): its best candidate goes through this kernel's own checks and the search is not run
        again (it would propose the same candidates)."""
        original = state.original
        result = KernelOutcome(kernel=info.name, fingerprint=info.fingerprint, profile=item.profile,
                               backward=info.backward)
        self.ui.kernel(model, info.name, self.options.budget_s * self._share)
        ev = lambda role, event, **data: self.run.event(role, event, model=model, kernel=info.name, **data)  # noqa: E731

        active, active_verdict = keeper.active(model, info, ev), None
        if active is not None:
            active_verdict = bench.judge(model, state, Proposal(
                source=active.source, origin=f"active:v{active.record.version}",
                rationale="the committed active version"), ev)
            if active_verdict is not None and active_verdict.status != "rejected":
                state.best, state.best_origin = active.source, f"active:v{active.record.version}"
                state.best_score = score(active_verdict) or 1.0
                state.best_kernel_speedup = (active_verdict.kernel_timing.speedup if active_verdict.kernel_timing
                                             else None)
        rounds = 0
        budget_stop: str | None = None  # the kernel or run budget ended the search (said in the result)
        limit_stop: str | None = None  # the best candidate came near the hardware limit (said in the result)
        done_stop: str | None = None  # the coder had nothing more to propose (said in the result)
        if twin is not None:
            name, twin_state, twin_source = twin
            seed = twin_source or _twin_best(keeper, twin_state)
            twin_note = (f"the same compiler kernel as {name} (equal fingerprint): "
                         + ("its best candidate checked here" if seed is not None
                            else "its search found nothing faster") + "; not searched again")
            if seed is not None and (budget_stop := self._out_of_budget(state, state.estimate())):
                twin_note = f"the same compiler kernel as {name} (equal fingerprint); not searched again"
            elif seed is not None:
                bench.judge(model, state, Proposal(source=seed, origin=f"twin:{name}", rationale=(
                    f"the best candidate of {name}, the same compiler kernel (equal fingerprint)")), ev)
            ev("planner", "stop", reason=twin_note)
        while (twin is None and rounds < self.options.max_rounds
               and not (self.stop_reason or self._shape_stop)):
            ctx = CoderContext(model=model, device=self.options.device, kernel=info, original=original,
                               best=state.best, best_origin=state.best_origin, profile=item.profile,
                               attempts=list(state.attempts), round=rounds, strategies=item.strategies,
                               compile=self._variant)
            why = self._out_of_budget(state, state.estimate())
            if why:
                ev("planner", "stop", reason=why)
                budget_stop = why
                self._end_run_if_spent()
                break
            proposals = self.coder.propose(ctx)
            error = getattr(self.coder, "last_error", None)
            reply: Any = getattr(self.coder, "last_reply", None)  # optional on a coder; checked with hasattr below
            ev("coder", "proposals", round=rounds, count=len(proposals), origins=[p.origin for p in proposals],
               error=error, reply=reply.model_dump(mode="json") if hasattr(reply, "model_dump") else None)
            if not proposals:
                if error and not self.coder.stopped:
                    rounds += 1  # a reply without usable code: the next round's prompt says why
                    continue
                done_stop = self.coder.stopped or "the coder has nothing new to try"
                ev("planner", "stop", reason=done_stop)
                break
            why = None
            for proposal in proposals:
                why = self._out_of_budget(state, state.estimate())
                if why:
                    ev("planner", "stop", reason=why)
                    budget_stop = why
                    self._end_run_if_spent()
                    break
                bench.judge(model, state, proposal, ev)
                reached = (limit_pct(item.profile, state.best_kernel_speedup)
                           if state.best_kernel_speedup is not None and state.best_origin != "compiler" else None)
                if reached is not None and reached >= LIMIT_PCT:
                    why = (f"the best candidate reaches {reached:.0f}% of the kernel's memory limit (the measured "
                           f"copy bandwidth), at least {LIMIT_PCT:.0f}%: search stopped")
                    ev("planner", "stop", reason=why)
                    limit_stop = why
                    break
            if why:
                break
            rounds += 1
        if self.coder.stopped:
            self.stop_reason = self.coder.stopped
        source = keeper.keep(model, info, state, result, active, active_verdict, ev)
        _tally(result, state)
        if limit_stop:
            result.message += f"; {limit_stop}"
        if twin is not None:
            result.message += f"; {twin_note}"
        if done_stop and not budget_stop and not limit_stop:
            result.message += f"; search ended before its budget: {done_stop}"
        if budget_stop and budget_stop.startswith("kernel budget"):
            # On a CPU one candidate's checks take tens of seconds: the budget, not the ideas, ran out.
            result.message += (f"; stopped by the {budget_stop} after {result.attempts} candidate(s): "
                               f"raise --budget-s to try more")
        return result, source, state


def _twin_best(keeper: Keeper, state: KernelState) -> str | None:
    """The source a kernel's twin starts from when the twin's search stored nothing: its near miss (correct, faster
    alone beyond noise, the model faster), else its best correct candidate; None when the compiler's stayed best."""
    sha = keeper.near_miss(state)
    if sha is not None:
        return state.sources.get(sha)
    return None if state.best_origin == "compiler" or state.best_origin.startswith("active:") else state.best


def _same_kernels(before: list[KernelInfo], after: list[KernelInfo]) -> None:
    """The session opened again after the Coder's preparation compiles the kernels the plan was made on (the same
    problem and settings, Inductor's FX graph cache): a difference is the compiler's, said as the problem's error."""
    names, again = {k.name for k in before}, {k.name for k in after}
    if names != again:
        differ = sorted(names ^ again)
        raise KerneloptError(f"the model compiled other Triton kernels when the session opened again after the "
                             f"harvest ({len(differ)} differ: {', '.join(differ[:4])}{', ...' if len(differ) > 4 else ''}); "
                             f"nothing was searched")


def _tally(result: KernelOutcome, state: KernelState) -> None:
    """The kernel's attempts into its outcome: count, history, outcomes by stage, checking time."""
    result.attempts = sum(1 for a in state.attempts if a.status not in ("duplicate",))
    result.gpu_seconds = round(state.spent, 2)
    result.history = list(state.attempts)
    for a in state.attempts:
        key = a.status if a.status in ("accepted", "correct", "reviewed") else (
            f"rejected:{a.stage}" if a.status == "rejected" else None)
        if key:
            result.by_stage[key] = result.by_stage.get(key, 0) + 1


def _interrupted(info: KernelInfo, item: PlanItem, state: KernelState) -> KernelOutcome:
    """The outcome of a kernel whose search Ctrl-C stopped: the candidates checked so far, nothing kept."""
    result = KernelOutcome(kernel=info.name, fingerprint=info.fingerprint, profile=item.profile,
                           backward=info.backward)
    _tally(result, state)
    result.message = (f"interrupted (Ctrl-C) after {result.attempts} candidate(s) were checked; "
                      f"nothing was kept for this kernel")
    return result


def _fresh_state(info: KernelInfo, model: str) -> KernelState:
    """A kernel's search state before any candidate: the compiler's kernel in candidate format is the best."""
    from ..candidate import render_dump

    original = render_dump(info, model)
    return KernelState(info=info, original=original, best=original)
