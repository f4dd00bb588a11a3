"""The gate's report: rendered from the typed result ``--kernelopt-json`` writes (no compile here)."""

from __future__ import annotations

import json
import shutil
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_kernelopt.report.gate import render_gate_report, write_gate_report
from pytest_kernelopt.runs.gate_result import GateResult, GateSettings, ItemResult, ResultEnvironment

SOFTMAX = "tests/problems/softmax_rows.py"
RMS = "tests/problems/rms_norm.py"


pytest_plugins = ["pytester"]


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: only the gate test compiles, and it asks for the interpreter
    (through ``compiled_models``) before anything imports triton."""

PROBLEM = Path(__file__).resolve().parent / "problems" / "elementwise_chain.py"


def result(*items: ItemResult, problems=("softmax_rows", "rms_norm", "sum_reduce")) -> GateResult:
    return GateResult(
        created=datetime(2026, 12, 1, 12, 0, tzinfo=timezone.utc), problems=list(problems),
        environment=ResultEnvironment(device="cuda", torch="2.11.0", triton="3.6.0", cuda="13.0", python="3.12.3",
                                      gpus=["NVIDIA H200"]),
        settings=GateSettings(seeds=3, timeout=600, max_slowdown=0.01, strict=False, base_ref="origin/main",
                              base_commit="abcdef1234567890"),
        items=list(items))


PASSING = [
    ItemResult(nodeid=f"{SOFTMAX}::triton_red_fused__softmax_0", problem=SOFTMAX, model="softmax_rows",
               kernel="triton_red_fused__softmax_0", item="kernel", outcome="passed", status="committed", version=2,
               speedup=1.07, speedup_ci=[1.05, 1.09], wall_seconds=12.3),
    ItemResult(nodeid=f"{SOFTMAX}::model", problem=SOFTMAX, model="softmax_rows", item="model", outcome="passed",
               committed=1, stale=0, baseline=0, speed_measured=True, speedup=1.071, speedup_ci=[1.062, 1.08],
               vs_base_speedup=1.0, vs_base_ci=[0.99, 1.01], error_vs_fp64=2e-6, baseline_error_vs_fp64=1.5e-6,
               wall_seconds=20.0),
]
FAILING = [
    ItemResult(nodeid=f"{RMS}::triton_per_fused_0", problem=RMS, model="rms_norm", kernel="triton_per_fused_0",
               item="kernel", outcome="failed", status="rejected", version=1, duration=3.2,
               message="kernel stage: out_ptr0: 12 of 4096 written values differ | ```x```"),
    ItemResult(nodeid=f"{RMS}::model", problem=RMS, model="rms_norm", item="model", outcome="failed", committed=1,
               stale=0, baseline=0, speed_measured=True, message="model stage: error 9.1e-03 exceeds 4x the compiled "
               "baseline's", vs_base="new at origin/main: nothing to compare", duration=5.0),
]


def test_a_failing_gate_names_each_failure_with_its_stage_and_reason(tmp_path):
    text = write_gate_report(result(*PASSING, *FAILING), tmp_path / "gate.md").read_text()
    assert text.startswith("# kernelopt gate: FAILED\n\n2 passed, 2 failed; 3 problem(s), unsharded;")
    assert "cuda on NVIDIA H200, torch 2.11.0, triton 3.6.0, CUDA 13.0" in text
    assert "compared with origin/main (abcdef1234)" in text
    assert (f"| `{SOFTMAX}` | passed | 1 | 0 | 0 | 0 | 1.071x [1.062, 1.080] | 1.000x [0.990, 1.010] | "
            f"2e-06 / 1.5e-06 |") in text
    assert f"| `{RMS}` | failed | 1 | 0 | 0 | 1 | - | new at origin/main: nothing to compare | - / - |" in text
    assert "| `sum_reduce` | not run |" in text  # responsible for it, but no item ran
    failures = text.split("## Failures", 1)[1].split("## Items", 1)[0]
    assert f"### `{RMS}::triton_per_fused_0`\n\nkernel triton_per_fused_0, status rejected, v1:" in failures
    # the message holds a fence of its own: the report's is longer
    assert "````\nkernel stage: out_ptr0: 12 of 4096 written values differ | ```x```\n````" in failures
    assert f"### `{RMS}::model`\n\nmodel check:\n\n```\nmodel stage: error 9.1e-03" in failures
    assert f"| `{SOFTMAX}::triton_red_fused__softmax_0` | passed | committed | v2 | 1.070x [1.050, 1.090] | 12.3 |" \
        in text


def test_a_passing_gate_says_so():
    text = render_gate_report(result(*PASSING, problems=["softmax_rows"]))
    assert text.startswith("# kernelopt gate: passed\n\n2 passed; 1 problem(s), unsharded;")
    assert "None: every kernel and model check passed." in text


def test_user_template_overrides_the_gate_report(tmp_path):
    (tmp_path / "gate.md.j2").write_text("{{ 'ok' if gate.passed else 'red' }} {{ gate.failures | length }}\n")
    assert render_gate_report(result(*PASSING, *FAILING), tmp_path) == "red 2\n"


@pytest.mark.slow
def test_gate_writes_its_report(pytester: pytest.Pytester, compiled_models):
    """``pytest --kernelopt --kernelopt-report``: a broken manifest fails the kernel item; the report names it."""
    kernel = compiled_models.get(PROBLEM).summary().kernels[0].name
    (pytester.path / "problems").mkdir()
    shutil.copy(PROBLEM, pytester.path / "problems")
    (pytester.path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    folder = pytester.path / "kernels" / "elementwise_chain" / kernel
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text("{not json")
    (pytester.path / "reports").mkdir()
    run = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p",
                                        "no:cacheprovider", "--kernelopt-report", "reports/gate.md",
                                        "--kernelopt-json", "gate.json")
    run.assert_outcomes(passed=0, failed=2)
    text = (pytester.path / "reports" / "gate.md").read_text()
    assert text.startswith("# kernelopt gate: FAILED\n\n2 failed; 1 problem(s), unsharded;")
    nodeid = f"problems/elementwise_chain.py::{kernel}"
    failure = text.split(f"### `{nodeid}`", 1)[1].split("###", 1)[0]
    assert "manifest.json: invalid manifest" in failure
    items = {i["nodeid"]: i for i in json.loads((pytester.path / "gate.json").read_text())["items"]}
    assert items[nodeid]["message"].strip() in failure  # the same words as --kernelopt-json
    usage = pytester.runpytest_subprocess("--kernelopt", "-p", "no:cacheprovider", "--kernelopt-report",
                                          "missing/gate.md")
    assert usage.ret == 4
    usage.stderr.fnmatch_lines(["ERROR: kernelopt: --kernelopt-report missing/gate.md: cannot write a file there"])


def test_terminal_summary_says_why_a_recorded_speedup_was_not_compared():
    from pytest_kernelopt.report import gate_lines

    note = "the compiled model runs in 51.3 us now, 82.7 us when recorded (...): speedups not compared"
    rows = [("problems/avg_pool.py::model", "passed",
             {"item": "model", "committed": 1, "stale": 0, "baseline": 0, "speedup": 1.008,
              "speedup_ci": [1.006, 1.009], "recorded_speedup": 1.634, "recorded_note": note}),
            ("problems/sum.py::model", "passed", {"item": "model", "committed": 0, "stale": 0, "baseline": 1})]
    lines = gate_lines(rows)
    assert lines[-1] == f"problems/avg_pool.py: {note}"
    assert not any(line.startswith("problems/sum.py:") for line in lines)
    assert any("1.008x [1.006, 1.009]" in line for line in lines)
