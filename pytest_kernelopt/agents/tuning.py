"""``kernelopt tune``'s entry point: every problem in turn, each declared shape with its share of the
budget, through one :class:`~.loop.Tuner` and one run directory (the package's map: ``agents/__init__.py``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..capture.problem import load_problem
from ..errors import Terminated
from ..measure.neighbours import neighbour_warning
from ..records import at_shape
from ..runs.records import RunRecord
from ..runs.trace import RunDir, new_run_id, now_iso
from .backends import make_coder
from .loop import UI, Tuner, TuneOptions


def shape_shares(problem: Path) -> list[tuple[str | None, float]]:
    """(declared shape, its share of each kernel's budget by SHAPE_WEIGHTS) per shape the problem declares;
    [(None, 1.0)] for a problem without SHAPES."""
    weights = load_problem(problem).shape_weights
    total = sum(weights.values())
    return [(name, w / total) for name, w in weights.items()] or [(None, 1.0)]


def tune(problems: list[Path], options: TuneOptions, *, agent: str = "search", agent_options: dict[str, Any] | None = None,
         store: Any, runs_dir: Path, ui: UI | None = None) -> RunRecord:
    """Tune every problem in turn; returns the run's record (also in ``runs_dir/<run_id>/run.json``).

    Ctrl-C stops at once: the record says ``interrupted`` and keeps every kernel finished
    (stored versions are complete files; nothing is half-written).
    """
    ui = ui or UI()
    coder = make_coder(agent, **(agent_options or {}))
    record = RunRecord(run_id=new_run_id(), started=now_iso(), agent=agent, agent_model=coder.model,
                       budget_s=options.budget_s, kernels_dir=str(store.root) if store is not None else "")
    record.gpu_neighbour = neighbour_warning(options.device)  # before any of this run's work is on the GPU
    run = RunDir.create(runs_dir, record)
    ui.message(f"run directory: {run.root}")
    if record.gpu_neighbour:
        ui.message(f"warning: {record.gpu_neighbour}")
    tuner = Tuner(options, coder, store, run, ui)
    try:
        work = [(problem, shape, share) for problem in problems for shape, share in shape_shares(problem)]
        for i, (problem, shape, share) in enumerate(work):
            if shape is not None:
                equal = len({s for p, _, s in work if p == problem}) == 1
                why = "equal shares: no SHAPE_WEIGHTS differ" if equal else "by SHAPE_WEIGHTS"
                ui.message(f"{Path(problem).stem}: tuning shape {shape} ({share:.0%} of each kernel's budget, {why})")
            tuner.tune_problem(problem, shape, share) if shape is not None else tuner.tune_problem(problem)
            if tuner.stop_reason:
                record.not_reached = [at_shape(Path(p).stem, s) for p, s, _ in work[i + 1:]]
                ui.message(f"stopping: {tuner.stop_reason}"
                           + (f"; not reached: {', '.join(record.not_reached)}" if record.not_reached else ""))
                break
    except KeyboardInterrupt as exc:
        record.interrupted = True
        if isinstance(exc, Terminated):
            tuner.stop_reason = "terminated (SIGTERM); what was stored stays"
        exc.kernelopt_record = record  # type: ignore[attr-defined]  # the command line prints its summary
        raise
    finally:
        spend = coder.spend
        record.input_tokens, record.output_tokens, record.usd = spend.input_tokens, spend.output_tokens, spend.usd
        record.stop_reason = tuner.stop_reason
        record.finished = now_iso()
        run.close()
    return record
