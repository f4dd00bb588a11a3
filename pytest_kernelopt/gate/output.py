"""What the gate says: the header, the terminal summary, ``--kernelopt-json`` and ``--kernelopt-report``.

The controller (the process that writes them; under pytest-xdist, the one that starts
the workers) keeps each gate item's result (:func:`pytest_kernelopt.runs.gate_result.item_result`) as its report
arrives; after the last item the run's :class:`~pytest_kernelopt.runs.gate_summary.GateSummary` is computed once,
and the terminal table, the Markdown report and ``kernelopt merge`` render it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ..runs.gate_result import GateResult, GateSettings, ItemResult, environment, gate_result, item_result, write
from ..runs.gate_summary import GateSummary, summarize


class GateOutput:
    """The items' results as they arrive, and everything rendered from them."""

    def __init__(self, options: Any, rootpath: Path, rules: Any):
        self.options = options  # gate.options.GateOptions
        self.rootpath = rootpath
        self.rules = rules  # gate.thresholds.SpeedRules: each model's tolerances, the accepted regressions
        self.items: list[ItemResult] = []
        self._summary: GateSummary | None = None
        self.history_lines: list[str] = []  # what --kernelopt-history did

    def record(self, report: Any) -> None:
        if (result := item_result(report)) is not None:
            self.items.append(result)
            self._summary = None

    def summary(self, problems: list[str]) -> GateSummary:
        """The summary of the items so far; ``problems``: the model ids this run is responsible for."""
        if self._summary is None:
            self._summary = summarize(self.items, problems)
        return self._summary

    def write_files(self, *, device: str, problems: list[str], run_problems: list[str], base: Any,
                    gpu_neighbour: str | None = None) -> None:
        """``--kernelopt-json``, ``--kernelopt-report`` and ``--kernelopt-history``, when asked for."""
        options = self.options
        if (options.json_path or options.report_path or options.history_path) is None:
            return
        verify = options.verify
        settings = GateSettings(seeds=verify.seeds, timeout=verify.timeout, max_slowdown=verify.speed.max_slowdown,
                                max_regression=verify.speed.max_regression, strict=options.strict,
                                base_ref=options.base_ref, base_commit=base.commit if base else None,
                                pinned_seed=verify.seed, thresholds=self.rules.settings_thresholds(),
                                accepted_regressions=self.rules.settings_accepted())
        result = gate_result(shard=options.shard, problems=problems, environment=environment(device, self.items, gpu_neighbour),
                             settings=settings, items=self.items, run_problems=run_problems)
        if options.json_path is not None:
            write(result, options.json_path)
        if options.report_path is not None:
            from ..report.gate import write_gate_report
            from ..templates import project_templates

            write_gate_report(result, options.report_path, project_templates(self.rootpath), self.summary(problems))
        if options.history_path is not None:
            self.history_lines.append(self.append_history(result, options.history_path))

    def append_history(self, result: GateResult, path: Path) -> str:
        """``--kernelopt-history``: this run's model times appended to ``path`` (github-action-benchmark's
        format); what was done, or why nothing was (the file is then left as it was)."""
        from ..errors import KerneloptError
        from ..gitops.history import append_history

        try:
            return append_history(result, path, self.rootpath)
        except KerneloptError as exc:  # the run's verdicts stand
            return f"kernelopt: history not appended: {exc}"

    def annotation_lines(self, file_of: Any) -> list[str]:
        """GitHub Actions annotations: one per failed item, one per stale kernel skipped."""
        from ..report.annotations import annotation_lines

        return annotation_lines(sorted(self.items, key=lambda i: i.nodeid), file_of)

    def terminal_lines(self, problems: list[str]) -> list[str]:
        """The table of the problems whose items ran, and its notes."""
        from ..report.terminal import summary_table_lines

        return summary_table_lines(self.summary(problems)) + threshold_lines(
            self.options.verify.speed.max_slowdown, self.options.verify.speed.max_regression,
            self.rules.settings_thresholds(), self.rules.settings_accepted(), problems)


def threshold_lines(max_slowdown: float, max_regression: float, thresholds: dict[str, Any],
                    accepted: dict[str, Any], problems: list[str]) -> list[str]:
    """The models of ``problems`` gated by their own tolerances, and their accepted regressions (active or
    not), after the table: a reviewer sees what each model was held to."""
    from ..report.untrusted import plain

    lines = []
    own = {m: t for m, t in thresholds.items() if m in problems}
    if own:
        lines.append(f"kernelopt: thresholds: max slowdown {max_slowdown:.1%}, max regression {max_regression:.1%}; "
                     "own ([tool.kernelopt.thresholds]): " + "; ".join(
                         f"{m} {t.max_slowdown:.1%}, {t.max_regression:.1%}" for m, t in own.items()))
    for model, entry in accepted.items():
        if model in problems:
            # The reason and the name come from a file a pull request can edit: shown as plain text.
            lines.append(plain(f"kernelopt: ACCEPTED REGRESSION {model}: up to {entry.max_slowdown:.1%} slower until "
                               f"{entry.expires} (by {entry.by}): {entry.reason}", lines=False))
    return lines


def summary_lines(result: GateResult) -> list[str]:
    """``kernelopt merge``: the gate's terminal table for ``result``, then one line of counts."""
    from ..report.terminal import summary_table_lines
    from ..report.untrusted import plain

    shards = ", ".join(str(s) for s in result.shards) or "unsharded"
    gpus = f" on {', '.join(result.environment.gpus)}" if result.environment.gpus else ""
    # A result file is read from disk (a CI artifact): its words are escaped like a candidate's.
    settings = result.settings
    return [*summary_table_lines(GateSummary.of_result(result)),
            *threshold_lines(settings.max_slowdown, settings.max_regression, settings.thresholds,
                             settings.accepted_regressions, result.problems),
            plain(f"{len(result.problems)} problem(s), shards {shards}, {result.environment.device}{gpus}, "
                  f"torch {result.environment.torch}, triton {result.environment.triton}: {result.counts()}",
                  lines=False)]
