"""The report of a gate run (``pytest --kernelopt --kernelopt-report PATH``, ``kernelopt merge --report``).

Rendered from the gate's typed result (:class:`~pytest_kernelopt.results.GateResult`,
the same record ``--kernelopt-json`` writes) through ``templates/gate.md.j2``: what was
checked, each model's verdict and speedup, each kernel's status, and every failure with
the stage and reason the gate gave. Markdown, so that CI can show it as the job summary.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .render import MD


@dataclass
class GateProblem:
    problem: str
    model: str
    outcome: str  # of the model item: passed, failed, skipped, or "not run"
    committed: int | None = None
    stale: int | None = None
    baseline: int | None = None
    failed_kernels: int = 0
    speed_measured: bool | None = None
    speedup: float | None = None
    ci: list[float] | None = None
    vs_base: str | None = None
    vs_base_speedup: float | None = None
    vs_base_ci: list[float] | None = None
    error: float | None = None
    baseline_error: float | None = None
    items: list[Any] = field(default_factory=list)


@dataclass
class GateView:
    passed: bool
    counts: str
    created: str
    shards: str
    environment: Any
    settings: Any
    problems: list[GateProblem]
    failures: list[Any]
    skipped: list[Any]


def gate_view(result: Any) -> GateView:
    """The report's figures from a GateResult (``result.items`` as the gate recorded them)."""
    problems: dict[str, GateProblem] = {}
    for item in result.items:
        row = problems.setdefault(item.problem, GateProblem(problem=item.problem, model=item.model,
                                                            outcome="not run"))
        row.items.append(item)
        if item.item == "model":
            row.outcome = item.outcome
            row.committed, row.stale, row.baseline = item.committed, item.stale, item.baseline
            row.speed_measured, row.speedup, row.ci = item.speed_measured, item.speedup, item.speedup_ci
            row.vs_base, row.vs_base_speedup, row.vs_base_ci = item.vs_base, item.vs_base_speedup, item.vs_base_ci
            row.error, row.baseline_error = item.error_vs_fp64, item.baseline_error_vs_fp64
        elif item.outcome == "failed":
            row.failed_kernels += 1
    for model in result.problems:  # responsible for, but no item ran (deselected, or collection failed)
        if not any(p.model == model for p in problems.values()):
            problems[model] = GateProblem(problem=model, model=model, outcome="not run")
    for row in problems.values():
        row.items.sort(key=lambda i: (i.item == "model", i.nodeid))
    failures = [i for i in result.items if i.outcome == "failed"]
    return GateView(
        passed=not failures, counts=result.counts(), created=result.created.isoformat(timespec="seconds"),
        shards=", ".join(str(s) for s in result.shards) or "unsharded", environment=result.environment,
        settings=result.settings, problems=sorted(problems.values(), key=lambda p: p.model), failures=failures,
        skipped=[i for i in result.items if i.outcome == "skipped"],
    )


def render_gate_report(result: Any, templates_dir: Path | None = None) -> str:
    """The gate report's Markdown (``templates/gate.md.j2``; the user's ``templates/`` override it)."""
    from ..templates import render

    return render("gate.md.j2", {"gate": gate_view(result)}, templates_dir, filters=MD)


def write_gate_report(result: Any, path: Path, templates_dir: Path | None = None) -> Path:
    from ..store import atomic_write

    atomic_write(Path(path), render_gate_report(result, templates_dir))
    return Path(path)
