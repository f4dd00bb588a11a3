"""The gate's summary is computed once (``runs/gate_summary.py``); the terminal table and the Markdown report
render the same figures from it (no compile here)."""

from __future__ import annotations

from datetime import datetime, timezone

from pytest_kernelopt.runs.gate_result import GateResult, GateSettings, ItemResult, ResultEnvironment
from pytest_kernelopt.runs.gate_summary import GateSummary
from pytest_kernelopt.report import gate_lines
from pytest_kernelopt.report.gate import render_gate_report

CHAIN, SUM = "problems/chain.py", "problems/sum.py"


def _result(*items: ItemResult, problems=("chain", "sum")) -> GateResult:
    return GateResult(created=datetime(2026, 12, 1, tzinfo=timezone.utc), problems=list(problems),
                      environment=ResultEnvironment(device="cpu", torch="2.13.0", triton="3.7.0", python="3.12.3"),
                      settings=GateSettings(seeds=1, timeout=600, max_slowdown=0.01, strict=True),
                      items=list(items))


def _kernel(problem: str, name: str, outcome: str, status: str) -> ItemResult:
    return ItemResult(nodeid=f"{problem}::{name}", problem=problem, model=problem[9:-3], kernel=name, item="kernel",
                      outcome=outcome, status=status)


def _model(problem: str, outcome: str, **figures) -> ItemResult:
    return ItemResult(nodeid=f"{problem}::model", problem=problem, model=problem[9:-3], item="model",
                      outcome=outcome, **figures)


def _row(lines: list[str], problem: str) -> list[str]:
    return next(line for line in lines if line.startswith(problem)).split()


def _report_row(text: str, problem: str) -> list[str]:
    line = next(line for line in text.splitlines() if line.startswith(f"| `{problem}` |"))
    return [cell.strip() for cell in line.strip("|").split("|")]


def test_without_the_model_item_the_kernel_items_are_counted_in_terminal_and_report() -> None:
    result = _result(_kernel(CHAIN, "k0", "passed", "committed"), _kernel(CHAIN, "k1", "failed", "rejected"),
                     _kernel(CHAIN, "k2", "skipped", "stale"), _kernel(CHAIN, "k3", "passed", "baseline"))
    assert _row(gate_lines(result.rows()), CHAIN) == [CHAIN, "2", "1", "1", "1", "-", "-", "-", "not", "run"]
    assert _report_row(render_gate_report(result), CHAIN)[:6] == [f"`{CHAIN}`", "not run", "2", "1", "1", "1"]
    # A problem the run was responsible for but no item of ran: a report row, no terminal row.
    assert _report_row(render_gate_report(result), "sum")[:6] == ["`sum`", "not run", "-", "-", "-", "0"]
    assert not any(line.startswith("sum") for line in gate_lines(result.rows()))


def test_speed_column_one_rule_two_renderings() -> None:
    result = _result(
        # passed with nothing committed, never timed: the compiler's model
        _model(SUM, "passed", kernels=1, committed=0, stale=0, baseline=1, speed_measured=False),
        # stopped before timing (rejected at the model stage)
        _model(CHAIN, "failed", kernels=1, committed=1, stale=0, baseline=0, speed_measured=True,
               message="model stage: rejected"))
    summary = GateSummary.of_result(result)
    assert {p.model: p.speed for p in summary.problems} == {"chain": "not reached", "sum": "compiler baseline"}
    lines, text = gate_lines(result.rows()), render_gate_report(result)
    assert _row(lines, SUM)[5:7] == ["compiler", "baseline"] and _report_row(text, SUM)[6] == "compiler baseline"
    assert _row(lines, CHAIN)[5:7] == ["not", "measured"] and _report_row(text, CHAIN)[6] == "-"
    timed = _result(_model(CHAIN, "passed", kernels=1, committed=1, stale=0, baseline=0, speed_measured=False))
    assert _row(gate_lines(timed.rows()), CHAIN)[5:7] == ["not", "measured"]
    assert _report_row(render_gate_report(timed), CHAIN)[6] == "not measured"


