"""The Coder role: what a backend that writes candidate files is (the types every backend shares).

A backend knows nothing of timing (as Inductor's coordinate-descent tuner takes a
scoring callable): it reads a :class:`~pytest_kernelopt.runs.records.CoderContext` (the kernel, the best
source so far, the profile, every earlier attempt with the cascade's reasons) and
returns :class:`~pytest_kernelopt.runs.records.Proposal` objects. The Reviewer and the Benchmarker decide
what becomes of them. The backends themselves (``search/``, ``claude/``) and how
one is chosen by name are in ``backends.py``; this module imports none of them.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from ..runs.records import CoderContext, Proposal


class Spend(BaseModel):
    """What a backend has spent so far in this run."""

    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    requests: int = 0


class Coder(Protocol):
    name: str
    model: str | None

    def prepare(self, problem: Path, device: str, kernels: list[Any], shape: str | None = None) -> None:
        """Once per problem (and declared shape), before its verification session opens (no GPU memory is held
        then)."""

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        """Candidates for ``ctx.kernel``; an empty list means this backend has nothing more to try."""

    @property
    def spend(self) -> Spend: ...

    @property
    def stopped(self) -> str | None:
        """Why the backend will propose nothing more in this run (e.g. its cost budget), else None."""
