"""The Coder role: backends that write candidate files.

A backend knows nothing of timing (as Inductor's coordinate-descent tuner takes a
scoring callable): it reads a :class:`~.records.CoderContext` (the kernel, the best
source so far, the profile, every earlier attempt with the cascade's reasons) and
returns :class:`~.records.Proposal` objects. The Reviewer and the Benchmarker decide
what becomes of them. Backends are imported only when chosen, so the gate and the
production loader never import ``anthropic``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from pydantic import BaseModel

from ..errors import UsageError
from .run_records import CoderContext, Proposal

BACKENDS = ("search", "anthropic")


class Spend(BaseModel):
    """What a backend has spent so far in this run."""

    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    requests: int = 0


class Coder(Protocol):
    name: str
    model: str | None

    def prepare(self, problem: Path, device: str, kernels: list[Any]) -> None:
        """Once per problem, before its verification session opens (no GPU memory is held then)."""

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        """Candidates for ``ctx.kernel``; an empty list means this backend has nothing more to try."""

    @property
    def spend(self) -> Spend: ...

    @property
    def stopped(self) -> str | None:
        """Why the backend will propose nothing more in this run (e.g. its cost budget), else None."""


def make_coder(name: str, **options: Any) -> Coder:
    if name == "search":
        from .search import SearchCoder

        return SearchCoder(**options)
    if name == "anthropic":
        from .claude import ClaudeCoder

        return ClaudeCoder(**options)
    raise UsageError(f"unknown agent backend {name!r} (choose from {', '.join(BACKENDS)})")
