"""Rendering for people: terminal tables (rich). Numbers are computed elsewhere."""

from __future__ import annotations

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
