"""The search backend's strategies: one module each, one line in :data:`REGISTRY`.

A plan entry names a strategy, with an argument after a colon (``rewrite:eviction``);
the Planner gives each kernel the entries of every registered strategy for its
bottleneck class (:meth:`.base.Strategy.entries`), in the order of this table, and the
search backend (``agents/search/coder.py``) asks them in that order: once-only strategies
first, one each round until one proposes something, then the repeating one (a descent)
round after round. Strategies never time anything; the loop judges what they propose.

    rewrite-first (rewrite.py) the rules registered ``first=True``, on the compiler's kernel
    harvest   (harvest.py)   Inductor's own alternatives for the kernel: other forms, then the rest
    rewrite   (rewrite.py)   a source rewrite rule (``candidate/rewrites.py``) of the best so far
    launch    (launch.py)    coordinate descent over the best's launch configuration

Adding a strategy: a module here with ``propose(search, ctx, tried, arg) -> list[Proposal]``
(see :mod:`.base`) and one line below. Adding a rewrite rule: one decorated function in
``candidate/rewrites.py``. Adding a Coder backend (an ``--agent`` value): see ``agents/backends.py``.
"""

from __future__ import annotations

from . import harvest, launch, rewrite
from .base import SearchState, Strategy

REGISTRY: dict[str, Strategy] = {
    # The rules measured to win on the compiler's own kernel, before the harvest's many candidates
    # (their entries are ``rewrite:<rule>``, asked through the ``rewrite`` strategy).
    "rewrite-first": Strategy(rewrite.propose, plan=rewrite.plan_first),
    "harvest": Strategy(harvest.propose, plan=harvest.plan),  # harvest:forms, then harvest
    "rewrite": Strategy(rewrite.propose, plan=rewrite.plan),
    "launch": Strategy(launch.propose, repeats=True),
}


def parse(entry: str) -> tuple[Strategy | None, str | None]:
    """The strategy a plan entry names (None: none registered by that name) and its argument."""
    name, _, arg = entry.partition(":")
    return REGISTRY.get(name), arg or None


__all__ = ["REGISTRY", "SearchState", "Strategy", "parse"]
