"""Rendering for people: terminal tables (rich). Numbers are computed elsewhere."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from .records import ArgInfo, CaptureSummary


def _arg(a: ArgInfo) -> str:
    mark = "*" if a.written else ""
    if a.kind == "tensor":
        text = f"{a.name}{mark}:{a.dtype}{a.shape}"
        if a.min is not None:
            text += f"[{a.min}..{a.max}]"
        return text
    if a.value is not None:
        return f"{a.name}={a.value}"
    return a.name


def kernels_table(summary: CaptureSummary) -> Table:
    table = Table(title=f"{summary.model} ({summary.device}, {summary.graphs} graph(s)); * = written")
    for col in ("kernel", "kind", "graph", "fingerprint", "arguments"):
        table.add_column(col, overflow="fold")
    for k in summary.kernels:
        table.add_row(k.name, k.kind, str(k.graph), k.fingerprint, " ".join(_arg(a) for a in k.args))
    for e in summary.externs:
        table.add_row(e.name, e.kind, str(e.graph), "", e.target)
    return table


def print_table(table: Table) -> None:
    Console(width=160).print(table)


def gate_lines(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """The gate's terminal summary: one row per model (kernels committed/stale/baseline,
    speedup with its 95% interval, worst error against float64)."""
    models: dict[str, dict[str, Any]] = {}
    for nodeid, outcome, props in rows:
        model = props.get("model") or nodeid.split("::")[0]
        m = models.setdefault(model, {"committed": 0, "stale": 0, "baseline": 0, "failed": 0, "error": None,
                                       "speed": "not measured", "vs_base": "", "outcome": "passed"})
        if props.get("item") == "model":
            m["outcome"] = outcome
            if "speedup" in props:
                lo, hi = props["speedup_ci"]
                m["speed"] = f"{props['speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"
            elif not props.get("committed"):
                m["speed"] = "compiler baseline"
            if "vs_base_speedup" in props:
                lo, hi = props["vs_base_ci"]
                m["vs_base"] = f"{props['vs_base_speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"
            if props.get("error_vs_fp64") is not None:
                m["error"] = props["error_vs_fp64"]
            continue
        status = props.get("status")
        if status in ("committed", "stale", "baseline"):
            m[status] += 1
        if outcome == "failed":
            m["failed"] += 1
    if not models:
        return []
    table = Table(box=None, pad_edge=False)
    for col in ("model", "committed", "stale", "baseline", "failed", "speedup vs compiled [95% CI]",
                "vs base ref", "worst err vs fp64", "model check"):
        table.add_column(col)
    for name in sorted(models):
        m = models[name]
        err = f"{m['error']:.3g}" if m["error"] is not None else "-"
        table.add_row(name, str(m["committed"]), str(m["stale"]), str(m["baseline"]), str(m["failed"]), m["speed"],
                      m["vs_base"] or "-", err, m["outcome"])
    console = Console(file=io.StringIO(), width=160, color_system=None)
    console.print(table)
    return console.file.getvalue().rstrip().splitlines()  # type: ignore[attr-defined]
