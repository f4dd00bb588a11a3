"""The report of a gate run (``pytest --kernelopt --kernelopt-report PATH``, ``kernelopt merge --report``).

Rendered from the summary (:mod:`pytest_kernelopt.gate.summary`) of the gate's typed result
(:class:`~pytest_kernelopt.gate.results.GateResult`, the same record ``--kernelopt-json``
writes) through ``templates/gate.md.j2``: what was checked, each model's verdict and
speedup, each kernel's status, and every failure with the stage and reason the gate gave.
Markdown, so that CI can show it as the job summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .render import MD


@dataclass
class GateView:
    """The template's ``gate``: the run's summary (:class:`~pytest_kernelopt.gate.summary.GateSummary`)
    with where and how it ran. ``problems`` are the summary's rows, by model id."""

    passed: bool
    counts: str
    created: str
    shards: str
    environment: Any
    settings: Any
    problems: list[Any]  # gate.summary.ProblemSummary
    failures: list[Any]
    skipped: list[Any]


def gate_view(result: Any, summary: Any = None) -> GateView:
    """The report's context from a GateResult (``result.items`` as the gate recorded them) and its
    summary (computed here when not given)."""
    from ..gate.summary import GateSummary

    summary = summary if summary is not None else GateSummary.of_result(result)
    return GateView(
        passed=summary.passed, counts=summary.counts, created=result.created.isoformat(timespec="seconds"),
        shards=", ".join(str(s) for s in result.shards) or "unsharded", environment=result.environment,
        settings=result.settings, problems=sorted(summary.problems, key=lambda p: p.model),
        failures=summary.failures, skipped=summary.skipped,
    )


def render_gate_report(result: Any, templates_dir: Path | None = None, summary: Any = None) -> str:
    """The gate report's Markdown (``templates/gate.md.j2``; the user's ``templates/`` override it)."""
    from ..templates import render

    from .untrusted import md_finalize

    return render("gate.md.j2", {"gate": gate_view(result, summary)}, templates_dir, filters=MD, finalize=md_finalize)


def write_gate_report(result: Any, path: Path, templates_dir: Path | None = None, summary: Any = None) -> Path:
    from ..store import atomic_write

    atomic_write(Path(path), render_gate_report(result, templates_dir, summary))
    return Path(path)
