"""Speed over commits: the gate's history file (``--kernelopt-history FILE``) and its chart.

The file is the object github-action-benchmark keeps in its ``data.js`` (without the
``window.BENCHMARK_DATA =`` prefix), so either tool can read what the other wrote::

    {"lastUpdate": <ms>, "repoUrl": "https://github.com/o/r",
     "entries": {"<suite>": [{"commit": {"id", "message", "timestamp", "url"}, "date": <ms>,
                              "tool": "customSmallerIsBetter",
                              "benches": [{"name", "value", "unit", "range", "extra"}]}]}}

A gate run appends one entry to the suite of its environment (``kernelopt (<GPU>)``): one
bench per model the run timed, its median milliseconds per call with the committed kernels
in, the speedup over the compiler and the environment in ``extra``. Models that were not
timed (interpreter mode on a CPU) add nothing. Each suite keeps its last :data:`KEEP`
entries; the file is written atomically and never replaced when it cannot be read.

:func:`draw_history` draws one line per model over the entries (matplotlib's object API on
the Agg canvas, as ``chart.py``); ``kernelopt report --history FILE`` calls it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from ..errors import UsageError, install_hint
from ..measure.text import speedup_text

KEEP = 500  # entries per suite
TOOL = "customSmallerIsBetter"
HISTORY_CHART = "history.png"


class _Open(BaseModel):
    # github-action-benchmark writes more than we read (the commit's author, committer, tree id):
    # kept as they are.
    model_config = ConfigDict(extra="allow")


class Commit(_Open):
    id: str
    message: str = ""
    timestamp: str | None = None
    url: str = ""


class Bench(_Open):
    name: str
    value: float
    unit: str
    range: str | None = None
    extra: str | None = None


class Entry(_Open):
    commit: Commit
    date: int  # milliseconds since the epoch
    tool: str
    benches: list[Bench]


class History(_Open):
    lastUpdate: int = 0  # noqa: N815 (github-action-benchmark's name)
    repoUrl: str = ""  # noqa: N815
    entries: dict[str, list[Entry]] = Field(default_factory=dict)


def read_history(path: Path) -> History:
    """The history in ``path`` (empty when there is no file yet); anything else is a UsageError naming it."""
    path = Path(path)
    if not path.exists():
        return History()
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{path}: cannot read the history file ({why})") from None
    # A data.js of github-action-benchmark's gh-pages branch: the same object after an assignment.
    text = text.strip().removeprefix("window.BENCHMARK_DATA =").strip().removesuffix(";")
    try:
        return History.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise UsageError(f"{path}: not a benchmark history file ({where}: {first['msg']}); it was left as it is: "
                         f"move it away or give another --kernelopt-history") from None


def suite_name(result: Any) -> str:
    """One suite per environment: times from different GPUs are not one series."""
    env = result.environment
    return f"kernelopt ({', '.join(env.gpus) if env.gpus else env.device})"


def benches(result: Any) -> list[Bench]:
    """One bench per timed model of the gate ``result``: the customSmallerIsBetter list github-action-benchmark reads."""
    env = result.environment
    where = f"{', '.join(env.gpus) or env.device}, torch {env.torch}, triton {env.triton}"
    found = []
    for item in sorted(result.items, key=lambda i: i.model):
        if item.item != "model" or item.model_ms is None:
            continue
        extra = f"{where}; {item.outcome}"
        if item.speedup is not None and item.speedup_ci:
            lo, hi = item.speedup_ci
            extra += f"; {speedup_text(item.speedup, lo, hi)} over the compiled model"
        if item.compiled_ms is not None:
            extra += f" ({item.compiled_ms:.4g} ms)"
        found.append(Bench(name=item.model, value=item.model_ms, unit="ms", extra=extra))
    return found


def draw_history(history: History, path: Path) -> str | None:
    """One line per model over the entries of each suite (a panel per suite); None, or why nothing was drawn."""
    suites = {name: entries for name, entries in history.entries.items() if any(e.benches for e in entries)}
    if not suites:
        return "the history holds no timed run yet: no chart"
    try:
        from matplotlib.backends.backend_agg import FigureCanvasAgg
        from matplotlib.figure import Figure
    except ImportError:
        return f"history chart not drawn: matplotlib is not installed ({install_hint('report')})"

    fig = Figure(figsize=(9, 3.2 * len(suites)), dpi=100)
    FigureCanvasAgg(fig)
    for index, (suite, entries) in enumerate(sorted(suites.items()), start=1):
        ax = fig.add_subplot(len(suites), 1, index)
        models = sorted({b.name for e in entries for b in e.benches})
        for model in models:
            xs, ys = [], []
            for x, entry in enumerate(entries):
                for bench in entry.benches:
                    if bench.name == model:
                        xs.append(x)
                        ys.append(bench.value)
            # A "$" would start matplotlib's math text: the name is shown as it is.
            ax.plot(xs, ys, marker="o", markersize=3, linewidth=1.2, label=model.replace("$", r"\$"))
        step = max(1, len(entries) // 12)  # at most a dozen commit labels
        ticks = list(range(0, len(entries), step))
        ax.set_xticks(ticks, [entries[t].commit.id[:7] for t in ticks], rotation=45, fontsize=7)
        ax.set_ylabel(entries[-1].benches[0].unit if entries[-1].benches else "ms")
        ax.set_title(f"{suite}: time per call, lower is better".replace("$", r"\$"), fontsize=9)
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
        ax.grid(True, linewidth=0.3)
    fig.tight_layout()
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, format="png")
    return None


def history_rows(history: History) -> list[dict[str, Any]]:
    """Per suite and model: the latest time, the one before it, and their commits (the page's table)."""
    rows = []
    for suite, entries in sorted(history.entries.items()):
        latest: dict[str, tuple[Entry, Bench]] = {}
        before: dict[str, tuple[Entry, Bench]] = {}
        for entry in entries:
            for bench in entry.benches:
                if bench.name in latest:
                    before[bench.name] = latest[bench.name]
                latest[bench.name] = (entry, bench)
        for name, (entry, bench) in sorted(latest.items()):
            prev = before.get(name)
            rows.append({"suite": suite, "model": name, "value": bench.value, "unit": bench.unit,
                         "commit": entry.commit.id[:10], "previous": prev[1].value if prev else None,
                         "previous_commit": prev[0].commit.id[:10] if prev else None,
                         "change": bench.value / prev[1].value - 1.0 if prev and prev[1].value else None,
                         "runs": sum(any(b.name == name for b in e.benches) for e in entries)})
    return rows


def write_history_report(path: Path, out_dir: Path | None = None,
                         templates_dir: Path | None = None) -> tuple[Path, Path | None, str | None]:
    """``kernelopt report --history FILE``: ``history.png`` and ``history.md`` (``templates/history.md.j2``) in
    ``out_dir`` (default: the file's folder); returns (page, chart or None, why no chart)."""
    from ..store import atomic_write
    from ..templates import render
    from .render import MD
    from .untrusted import md_finalize

    path = Path(path)
    if not path.is_file():
        raise UsageError(f"{path}: no such history file (pytest --kernelopt --kernelopt-history {path} writes it)")
    history = read_history(path)
    out = Path(out_dir) if out_dir is not None else path.parent
    chart = out / HISTORY_CHART
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"{out}: cannot create the report folder ({exc.strerror})") from None
    note = draw_history(history, chart)
    page = out / "history.md"
    text = render("history.md.j2", {"history": history, "rows": history_rows(history), "source": path.name,
                                    "chart": HISTORY_CHART if note is None else None, "chart_note": note},
                  templates_dir, filters=MD, finalize=md_finalize)
    atomic_write(page, text)
    return page, chart if note is None else None, note
