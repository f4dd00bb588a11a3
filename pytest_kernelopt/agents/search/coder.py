"""The ``search`` backend: offline, no network, no key.

Per kernel, in rounds, the strategies the Planner chose (:mod:`.strategies`, one module
each) in plan order:

1. ``rewrite:<rule>`` for the rules registered ``first=True`` (the L2 rules of memory-bound
   kernels), on the compiler's own kernel, where they were measured to win.
2. ``harvest``: Inductor's own alternatives for the same kernel: the other launch
   configurations the default compile built (it raced them once, briefly, at the first
   call) and recompiles (:mod:`..harvest`: max-autotune, coordinate descent, looped
   reductions), each a drop-in candidate; then the other ``rewrite:<rule>`` entries
   (:mod:`pytest_kernelopt.candidate.rewrites`, where each rule says what it changes and for which classes). Each
   rule is applied to the best candidate so far, so rules that win compose.
3. ``launch``: coordinate descent over the launch configuration of the best
   candidate so far (:mod:`pytest_kernelopt.candidate.launch_space`: single steps, then diagonal steps that
   keep the tile size or the work per thread): every neighbour not yet tried, each
   judged by the session; when the best stops changing, every neighbour of it has
   been tried and the search ends.

Each once-only strategy is asked once per kernel, in plan order, one per round until
one proposes something; then the repeating one (``launch``) round after round. The loop
decides what "best" is from the verdicts; this module never times anything.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ... import settings

from ...candidate.rewrites import REWRITES, approximate_divisions, drop_eviction_hints
from ...runs.records import CoderContext, Proposal
from ...store import sha256_text
from ..coder import Backend, Spend
from ..harvest import CPU_VARIANTS, HARVEST_VARIANTS, HarvestResult, harvest
from .strategies import parse

HARVEST_TIMEOUT = 900.0

__all__ = ["BACKEND", "HARVEST_TIMEOUT", "REWRITES", "SearchCoder", "SearchOptions", "approximate_divisions", "drop_eviction_hints"]


class SearchCoder:
    name = "search"
    model = None

    def __init__(self, *, variants: list[str] | None = None, launch_per_round: int = 8,
                 harvest_timeout: float = HARVEST_TIMEOUT, harvest_jobs: int | None = None, progress: Any = None):
        self.variants = variants
        self.harvest_jobs = harvest_jobs
        self.launch_per_round = launch_per_round
        self.harvest_timeout = harvest_timeout
        self.progress = progress or (lambda _: None)
        self.harvested: HarvestResult = HarvestResult()
        self._device = "cpu"
        self._done: dict[str, set[str]] = {}  # kernel -> once-only plan entries already asked
        self.cpu_points: dict[str, int] = {}  # the launch strategy's count in interpreter mode

    @property
    def device(self) -> str:
        return self._device

    @property
    def spend(self) -> Spend:
        return Spend()

    @property
    def stopped(self) -> str | None:
        return None

    def _variants(self, device: str) -> list[str]:
        """The compile settings harvested on ``device``."""
        return self.variants if self.variants is not None else (
            list(HARVEST_VARIANTS) if device == "cuda" else list(CPU_VARIANTS))

    def prepare_uses_device(self, device: str) -> bool:
        return bool(self._variants(device))  # each harvest child compiles (and max-autotune benchmarks) there

    def prepare(self, problem: Path, device: str, kernels: list[str], shape: str | None = None,
                budget_s: float | None = None) -> None:
        """Harvest Inductor's alternatives (:mod:`..harvest`: whole-model compiles, whichever of them are
        searched) when ``kernels`` are searched, within ``budget_s`` (the run's, where sooner than the harvest's
        own limit); none otherwise."""
        self._device = device
        variants = self._variants(device)
        self._done.clear()
        self.cpu_points.clear()
        if not variants or not kernels:
            self.harvested = HarvestResult()
            return
        self.progress(f"harvesting Inductor's alternatives ({', '.join(variants)})")
        limit = self.harvest_timeout if budget_s is None else min(self.harvest_timeout, budget_s)
        self.harvested = harvest(problem, device, variants, limit, shape, jobs=self.harvest_jobs)

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        done = self._done.setdefault(ctx.kernel.name, set())
        tried = {a.sha256 for a in ctx.attempts} | {sha256_text(ctx.original)}
        entries = list(dict.fromkeys(ctx.strategies))
        for entry in entries:  # once-only strategies, in plan order: one per round until one has something
            strategy, arg = parse(entry)
            if entry in done or (strategy is not None and strategy.repeats):
                continue
            done.add(entry)
            proposals = strategy.propose(self, ctx, tried, arg) if strategy is not None else []
            if proposals:
                return proposals
        for entry in entries:  # then the descent, round after round
            strategy, arg = parse(entry)
            if strategy is not None and strategy.repeats:
                proposals = strategy.propose(self, ctx, tried, arg)
                if proposals:
                    return proposals
        return []


class SearchOptions(BaseModel):
    """The options ``kernelopt tune`` offers this backend (``--harvest-jobs``); the constructor takes more."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    harvest_jobs: int | None = settings.field("harvest_jobs")


BACKEND = Backend(coder=SearchCoder, options=SearchOptions)  # no SDK
