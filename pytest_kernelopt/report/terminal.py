"""Rendering for people: terminal tables (rich). Numbers are computed elsewhere."""

from __future__ import annotations

import io
from typing import Any

from rich.console import Console
from rich.table import Table

from ..records import ArgInfo, CaptureSummary
from .untrusted import INLINE_LIMIT, plain


def _inert(value: Any) -> Any:
    """A property as the terminal may show it: text escaped and capped (a result file or a candidate wrote it)."""
    if isinstance(value, str):
        return plain(value, INLINE_LIMIT, lines=False)
    if isinstance(value, (list, tuple)):
        return [_inert(v) for v in value]
    return value


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
    """The gate's terminal summary: one row per problem file (its path from the node id).

    ``rows`` are (node id, outcome, ``kernelopt_*`` properties without the prefix) of the
    items that ran. committed/stale/baseline say what the store holds for the model's
    kernels: the model item knows all of them; without it (deselected) the kernel items
    that ran are counted. failed counts the kernel items that failed; "model check" is
    the model item's outcome. The speedup with its 95% interval and the worst error
    against float64 come from the model item.
    """
    problems: dict[str, dict[str, Any]] = {}
    rows = [(_inert(nodeid), _inert(outcome), {k: _inert(v) for k, v in props.items()}) for nodeid, outcome, props in rows]
    for nodeid, outcome, props in rows:
        m = problems.setdefault(nodeid.split("::")[0], {
            "counts": None, "kernels": {"committed": 0, "stale": 0, "baseline": 0}, "failed": 0, "error": None,
            "speed": "-", "vs_base": "", "outcome": "not run"})
        if props.get("item") == "model":
            m["outcome"] = outcome
            if "committed" in props:
                m["counts"] = {key: props.get(key, 0) for key in ("committed", "stale", "baseline")}
            if "speedup" in props:
                lo, hi = props["speedup_ci"]
                m["speed"] = f"{props['speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"
            else:
                m["speed"] = ("not measured" if props.get("committed") or outcome != "passed"
                              else "compiler baseline")
            if "vs_base_speedup" in props:
                lo, hi = props["vs_base_ci"]
                m["vs_base"] = f"{props['vs_base_speedup']:.3f}x [{lo:.3f}, {hi:.3f}]"
            elif "vs_base" in props:
                m["vs_base"] = props["vs_base"]
            if props.get("error_vs_fp64") is not None:
                m["error"] = props["error_vs_fp64"]
            notes = [props.get("recorded_note")]
            if props.get("orphaned"):
                notes.append(f"committed versions of {', '.join(props['orphaned'])} are not used: the compiler no "
                             "longer generates these kernels (re-tune, or remove their folders)")
            if any(notes):
                m["note"] = "; ".join(n for n in notes if n)
            continue
        # A committed version that was checked and failed is still a committed one.
        status = {"rejected": "committed", "slower": "committed"}.get(props.get("status"), props.get("status"))
        if status in m["kernels"]:
            m["kernels"][status] += 1
        if outcome == "failed":
            m["failed"] += 1
    if not problems:
        return []
    table = Table(box=None, pad_edge=False)
    for col in ("problem", "committed", "stale", "baseline", "failed", "speedup vs compiled [95% CI]",
                "vs base ref", "worst err vs fp64", "model check"):
        table.add_column(col)
    for name in sorted(problems):
        m = problems[name]
        counts = m["counts"] or m["kernels"]
        err = f"{m['error']:.3g}" if m["error"] is not None else "-"
        table.add_row(name, str(counts["committed"]), str(counts["stale"]), str(counts["baseline"]), str(m["failed"]),
                      m["speed"], m["vs_base"] or "-", err, m["outcome"])
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    lines = console.file.getvalue().rstrip().splitlines()  # type: ignore[attr-defined]
    # Why a model's recorded speedup was not compared (the compiled model's own time moved);
    # committed kernels the compiler no longer generates.
    return lines + [f"{name}: {problems[name]['note']}" for name in sorted(problems) if problems[name].get("note")]
