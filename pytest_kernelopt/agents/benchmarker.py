"""The Benchmarker role: judge the Coder's candidates in the problem's verification session.

One :class:`Benchmarker` per problem, around its open session (``VerifySession`` or a
test's fake). :meth:`Benchmarker.judge` sends a proposal through the Reviewer and, if it
passes, through the cascade with the short exploration timing, records the attempt on
the kernel's :class:`KernelState` and moves the search's "best" when the candidate is
faster (:func:`score`, the kernel alone when timed). :meth:`Benchmarker.confirm` and
:meth:`Benchmarker.model_check` time at the verifier's full length, which alone decides
what is stored (the winner of many short races is biased upwards); what is stored is the
keeper's business (``keeper.py``).
"""

from __future__ import annotations

import contextlib
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator

from ..errors import VerifierError
from ..records import KernelInfo, Verdict
from .reviewer import review
from ..runs.records import Attempt, Proposal
from ..runs.trace import RunDir
from .ui import UI

IMPROVE = 0.01  # a launch point must be this much faster (kernel alone) to become the search's best


@dataclass
class KernelState:
    """One kernel's search so far: every attempt, the correct candidates' verdicts and sources, the best."""

    info: KernelInfo
    original: str
    best: str
    best_origin: str = "compiler"
    best_score: float = 1.0
    # The best's kernel time against the compiler kernel's (None when only the model was timed).
    best_kernel_speedup: float | None = 1.0
    attempts: list[Attempt] = field(default_factory=list)
    verdicts: dict[str, Verdict] = field(default_factory=dict)  # sha -> verdict (non-rejected)
    sources: dict[str, str] = field(default_factory=dict)  # sha -> source
    spent: float = 0.0

    def estimate(self) -> float:
        """Device seconds the next candidate will likely take: the median of those judged so far."""
        times = [a.seconds for a in self.attempts if a.status in ("accepted", "correct", "rejected") and a.seconds]
        return statistics.median(times) if times else 0.0


def score(verdict: Verdict) -> float | None:
    """How fast a correct candidate is, for the search's direction: the kernel alone when timed."""
    timing = verdict.kernel_timing or verdict.model_timing
    return timing.speedup if timing is not None else None


class Benchmarker:
    def __init__(self, session: Any, full_options: Any, run: RunDir, ui: UI, shape: str | None = None):
        """``session`` times with the exploration's short options; ``full_options`` are the verifier's own;
        ``shape``: the problem's declared shape it is open at (None: a problem without SHAPES)."""
        self.session = session
        self.shape = shape
        self.full_options = full_options
        self.run = run
        self.ui = ui

    def judge(self, model: str, state: KernelState, proposal: Proposal, ev: Callable[..., Any]) -> Verdict | None:
        """Review, then verify ``proposal`` (briefly timed); None when the Reviewer stopped it."""
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
        file = self.run.save_candidate(model, state.info.name, r.sha256, proposal.source, self.shape)
        label = f"{proposal.origin} ({Path(file).name})"
        t0 = time.monotonic()
        try:
            verdict = self.session.verify(state.info.name, source_of(proposal.source, label))
        except VerifierError:
            state.spent += time.monotonic() - t0
            raise  # the verifier's own failure: never the candidate's; the problem stops here
        seconds = time.monotonic() - t0
        state.spent += seconds
        failed = next((s for s in verdict.stages if s.passed is False), None)
        attempt = Attempt(kernel=state.info.name, origin=proposal.origin, rationale=proposal.rationale, sha256=r.sha256,
                          status=verdict.status, stage=failed.name if failed and verdict.status == "rejected" else None,
                          reason=verdict.reason_for_agents(), model_timing=verdict.model_timing,
                          kernel_timing=verdict.kernel_timing,
                          seconds=round(seconds, 2), file=file,
                          errors=[e for e in verdict.errors if e.candidate_vs_fp64 is not None])
        state.attempts.append(attempt)
        ev("benchmarker", "verdict", origin=proposal.origin, status=verdict.status, reason=verdict.reason_for_agents(),
           speedup=verdict.model_timing.speedup if verdict.model_timing else None,
           kernel_speedup=verdict.kernel_timing.speedup if verdict.kernel_timing else None, file=file,
           seconds=round(seconds, 2), stages={st.name: round(st.seconds, 2) for st in verdict.stages})
        self.ui.attempt(attempt, state.spent)
        if verdict.status != "rejected":
            state.verdicts[r.sha256] = verdict
            state.sources[r.sha256] = proposal.source
            s = score(verdict)
            if s is not None and s > state.best_score * (1 + IMPROVE):
                state.best, state.best_origin, state.best_score = proposal.source, proposal.origin, s
                state.best_kernel_speedup = verdict.kernel_timing.speedup if verdict.kernel_timing else None
        return verdict

    @contextlib.contextmanager
    def full_length(self) -> Iterator[None]:
        """The session times with the verifier's full-length options inside (exploration's are short)."""
        session = self.session
        screen, session.options = session.options, self.full_options or session.options
        try:
            yield
        finally:
            session.options = screen

    def confirm(self, state: KernelState, sha: str, label: str, ev: Callable[..., Any]) -> Verdict:
        """The full-length check of one candidate (what decides whether it is stored)."""
        from ..verify import source_of

        t0 = time.monotonic()
        try:
            with self.full_length():
                verdict = self.session.verify(state.info.name, source_of(state.sources[sha], label))
        finally:
            state.spent += time.monotonic() - t0
        ev("benchmarker", "confirm", origin=label, status=verdict.status, reason=verdict.reason_for_agents(),
           speedup=verdict.model_timing.speedup if verdict.model_timing else None,
           ci=[verdict.model_timing.ci_low, verdict.model_timing.ci_high] if verdict.model_timing else None)
        return verdict

    def model_check(self, sources: dict[str, str], label: str, ev: Callable[..., Any]) -> Verdict:
        """The model with ``sources`` swapped in, timed at full length (what decides)."""
        from ..verify import source_of

        with self.full_length():
            verdict = self.session.verify_model({k: source_of(s, f"{k} ({label})") for k, s in sources.items()})
        ev("benchmarker", "model", label=label, kernels=sorted(sources), status=verdict.status,
           reason=verdict.reason_for_agents(),
           timing=verdict.model_timing.model_dump() if verdict.model_timing else None)
        return verdict
