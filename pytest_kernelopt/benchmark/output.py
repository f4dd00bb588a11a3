"""What ``kernelopt bench`` prints and writes: the table (one row per problem and mode, the
geometric means at the bottom) and the ``--json`` file (:class:`~.records.BenchResult`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..measure.text import print_whole, speedup_text, time_text
from ..records import at_shape, dump_json
from .records import BASELINE, BenchResult, ModeResult


def _us(m: ModeResult) -> str:
    if m.median_us is None:
        return "-"
    assert m.ci_low_us is not None and m.ci_high_us is not None
    return time_text(m.median_us, m.ci_low_us, m.ci_high_us)


def _x(m: ModeResult) -> str:
    if m.speedup is None:
        return "-"
    judged = f" {m.vs_default}" if m.vs_default else ""
    return f"{speedup_text(m.speedup, m.speedup_ci_low, m.speedup_ci_high)}{judged}"


def _error(m: ModeResult) -> str:
    mark = {True: "ok", False: "FAIL", None: "-"}[m.correct]
    rel = f"{m.relative_error:.1e}" if m.relative_error is not None else "-"
    return f"{rel} {mark}"


# Columns of short cells, never cut (``print_whole`` widens the console for them); the others fold.
_SHORT = ("mode", "median us [95% CI]", "vs default [95% CI]", "of limit", "compile s", "Triton share")


def bench_table(result: BenchResult) -> Any:
    from rich.table import Table

    speed = "" if result.speed_measured else "; speed not measured (interpreter mode or no timings)"
    table = Table(title=f"kernelopt bench: speedup = default / mode, medians with 95% CIs{speed}")
    for col in ("problem", "mode", "median us [95% CI]", "vs default [95% CI]", "of limit", "error/scale",
                "compile s", "Triton share", "notes"):
        table.add_column(col, overflow="fold", no_wrap=col in _SHORT)
    for p in result.problems:
        rows = p.modes if p.modes else []
        if p.status == "error" and not any(m.compile_seconds is not None or m.correct is not None for m in rows):
            table.add_row(_label(p), "-", "-", "-", "-", "-", "-", "-", f"ERROR {p.error}", end_section=True)
            continue
        for i, m in enumerate(rows):
            notes = []
            if i == 0 and p.status == "error":
                notes.append(f"ERROR {p.error}")
            if m.error:
                notes.append(m.error)
            elif m.skipped:
                notes.append(m.skipped)
            elif m.correct is False and m.correctness_detail:
                notes.append(m.correctness_detail)
            if m.mode == BASELINE and p.method:
                notes.append(f"{p.method} timing, {p.rounds} rounds")
                if p.method_note:
                    notes.append(p.method_note)
            if m.mode == "kernelopt" and m.kernels_note:
                notes.append(m.kernels_note)
            if i == 0 and p.baseline_note:
                notes.append(p.baseline_note)
            if i == 0 and p.reference == "eager":
                notes.append(f"no float64 reference: {p.reference_note}")
            share = f"{p.triton_share:.0%}" if m.mode == BASELINE and p.triton_share is not None else ""
            limit = f"{m.limit_pct:.0f}%" if m.limit_pct is not None else "-"
            step = f"training step + {p.optimizer} step" if p.optimizer else "training step"
            name = f"{_label(p)} ({step})" if p.training else _label(p)
            table.add_row(name if i == 0 else "", m.mode, _us(m), _x(m), limit, _error(m),
                          f"{m.compile_seconds:.1f}" if m.compile_seconds is not None else "-", share,
                          "; ".join(notes), end_section=i == len(rows) - 1)
    for i, g in enumerate(result.geomeans):
        table.add_row("geomean" if i == 0 else "", g.mode, "", speedup_text(g.speedup), "", "", "", "",
                      f"over {g.problems} problem(s) timed without error")
    return table


def _label(p: Any) -> str:
    """The problem's row label: its model id, ``<model>@<shape>`` per declared shape."""
    return at_shape(p.model, p.shape)


def print_bench(result: BenchResult) -> None:
    print_whole(bench_table(result))
    if result.gpu_neighbour:
        print(f"warning: {result.gpu_neighbour}")
    if not result.speed_measured:
        print("speed not measured: no CUDA device (interpreter mode); correctness and compile times only")


def write_json(result: BenchResult, path: Path) -> None:
    path = Path(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(dump_json(result))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the JSON result ({exc.strerror or exc})") from exc
