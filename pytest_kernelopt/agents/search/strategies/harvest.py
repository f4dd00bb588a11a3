"""``harvest``: Inductor's own alternatives for the kernel, each a drop-in candidate.

The other launch configurations the default compile built (it raced them once, briefly,
at the first call), then the kernel as other compiles made it (:mod:`..harvest`:
max-autotune, coordinate descent, looped reductions).
"""

from __future__ import annotations

from ....store import sha256_text
from ...harvest import matches
from ....candidate.launch_space import describe, read_point, with_point
from ....runs.records import CoderContext, Proposal
from .base import SearchState


def propose(search: SearchState, ctx: CoderContext, tried: set[str], arg: str | None) -> list[Proposal]:
    out: list[Proposal] = []
    seen = set(tried)
    n = ctx.kernel.launch.compiled_configs or len(ctx.kernel.launch.alternatives) + 1
    base = read_point(ctx.original)
    for point in ctx.kernel.launch.alternatives:
        if not base or not set(point) <= set(base):
            continue  # a setting the dump does not spell out: not a drop-in
        text = with_point(ctx.original, point)
        if read_point(text) == point | {k: v for k, v in base.items() if k not in point} and \
                sha256_text(text) not in seen:
            seen.add(sha256_text(text))
            out.append(Proposal(source=text, origin="harvest:compiled",
                                rationale=f"one of the {n} configurations Inductor compiled for this kernel "
                                          f"and raced once at the first call: {describe(point)}"))
    for alt in search.harvested.kernels:
        if matches(ctx.kernel, alt) and sha256_text(alt.source) not in seen:
            seen.add(sha256_text(alt.source))
            same = "same kernel source" if alt.fingerprint == ctx.kernel.fingerprint else f"as {alt.name}"
            out.append(Proposal(source=alt.source, origin=f"harvest:{alt.variant}",
                                rationale=f"Inductor's {alt.variant} compile of this kernel ({same}), "
                                          f"launch {describe(read_point(alt.source))}"))
    return out
