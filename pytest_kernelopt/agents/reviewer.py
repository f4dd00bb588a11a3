"""The Reviewer role: what a candidate must pass before any of it runs.

The static stage of the cascade (the allowlisted candidate language, the entry
point's arguments) plus a critique of what the search can tell from the text:
bytes already tried, the compiler's kernel unchanged, a launch configuration
outside what the kernel can take. Nothing is executed here.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..records import KernelInfo
from ..store import sha256_text
from ..verify.limits import size_problem
from ..verify.static import check_candidate
from ..candidate.launch_space import Limits, read_point


@dataclass
class Review:
    ok: bool
    sha256: str
    status: str = "reviewed"  # or "duplicate"
    reason: str = ""


def review(source: str, kernel: KernelInfo, original: str, tried: set[str]) -> Review:
    sha = sha256_text(source)
    if sha in tried:
        return Review(False, sha, "duplicate", "these bytes were tried already in this run")
    if source == original:
        return Review(False, sha, "duplicate", "the compiler's kernel, unchanged")
    too_large = size_problem(source, "the proposal")  # checked in this process: never a large text
    if too_large:
        return Review(False, sha, "reviewed", too_large)
    result = check_candidate(source, entry_args=[a.name for a in kernel.args])
    if result.problems:
        return Review(False, sha, "reviewed", "; ".join(result.problems)[:500])
    point = read_point(source)
    if point and not Limits(kernel, source).valid(point):
        return Review(False, sha, "reviewed", f"launch configuration {point} is outside what this kernel can take")
    return Review(True, sha)
