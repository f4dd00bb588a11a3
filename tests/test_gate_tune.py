"""`pytest --kernelopt --kernelopt-tune`: each problem is tuned before its items are checked."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import forkserver

from conftest import gate_project

pytest_plugins = ["pytester"]

PROBLEM = Path(__file__).resolve().parent / "problems" / "sum_reduce.py"


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    return gate_project(pytester.path, PROBLEM)


@pytest.fixture(scope="module")
def tuned(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """One `pytest --kernelopt --kernelopt-tune --kernelopt-open-pr` run (a Python start, torch's import and the
    compiles) over sum_reduce. The project and the run's output (stdout and stderr). A training problem's tune
    run is tests/test_tune_training.py's and tests/test_training.py's; what the gate prints of one,
    test_the_summary_says_what_tune_did_to_a_training_step."""
    repo = gate_project(tmp_path_factory.mktemp("tuned"), PROBLEM)
    # sum_reduce at 16 output rows instead of 128 (the same kernel, 8x fewer interpreted programs: one
    # candidate's checks took about 13 s), and a budget of 1 s: the first candidate is always judged (nothing
    # is estimated before it), which is all this needs; a second one would only add time.
    problem = repo / "problems" / "sum_reduce.py"
    assert "(4, 16, 32)" in problem.read_text()
    problem.write_text(problem.read_text().replace("(4, 16, 32)", "(2, 16, 8)"))
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    run = forkserver.run([sys.executable, "-m", "pytest", "--kernelopt", "--kernelopt-tune", "--kernelopt-open-pr",
                          "--kernelopt-seeds", "1", "--kernelopt-budget-s", "1", "-p", "no:cacheprovider"],
                         cwd=repo, env=env, timeout=900)
    assert run.returncode == 0, run.stdout + run.stderr
    return repo, run.stdout


def _run_of(repo: Path, model: str) -> dict[str, Any]:
    """The run record of the tune run of ``model`` (one run directory per problem)."""
    records = [json.loads((run / "run.json").read_text()) for run in (repo / ".kernelopt" / "runs").iterdir()]
    (record,) = [r for r in records if [p["model"] for p in r["problems"]] == [model]]
    return record


def test_tune_then_gate(tuned: tuple[Path, str]) -> None:
    repo, out = tuned
    assert "kernelopt tune: run directory" in out
    assert "kernelopt tune: sum_reduce: 1 kernel(s) tuned, " in out and "nothing stored: interpreter mode" in out
    # Interpreter mode stores nothing, so --kernelopt-open-pr has nothing to publish (and touches no git).
    assert "kernelopt publish: problems/sum_reduce.py: the tuning run stored nothing new" in out
    (problem,) = _run_of(repo, "sum_reduce")["problems"]
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


def test_the_summary_says_per_problem_what_tune_did(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One line per problem: kernels tuned, candidates tried, what was stored and where (no compile here)."""
    from types import SimpleNamespace

    import pytest_kernelopt.agents as agents
    from pytest_kernelopt.runs.records import KernelOutcome, ProblemOutcome, RunRecord
    from pytest_kernelopt.gate.tuning import Tuning
    from pytest_kernelopt.verify.options import VerifyOptions

    def record(model: str, device: str, kernels: list[KernelOutcome]) -> RunRecord:
        return RunRecord(run_id=f"r-{model}", started="now", agent="search", kernels_dir=str(tmp_path / "kernels"),
                         problems=[ProblemOutcome(model=model, problem=f"{model}.py", device=device,
                                                  speed_measured=device == "cuda", kernels=kernels)])

    runs = {"a": record("a", "cpu", [KernelOutcome(kernel="k0", fingerprint="f", attempts=3,
                                                   by_stage={"correct": 2, "rejected:model": 1}),
                                     KernelOutcome(kernel="k1", fingerprint="f", skipped="small share")]),
            "b": record("b", "cuda", [KernelOutcome(kernel="k0", fingerprint="f", attempts=5, by_stage={"accepted": 1},
                                                    stored_version=2, stored_file="b/k0/v2.py")])}
    monkeypatch.setattr(agents, "tune", lambda problems, *a, **k: runs[problems[0].stem])
    options = SimpleNamespace(tune=True, refresh=False, verify=VerifyOptions(seeds=1), budget_s=1.0, agent="search")
    tuning = Tuning(options, SimpleNamespace(root=tmp_path), "cpu", lambda: None, None)
    for model in ("a", "b"):
        tuning.before_checks(SimpleNamespace(path=tmp_path / f"{model}.py"), SimpleNamespace(prop=lambda *_: None))
    assert tuning.tune_lines == [
        "kernelopt tune: a: 1 kernel(s) tuned (1 skipped), 3 candidate(s) tried, 2 passed the cascade; nothing "
        "stored: interpreter mode measures no speed (`kernelopt accept` stores a correct candidate)",
        f"kernelopt tune: run directory {tmp_path / '.kernelopt' / 'runs' / 'r-a'}",
        f"kernelopt tune: b: 1 kernel(s) tuned, 5 candidate(s) tried, 1 passed the cascade; stored k0 v2 "
        f"({tmp_path / 'kernels' / 'b' / 'k0' / 'v2.py'})",
        f"kernelopt tune: run directory {tmp_path / '.kernelopt' / 'runs' / 'r-b'}"]


