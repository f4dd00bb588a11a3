"""What ``kernelopt tune`` shows while it works: rich progress bars on stderr, one line per event."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..measure.text import print_whole, timing_text, unbroken
from ..records import at_shape
from .ui import UI
from ..runs.records import Attempt, KernelOutcome


class RichUI(UI):
    def __init__(self, quiet: bool = False):
        from rich.console import Console
        from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

        self.console = Console(stderr=True)
        self.quiet = quiet
        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.fields[status]}"),
                            TimeElapsedColumn(), console=self.console, transient=True, disable=quiet)
        self._task: Any = None

    def __enter__(self) -> RichUI:
        self.bar.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.bar.stop()

    def message(self, text: str) -> None:
        if not self.quiet:
            self.console.print(text, markup=False, highlight=False, soft_wrap=True)  # one line per message in logs

    def problem(self, model: str, kernels: int) -> None:
        self.message(f"{model}: tuning {kernels} kernel(s)")

    def kernel(self, model: str, kernel: str, budget_s: float) -> None:
        if self._task is not None:
            self.bar.remove_task(self._task)
        self._task = self.bar.add_task(f"{model}/{kernel[:48]}", total=budget_s, status="starting")

    def attempt(self, attempt: Attempt, spent_s: float) -> None:
        timing = attempt.model_timing
        speed = f" {timing.speedup:.3f}x" if timing else ""
        status = f"{attempt.status}{' at ' + attempt.stage if attempt.stage else ''}{speed}"
        if self._task is not None:
            self.bar.update(self._task, completed=spent_s, status=f"{attempt.origin[:40]}: {status}")
        if not self.quiet:
            # The candidate's file (candidates/<model>/<kernel>/NNN-<sha12>.py) beside the strategy that wrote it,
            # so a log line leads to the file; a candidate the reviewer stopped was not saved.
            file = f" ({Path(attempt.file).name})" if attempt.file else ""
            self.console.print(f"  {attempt.origin}{file}: {status}", markup=False, highlight=False, soft_wrap=True)

    def kernel_done(self, outcome: KernelOutcome) -> None:
        if self._task is not None:
            self.bar.remove_task(self._task)
            self._task = None
        self.message(f"  -> {outcome.kernel}{' (backward pass)' if outcome.backward else ''}: {outcome.message}")


def _x(t: Any) -> str:
    return timing_text(t) if t is not None else "-"


def _no_kernels(p: Any) -> str | None:
    """Why a problem has no kernel rows: its error, its note (no Triton kernels), or, where no kernel was reached,
    the last of its notes (the kernel search not started: the budget spent in the compile step or opening)."""
    if p.error:
        return f"error: {p.error}"
    return p.note or (p.notes[-1] if not p.kernels and p.notes else None)


def print_tune_table(record: Any) -> None:
    """The table at the end of ``kernelopt tune``: per kernel, class, share, percent of its memory limit
    (compiler / max-autotune -> stored), candidates, outcome by stage, speedup."""
    from rich.table import Table

    from .planner import kernel_limits

    table = Table(title=f"kernelopt tune ({record.agent}{', ' + record.agent_model if record.agent_model else ''})")
    # Seconds of checks spent on candidates, on the device they ran on.
    device_s = "gpu s" if any(p.device == "cuda" for p in record.problems) else "cpu s"
    names = [f"{k.kernel} (backward)" if k.backward else k.kernel for p in record.problems for k in p.kernels]
    for col in ("model", "kernel", "class", "share", "of limit", "tried", "outcome by stage", "best (model)",
                "kernel alone", "stored", device_s):
        # Short cells are never cut; only the stages' text wraps (print_whole widens the console for the rest).
        table.add_column(col, **(unbroken(names) if col == "kernel" else {"no_wrap": col != "outcome by stage"}))
    for p in record.problems:
        label = at_shape(p.model, p.shape)  # a row group per declared shape
        if what := _no_kernels(p):
            table.add_row(label, "-", "-", "-", "-", "-", what, "-", "-", "-", "0")  # no candidate ran
            continue
        chosen = p.compile.chosen if p.compile else None
        for k in p.kernels:
            prof = k.profile
            share = f"{prof.share:.1%}" if prof else "-"
            limit = kernel_limits(k, compile_chosen=chosen).text()
            stages = (f"skipped: {k.skipped}" if k.skipped  # a skipped kernel may still be pinned
                      else ", ".join(f"{n} {s}" for s, n in sorted(k.by_stage.items())) or "-")
            name = f"{k.kernel} (backward)" if k.backward else k.kernel  # a training step's pass
            table.add_row(label, name, prof.bottleneck if prof else "-", share, limit, str(k.attempts), stages,
                          _x(k.best_timing), _x(k.best_kernel_timing),
                          (f"v{k.stored_version}" + (" (pinned)" if k.pinned else "")) if k.stored_version else "-",
                          f"{k.gpu_seconds:.0f}")
        if p.model_timing is not None:
            table.add_row(label, "(whole model, stored kernels)", "", "", "", "", "", _x(p.model_timing), "", "", "")
    console = print_whole(table)  # a terminal at its width, a log (CI) 200 wide; wider where names need it
    failed = [at_shape(p.model, p.shape) for p in record.problems if p.error]
    if failed:
        console.print(f"not tuned, each for the error in its row: {', '.join(failed)}", markup=False,
                      highlight=False, soft_wrap=True)
    if len(failed) < len(record.problems) and not any(p.speed_measured for p in record.problems):
        console.print("speed not measured (interpreter mode): nothing was stored as faster")
    if record.interrupted or record.stop_reason:
        console.print(f"stopped early: {record.stop_reason or 'interrupted (Ctrl-C); what was stored stays'}")
    if record.not_reached:
        console.print(f"not reached: {', '.join(record.not_reached)}")


def problem_lines(record: Any) -> list[str]:
    """One line per problem of a tuning run: kernels tuned, candidates tried, what was stored and where
    (``pytest --kernelopt-tune``'s summary; ``kernelopt tune`` shows the same in its table)."""
    lines = []
    for p in record.problems:
        label = at_shape(p.model, p.shape)  # a line per declared shape
        if what := _no_kernels(p):
            lines.append(f"{label}: {what}")
            continue
        tuned = [k for k in p.kernels if not k.skipped]
        tried = sum(k.attempts for k in p.kernels)
        passed = sum(k.by_stage.get(s, 0) for k in p.kernels for s in ("accepted", "correct"))
        stored = [f"{k.kernel} v{k.stored_version} ({Path(record.kernels_dir) / k.stored_file})"
                  for k in p.kernels if k.stored_version is not None and k.stored_file]
        if stored:
            kept = f"stored {', '.join(stored)}"
        elif not p.speed_measured:
            kept = ("nothing stored: interpreter mode measures no speed (`kernelopt accept` stores a correct "
                    "candidate)")
        else:
            kept = "nothing stored: no candidate was faster beyond noise"
        skipped = len(p.kernels) - len(tuned)
        backward = sum(1 for k in tuned if k.backward)
        parts = ", ".join([f"{backward} backward"] * bool(backward) + [f"{skipped} skipped"] * bool(skipped))
        lines.append(f"{label}: {len(tuned)} kernel(s) tuned{f' ({parts})' if parts else ''}, "
                     f"{tried} candidate(s) tried, {passed} passed the cascade; {kept}")
        lines += [f"{label}: {note}" for note in p.notes]
    return lines
