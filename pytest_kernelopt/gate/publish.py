"""``--kernelopt-open-pr``: after the run, a branch and pull request for each problem whose items all passed.

The controller watches every item's report: a failed item holds its problem file back,
and the ``tune_run`` / ``refresh_run`` properties (:mod:`.tuning`) name the run
directories to publish. :func:`~pytest_kernelopt.gitops.publish_run` does the git work.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import KerneloptError
from .items import PREFIX


class Publisher:
    """What to publish, gathered from the reports; one summary line per kernel published or problem held back."""

    def __init__(self, rootpath: Path):
        self.rootpath = rootpath
        self.runs_by_file: dict[str, list[str]] = {}  # problem node id -> tune and refresh run directories
        self.failed_files: set[str] = set()
        self.lines: list[str] = []

    def record(self, report: Any) -> None:
        file = report.nodeid.split("::")[0]
        if report.failed:
            self.failed_files.add(file)
        for key, value in report.user_properties:
            if key in (PREFIX + "tune_run", PREFIX + "refresh_run"):
                self.runs_by_file.setdefault(file, []).append(str(value))

    def publish(self) -> None:
        """Branches and pull requests for the problems whose gate items all passed."""
        from ..gitops import publish_run

        for file, run_dir in sorted((f, r) for f, runs in self.runs_by_file.items() for r in runs):
            if file in self.failed_files:
                self.lines.append(f"kernelopt publish: {file}: not published, one of its gate items failed")
                continue
            try:
                published = publish_run(run_dir, self.rootpath, open_pr=True)
            except KerneloptError as exc:
                self.lines.append(f"kernelopt publish: {file}: {exc}")
                continue
            if not published:
                self.lines.append(f"kernelopt publish: {file}: the tuning run stored nothing new")
            self.lines += [f"kernelopt publish: {r.line()}" for r in published]
