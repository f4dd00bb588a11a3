"""Rendering for people: terminal tables (rich). Numbers are computed elsewhere (the gate's in
:mod:`pytest_kernelopt.runs.gate_summary`)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

from ..capture.shapes import split_name
from ..measure.text import print_whole, speedup_text, unbroken
from ..records import ArgInfo, CaptureSummary, at_shape
from ..runs.gate_summary import GateSummary
from .untrusted import INLINE_LIMIT, plain

if TYPE_CHECKING:  # the record only (the agents' package imports the tuner)
    from ..agents.refresh import RefreshRecord


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


def kernels_table(summary: CaptureSummary, shape: str | None = None) -> Table:
    """``kernelopt kernels``' table of one problem (at its declared ``shape``: the title says which)."""
    table = Table(title=f"{at_shape(summary.model, shape)} ({summary.device}, {summary.graphs} graph(s)); * = written")
    table.add_column("kernel", **unbroken([k.name for k in summary.kernels] + [e.name for e in summary.externs]))
    for col in ("kind", "graph", "pass", "fingerprint"):
        table.add_column(col, no_wrap=True)
    table.add_column("arguments", overflow="fold")
    # A graph's pass: backward when any of its kernels is (a training step's, capture/training.py).
    backward = {k.graph for k in summary.kernels if k.backward}
    for k in summary.kernels:
        table.add_row(k.name, k.kind, str(k.graph), _pass(k.backward), k.fingerprint, " ".join(_arg(a) for a in k.args))
    for e in summary.externs:
        table.add_row(e.name, e.kind, str(e.graph), _pass(e.graph in backward), "", e.target)
    return table


def _pass(backward: bool) -> str:
    return "backward" if backward else "forward"


def print_table(table: Table) -> None:
    print_whole(table, log_width=160)  # a terminal too narrow for it: a row at a time


def gate_lines(rows: list[tuple[str, str, dict[str, Any]]]) -> list[str]:
    """The gate's terminal summary of ``rows``: (node id, outcome, ``kernelopt_*`` properties without the
    prefix) of the items that ran. See :func:`summary_table_lines`."""
    return summary_table_lines(GateSummary.of_rows(rows))


def summary_table_lines(summary: Any) -> list[str]:
    """The gate's terminal summary (a :class:`~pytest_kernelopt.runs.gate_summary.GateSummary`): one row per
    problem file that items of ran, then the notes.

    committed/stale/baseline say what the store holds for the model's kernels (0 where
    unknown); failed counts the kernel items that failed; "model check" is the model item's
    outcome. The speedup with its 95% interval and the worst error against float64 come
    from the model item; "not measured" when it was not timed or stopped before timing.
    """
    problems = [p for p in summary.problems if p.ran]
    if not problems:
        return []
    table = Table(box=None, pad_edge=False)
    for col in ("problem", "committed", "stale", "baseline", "failed", "speedup vs compiled [95% CI]",
                "vs base ref", "worst err vs fp64", "model check"):
        table.add_column(col)
    notes = []
    for p in problems:
        counts = [p.committed or 0, p.stale or 0, p.baseline or 0]
        # n/a: the model check ran but measured no error (it failed before, or on NaN/Inf); never a made-up 0.
        err = f"{p.error:.3g}" if p.error is not None else "-" if p.outcome == "not run" else "n/a"
        outcome = _inert(p.outcome) + (" (accepted regression)" if p.accepted else "")
        table.add_row(_inert(p.problem), *map(str, counts), str(p.failed_kernels), _speed(p), _vs_base(p), err,
                      outcome)
        # Why a model's recorded speedup was not compared (the compiled model's own time moved);
        # committed kernels the compiler no longer generates.
        found = [_inert(p.recorded_note)] if p.recorded_note else []
        if p.limit_note:
            found.insert(0, _inert(p.limit_note))
        if p.compile_note:
            found.insert(0, _inert(p.compile_note))
        if p.base_note:
            found.insert(0, _inert(p.base_note))
        # Passed only by an accepted regression ([tool.kernelopt.accepted_regressions]): never quietly.
        found += [f"ACCEPTED REGRESSION: {_inert(story)}" for story in p.accepted]
        if p.orphaned:
            found.append(f"committed versions of {', '.join(_inert(p.orphaned))} are not used: the compiler no "
                         "longer generates these kernels (re-tune, or remove their folders)")
        if found:
            notes.append(f"{_inert(p.problem)}: {'; '.join(found)}")
    console = Console(file=io.StringIO(), width=200, color_system=None)
    console.print(table)
    lines = console.file.getvalue().rstrip().splitlines()  # type: ignore[attr-defined]
    return lines + notes


def _speed(p: Any) -> str:
    if p.speed == "measured":
        lo, hi = p.ci
        return speedup_text(p.speedup, lo, hi)
    return {"compiler baseline": "compiler baseline", "not timed": "not measured",
            "not reached": "not measured"}.get(p.speed, "-")


def _vs_base(p: Any) -> str:
    if p.vs_base_speedup is not None:
        lo, hi = p.vs_base_ci
        return speedup_text(p.vs_base_speedup, lo, hi)
    return _inert(p.vs_base) if p.vs_base else "-"


def refresh_table(record: RefreshRecord) -> Table:
    """``kernelopt refresh``'s terminal table: one row per stale kernel (and a row per problem with an error)."""
    def speed(value: float | None, measured: bool = True) -> str:
        return f"{value:.3f}x" if value is not None else ("not measured" if not measured else "-")

    table = Table(title=f"kernelopt refresh ({record.device}): {record.stale} stale kernel(s)")
    names = [f"{k.kernel} v{k.version}" for p in record.problems for k in p.kernels]
    for col in ("model", "kernel", "status", "successor", "recipe", "speed before", "speed after", "why"):
        table.add_column(col, **(unbroken(names) if col == "kernel" else {"overflow": "fold"}))
    for p in record.problems:
        label = at_shape(p.model, p.shape)  # a row group per declared shape
        if p.error:
            table.add_row(label, "", "error", "", "", "", "", plain(p.error, 300, lines=False))
        for k in p.kernels:
            successor = "" if k.successor in (None, split_name(k.kernel)[0]) else k.successor
            after = f"v{k.new_version}: " if k.new_version else ""
            table.add_row(label, f"{k.kernel} v{k.version}", k.status, successor,
                          (k.recipe or "") + (" (derived)" if k.recipe_derived else ""),
                          speed(k.speed_before, k.speed_before_measured),
                          after + speed(k.speed_after, k.speed_measured or k.status != "refreshed"),
                          plain(k.reason, 400, lines=False))
        for folder in p.undeclared:
            table.add_row(p.model, folder, "undeclared shape", "", "", "", "",
                          f"{Path(p.problem).name} does not declare this shape: not refreshed (production runs the "
                          "compiler's kernel there; remove the folder, or declare the shape)")
        if not p.kernels and not p.error and (p.current or not p.undeclared):
            table.add_row(label, "", "current", "", "", "", "",
                          f"{len(p.current)} committed kernel(s), none stale" if p.current else "nothing committed")
    return table
