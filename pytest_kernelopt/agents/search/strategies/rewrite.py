"""``rewrite:<rule>``: a source rewrite (:mod:`..rewrites`) of the best candidate so far.

Which rules a kernel gets follows its bottleneck class (each rule's ``classes``).
"""

from __future__ import annotations

from ....store import sha256_text
from ....candidate.rewrites import REWRITES, RULE_CLASSES, RULES_FIRST
from ....runs.records import CoderContext, Proposal
from .base import SearchState


def propose(search: SearchState, ctx: CoderContext, tried: set[str], arg: str | None) -> list[Proposal]:
    rule = REWRITES.get(arg or "")
    if rule is None:
        return []
    text = rule(ctx.best)
    if sha256_text(text) in tried or text == ctx.best:
        return []
    strategy = f"rewrite:{arg}"
    return [Proposal(source=text, origin=strategy, rationale=f"{strategy} applied to the best so far ({ctx.best_origin})")]


def plan_first(bottleneck: str) -> list[str]:
    """``rewrite:<rule>`` for the rules registered ``first=True`` that apply to the class (before the harvest)."""
    return [f"rewrite:{name}" for name, classes in RULE_CLASSES.items() if bottleneck in classes and name in RULES_FIRST]


def plan(bottleneck: str) -> list[str]:
    """``rewrite:<rule>`` for every other rule that applies to the class, in registration order."""
    return [f"rewrite:{name}" for name, classes in RULE_CLASSES.items()
            if bottleneck in classes and name not in RULES_FIRST]
