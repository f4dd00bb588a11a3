"""One summary of a gate run, computed once from its items' results and rendered by every output.

Per problem file, and per declared shape of a problem with SHAPES (:class:`ProblemSummary`): what the
store holds for the model's kernels (committed / stale / compiler's), how many kernel items failed, the
model check's outcome, its speedup with the 95% interval, the comparison with the base ref, the worst error
against float64, and the notes the terminal prints under its table. The rules, once:

* counts: the model item's (it knows every kernel of the model); without them (the model
  item deselected, or failed before counting) the kernel items that ran and recorded a
  status are counted, a rejected or slower version as committed; neither: unknown (None).
* speed: ``measured`` (a speedup); ``compiler baseline`` (the model check passed with
  nothing committed and no speedup); ``not timed`` (the device could not time it:
  interpreter mode); ``not reached`` (the check stopped before timing); ``not run`` (no
  model item ran).

The terminal table (:func:`~pytest_kernelopt.report.terminal.summary_table_lines`), the
Markdown report (:mod:`pytest_kernelopt.report.gate`) and ``kernelopt merge`` render it;
junit XML and ``--kernelopt-json`` carry the items' own figures it is computed from.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any, Literal

from ..measure.text import speedup_text
from ..records import at_shape
from .gate_result import GateResult, ItemResult, item_from_properties, outcome_counts

Speed = Literal["measured", "compiler baseline", "not timed", "not reached", "not run"]


@dataclass(frozen=True)
class KernelCounts:
    committed: int
    stale: int
    baseline: int  # the compiler's kernel runs


@dataclass
class ProblemSummary:
    problem: str  # the problem file's path from the rootdir (``<path>@<shape>`` per declared shape); the model id
    # when none of its items ran
    model: str
    shape: str | None = None  # the declared shape of this row (a problem with SHAPES has a row per shape)
    outcome: str = "not run"  # of the model item: passed, failed, skipped, or "not run"
    counts: KernelCounts | None = None
    failed_kernels: int = 0
    speed: Speed = "not run"
    speed_measured: bool | None = None
    speedup: float | None = None
    ci: list[float] | None = None
    vs_base: str | None = None  # why there is no comparison ("new at REF: nothing to compare")
    vs_base_speedup: float | None = None
    vs_base_ci: list[float] | None = None
    base_ms: float | None = None  # the base commit as production ran it, and the head, timed side by side
    head_ms: float | None = None
    base_ran: str | None = None  # what ran at the base ("1 of 2 kernels committed (...)", "compiler kernels only")
    base_failure: str | None = None  # why the base could not be compiled, run or timed
    error: float | None = None  # worst error against float64, committed kernels swapped in
    baseline_error: float | None = None  # the compiled model's
    recorded_note: str | None = None  # why the recorded speedup was not compared
    orphaned: list[str] = field(default_factory=list)  # committed kernel folders the compiler no longer generates
    compile: str | None = None  # model.json's compile setting (None: the defaults)
    compile_speedup: float | None = None  # the model under it over the default compile
    compile_ci: list[float] | None = None
    limit_pct: float | None = None  # percent of the limit (measure/roofline.py) with the committed kernels
    baseline_limit_pct: float | None = None  # the compiled model's
    items: list[ItemResult] = field(default_factory=list)  # kernel items by node id, then the model item
    # What accepted regressions let pass ([tool.kernelopt.accepted_regressions]), "<kernel>: <story>" for a kernel item.
    accepted: list[str] = field(default_factory=list)

    # The counts one by one (None: unknown), as the report's template reads them.
    @property
    def committed(self) -> int | None:
        return self.counts.committed if self.counts else None

    @property
    def stale(self) -> int | None:
        return self.counts.stale if self.counts else None

    @property
    def baseline(self) -> int | None:
        return self.counts.baseline if self.counts else None

    @property
    def ran(self) -> bool:
        return bool(self.items)

    @property
    def limit_note(self) -> str | None:
        """How close to the hardware the model runs (Triton-bound models on a GPU)."""
        if self.limit_pct is None:
            return None
        text = f"{self.limit_pct:.0f}% of its hardware limit"
        if self.baseline_limit_pct is not None:
            text += f" (the compiled model: {self.baseline_limit_pct:.0f}%)"
        return text + ": its inputs, weights and outputs moved once at the measured copy bandwidth"

    @property
    def base_note(self) -> str | None:
        """The comparison with the base commit in words: each side's time and what ran at the base."""
        if self.base_failure is not None:
            return f"the base commit failed ({self.base_failure}): not compared; the head's verdict stands"
        if self.base_ran is None:
            return None
        text = ""
        if self.base_ms is not None and self.head_ms is not None:
            text = f"base {self.base_ms:.4g} ms, head {self.head_ms:.4g} ms"
            if self.vs_base_speedup is not None and self.vs_base_ci:
                lo, hi = self.vs_base_ci
                text += f" ({speedup_text(self.vs_base_speedup, lo, hi)})"
            text += "; "
        return text + f"base ran {self.base_ran}"

    @property
    def compile_note(self) -> str | None:
        """What the model is compiled as, when not Inductor's defaults: the terminal's and the report's note."""
        if self.compile is None:
            return None
        text = f"compiled as {self.compile!r} (model.json)"
        if self.compile_speedup is not None and self.compile_ci:
            lo, hi = self.compile_ci
            text += f": {speedup_text(self.compile_speedup, lo, hi)} over the default compile"
        return text + ("; the speedup column is over that compile" if self.speed == "measured" else "")


