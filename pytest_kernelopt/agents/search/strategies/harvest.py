"""``harvest``: Inductor's own alternatives for the kernel, each a drop-in candidate.

In this order: the kernel as another compile made it *in another form* (a persistent
reduction where the default compile loops, or the other way round: another kind of kernel, or
other launch settings); then the other launch configurations the default compile built (it
raced them once, briefly, at the first call); then the other compiles' kernels of the same form
(:mod:`..harvest`: max-autotune, coordinate descent, looped reductions, persistent rows).
A launch configuration moves a memory-bound kernel a few percent; a form that reads each row
once instead of twice can move it up to twice as far (the bf16 softmax forward of a training
step ran at 44% of the copy limit on the H200 as a looped reduction, 2026-12-05), so under a
small budget the other forms are judged first.
"""

from __future__ import annotations

from ....store import sha256_text
from ...harvest import kind, matches
from ....candidate.launch_space import describe, read_point, with_point
from ....runs.records import CoderContext, Proposal
from .base import SearchState


def other_form(original: str, name: str, alt_source: str, alt_name: str) -> bool:
    """Whether a harvested kernel differs from the compiler's in form, not only in launch values: another
    kind of kernel (persistent against looped) or another set of launch settings."""
    return kind(alt_name) != kind(name) or set(read_point(alt_source)) != set(read_point(original))


def propose(search: SearchState, ctx: CoderContext, tried: set[str], arg: str | None) -> list[Proposal]:
    out: list[Proposal] = []
    forms: list[Proposal] = []
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
            into = forms if other_form(ctx.original, ctx.kernel.name, alt.source, alt.name) else out
            into.append(Proposal(source=alt.source, origin=f"harvest:{alt.variant}",
                                rationale=f"Inductor's {alt.variant} compile of this kernel ({same}), "
                                          f"launch {describe(read_point(alt.source))}"))
    return forms + out
