"""Render a tuning run's report (Markdown or HTML) from its records, with the chart beside it."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import UsageError
from ..measure.text import speedup_text, timing_text
from .chart import CHART_FILE, draw_chart
from .untrusted import HTML_FILTERS, MD_FILTERS, MdSafe, md_finalize
from .view import RunView, build_view, kernels_path, repository_root

# format -> (template, output file name)
FORMATS = {"md": ("report.md.j2", "report.md"), "html": ("report.html.j2", "report.html")}


@dataclass(frozen=True)
class ReportFiles:
    """What :func:`write_report` wrote: the report, the chart (None when there is none) and why not."""

    report: Path
    chart: Path | None
    chart_note: str | None


def _speedup(value: float | None) -> str:
    return "-" if value is None else speedup_text(value)


def _ci(timing: Any) -> str:
    if timing is None:
        return "-"
    return timing_text(timing)


def _ms(value: float | None) -> str:
    return "-" if value is None else f"{value:.4g}"


def _pct(value: float | None, scale: float = 1.0) -> str:
    """``scale=100`` for shares in 0..1."""
    return "-" if value is None else f"{value * scale:.1f}%"


def _sci(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def _cell(value: Any) -> str:
    """Text safe inside a Markdown table cell."""
    return str(value).replace("\\", "\\\\").replace("|", "\\|").replace("\r", " ").replace("\n", " ")


def _safe(f: Any) -> Any:
    """``f`` with its output marked as Markdown we wrote (numbers and fences)."""
    return lambda *args, **kwargs: MdSafe(f(*args, **kwargs))


def _fence(text: str) -> str:
    """A backtick fence longer than any run of backticks inside ``text``."""
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(3, longest + 1)


FILTERS = {"speedup": _speedup, "ci": _ci, "ms": _ms, "pct": _pct, "sci": _sci, "cell": _cell, "fence": _fence}
# Text a candidate or a worker wrote goes through text / text_cell / block (report/untrusted.py); in
# Markdown everything else is escaped by md_finalize unless a filter of ours wrote it (MdSafe). ``cell``
# only escapes a table's pipes: its output is still escaped.
MD = {**{name: _safe(f) if name != "cell" else f for name, f in FILTERS.items()}, **MD_FILTERS}
HTML = {**FILTERS, **HTML_FILTERS}


def render_report(view: RunView, fmt: str = "md", templates_dir: Path | None = None) -> str:
    """The report's text. ``view.chart`` (a path relative to the report, or a URL) is linked
    when set, else ``view.chart_note`` says why there is no chart."""
    from ..templates import render

    if fmt not in FORMATS:
        raise UsageError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
    return render(FORMATS[fmt][0], {"run": view}, templates_dir, html=fmt == "html",
                  filters=HTML if fmt == "html" else MD, finalize=None if fmt == "html" else md_finalize)


def write_report(run_dir: Path, out_dir: Path | None = None, *, fmt: str = "md", templates_dir: Path | None = None,
                 kernels_dir: Path | None = None) -> ReportFiles:
    """Render the report of the run in ``run_dir`` from ``run.json`` and ``trace.jsonl`` into
    ``out_dir`` (default: the run directory), with ``speedup.png`` beside it. Paths are shown
    relative to the git repository that holds the kernel store (when there is one)."""
    from ..runs.trace import load_run
    from ..store import atomic_write

    if fmt not in FORMATS:
        raise UsageError(f"unknown report format {fmt!r} (choose from {', '.join(FORMATS)})")
    record, events = load_run(Path(run_dir))
    out = Path(out_dir) if out_dir is not None else Path(run_dir)
    top = repository_root(kernels_path(record, kernels_dir))
    view = build_view(record, events, kernels_dir, roots=[top] if top is not None else [])
    chart = out / CHART_FILE
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the report folder ({exc.strerror})") from exc
    view.chart_note = draw_chart(view, chart)
    view.chart = CHART_FILE if view.chart_note is None else None
    text = render_report(view, fmt, templates_dir)
    report = out / FORMATS[fmt][1]
    atomic_write(report, text)
    return ReportFiles(report=report, chart=chart if view.chart else None, chart_note=view.chart_note)


__all__ = ["FORMATS", "ReportFiles", "build_view", "render_report", "write_report"]
