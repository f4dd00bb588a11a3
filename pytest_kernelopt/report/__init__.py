"""Rendering for people: terminal tables, and the report of a tuning run.

    terminal.py  rich tables: ``kernelopt kernels``, the gate's terminal summary
    view.py      the report's figures, computed from a run's records and the kernel store
    chart.py     the speedup chart (matplotlib, imported only when drawn)
    render.py    Markdown/HTML through the Jinja templates (``templates/report.*.j2``)
    gate.py      the gate run's report (``pytest --kernelopt --kernelopt-report PATH``, ``templates/gate.md.j2``)

The one entry point for a run's report is :func:`write_report`; ``kernelopt report
RUN_DIR`` calls it. Importing this package imports neither jinja2 nor matplotlib.
"""

from __future__ import annotations

from .render import FORMATS, ReportFiles, render_report, write_report
from .terminal import gate_lines, kernels_table, print_table
from .view import RunView, build_view

__all__ = ["FORMATS", "ReportFiles", "RunView", "build_view", "gate_lines", "kernels_table", "print_table",
           "render_report", "write_report"]
