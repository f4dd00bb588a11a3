"""`pytest --kernelopt --kernelopt-tune`: each problem is tuned before its items are checked."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from conftest import gate_project

pytest_plugins = ["pytester"]

PROBLEM = Path(__file__).resolve().parent / "problems" / "sum_reduce.py"


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    return gate_project(pytester.path, PROBLEM)


def test_tune_then_gate(repo: Path, pytester: pytest.Pytester) -> None:
    # sum_reduce at 16 output rows instead of 128 (the same kernel, 8x fewer interpreted programs: one
    # candidate's checks took about 13 s), and a budget of 1 s: the first candidate is always judged (nothing
    # is estimated before it), which is all this needs; a second one would only add time.
    problem = repo / "problems" / "sum_reduce.py"
    assert "(4, 16, 32)" in problem.read_text()
    problem.write_text(problem.read_text().replace("(4, 16, 32)", "(2, 16, 8)"))
    result = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-tune", "--kernelopt-open-pr", "--kernelopt-seeds", "1",
                                           "--kernelopt-budget-s", "1", "-p", "no:cacheprovider", timeout=900)
    out = result.stdout.str()
    assert result.ret == 0, out + result.stderr.str()
    assert "kernelopt tune: run directory" in out
    # Interpreter mode stores nothing, so --kernelopt-open-pr has nothing to publish (and touches no git).
    assert "kernelopt publish: problems/sum_reduce.py: the tuning run stored nothing new" in out
    (run,) = (repo / ".kernelopt" / "runs").iterdir()
    record = json.loads((run / "run.json").read_text())
    (problem,) = record["problems"]
    assert problem["model"] == "sum_reduce" and problem["error"] is None
    (kernel,) = problem["kernels"]
    assert kernel["attempts"] >= 1 and kernel["stored_version"] is None  # interpreter mode: nothing stored
    assert not (repo / "kernels").exists()


@pytest.mark.parametrize("value", ["0", "-5", "nan"])
def test_bad_budget_is_a_usage_error(repo: Path, pytester: pytest.Pytester, value: str) -> None:
    result = pytester.runpytest("--kernelopt", "--kernelopt-tune", "--kernelopt-budget-s", value, "-p",
                                "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kernelopt-budget-s" in result.stderr.str() and "Traceback" not in result.stderr.str()


def test_open_pr_needs_tune(repo: Path, pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--kernelopt", "--kernelopt-open-pr", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kernelopt-open-pr" in result.stderr.str() and "--kernelopt-tune" in result.stderr.str()
