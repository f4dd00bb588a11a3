"""``--kernelopt-base-ref``: the base is the base commit as production ran it.

Its problem file and its ``kernels/<model>/`` folder are read at the base commit (gate/base.py),
and the verifier compiles the base through the production backend (verify/base.py): its committed
versions run, and the report says what ran there. A base that fails is its own failure.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest

from conftest import TESTS, gate_project
from test_production import commit, marked

pytest_plugins = ["pytester"]

ELEMENTWISE = TESTS / "problems" / "elementwise_chain.py"


def _git(repo: Path, *args: str) -> str:
    done = subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", *args], cwd=repo, check=True,
                          capture_output=True, text=True)
    return done.stdout.strip()


def _commit_all(repo: Path, message: str = "x") -> None:
    if not (repo / ".git").exists():
        _git(repo, "init", "-q")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", message)


# --- the base commit's files (no torch) ------------------------------------------------------

def test_the_store_folder_is_read_at_the_base_commit_byte_for_byte(tmp_path: Path) -> None:
    from pytest_kernelopt.gate.base import BaseRef, base_files

    folder = tmp_path / "kernels" / "m" / "triton_k"
    folder.mkdir(parents=True)
    committed = b"# v1 as committed\r\n\x00\xff"  # raw bytes: no filter, no line-ending change
    (folder / "v1.py").write_bytes(committed)
    (folder / "manifest.json").write_text("{}")
    (tmp_path / "kernels" / "m" / "model.json").write_text('{"model": "m"}')
    (tmp_path / "kernels" / "mm").mkdir()  # a neighbour whose name starts with the model's
    (tmp_path / "kernels" / "mm" / "other").write_text("not m's")
    (tmp_path / ".gitattributes").write_text("kernels/** export-ignore\n")  # would empty a `git archive`
    (tmp_path / "m.py").write_text("problem at base\n")
    _commit_all(tmp_path)
    # The head moves on: the working tree is not what the base committed.
    (folder / "v1.py").write_text("edited at head")
    (folder / "v2.py").write_text("added at head")
    (tmp_path / "m.py").write_text("problem at head\n")

    base = BaseRef("HEAD", tmp_path)
    store = base.store_relative(tmp_path / "kernels")
    assert store == "kernels"
    files = base.store_files(store, "m")
    assert files == {("triton_k", "v1.py"): committed, ("triton_k", "manifest.json"): b"{}",
                     ("model.json",): b'{"model": "m"}'}
    assert base.store_files(store, "absent") == {}
    assert base.store_relative(tmp_path.parent / "elsewhere") is None  # outside the repository: said by the gate

    with base_files("m.py", "m", base.text(tmp_path / "m.py"), files) as (problem, kernels):
        assert problem is not None and kernels is not None
        temp = Path(problem).parent
        assert Path(problem).read_text() == "problem at base\n"
        assert (Path(kernels) / "m" / "triton_k" / "v1.py").read_bytes() == committed
        assert sorted(p.name for p in (Path(kernels) / "m").iterdir()) == ["model.json", "triton_k"]
    assert not temp.exists()  # removed when the check ends
    with base_files("m.py", "m", b"x", {}) as (problem, kernels):
        assert problem is not None and kernels is None  # nothing committed for the model at the base


# --- the verifier's side: the base compiled as production ran it ------------------------------

@pytest.mark.slow
def test_the_base_runs_its_committed_version_and_says_so(compiled_models: Any, tmp_path: Path) -> None:
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    captured = compiled_models.get(ELEMENTWISE)
    (name, handle), = captured.kernels.items()
    commit(tmp_path / "kernels", "elementwise_chain", handle.info, marked(handle.info, "elementwise_chain"))
    base = tmp_path / "base" / "elementwise_chain.py"  # as the gate writes it: the file's name kept
    base.parent.mkdir()
    shutil.copy(ELEMENTWISE, base)
    broken = tmp_path / "broken" / "elementwise_chain.py"
    broken.parent.mkdir()
    broken.write_text(ELEMENTWISE.read_text().replace("return y + 0.5 * x", "raise RuntimeError('base is broken')"))

    with VerifySession(ELEMENTWISE, "cpu", VerifyOptions(seeds=1)) as session:
        at_base = session.verify_model({}, base_problem=base, base_kernels=tmp_path / "kernels")
        nothing = session.verify_model({}, base_problem=base, base_kernels=None)
        failed = session.verify_model({}, base_problem=broken, base_kernels=tmp_path / "kernels")

    assert at_base.status == "correct" and at_base.base_run is not None
    assert at_base.base_run.failure is None
    assert [(k.name, k.runs, k.version) for k in at_base.base_run.kernels] == [(name, "committed", 1)]
    assert at_base.base_run.describe() == f"1 of 1 kernel committed ({name} v1)"
    assert nothing.base_run is not None and nothing.base_run.describe() == "compiler kernels only"
    # The base's own failure is said as such; the head's verdict stands.
    assert failed.status == "correct" and failed.base_run is not None
    assert "eager mode" in (failed.base_run.failure or "") and "base is broken" in failed.base_run.failure


# --- the gate end to end -----------------------------------------------------------------------

@pytest.mark.slow
def test_gate_reports_what_ran_at_the_base_commit(compiled_models: Any, pytester: pytest.Pytester,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A head that drops the committed version is compared with the base that ran it."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    repo = gate_project(pytester.path, ELEMENTWISE)
    captured = compiled_models.get(ELEMENTWISE)
    (name, handle), = captured.kernels.items()
    commit(repo / "kernels", "elementwise_chain", handle.info, marked(handle.info, "elementwise_chain"))
    _commit_all(repo, "base: v1 committed")
    shutil.rmtree(repo / "kernels")  # the head: the compiler's kernel again
    temp = repo / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())  # it follows TMPDIR (torch 2.13)
    monkeypatch.setenv("TMPDIR", str(temp))

    result = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore",
                                           "-p", "no:cacheprovider", "problems/elementwise_chain.py::model",
                                           "--kernelopt-base-ref", "HEAD", "--kernelopt-json", "gate.json",
                                           "--kernelopt-report", "gate.md")
    result.assert_outcomes(passed=1)
    (item,) = json.loads((repo / "gate.json").read_text())["items"]
    assert item["base_ran"] == f"1 of 1 kernel committed ({name} v1)"
    assert item["vs_base"] == "not measured" and item["base_ms"] is None  # interpreter mode: nothing timed
    assert f"base ran 1 of 1 kernel committed ({name} v1)" in result.stdout.str()
    report = (repo / "gate.md").read_text()
    assert "## vs base (HEAD)" in report and f"1 of 1 kernel committed ({name} v1)" in report
    assert list(temp.iterdir()) == []  # the base's files lived only as long as the check


# --- the report (no compile) -------------------------------------------------------------------

def test_report_shows_base_time_head_time_change_and_what_ran_at_base() -> None:
    from datetime import datetime, timezone

    from pytest_kernelopt.runs.gate_result import GateResult, GateSettings, ItemResult, ResultEnvironment
    from pytest_kernelopt.report import gate_lines
    from pytest_kernelopt.report.gate import render_gate_report

    ran = "2 of 3 kernels committed (triton_a v3, triton_b v1); the compiler's for triton_c (stale), compile max-autotune"
    items = [
        ItemResult(nodeid="p/a.py::model", problem="p/a.py", model="a", item="model", outcome="failed",
                   committed=2, stale=0, baseline=1, speed_measured=True, speedup=1.1, speedup_ci=[1.05, 1.15],
                   base_ms=1.0, head_ms=1.25, vs_base_speedup=0.8, vs_base_ci=[0.78, 0.82], base_ran=ran,
                   base_compile="max-autotune", message="a: slower than at origin/main: 0.800x"),
        ItemResult(nodeid="p/b.py::model", problem="p/b.py", model="b", item="model", outcome="passed",
                   committed=1, stale=0, baseline=0, speed_measured=True, speedup=1.2, speedup_ci=[1.1, 1.3],
                   vs_base="base failed at origin/main", base_ran="failed: the model fails in eager mode: x | y",
                   base_failure="the model fails in eager mode: x | y"),
    ]
    result = GateResult(created=datetime(2026, 12, 4, tzinfo=timezone.utc), problems=["a", "b"],
                        environment=ResultEnvironment(device="cuda", torch="2.13.0", triton="3.7.1", python="3.11"),
                        settings=GateSettings(seeds=3, timeout=600, max_slowdown=0.01, strict=False,
                                              base_ref="origin/main", base_commit="abcdef1234567890"),
                        items=items)
    text = render_gate_report(result)
    section = text.split("## vs base (origin/main)", 1)[1].split("## Failures", 1)[0]
    assert "| base ms | head ms | change vs base [95% CI] | what ran at base |" in section
    assert f"| `p/a.py` | 1 | 1.25 | 0.800x [0.780, 0.820] | ` {ran} ` |" in section  # the worker's words: inert
    assert r"| `p/b.py` | - | - | base failed at origin/main | ` failed: the model fails in eager mode: x \| y ` |" \
        in section
    lines = "\n".join(gate_lines(result.rows()))
    assert f"p/a.py: base 1 ms, head 1.25 ms (0.800x [0.780, 0.820]); base ran {ran}" in lines
    assert "p/b.py: the base commit failed (the model fails in eager mode: x | y): not compared; the head's " \
           "verdict stands" in lines
    # The JSON result carries the new fields (an addition: older readers ignore nothing they knew).
    (a, _) = json.loads(result.model_dump_json())["items"]
    assert (a["base_ms"], a["head_ms"], a["base_ran"], a["base_compile"]) == (1.0, 1.25, ran, "max-autotune")
