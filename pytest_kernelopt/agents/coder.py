"""The Coder role: what a backend that writes candidate files is (the types every backend shares).

A backend knows nothing of timing (as Inductor's coordinate-descent tuner takes a
scoring callable): it reads a :class:`~pytest_kernelopt.runs.records.CoderContext` (the kernel, the best
source so far, the profile, every earlier attempt with the cascade's reasons) and
returns :class:`~pytest_kernelopt.runs.records.Proposal` objects. The Reviewer and the Benchmarker decide
what becomes of them. A backend declares itself as a :class:`Backend` (its coder, its
command-line options, its SDK); the backends themselves (``search/``, ``claude/``) and how
one is chosen by name are in ``backends.py``; this module imports none of them.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Callable, Protocol

from pydantic import BaseModel

from ..errors import UsageError, install_hint
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

    def prepare(self, problem: Path, device: str, kernels: list[str], shape: str | None = None,
                budget_s: float | None = None) -> None:
        """Once per problem (and declared shape), after the plan: ``kernels`` are the names it searches, in plan
        order (none: nothing will be proposed for this problem, prepare nothing). When there are some, on a GPU,
        the verification session is closed first (no GPU memory held) where :meth:`prepare_uses_device` says so,
        and opens again afterwards. ``budget_s``: what is left of the run's budget (None: no bound), by which the
        preparation ends."""

    def prepare_uses_device(self, device: str) -> bool:
        """Whether :meth:`prepare` runs work on ``device`` (the search backend's harvest compiles and benchmarks
        there), so the session must close first."""

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        """Candidates for ``ctx.kernel``; an empty list means this backend has nothing more to try."""

    @property
    def spend(self) -> Spend: ...

    @property
    def stopped(self) -> str | None:
        """Why the backend will propose nothing more in this run (e.g. its cost budget), else None."""


@dataclass(frozen=True)
class Sdk:
    """The SDK a backend needs, installed by a pip extra of this package (never by the core install)."""

    module: str  # what the backend imports: "anthropic"
    extra: str  # the pip extra that installs it: "agents" (pyproject.toml [project.optional-dependencies])
    about: str  # its name in the error that says it is missing: "the Anthropic SDK"

    def load(self, backend: str) -> ModuleType:
        """The SDK's module, imported now (a backend calls this when it is constructed, so the gate and the
        production loader never import it); a one-line UsageError with the pip command when it is missing."""
        try:
            return importlib.import_module(self.module)
        except ImportError:
            raise UsageError(f"the {backend} backend needs {self.about}: {install_hint(self.extra)}") from None


@dataclass(frozen=True)
class Backend:
    """What a backend declares as ``BACKEND`` in its module (the name it goes by is its line in
    ``settings.AGENT_BACKENDS``); ``backends.py`` derives the rest from it."""

    # Constructed with the chosen options as keywords. Any, not Coder: a class's plain attributes (``model: str``)
    # do not match the protocol's settable ``model: str | None`` for mypy, though they are read only.
    coder: Callable[..., Any]
    # The options ``kernelopt tune`` offers it: one flag per field (``max_usd`` -> ``--max-usd``), the field's
    # description as its help, ``json_schema_extra={"metavar": ...}``; a bool field is a switch. A value given
    # is checked by its field and passed to ``coder`` under the field's name; one not given is not passed.
    options: type[BaseModel] | None = None
    sdk: Sdk | None = None
