"""The speedup chart: one bar per model and per stored kernel, with 95% intervals (PNG).

matplotlib is imported only here, when a chart is drawn, and only through its
object API with the Agg canvas: no pyplot, so no global backend is switched in the
caller's process.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import install_hint
from .view import RunView

CHART_FILE = "speedup.png"


def chart_rows(view: RunView) -> list[tuple[str, float, float, float]]:
    """(label, speedup, ci_low, ci_high) of every measured model and stored kernel, in report order."""
    rows = []
    for model in view.models:
        if model.timing is not None:
            t = model.timing
            rows.append((f"{model.model} (model, all stored kernels)", t.speedup, t.ci_low, t.ci_high))
        for k in model.stored:
            if k.timing is not None:
                t = k.timing
                rows.append((f"{k.model} / {k.kernel} v{k.stored_version}", t.speedup, t.ci_low, t.ci_high))
    return rows


def draw_chart(view: RunView, path: Path) -> str | None:
    """Write the chart to ``path``; returns None, or why no chart was drawn."""
    rows = chart_rows(view)
    if not rows:
        return ("no speed was measured in this run (interpreter mode): no chart" if not view.speed_measured
                else "no model or stored kernel has a timing: no chart")
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return f"chart not drawn: matplotlib is not installed ({install_hint('report')})"

    labels = [r[0] for r in rows][::-1]  # first row at the top
    speed = [r[1] for r in rows][::-1]
    low = [max(r[1] - r[2], 0.0) for r in rows][::-1]
    high = [max(r[3] - r[1], 0.0) for r in rows][::-1]
    colors = ["#2a9d46" if r[2] > 1 else "#c0392b" if r[3] < 1 else "#8c8c8c" for r in rows][::-1]
    fig = Figure(figsize=(8, 1.2 + 0.45 * len(rows)), dpi=100)
    FigureCanvasAgg(fig)
    ax = fig.add_subplot()
    positions = list(range(len(rows)))
    # Bars start at 1.0 (no change), so a slowdown points left.
    ax.barh(positions, [s - 1.0 for s in speed], left=1.0, xerr=[low, high], color=colors, capsize=3, height=0.6)
    ax.axvline(1.0, color="black", linewidth=0.8)
    ax.set_yticks(positions, labels, fontsize=8)
    ax.set_xlabel("speedup vs torch.compile (median, 95% CI)")
    lo = min([r[2] for r in rows] + [1.0])
    hi = max([r[3] for r in rows] + [1.0])
    pad = max(hi - lo, 0.05) * 0.15
    ax.set_xlim(max(lo - pad, 0.0), hi + pad)
    for y, value in zip(positions, speed):
        ax.annotate(f"{value:.3f}x", (value, y), xytext=(3, 3), textcoords="offset points", fontsize=7)
    ax.set_title(f"kernelopt run {view.run_id}", fontsize=9)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return None
