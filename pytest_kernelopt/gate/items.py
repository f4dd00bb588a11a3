"""The gate's pytest nodes: a :class:`ProblemFile` per problem, a :class:`KernelItem` per Triton
kernel (``problems/x.py::<kernel>``) and a :class:`ModelItem` per model (``problems/x.py::model``); for
a problem with SHAPES, per declared shape (``problems/x.py::<kernel>@<shape>``, ``problems/x.py::model@<shape>``).

An item records its figures as ``kernelopt_*`` user properties (junit XML and pytest-xdist
carry them; :mod:`pytest_kernelopt.runs.gate_result` reads them back); what it checks is :mod:`.checks`'.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..errors import KerneloptError
from .failure import GateFailure
from .problems import Problem

if TYPE_CHECKING:
    from _pytest._code.code import TerminalRepr

    from .session import GateSession

PREFIX = "kernelopt_"  # of every property an item records


class ProblemFile(pytest.File):
    """A configured problem file: compiled at collection, one item per Triton kernel and one for the model."""

    def __init__(self, *, gate: GateSession, problem: Problem, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate = gate
        self.problem = problem

    def collect(self) -> Iterator[pytest.Item]:
        # A problem with SHAPES: items per declared shape, ``<kernel>@<shape>`` and ``model@<shape>``.
        for part in self.gate.load(self.problem).parts:
            for kernel in part.kernels:
                yield KernelItem.from_parent(self, name=part.store_name(kernel), gate=self.gate, problem=part,
                                             kernel=kernel)
            yield ModelItem.from_parent(self, name=part.store_name("model"), gate=self.gate, problem=part)


class GateItem(pytest.Item):
    """What kernel and model items share: properties, timing, and a failure shown as plain text."""

    kind = ""
    # Also the store-wide check (Checks.unowned): the first gate item selected to run (GateSession.pytest_collection_
    # finish, after -k, -m, node ids and deselection; every xdist worker selects the same items in the same order).
    store_check = False

    def __init__(self, *, gate: GateSession, problem: Problem, kernel: str | None = None, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate = gate
        self.problem = problem
        self.kernel = kernel if kernel is not None else self.name  # the compiler's kernel name (kernel items)
        self.add_marker("kernelopt")
        # `-k` matches every name up the item's chain (pytest's rule): under a folder `models/`, `-k model`
        # matches all items. The kind's marker selects by kind whatever the folders are called.
        self.add_marker(f"kernelopt_{self.kind}")

    def prop(self, key: str, value: Any) -> None:
        self.user_properties.append((PREFIX + key, value))

    def runtest(self) -> None:
        self.prop("item", self.kind)
        if self.problem.shape is not None:
            self.prop("shape", self.problem.shape)
        started = time.monotonic()
        try:
            self.check()
        finally:
            # The whole item, opening the problem's verification session included when this
            # item was the first of its problem to need it (``open_seconds`` says how long).
            self.prop("wall_seconds", round(time.monotonic() - started, 2))

    def check(self) -> None:
        raise NotImplementedError

    def repr_failure(self, excinfo: Any, style: Any = None) -> str | TerminalRepr:
        if isinstance(excinfo.value, (GateFailure, KerneloptError)):
            from ..report.untrusted import plain

            # It quotes the candidate (verdict reasons, exception text): what reaches the
            # terminal and junit XML is escaped and capped.
            return plain(str(excinfo.value))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"kernelopt {self.nodeid}"  # line 0: skips are reported at the problem file


class KernelItem(GateItem):
    kind = "kernel"

    def check(self) -> None:
        self.gate.checks.kernel(self)


class ModelItem(GateItem):
    kind = "model"

    def check(self) -> None:
        self.gate.checks.model(self)
