"""The gate's history file (github-action-benchmark's format) and its chart; no compile here."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

import forkserver
from test_gate_report import result

from pytest_kernelopt.cli import main
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.runs.gate_result import ItemResult, write
from pytest_kernelopt.gitops.history import append_history
from pytest_kernelopt.report.history import read_history

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


def model(name: str, ms: float | None, speedup: float = 1.1) -> ItemResult:
    timed = {"speed_measured": True, "speedup": speedup, "speedup_ci": [speedup - 0.01, speedup + 0.01],
             "model_ms": ms, "compiled_ms": ms * speedup} if ms is not None else {"speed_measured": False}
    return ItemResult(nodeid=f"problems/{name}.py::model", problem=f"problems/{name}.py", model=name, item="model",
                      outcome="passed", kernels=0, **timed)


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch) -> Path:
    for name in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY"):
        monkeypatch.delenv(name, raising=False)
    git(tmp_path, "init", "-q", "-b", "main")
    git(tmp_path, "remote", "add", "origin", "git@github.com:acme/widgets.git")
    git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "first")
    return tmp_path


def test_two_runs_append_two_entries_in_the_benchmark_format(repo):
    path = repo / "history.json"
    line = append_history(result(model("softmax_rows", 0.4), model("rms_norm", 1.25), model("cpu_only", None)),
                          path, repo)
    assert "2 model time(s) appended to 'kernelopt (NVIDIA H200)'" in line
    git(repo, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "--allow-empty", "-m", "second")
    append_history(result(model("softmax_rows", 0.38), model("rms_norm", 1.3)), path, repo)
    data = json.loads(path.read_text())
    assert data["repoUrl"] == "https://github.com/acme/widgets" and isinstance(data["lastUpdate"], int)
    [(suite, entries)] = data["entries"].items()
    assert suite == "kernelopt (NVIDIA H200)" and len(entries) == 2
    first, second = entries
    assert second["commit"]["id"] == git(repo, "rev-parse", "HEAD") and second["commit"]["message"] == "second"
    assert second["commit"]["url"] == f"https://github.com/acme/widgets/commit/{second['commit']['id']}"
    assert first["commit"]["message"] == "first" and first["tool"] == "customSmallerIsBetter"
    assert isinstance(first["date"], int) and first["date"] <= second["date"]
    bench = {b["name"]: b for b in first["benches"]}
    assert set(bench) == {"softmax_rows", "rms_norm"}  # the untimed model adds nothing
    assert bench["softmax_rows"]["value"] == 0.4 and bench["softmax_rows"]["unit"] == "ms"
    assert "NVIDIA H200, torch 2.11.0, triton 3.6.0" in bench["softmax_rows"]["extra"]
    assert "1.100x [1.090, 1.110] over the compiled model" in bench["softmax_rows"]["extra"]


def test_a_corrupt_file_is_a_clear_error_and_stays_as_it_was(repo):
    path = repo / "history.json"
    append_history(result(model("softmax_rows", 0.4)), path, repo)
    broken = path.read_text()[:-20]
    path.write_text(broken)
    with pytest.raises(UsageError, match=r"history.json: not a benchmark history file .*it was left as it is"):
        append_history(result(model("softmax_rows", 0.5)), path, repo)
    assert path.read_text() == broken and [p.name for p in repo.iterdir() if p.name.startswith(".history")] == []


def test_foreign_fields_and_a_data_js_are_kept_and_the_length_bounded(repo):
    path = repo / "data.js"
    path.write_text('window.BENCHMARK_DATA = {"lastUpdate": 1, "repoUrl": "https://github.com/o/r", "entries": '
                    '{"other": [{"commit": {"id": "abc", "author": {"name": "x"}}, "date": 1, "tool": "pytest", '
                    '"benches": [{"name": "b", "value": 1, "unit": "s"}]}]}};\n')
    for ms in (0.5, 0.4, 0.3):
        append_history(result(model("softmax_rows", ms)), path, repo, keep=2)
    data = json.loads(path.read_text())
    assert data["entries"]["other"][0]["commit"]["author"] == {"name": "x"} and data["repoUrl"] == "https://github.com/o/r"
    assert [e["benches"][0]["value"] for e in data["entries"]["kernelopt (NVIDIA H200)"]] == [0.4, 0.3]


def test_an_untimed_run_appends_nothing(repo):
    path = repo / "history.json"
    assert "no model was timed" in append_history(result(model("x", None)), path, repo)
    assert not path.exists()


def test_report_draws_the_history(repo, capsys):
    pytest.importorskip("matplotlib")
    path = repo / "history.json"
    for ms in (0.5, 0.4):
        append_history(result(model("softmax_rows", ms), model("r$ms", ms * 2)), path, repo)
    assert main(["report", "--history", str(path), "--out", str(repo / "out")]) == 0
    out = capsys.readouterr().out
    assert f"wrote {repo / 'out' / 'history.png'}" in out
    assert (repo / "out" / "history.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    page = (repo / "out" / "history.md").read_text()
    assert "![time per call of each model over commits](history.png)" in page
    assert "| kernelopt (NVIDIA H200) | softmax_rows | 0.4 ms |" in page and "| 0.5 |" in page and "| -20.0% | 2 |" in page


def test_report_without_matplotlib_says_how_to_install(repo, capsys, monkeypatch):
    path = repo / "history.json"
    append_history(result(model("softmax_rows", 0.5)), path, repo)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib... raises ImportError
    monkeypatch.setitem(sys.modules, "matplotlib.figure", None)
    monkeypatch.setitem(sys.modules, "matplotlib.backends.backend_agg", None)
    assert main(["report", "--history", str(path)]) == 0
    out = capsys.readouterr().out
    assert "history chart not drawn: matplotlib is not installed (pip install" in out
    assert "chart not drawn" in (repo / "history.md").read_text()


def test_merge_appends_the_merged_run(repo, capsys, monkeypatch):
    shard = repo / "gate.json"
    write(result(model("softmax_rows", 0.4), problems=["softmax_rows"]).model_copy(update={"run_problems": ["softmax_rows"]}),
          shard)
    monkeypatch.chdir(repo)
    main(["merge", str(shard), "--history", "history.json"])
    assert "1 model time(s) appended" in capsys.readouterr().err
    assert read_history(repo / "history.json").entries["kernelopt (NVIDIA H200)"][0].benches[0].value == 0.4


def test_the_gate_refuses_a_history_file_it_cannot_read_before_compiling(tmp_path):
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    (tmp_path / "history.json").write_text("{not json")
    run = forkserver.run([sys.executable, "-m", "pytest", "--kernelopt", "--kernelopt-history", "history.json",
                          "-p", "no:cacheprovider"], cwd=tmp_path, env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 4, run.stdout + run.stderr
    assert "history.json: not a benchmark history file" in run.stderr
    assert (tmp_path / "history.json").read_text() == "{not json"


def test_report_needs_a_run_or_a_history(tmp_path, capsys):
    assert main(["report"]) == 2
    assert "give RUN_DIR (a tuning run's report), --history FILE" in capsys.readouterr().err
    assert main(["report", "--history", str(tmp_path / "none.json")]) == 2
    assert "no such history file (pytest --kernelopt --kernelopt-history" in capsys.readouterr().err
