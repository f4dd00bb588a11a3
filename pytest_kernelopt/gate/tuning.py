"""``--kernelopt-tune`` and ``--kernelopt-refresh``: what a problem's first item runs before it is checked.

Refresh replays the recipes of the problem's stale kernels in the gate's own verification
session (compiled once); tune runs ``kernelopt tune`` on the problem in a session of its
own. Whatever they store is then gated like any committed kernel. The run directories
they wrote are recorded on the item (``tune_run``, ``refresh_run``), which is how
``--kernelopt-open-pr`` finds what to publish (:mod:`.publish`).
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ..config import runs_folder
from ..errors import KerneloptError
from .problems import Problem
from .torch_warnings import internal_warnings_ignored


class Tuning:
    """Tune and refresh, each problem once; the lines the terminal summary prints about them."""

    def __init__(self, options: Any, settings: Any, device: str, store: Any, sessions: Any):
        self.options = options  # gate.options.GateOptions
        self.runs_dir: Path = runs_folder(settings)  # where `kernelopt tune` and `refresh` put theirs
        self.device = device
        self.store = store  # () -> a KernelStore of the project's kernels/
        self.sessions = sessions  # checks.VerifySessions: refresh borrows the problem's
        self.tune_runs: list[str] = []  # the tune run directories written
        self.tune_lines: list[str] = []  # per problem what tune did, then its run directory
        self.refresh_lines: list[str] = []  # one line per stale kernel, and the run directory
        self._refreshed: set[tuple[Path, str | None]] = set()  # per problem file and declared shape
        self._tuned: set[Path] = set()  # per problem file: tune tunes every declared shape

    def before_checks(self, problem: Problem, item: Any) -> None:
        """On the first item of ``problem`` to run: refresh (of a problem with SHAPES: on the first item of each
        declared shape, in that shape's session), then tune (once per file), as the options ask."""
        if self.options.refresh and problem.key not in self._refreshed:
            self._refreshed.add(problem.key)
            self._refresh(problem, item)
        if self.options.tune and problem.path not in self._tuned:
            self._tuned.add(problem.path)
            self._tune(problem, item)

    def _tune(self, problem: Problem, item: Any) -> None:
        """Tune the problem in a session of its own before the gate opens its session."""
        from ..agents import TuneOptions, tune

        # The gate's verify options whole (seeds, --kernelopt-seed, timeout, speed policy): tune checks as the
        # gate does. Kernels only: the problem was compiled for its items under model.json's compile settings,
        # which `kernelopt tune` chooses (a new choice here would leave the items on the old compile).
        options = TuneOptions(device=self.device, budget_s=self.options.budget_s, verify=self.options.verify,
                              compile_variants=[])
        started = time.monotonic()
        with internal_warnings_ignored():
            record = tune([problem.path], options, agent=self.options.agent, store=self.store(),
                          runs_dir=self.runs_dir)
        from ..agents.progress import problem_lines

        run_dir = str(self.runs_dir / record.run_id)
        self.tune_runs.append(run_dir)
        self.tune_lines += [f"kernelopt tune: {line}" for line in problem_lines(record)]
        self.tune_lines.append(f"kernelopt tune: run directory {run_dir}")
        item.prop("tune_run", run_dir)
        item.prop("tune_seconds", round(time.monotonic() - started, 2))
        item.prop("tune_stored", sum(1 for p in record.problems for k in p.kernels if k.stored_version is not None))

    def _refresh(self, problem: Problem, item: Any) -> None:
        """When the problem's committed kernels are stale, refresh them in the gate's session of the problem."""
        from ..agents.refresh import refresh, stale_kernels

        try:  # at the part's shape: its <kernel>@<shape> folders against the kernels compiled at its inputs
            stale = stale_kernels(self.store(), problem.id,
                                  {n: problem.info(n).fingerprint for n in problem.kernels}, problem.shape)
        except KerneloptError:
            return  # a broken store: the items fail naming the file
        if not stale:
            return
        session = self.sessions.get(problem, item)
        with internal_warnings_ignored():
            record = refresh([problem.path], self.store(), self.device, self.options.verify, runs_dir=self.runs_dir,
                             session_factory=lambda *a, **k: _Borrowed(session), shapes=[problem.shape])
        for p in record.problems:
            if p.error:
                self.refresh_lines.append(f"kernelopt refresh: {p.model}: {p.error}")
            self.refresh_lines += [f"kernelopt refresh: {p.model}/{k.kernel} v{k.version}: {k.status}: {k.reason}"
                                   for k in p.kernels]
            if p.undeclared:  # the model item fails them as stale; said here too, as not refreshed
                self.refresh_lines.append(f"kernelopt refresh: {p.model}: {', '.join(p.undeclared)}: of a shape "
                                          "the file does not declare; not refreshed")
        self.refresh_lines.append(f"kernelopt refresh: run directory {record.run_dir}")
        item.prop("refresh_run", record.run_dir)
        item.prop("refreshed", sum(1 for p in record.problems for k in p.kernels if k.status == "refreshed"))


class _Borrowed:
    """The gate's verification session lent to ``refresh`` (which would close a session it opened)."""

    def __init__(self, session: Any):
        self.session = session

    def __enter__(self) -> Any:
        return self.session

    def __exit__(self, *exc: object) -> None:
        pass