@dataclass
class GateSummary:
    problems: list[ProblemSummary]  # by problem path; those no item of ran come too (``ran`` is False)
    items: list[ItemResult]  # by node id

    @property
    def failures(self) -> list[ItemResult]:
        return [i for i in self.items if i.outcome == "failed"]

    @property
    def skipped(self) -> list[ItemResult]:
        return [i for i in self.items if i.outcome == "skipped"]

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def counts(self) -> str:
        return outcome_counts(self.items)

    @classmethod
    def of_result(cls, result: GateResult) -> GateSummary:
        return summarize(result.items, result.problems)

    @classmethod
    def of_rows(cls, rows: list[tuple[str, str, dict[str, Any]]]) -> GateSummary:
        """From (node id, outcome, ``kernelopt_*`` properties without the prefix) per item."""
        items = [item_from_properties(nodeid, outcome, props) for nodeid, outcome, props in rows]
        return summarize([i for i in items if i is not None])


# A committed version that was checked and failed is still a committed one.
_KERNEL_STATUS = {"committed": "committed", "rejected": "committed", "slower": "committed", "stale": "stale",
                  "baseline": "baseline", "accepted-regression": "committed"}


def summarize(items: list[ItemResult], problems: Iterable[str] = ()) -> GateSummary:
    """The summary of ``items``; ``problems``: model ids the run was responsible for, whether or not items ran."""
    rows: dict[str, ProblemSummary] = {}
    counted: dict[str, dict[str, int]] = {}
    for item in items:
        name = at_shape(item.problem, item.shape)  # a row per declared shape
        row = rows.setdefault(name, ProblemSummary(problem=name, model=item.model, shape=item.shape))
        row.items.append(item)
        if item.accepted_regression:
            row.accepted.append(item.accepted_regression if item.kernel is None
                                else f"{item.kernel}: {item.accepted_regression}")
        if item.item == "model":
            _model_figures(row, item)
            continue
        if (status := _KERNEL_STATUS.get(item.status or "")) is not None:
            found = counted.setdefault(name, {"committed": 0, "stale": 0, "baseline": 0})
            found[status] += 1
        if item.outcome == "failed":
            row.failed_kernels += 1
    for name, row in rows.items():
        if row.counts is None and name in counted:
            row.counts = KernelCounts(**counted[name])
        row.items.sort(key=lambda i: (i.item == "model", i.nodeid))
    for model in problems:  # responsible for, but no item ran (deselected, or collection failed)
        if not any(p.model == model for p in rows.values()):
            rows[model] = ProblemSummary(problem=model, model=model)
    return GateSummary(problems=[rows[name] for name in sorted(rows, key=_natural)],
                       items=sorted(items, key=lambda i: i.nodeid))


def _natural(name: str) -> list[Any]:
    """A sort key that orders numbers in names by value: ``m@b8`` before ``m@b32`` (shards merge the same)."""
    return [(0, int(part), "") if part.isdigit() else (1, 0, part) for part in re.split(r"(\d+)", name)]


def _model_figures(row: ProblemSummary, item: ItemResult) -> None:
    row.outcome = item.outcome
    if item.committed is not None:
        row.counts = KernelCounts(committed=item.committed, stale=item.stale or 0, baseline=item.baseline or 0)
    row.speed_measured, row.speedup, row.ci = item.speed_measured, item.speedup, item.speedup_ci
    row.compile, row.compile_speedup, row.compile_ci = item.compile, item.compile_speedup, item.compile_speedup_ci
    row.limit_pct, row.baseline_limit_pct = item.limit_pct, item.baseline_limit_pct
    if item.speedup is not None:
        row.speed = "measured"
    elif item.outcome == "passed" and not item.committed and item.compile is None:
        row.speed = "compiler baseline"
    elif item.speed_measured is False:
        row.speed = "not timed"
    else:
        row.speed = "not reached"
    row.vs_base, row.vs_base_speedup, row.vs_base_ci = item.vs_base, item.vs_base_speedup, item.vs_base_ci
    row.base_ms, row.head_ms, row.base_ran, row.base_failure = item.base_ms, item.head_ms, item.base_ran, \
        item.base_failure
    row.error, row.baseline_error = item.error_vs_fp64, item.baseline_error_vs_fp64
    note = item.other.get("recorded_note")
    row.recorded_note = None if note is None else str(note)
    row.orphaned = list(item.orphaned or [])
