"""The tuning loop: Profiler -> Planner -> (Coder -> Reviewer -> Benchmarker)* -> store.

Per problem: the Coder prepares (the search backend harvests Inductor's
alternatives in a child process), Nsight Compute reads counters where it runs, and
one verification session opens (the problem compiled once). The Profiler measures
the compiled model in that session and the Planner orders its kernels. Per kernel,
the active committed version (if any, and not stale) is judged first and becomes
the starting point; then the Coder proposes candidates round after round, the
Reviewer stops what need not run, and the Benchmarker (the session) judges the
rest. A kernel's search ends when the Coder has nothing new, its budget is spent,
or the run's budget or the backend's cost limit is reached.

What is stored: the candidate with the best whole-model speedup among those the
cascade *accepted* (faster than the compiler's kernel beyond noise), and only if
it also beats the active version: its model interval lies entirely above the
active version's, both measured in this session against the same compiled
baseline. Then the combine pass (``_combine``) tries the kernels' near misses together:
versions too small to clear the model-level gain alone are stored as a set when the
model with all of them clears it. Then the pin pass (``_pin``) stores, for kernels whose
compiler pick varies between compiles, the fastest configuration the run measured. On a
CPU (interpreter mode) speed is not measured and nothing is stored.
Every store write is atomic and ``run.json`` is rewritten after each kernel, so
Ctrl-C keeps what was accepted and leaves no half-written file.
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from .. import settings
from ..errors import KerneloptError, StoreError, VerifierError
from ..records import KernelInfo, Verdict
from ..store import sha256_text
from .coder import Coder
from .planner import MIN_SHARE, PlanItem, plan
from .run_records import Attempt, CoderContext, KernelOutcome, ProblemOutcome, Proposal
from .reviewer import review
from .trace import RunDir

IMPROVE = 0.01  # a launch point must be this much faster (kernel alone) to become the search's best


@dataclass
class TuneOptions:
    device: str
    # Defaults shared with the command line and the gate come from ..settings (one definition).
    budget_s: float = settings.default("budget_s")  # device seconds per kernel
    run_budget_s: float | None = settings.default("run_budget_s")  # device seconds for the whole run
    max_rounds: int = 50
    min_share: float = MIN_SHARE  # settings.default("min_share"), the Planner's
    kernels: list[str] | None = None  # only these kernels (names)
    seeds: int = settings.default("seeds")
    seed: int | None = settings.default("seed")  # --seed: every session's draws come from it (None: the OS's)
    timeout: float = settings.default("timeout")  # one candidate's checks
    ncu: bool = True
    # Exploration times each candidate briefly (seconds of paired timing, model and kernel);
    # the best few are then confirmed with the verifier's full-length timing, which alone
    # decides what is stored (the winner of many short races is biased upwards).
    screen_seconds: float = 0.25
    # Store the fastest configuration measured for kernels whose compiler pick varies between
    # compiles (Inductor timed several configurations at the first call); see Tuner._pin.
    pin: bool = True
    confirm: int = 2


class UI:
    """What the loop tells the user; the CLI draws progress bars, tests record."""

    def message(self, text: str) -> None: ...
    def problem(self, model: str, kernels: int) -> None: ...
    def kernel(self, model: str, kernel: str, budget_s: float) -> None: ...
    def attempt(self, attempt: Attempt, spent_s: float) -> None: ...
    def kernel_done(self, outcome: KernelOutcome) -> None: ...


@dataclass
class _KernelState:
    info: KernelInfo
    original: str
    best: str
    best_origin: str = "compiler"
    best_score: float = 1.0
    attempts: list[Attempt] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # sha -> verdict (non-rejected)
    sources: dict[str, str] = field(default_factory=dict)  # sha -> source
    spent: float = 0.0


def _score(verdict: Verdict) -> float | None:
    """How fast a correct candidate is, for the search's direction: the kernel alone when timed."""
    timing = verdict.kernel_timing or verdict.model_timing
    return timing.speedup if timing is not None else None


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
        self._full_options: Any = None

    # --- budgets -----------------------------------------------------------------------

    def _run_left(self) -> float:
        if self.options.run_budget_s is None:
            return float("inf")
        return self.options.run_budget_s - (time.monotonic() - self.started)

    def _out_of_budget(self, state: _KernelState, estimate: float) -> str | None:
        if self.coder.stopped:
            return self.coder.stopped
        if state.spent + estimate > self.options.budget_s:
            return f"kernel budget: {state.spent:.0f} of {self.options.budget_s:g} s spent"
        if estimate > self._run_left():
            return f"run budget: {self.options.run_budget_s:g} s spent"
        return None

    # --- one problem --------------------------------------------------------------------

    def tune_problem(self, problem_path: Path) -> ProblemOutcome:
        from ..capture.problem import load_problem
        from ..verify import VerifyOptions, VerifySession
        from .profiler import build_profile, ncu_counters

        t0 = time.monotonic()
        problem = load_problem(problem_path)
        model = problem.id
        outcome = ProblemOutcome(model=model, problem=str(problem.path), device=self.options.device,
                                 speed_measured=self.options.device == "cuda")
        self.run.record.problems.append(outcome)
        ev = lambda role, event, **data: self.run.event(role, event, model=model, **data)  # noqa: E731
        ev("run", "problem", problem=str(problem.path))
        try:
            self.coder.prepare(problem.path, self.options.device, [])
            harvested = getattr(self.coder, "harvested", None)
            if harvested is not None:
                ev("coder", "harvest", kernels=len(harvested.kernels), errors=harvested.errors,
                   seconds=harvested.seconds)
            counters, note = None, ("Nsight Compute not run (--no-ncu): roofline estimate" if self.options.device == "cuda"
                                    else "interpreter mode: no timing; shares are shares of bytes moved")
            if self.options.device == "cuda" and self.options.ncu:
                self.ui.message(f"{model}: reading Nsight Compute counters")
                counters, note = ncu_counters(problem.path, timeout=600.0)
                ev("profiler", "ncu", kernels=len(counters or {}), note=note)
            self._full_options = VerifyOptions(seeds=self.options.seeds, seed=self.options.seed,
                                               timeout=self.options.timeout)
            options = self._full_options.model_copy(update={"model_seconds": self.options.screen_seconds,
                                                            "kernel_seconds": self.options.screen_seconds})
            factory = self.session_factory or VerifySession
            with factory(problem.path, self.options.device, options, progress=self.ui.message) as session:
                opened = session.open()
                ev("benchmarker", "opened", seconds=round(opened.seconds, 2), kernels=len(opened.kernels),
                   isolation=getattr(session, "isolation", None))
                if self.run.record.environment is None:
                    self.run.record.environment = opened.environment
                if not opened.kernels:
                    targets = sorted({e.target for e in opened.externs})
                    outcome.note = ("no Triton kernels to tune: Inductor generated none"
                                    + (f"; the model runs {len(opened.externs)} extern call(s) ({', '.join(targets)}), "
                                       "which kernelopt leaves alone" if targets else ""))
                    ev("planner", "stop", reason=outcome.note)
                    self.ui.message(f"{model}: {outcome.note}")
                    return outcome
                try:
                    profiled = session.profile()
                except KerneloptError as exc:  # measuring is ours: fall back to bytes, say why
                    from ..verify.protocol import Profiled

                    ev("profiler", "error", error=str(exc))
                    profiled, note = Profiled(measured=False), f"profiling failed ({exc}); shares from bytes moved"
                profile = build_profile(model, self.options.device, opened.kernels, profiled, counters, note)
                outcome.profile = profile
                self.run.save_profile(profile)
                ev("profiler", "profile", triton_share=profile.triton_share, model_gpu_us=profile.model_gpu_us,
                   kernels=[k.model_dump(include={"kernel", "bottleneck", "share", "roofline_pct", "source"})
                            for k in profile.kernels])
                items = plan(profile, min_share=self.options.min_share, only=self.options.kernels)
                self.ui.problem(model, sum(1 for i in items if i.skip is None))
                stored: dict[str, str] = {}
                tuned: dict[str, tuple[_KernelState, KernelOutcome, str | None]] = {}
                for item in items:
                    ev("planner", "plan", kernel=item.kernel, strategies=item.strategies, skip=item.skip)
                    info = session.kernel_info(item.kernel)
                    if item.skip is not None:
                        outcome.kernels.append(KernelOutcome(kernel=item.kernel, fingerprint=info.fingerprint,
                                                             profile=item.profile, skipped=item.skip))
                        continue
                    result, source, state = self._tune_kernel(session, model, info, item)
                    outcome.kernels.append(result)
                    tuned[item.kernel] = (state, result, source)
                    if source is not None:
                        stored[item.kernel] = source
                    self.run.save()
                    self.ui.kernel_done(result)
                    if self.stop_reason:
                        break
                if self.options.device == "cuda":
                    self._finish_model(session, model, outcome, tuned, stored, ev)
        except KerneloptError as exc:
            outcome.error = str(exc)
            ev("run", "error", error=str(exc))
            self.ui.message(f"{model}: {exc}")
        finally:
            outcome.seconds = round(time.monotonic() - t0, 2)
            self.run.save()
        return outcome

    # --- one kernel ---------------------------------------------------------------------

    def _tune_kernel(self, session: Any, model: str, info: KernelInfo,
                     item: PlanItem) -> tuple[KernelOutcome, str | None, _KernelState]:
        from ..candidate import render_dump

        original = render_dump(info, model)
        state = _KernelState(info=info, original=original, best=original)
        result = KernelOutcome(kernel=info.name, fingerprint=info.fingerprint, profile=item.profile)
        self.ui.kernel(model, info.name, self.options.budget_s)
        ev = lambda role, event, **data: self.run.event(role, event, model=model, kernel=info.name, **data)  # noqa: E731

        active, active_verdict = self._active(model, info, ev), None
        if active is not None:
            active_verdict = self._judge(session, model, state, Proposal(
                source=active.source, origin=f"active:v{active.record.version}",
                rationale="the committed active version"), ev)
            if active_verdict is not None and active_verdict.status != "rejected":
                state.best, state.best_origin = active.source, f"active:v{active.record.version}"
                state.best_score = _score(active_verdict) or 1.0
        rounds = 0
        budget_stop: str | None = None  # the kernel or run budget ended the search (said in the result)
        while rounds < self.options.max_rounds and not self.stop_reason:
            ctx = CoderContext(model=model, device=self.options.device, kernel=info, original=original,
                               best=state.best, best_origin=state.best_origin, profile=item.profile,
                               attempts=list(state.attempts), round=rounds, strategies=item.strategies)
            why = self._out_of_budget(state, self._estimate(state))
            if why:
                ev("planner", "stop", reason=why)
                budget_stop = why
                break
            proposals = self.coder.propose(ctx)
            error = getattr(self.coder, "last_error", None)
            reply = getattr(self.coder, "last_reply", None)
            ev("coder", "proposals", round=rounds, count=len(proposals), origins=[p.origin for p in proposals],
               error=error, reply=reply.model_dump(mode="json") if hasattr(reply, "model_dump") else None)
            if not proposals:
                if error and not self.coder.stopped:
                    rounds += 1  # a reply without usable code: the next round's prompt says why
                    continue
                ev("planner", "stop", reason=self.coder.stopped or "the coder has nothing new to try")
                break
            why = None
            for proposal in proposals:
                why = self._out_of_budget(state, self._estimate(state))
                if why:
                    ev("planner", "stop", reason=why)
                    budget_stop = why
                    if self._run_left() <= 0 or self.coder.stopped:
                        self.stop_reason = why
                    break
                self._judge(session, model, state, proposal, ev)
            if why:
                break
            rounds += 1
        if self.coder.stopped:
            self.stop_reason = self.coder.stopped
        source = self._keep(session, model, info, state, result, active, active_verdict, ev)
        result.attempts = sum(1 for a in state.attempts if a.status not in ("duplicate",))
        if budget_stop and budget_stop.startswith("kernel budget"):
            # On a CPU one candidate's checks take tens of seconds: the budget, not the ideas, ran out.
            result.message += (f"; stopped by the {budget_stop} after {result.attempts} candidate(s): "
                               f"raise --budget-s to try more")
        result.gpu_seconds = round(state.spent, 2)
        result.history = list(state.attempts)
        for a in state.attempts:
            key = a.status if a.status in ("accepted", "correct", "reviewed") else (
                f"rejected:{a.stage}" if a.status == "rejected" else None)
            if key:
                result.by_stage[key] = result.by_stage.get(key, 0) + 1
        return result, source, state

    def _estimate(self, state: _KernelState) -> float:
        times = [a.seconds for a in state.attempts if a.status in ("accepted", "correct", "rejected") and a.seconds]
        return statistics.median(times) if times else 0.0

    def _active(self, model: str, info: KernelInfo, ev: Callable[..., Any]) -> Any:
        if self.store is None:
            return None
        try:
            active = self.store.active_file(model, info.name)
        except StoreError as exc:
            ev("store", "active-unreadable", error=str(exc))
            self.ui.message(f"{model}/{info.name}: {exc}; tuning from the compiler's kernel")
            return None
        if active is not None and active.manifest.fingerprint != info.fingerprint:
            ev("store", "active-stale", version=active.record.version)
            return None
        return active

    def _judge(self, session: Any, model: str, state: _KernelState, proposal: Proposal,
               ev: Callable[..., Any]) -> Verdict | None:
        from ..verify import source_of

        tried = {a.sha256 for a in state.attempts}
        r = review(proposal.source, state.info, state.original, tried)
        if not r.ok:
            attempt = Attempt(kernel=state.info.name, origin=proposal.origin, rationale=proposal.rationale,
                              sha256=r.sha256, status=r.status, stage="static" if r.status == "reviewed" else None,
                              reason=r.reason)
            state.attempts.append(attempt)
            ev("reviewer", r.status, origin=proposal.origin, reason=r.reason)
            self.ui.attempt(attempt, state.spent)
            return None
        file = self.run.save_candidate(model, state.info.name, r.sha256, proposal.source)
        label = f"{proposal.origin} ({Path(file).name})"
        t0 = time.monotonic()
        try:
            verdict = session.verify(state.info.name, source_of(proposal.source, label))
        except VerifierError:
            state.spent += time.monotonic() - t0
            raise  # the verifier's own failure: never the candidate's; the problem stops here
        seconds = time.monotonic() - t0
        state.spent += seconds
        failed = next((s for s in verdict.stages if s.passed is False), None)
        attempt = Attempt(kernel=state.info.name, origin=proposal.origin, rationale=proposal.rationale, sha256=r.sha256,
                          status=verdict.status, stage=failed.name if failed and verdict.status == "rejected" else None,
                          reason=verdict.reason, model_timing=verdict.model_timing, kernel_timing=verdict.kernel_timing,
                          seconds=round(seconds, 2), file=file,
                          errors=[e for e in verdict.errors if e.candidate_vs_fp64 is not None])
        state.attempts.append(attempt)
        ev("benchmarker", "verdict", origin=proposal.origin, status=verdict.status, reason=verdict.reason,
           speedup=verdict.model_timing.speedup if verdict.model_timing else None,
           kernel_speedup=verdict.kernel_timing.speedup if verdict.kernel_timing else None, file=file,
           seconds=round(seconds, 2))
        self.ui.attempt(attempt, state.spent)
        if verdict.status != "rejected":
            state.verdicts[r.sha256] = verdict
            state.sources[r.sha256] = proposal.source
            score = _score(verdict)
            if score is not None and score > state.best_score * (1 + IMPROVE):
                state.best, state.best_origin, state.best_score = proposal.source, proposal.origin, score
        return verdict

    @contextlib.contextmanager
    def _full_length(self, session: Any) -> Iterator[None]:
        """The session times with the verifier's full-length options inside (exploration's are short)."""
        screen, session.options = session.options, self._full_options or session.options
        try:
            yield
        finally:
            session.options = screen

    def _confirm(self, session: Any, state: _KernelState, sha: str, label: str, ev: Callable[..., Any]) -> Verdict:
        """The full-length check of one candidate (what decides whether it is stored)."""
        from ..verify import source_of

        t0 = time.monotonic()
        try:
            with self._full_length(session):
                verdict = session.verify(state.info.name, source_of(state.sources[sha], label))
        finally:
            state.spent += time.monotonic() - t0
        ev("benchmarker", "confirm", origin=label, status=verdict.status, reason=verdict.reason,
           speedup=verdict.model_timing.speedup if verdict.model_timing else None,
           ci=[verdict.model_timing.ci_low, verdict.model_timing.ci_high] if verdict.model_timing else None)
        return verdict

    def _keep(self, session: Any, model: str, info: KernelInfo, state: _KernelState, result: KernelOutcome,
              active: Any, active_verdict: Verdict | None, ev: Callable[..., Any]) -> str | None:
        """Confirm the best few, store the best accepted one if it beats the active version; the source in force."""
        from ..store import accept_verdict

        active_ok = active is not None and active_verdict is not None and active_verdict.status != "rejected"
        in_force = active.source if active_ok else None
        if self.options.device != "cuda":
            correct = sum(1 for a in state.attempts if a.status == "correct")
            result.message = (f"speed not measured (interpreter mode): {correct} correct candidate(s), nothing stored "
                              f"as faster")
            return None
        if active is not None and active_verdict is not None and active_verdict.status == "rejected":
            result.message = f"the active v{active.record.version} was rejected ({active_verdict.reason}); "
        origin = {a.sha256: a.origin for a in state.attempts}
        ranked = sorted(((sha, _score(v)) for sha, v in state.verdicts.items() if not origin[sha].startswith("active:")),
                        key=lambda sv: sv[1] or 0.0, reverse=True)
        finalists = [sha for sha, score in ranked if score is not None and score > 1.0][: self.options.confirm]
        confirmed = []
        for sha in finalists:
            verdict = self._confirm(session, state, sha, f"{origin[sha]} (confirm)", ev)
            if verdict.status == "accepted" and verdict.model_timing is not None:
                confirmed.append((sha, verdict))
        if active_ok and confirmed and sha256_text(active.source) in state.sources:
            active_verdict = self._confirm(session, state, sha256_text(active.source),
                                           f"active:v{active.record.version} (confirm)", ev)
        if not confirmed:
            result.message += (f"nothing faster than the {'active version' if active_ok else 'compiler kernel'} "
                               f"beyond noise ({len(state.attempts)} candidate(s), {len(finalists)} confirmed)")
            return in_force
        sha, best = max(confirmed, key=lambda sv: sv[1].model_timing.speedup)  # type: ignore[union-attr]
        attempt = next(a for a in state.attempts if a.sha256 == sha)
        result.best_origin, result.best_timing, result.best_kernel_timing = attempt.origin, best.model_timing, best.kernel_timing
        result.best_sha256 = sha
        if active_ok and active_verdict is not None and active_verdict.model_timing is not None:
            if not best.model_timing.ci_low > active_verdict.model_timing.ci_high:  # type: ignore[union-attr]
                result.message += (f"best candidate {best.model_timing.speedup:.3f}x is not faster than the active "  # type: ignore[union-attr]
                                   f"v{active.record.version} ({active_verdict.model_timing.speedup:.3f}x) beyond noise")
                return in_force
        try:
            outcome = accept_verdict(self.store, model, info.name, state.sources[sha], best,
                                     provenance=self._provenance(attempt.origin),
                                     alternatives=self._alternatives(info))
        except StoreError as exc:
            result.message += f"not stored: {exc}"
            ev("store", "error", error=str(exc))
            return in_force
        result.message += outcome.message
        ev("store", "stored" if outcome.stored else "not-stored", message=outcome.message,
           version=outcome.record.version if outcome.record else None)
        return state.sources[sha] if self._in_store(model, info.name, result, outcome) else in_force

    # --- the whole model: kernels that are faster together ------------------------------

    def _model_check(self, session: Any, sources: dict[str, str], label: str, ev: Callable[..., Any]) -> Verdict:
        """The model with ``sources`` swapped in, timed at full length (what decides)."""
        from ..verify import source_of

        with self._full_length(session):
            verdict = session.verify_model({k: source_of(s, f"{k} ({label})") for k, s in sources.items()})
        ev("benchmarker", "model", label=label, kernels=sorted(sources), status=verdict.status, reason=verdict.reason,
           timing=verdict.model_timing.model_dump() if verdict.model_timing else None)
        return verdict

    def _finish_model(self, session: Any, model: str, outcome: ProblemOutcome,
                      tuned: dict[str, tuple[_KernelState, KernelOutcome, str | None]], stored: dict[str, str],
                      ev: Callable[..., Any]) -> None:
        """Measure the model with every version in force; try the near misses together; pin; record the baseline."""
        verdict = self._model_check(session, stored, "stored", ev) if stored else None
        combined = self._combine(session, model, tuned, stored, verdict, ev)
        if combined is not None:
            verdict = combined
        if self._pin(session, model, tuned, stored, ev):
            verdict = self._model_check(session, stored, "stored and pinned", ev)
        if verdict is None:
            return
        outcome.model_timing = verdict.model_timing
        if verdict.status != "rejected" and any(r.stored_version for _, r, _ in tuned.values()):
            self._save_baseline(model, stored, verdict, ev)

    def _near_miss(self, state: _KernelState) -> str | None:
        """The kernel's best correct candidate that is faster alone beyond noise but missed the model's threshold."""
        origin = {a.sha256: a.origin for a in state.attempts}
        best: tuple[str, float] | None = None
        for sha, v in state.verdicts.items():
            k, m = v.kernel_timing, v.model_timing
            if origin.get(sha, "").startswith("active:") or k is None or m is None:
                continue
            if k.ci_low > 1.0 and m.speedup > 1.0 and (best is None or m.speedup > best[1]):
                best = (sha, m.speedup)
        return best[0] if best else None

    def _combine(self, session: Any, model: str, tuned: dict[str, tuple[_KernelState, KernelOutcome, str | None]],
                 stored: dict[str, str], base: Verdict | None, ev: Callable[..., Any]) -> Verdict | None:
        """Store near misses of several kernels as a set when, together, they make the model faster.

        Each kernel's version must clear the model-level gain (2%) alone to be stored by its
        own search; a model of several kernels, each a little faster, can gain that much
        only together. A kernel whose compiler version is in force joins with its best
        candidate that was faster alone beyond noise; each joins after a full-length check
        of its own (correct, kernel faster, model not slower), and the set is stored only
        if the model with all of them is faster than the compiler beyond the threshold and,
        when versions are already in force, faster than the model with those beyond noise.
        Returns the set's model verdict when it was stored.
        """
        from ..store import accept_verdict

        if self.stop_reason or self.coder.stopped:
            return None
        near = {name: (state, result, sha) for name, (state, result, source) in tuned.items()
                if source is None and (sha := self._near_miss(state)) is not None}
        if not near or len(near) + len(stored) < 2:
            return None
        ev("planner", "combine", kernels=sorted(near), in_force=sorted(stored))
        self.ui.message(f"{model}: trying {len(near)} near miss(es) together with {len(stored)} version(s) in force")
        joined: dict[str, tuple[_KernelState, KernelOutcome, str, Verdict]] = {}
        for name, (state, result, sha) in near.items():
            if self._run_left() < self._estimate(state):  # the run's budget; a kernel's own was spent on search
                break
            origin = next(a.origin for a in state.attempts if a.sha256 == sha)
            v = self._confirm(session, state, sha, f"{origin} (combine)", ev)
            k, m = v.kernel_timing, v.model_timing
            if v.status != "rejected" and k is not None and m is not None and k.ci_low > 1.0 and m.speedup > 1.0:
                joined[name] = (state, result, sha, v)
            else:
                result.message += f"; near miss {origin} not confirmed at full length"
        if not joined or len(joined) + len(stored) < 2:
            return None
        sources = {**stored, **{name: state.sources[sha] for name, (state, _, sha, _) in joined.items()}}
        verdict = self._model_check(session, sources, "combined", ev)
        t = verdict.model_timing
        beats = base is None or (base.model_timing is not None and t is not None
                                 and t.ci_low > base.model_timing.ci_high)
        what = "+".join(sorted(sources))
        if verdict.status != "accepted" or t is None or not beats:
            why = verdict.reason or (f"{t.speedup:.3f}x, not beyond the threshold" if t is not None else "not timed")
            if verdict.status == "accepted" and not beats:
                why = "not faster than the versions in force beyond noise"
            for _, result, _, _ in joined.values():
                result.message += f"; together ({what}): {why}; not stored"
            ev("store", "combine-not-stored", kernels=sorted(sources), reason=why)
            return None
        for name, (state, result, sha, own) in joined.items():
            attempt = next(a for a in state.attempts if a.sha256 == sha)
            try:
                stored_outcome = accept_verdict(self.store, model, name, state.sources[sha], own, allow_no_gain=True,
                                                provenance=self._provenance(attempt.origin, "combined"),
                                                combined_timing=t,
                                                combined_with=sorted(set(sources) - {name}),
                                                alternatives=self._alternatives(state.info))
            except StoreError as exc:
                result.message += f"; not stored: {exc}"
                ev("store", "error", kernel=name, error=str(exc))
                continue
            ev("store", "stored" if stored_outcome.stored else "not-stored", kernel=name, combined=True,
               message=stored_outcome.message, version=stored_outcome.record.version if stored_outcome.record else None)
            if self._in_store(model, name, result, stored_outcome):
                result.best_origin, result.best_sha256 = attempt.origin, sha
                result.best_timing, result.best_kernel_timing = own.model_timing, own.kernel_timing
                alone = own.model_timing.speedup if own.model_timing is not None else float("nan")
                result.message = (f"alone {alone:.3f}x, under the model gain a version needs alone; stored "
                                  f"v{stored_outcome.record.version} as one of a set: the model with {what} is "
                                  f"{t.speedup:.3f}x [{t.ci_low:.3f}, {t.ci_high:.3f}]")
                stored[name] = state.sources[sha]
        return verdict

    def _pin(self, session: Any, model: str, tuned: dict[str, tuple[_KernelState, KernelOutcome, str | None]],
             stored: dict[str, str], ev: Callable[..., Any]) -> bool:
        """Fix the launch configuration of kernels whose compiler pick varies between compiles.

        Where Inductor compiled several configurations of a kernel, it times them once at
        the first call and keeps the fastest of that one noisy race, so two compiles of one
        model can run different configurations (on the H200, 51 vs 83 us for one pooling
        kernel, 77 vs 88 us for one reduction). A kernel of that kind that nothing beat beyond
        the model gain is stored ("pinned") as the fastest this run measured: its best
        candidate that was faster alone beyond noise, else the compiler's own pick of this
        compile (which every candidate tried failed to beat). Either is checked at full
        length and stored only when correct and not slower than the compiled model's.
        Returns whether anything was pinned.
        """
        from ..store import accept_verdict

        if not self.options.pin or self.stop_reason or self.coder.stopped:
            return False
        pinned = False
        for name, (state, result, _) in tuned.items():
            configs = state.info.launch.compiled_configs or 0
            if name in stored or configs < 2:
                continue
            if self._run_left() < 2 * self._estimate(state):
                result.message += "; not pinned: the run's budget is spent"
                break
            choice: tuple[str, str, Verdict] | None = None
            sha = self._near_miss(state)
            if sha is not None:
                origin = next(a.origin for a in state.attempts if a.sha256 == sha)
                v = self._confirm(session, state, sha, f"{origin} (pin)", ev)
                k, m = v.kernel_timing, v.model_timing
                if v.status != "rejected" and k is not None and m is not None and k.ci_low > 1.0 and m.speedup >= 1.0:
                    choice = (origin, state.sources[sha], v)
            if choice is None:
                compiler = sha256_text(state.original)
                state.sources[compiler] = state.original
                v = self._confirm(session, state, compiler, "compiler (pin)", ev)
                m = v.model_timing
                if v.status != "rejected" and m is not None and m.ci_high >= 1.0:
                    choice = ("compiler", state.original, v)
            if choice is None:
                result.message += "; not pinned: no configuration measured at least as fast as the compiler's pick"
                continue
            origin, text, verdict = choice
            try:
                out = accept_verdict(self.store, model, name, text, verdict, allow_no_gain=True,
                                     provenance=self._provenance(origin, "pinned"),
                                     alternatives=self._alternatives(state.info))
            except StoreError as exc:
                result.message += f"; not pinned: {exc}"
                ev("store", "error", kernel=name, error=str(exc))
                continue
            ev("store", "pinned" if out.stored else "not-stored", kernel=name, origin=origin, message=out.message,
               version=out.record.version if out.record else None)
            if not self._in_store(model, name, result, out):
                continue
            t = verdict.model_timing
            result.pinned = True
            result.best_origin, result.best_sha256 = origin, sha256_text(text)
            result.best_timing, result.best_kernel_timing = t, verdict.kernel_timing
            result.message += (f"; pinned v{out.record.version} ({origin}, {t.speedup:.3f}x): Inductor picks among "  # type: ignore[union-attr]
                               f"{configs} launch configurations by timing them at each compile, so its pick varies")
            stored[name] = text
            pinned = True
        return pinned

    def _provenance(self, origin: str, how: str | None = None) -> Any:
        """Who proposed a version this run stores: the candidate's origin, the backend, its spend so far."""
        from ..store import Provenance

        spend = self.coder.spend
        return Provenance(proposed_by=f"kernelopt tune ({origin}{', ' + how if how else ''})", agent=origin,
                          backend=self.coder.name, llm_model=self.coder.model,
                          cost_usd=round(spend.usd, 4) if spend.usd else None,
                          tokens=(spend.input_tokens + spend.output_tokens) or None)

    def _alternatives(self, info: Any) -> list[tuple[str, str]]:
        """(variant, source) of the harvested Inductor compiles of ``info``: what a stored version's recipe
        may start from (recipe.derive_recipe)."""
        from .harvest import matches

        harvested = getattr(self.coder, "harvested", None)
        return [(alt.variant, alt.source) for alt in getattr(harvested, "kernels", []) if matches(info, alt)]

    def _in_store(self, model: str, name: str, result: KernelOutcome, outcome: Any) -> bool:
        """Record a stored (or already active) version on the kernel's outcome; whether there is one."""
        if outcome.record is None or not (outcome.stored or outcome.active):
            return False
        result.stored_version = outcome.record.version
        result.stored_file = str((self.store.kernel_dir(model, name) / outcome.record.file).relative_to(self.store.root))
        return True

    def _save_baseline(self, model: str, stored: dict[str, str], verdict: Verdict, ev: Callable[..., Any]) -> None:
        """kernels/<model>/model.json: the speedup of the model with every version in force (the gate's reference)."""
        from datetime import datetime, timezone

        from ..store import model_baseline

        if verdict.environment is None:
            return
        try:
            versions = {}
            for name in stored:
                active = self.store.active_file(model, name)
                if active is not None:
                    versions[name] = active.record.version
            self.store.save_baseline(model, model_baseline(verdict, versions, datetime.now(timezone.utc)))
        except StoreError as exc:
            ev("store", "error", error=f"model baseline not recorded: {exc}")