def test_the_summary_says_what_tune_did_to_a_training_step(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A training problem's line counts its backward kernels, and the run's note (the graph rewrites are not
    tried on a training step) is said once, under the problem's name (no compile here)."""
    from types import SimpleNamespace

    import pytest_kernelopt.agents as agents
    from pytest_kernelopt.agents.loop import REWRITES_DECLINE
    from pytest_kernelopt.gate.tuning import Tuning
    from pytest_kernelopt.runs.records import KernelOutcome, ProblemOutcome, RunRecord
    from pytest_kernelopt.verify.options import VerifyOptions

    kernels = [KernelOutcome(kernel="triton_per_fused_0", fingerprint="f", attempts=2, by_stage={"correct": 1}),
               KernelOutcome(kernel="triton_per_fused_1__bwd", fingerprint="g", attempts=1, backward=True,
                             by_stage={"rejected:kernel": 1})]
    record = RunRecord(run_id="r-xent", started="now", agent="search", kernels_dir=str(tmp_path / "kernels"),
                       problems=[ProblemOutcome(model="xent", problem="xent.py", device="cpu", training=True, speed_measured=False,
                                                kernels=kernels, notes=[REWRITES_DECLINE])])
    monkeypatch.setattr(agents, "tune", lambda problems, *a, **k: record)
    options = SimpleNamespace(tune=True, refresh=False, verify=VerifyOptions(seeds=1), budget_s=1.0, agent="search")
    tuning = Tuning(options, SimpleNamespace(root=tmp_path), "cpu", lambda: None, None)
    tuning.before_checks(SimpleNamespace(path=tmp_path / "xent.py"), SimpleNamespace(prop=lambda *_: None))
    assert tuning.tune_lines[0] == ("kernelopt tune: xent: 2 kernel(s) tuned (1 backward), 3 candidate(s) tried, 1 "
                                    "passed the cascade; nothing stored: interpreter mode measures no speed "
                                    "(`kernelopt accept` stores a correct candidate)")
    assert [line for line in tuning.tune_lines if "graph rewrites only the cross-entropy" in line] == [
        f"kernelopt tune: xent: {REWRITES_DECLINE}"]


def test_tune_gets_the_gates_seed_and_verify_options_whole(repo: Path, pytester: pytest.Pytester,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """`pytest --kernelopt --kernelopt-tune --kernelopt-seed S`: the tune run checks with S's seeds added, like
    the gate's own checks (it once dropped the seed: its options were copied field by field). No compile here."""
    from types import SimpleNamespace

    from pytest_kernelopt import agents
    from pytest_kernelopt.runs.records import RunRecord
    from pytest_kernelopt.config import load_config
    from pytest_kernelopt.gate.options import read_options
    from pytest_kernelopt.gate.tuning import Tuning

    config = pytester.parseconfig("--kernelopt", "--kernelopt-tune", "--kernelopt-seed", "7", "--kernelopt-seeds", "2",
                                  "--kernelopt-max-slowdown", "0.03", "-p", "no:cacheprovider")
    settings = load_config(repo)
    options = read_options(config, settings)
    given: list[object] = []

    def fake_tune(problems: list[Path], tune_options: object, **_: object) -> RunRecord:
        given.append(tune_options)
        return RunRecord(run_id="r", started="now", agent="search", kernels_dir=str(repo / "kernels"))

    monkeypatch.setattr(agents, "tune", fake_tune)
    tuning = Tuning(options, settings, "cpu", lambda: None, None)
    tuning.before_checks(SimpleNamespace(path=repo / "problems" / "sum_reduce.py"), SimpleNamespace(prop=lambda *_: None))
    (tune_options,) = given
    verify = tune_options.verify  # type: ignore[attr-defined]
    assert verify == options.verify  # handed down whole: seed, seeds, timeout and the speed policy
    assert verify.seed == 7 and verify.seeds == 2 and verify.speed.max_slowdown == 0.03 and not verify.exact
    seeds = verify.session_seeds()
    assert seeds.pinned == 7 and len(seeds.seeds) == 4  # the pinned seed's two, added to two fresh ones
