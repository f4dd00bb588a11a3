"""What a search strategy is: a function from the search's state and a kernel's context to proposals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Protocol

from ....runs.records import CoderContext, Proposal


class SearchState(Protocol):
    """What the search backend (``SearchCoder``) lends its strategies; reset per problem."""

    harvested: Any  # harvest.HarvestResult: Inductor's alternatives for this problem
    launch_per_round: int
    cpu_points: dict[str, int]  # kernel -> launch points proposed in interpreter mode

    @property
    def device(self) -> str: ...


# propose(search, ctx, tried, arg): ``tried`` holds the sha256 of every source already judged
# for the kernel (never propose those again); ``arg`` is what follows the strategy's name in the
# plan ("eviction" in "rewrite:eviction"), else None.
Propose = Callable[[SearchState, CoderContext, set[str], "str | None"], list[Proposal]]


@dataclass(frozen=True)
class Strategy:
    propose: Propose
    # False: asked once per kernel, in plan order; True: asked round after round, after the
    # once-only strategies, until it has nothing new (a descent from the best so far).
    repeats: bool = False
    # The plan entries this strategy gives a kernel of a bottleneck class (planner.STRATEGIES);
    # None: its own name, for every class.
    plan: Callable[[str], list[str]] | None = None

    def entries(self, name: str, bottleneck: str) -> list[str]:
        return self.plan(bottleneck) if self.plan is not None else [name]
