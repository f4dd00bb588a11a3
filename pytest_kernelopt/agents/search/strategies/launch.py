"""``launch``: coordinate descent over the launch configuration of the best candidate so far.

Every neighbour not yet tried (:mod:`pytest_kernelopt.candidate.launch_space`: single steps, then diagonal steps
that keep the tile size or the work per thread), at most ``launch_per_round`` a round;
when the best stops changing, every neighbour of it has been tried and the search ends.
"""

from __future__ import annotations

from ....store import sha256_text
from ....candidate.launch_space import Limits, describe, neighbours, read_point, with_point
from ....runs.records import CoderContext, Proposal
from .base import SearchState

# In interpreter mode nothing is timed, so the launch search has no direction: a few
# neighbours still exercise the loop and the cascade.
CPU_LAUNCH_POINTS = 2


def propose(search: SearchState, ctx: CoderContext, tried: set[str], arg: str | None) -> list[Proposal]:
    point = read_point(ctx.best)
    if not point:
        return []
    limits = Limits(ctx.kernel, ctx.best)
    out = []
    for p in neighbours(point, limits):
        text = with_point(ctx.best, p)
        if sha256_text(text) in tried:
            continue
        changed = {k: v for k, v in p.items() if point.get(k) != v}
        out.append(Proposal(source=text, origin=f"launch:{describe(p)}",
                            rationale=f"one step from the best so far ({ctx.best_origin}, {describe(point)}): "
                                      f"{describe(changed)}"))
    if search.device != "cuda":
        left = CPU_LAUNCH_POINTS - search.cpu_points.get(ctx.kernel.name, 0)
        out = out[:max(0, left)]
        search.cpu_points[ctx.kernel.name] = search.cpu_points.get(ctx.kernel.name, 0) + len(out)
    return out[: search.launch_per_round]