def test_the_summary_of_rows_is_the_summary_of_the_result() -> None:
    result = _result(_kernel(CHAIN, "k0", "passed", "committed"),
                     _model(CHAIN, "passed", kernels=1, committed=1, stale=0, baseline=0, speedup=1.2,
                            speedup_ci=[1.1, 1.3], speed_measured=True, error_vs_fp64=1e-7, orphaned=["gone"]))
    of_rows, of_result = GateSummary.of_rows(result.rows()), GateSummary.of_result(result)
    assert [p for p in of_result.problems if p.ran] == of_rows.problems
    lines = gate_lines(result.rows())
    assert _row(lines, CHAIN)[1:8] == ["1", "0", "0", "0", "1.200x", "[1.100,", "1.300]"]
    assert lines[-1].startswith(f"{CHAIN}: committed versions of gone are not used")


def test_compile_setting_and_memory_limit_notes_in_terminal_and_report() -> None:
    """The model item's compile setting and percent of the memory limit: one note, two renderings."""
    result = _result(_model(CHAIN, "passed", committed=1, stale=0, baseline=0, speed_measured=True, speedup=1.2,
                            speedup_ci=[1.18, 1.22], compile="max-autotune", compile_speedup=1.3,
                            compile_speedup_ci=[1.29, 1.31], limit_pct=88.4, baseline_limit_pct=70.1),
                     _model(SUM, "passed", committed=0, stale=0, baseline=1, speed_measured=True))
    note = ("compiled as 'max-autotune' (model.json): 1.300x [1.290, 1.310] over the default compile; the speedup "
            "column is over that compile; 88% of its hardware limit (the compiled model: 70%)")
    lines = gate_lines(result.rows())
    assert any(line.startswith(f"{CHAIN}: {note}") for line in lines)
    assert not any(line.startswith(f"{SUM}:") for line in lines)  # nothing to say
    assert f"- `{CHAIN}`: {note}" in render_gate_report(result)


def test_a_model_failed_on_numbers_shows_its_real_worst_error_never_a_made_up_zero() -> None:
    """The failing seed's row carries the error the judge measured (NaN/Inf: none, shown n/a), and the gate's
    figures, table and JSON take it from there."""
    import torch

    from pytest_kernelopt.gate.checks import figures
    from pytest_kernelopt.records import SeedErrors, Verdict
    from pytest_kernelopt.verify.model import _output_reference, failed_row, judge_output
    from pytest_kernelopt.verify.numerics import NumericsRule
    from pytest_kernelopt.verify.prepared import StageFailure

    ref = torch.linspace(-1, 1, 64, dtype=torch.float64)
    reference = _output_reference(ref.float(), ref)
    rows = {}
    for how, out in (("off", ref.float() + 0.25), ("nan", torch.full((64,), float("nan")))):
        try:
            judge_output(out, reference, NumericsRule(), "seed 1, output 0")
        except StageFailure as failure:
            rows[how] = failed_row(SeedErrors(seed=1, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0), reference, failure)
    assert rows["off"].candidate_vs_fp64 >= 0.25 and rows["nan"].candidate_vs_fp64 is None

    class Item:
        def __init__(self) -> None:
            self.props: dict = {}

        def prop(self, name, value) -> None:
            self.props[name] = value

    for how, shown in (("off", f"{rows['off'].candidate_vs_fp64:.3g}"), ("nan", "n/a")):
        item = Item()
        figures(item, Verdict.model_construct(status="rejected", reason="model", errors=[rows[how]]))
        assert item.props.get("error_vs_fp64") == rows[how].candidate_vs_fp64  # JSON: the figure, or null
        result = _result(_model(CHAIN, "failed", kernels=1, committed=1, stale=0, baseline=0,
                                error_vs_fp64=item.props.get("error_vs_fp64")))
        assert _row(gate_lines(result.rows()), CHAIN)[8] == shown  # after "not measured" and vs base


def test_a_problems_shapes_are_listed_by_their_numbers_value() -> None:
    """``chain.py@b8`` before ``chain.py@b32`` (a trial found them in text order), the same in every shard's merge."""
    items = [ItemResult(nodeid=f"{CHAIN}::model@{shape}", problem=CHAIN, model="chain", item="model", shape=shape,
                        outcome="passed") for shape in ("b32", "b8", "b128")]
    summary = GateSummary.of_result(_result(*items, problems=("chain",)))
    assert [p.problem for p in summary.problems] == [f"{CHAIN}@b8", f"{CHAIN}@b32", f"{CHAIN}@b128"]
