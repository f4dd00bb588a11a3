"""``harvest``: Inductor's own alternatives for the kernel, each a drop-in candidate.

Two plan entries, two rounds, so the second sees what the first found:

* ``harvest:forms``: the kernel as another compile made it *in another form* (another kind of
  kernel, a persistent reduction where the default compile loops or the other way round, or
  another set of launch settings). A launch configuration moves a memory-bound kernel a few
  percent; a form that reads each row once instead of twice can move it up to twice as far (the
  bf16 softmax forward of a training step: 43% of the copy limit as Inductor's looped online
  softmax, 1.33x faster as the persistent-rows compile's kernel, H100, 2026-12-05).
* ``harvest``: the other launch configurations the default compile built (it raced them once,
  briefly, at the first call), then the other compiles' kernels of the compiler's form
  (:mod:`..harvest`: max-autotune, coordinate descent, looped reductions, persistent rows). Not
  when the best so far is of another form: those are configurations of the form the search has
  left, and the budget goes to the launch descent around the new best instead (in that softmax
  search, nine configurations of the looped kernel, 0.45-1.00x, took about 40 of its 60 s after the
  persistent kernel had won).
"""

from __future__ import annotations

import re

from ....store import sha256_text
from ...harvest import fitting, kind
from ....candidate.launch_space import describe, read_point, with_point
from ....runs.records import CoderContext, Proposal
from .base import SearchState

_JIT_DEF = re.compile(r"@triton\.jit\s*\ndef\s+(\w+)\s*\(")


def plan(bottleneck: str) -> list[str]:
    """Both rounds, for every class."""
    return ["harvest:forms", "harvest"]


def form(source: str) -> tuple[str, frozenset[str]]:
    """A candidate's form: the kind prefix of its last ``@triton.jit`` function (the kernel; helpers come
    first: ``triton_per_`` against ``triton_red_``) and the names of its launch settings. Two candidates of one
    form differ at most in launch values."""
    names = _JIT_DEF.findall(source)
    return kind(names[-1]) if names else "", frozenset(read_point(source))


def propose(search: SearchState, ctx: CoderContext, tried: set[str], arg: str | None) -> list[Proposal]:
    if arg == "forms":
        return _harvested(search, ctx, set(tried), forms=True)
    if ctx.best != ctx.original and form(ctx.best) != form(ctx.original):
        return []  # the search left the compiler's form: its configurations are behind it
    seen = set(tried)
    out: list[Proposal] = []
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
    return out + _harvested(search, ctx, seen, forms=False)


def _harvested(search: SearchState, ctx: CoderContext, seen: set[str], *, forms: bool) -> list[Proposal]:
    """The harvested kernels that fit this one, of another form (``forms``) or of the compiler's."""
    out: list[Proposal] = []
    for alt in fitting(ctx.kernel, search.harvested.kernels):
        if sha256_text(alt.source) in seen:
            continue
        if (form(alt.source) != form(ctx.original)) != forms:
            continue
        seen.add(sha256_text(alt.source))
        same = "same kernel source" if alt.fingerprint == ctx.kernel.fingerprint else f"as {alt.name}"
        out.append(Proposal(source=alt.source, origin=f"harvest:{alt.variant}",
                            rationale=f"Inductor's {alt.variant} compile of this kernel ({same}), "
                                      f"launch {describe(read_point(alt.source))}"))
    return out
