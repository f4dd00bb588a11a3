"""The report of a gate run (``pytest --kernelopt --kernelopt-report PATH``, ``kernelopt merge --report``).

Rendered from the summary (:mod:`pytest_kernelopt.runs.gate_summary`) of the gate's typed result
(:class:`~pytest_kernelopt.runs.gate_result.GateResult`, the same record ``--kernelopt-json``
writes) through ``templates/gate.md.j2``: what was checked, each model's verdict and
speedup, each kernel's status, and every failure with the stage and reason the gate gave.
Markdown, so that CI can show it as the job summary.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..runs.gate_summary import GateSummary
from ..store.files import atomic_write
from ..templates import render
from .render import MD
from .untrusted import md_finalize


@dataclass
class GateView:
    """The template's ``gate``: the run's summary (:class:`~pytest_kernelopt.runs.gate_summary.GateSummary`)
    with where and how it ran. ``problems`` are the summary's rows, by model id."""

    passed: bool
    counts: str
    created: str
    shards: str
    environment: Any
    settings: Any
    problems: list[Any]  # runs.gate_summary.ProblemSummary
    failures: list[Any]
    skipped: list[Any]


def gate_view(result: Any, summary: Any = None) -> GateView:
    """The report's context from a GateResult (``result.items`` as the gate recorded them) and its
    summary (computed here when not given)."""
    summary = summary if summary is not None else GateSummary.of_result(result)
    return GateView(
        passed=summary.passed, counts=summary.counts, created=result.created.isoformat(timespec="seconds"),
        shards=", ".join(str(s) for s in result.shards) or "unsharded", environment=result.environment,
        settings=result.settings, problems=sorted(summary.problems, key=lambda p: p.model),
        failures=summary.failures, skipped=summary.skipped,
    )


def render_gate_report(result: Any, templates_dir: Path | None = None, summary: Any = None) -> str:
    """The gate report's Markdown (``templates/gate.md.j2``; the user's ``templates/`` override it)."""
    return render("gate.md.j2", {"gate": gate_view(result, summary)}, templates_dir, filters=MD, finalize=md_finalize)


def write_gate_report(result: Any, path: Path, templates_dir: Path | None = None, summary: Any = None) -> Path:
    atomic_write(Path(path), render_gate_report(result, templates_dir, summary))
    return Path(path)


@dataclass
class CommentRow:
    """One model of the pull-request comment: before (the base commit) and after (the head)."""

    model: str
    problem: str
    outcome: str
    failed_kernels: int
    base_ms: float | None  # the base commit's time per call, measured side by side (--kernelopt-base-ref)
    head_ms: float | None  # this revision's
    change: float | None  # head over base, minus 1 (negative: faster)
    vs_base: Any  # (speedup, [low, high]) over the base commit, or None
    vs_base_note: str | None  # why there is no comparison ("new at REF", "base failed at REF")
    vs_compiled: Any  # (speedup, [low, high]) over the compiled model, or None
    speed: str  # runs.gate_summary's speed word: measured, compiler baseline, not timed, ...
    notes: list[str]  # what ran at the base, why it failed; accepted regressions


def comment_rows(summary: Any) -> list[CommentRow]:
    rows = []
    for p in sorted(summary.problems, key=lambda p: p.model):
        base_ms, head_ms = p.base_ms, p.head_ms
        notes = [n for n in (p.base_failure and f"the base commit failed: {p.base_failure}",) if n]
        notes += [f"accepted regression: {story}" for story in p.accepted]
        rows.append(CommentRow(
            model=p.model, problem=p.problem, outcome=p.outcome, failed_kernels=p.failed_kernels,
            base_ms=base_ms, head_ms=head_ms,
            change=head_ms / base_ms - 1.0 if base_ms and head_ms is not None else None,
            vs_base=(p.vs_base_speedup, p.vs_base_ci) if p.vs_base_speedup is not None and p.vs_base_ci else None,
            vs_base_note=p.vs_base, vs_compiled=(p.speedup, p.ci) if p.speedup is not None and p.ci else None,
            speed=p.speed, notes=notes))
    return rows


def render_gate_comment(result: Any, templates_dir: Path | None = None, *, run_url: str | None = None) -> str:
    """The pull-request comment's Markdown (``templates/gate_comment.md.j2``): per model the time at the base
    revision and at the head with the change and its interval (else the speedup over the compiled model), and
    the failures. Everything from the result file is escaped (``md_finalize`` and the text filters)."""
    summary = GateSummary.of_result(result)
    return render("gate_comment.md.j2", {"gate": gate_view(result, summary), "rows": comment_rows(summary),
                                         "run_url": run_url}, templates_dir, filters=MD, finalize=md_finalize)
