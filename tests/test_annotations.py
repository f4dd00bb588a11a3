"""Where reviewers look, from the gate's own run: the report header and GitHub Actions annotations.

The end-to-end runs use a problem file that fails to import: its model item fails at once,
with nothing compiled.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import forkserver

from pytest_kernelopt.runs.gate_result import ItemResult
from pytest_kernelopt.report.annotations import annotation_lines, escape_data, escape_property, one_line

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: the gate runs in a child process."""


def gate(project: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("GITHUB_")}
    return forkserver.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", *args], cwd=project,
                          env={**environ, "PYTHONPATH": str(ROOT), **env})


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("project")
    (root / "problems").mkdir()
    (root / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    # A reason with the characters GitHub's commands give meaning to, and a second line.
    (root / "problems" / "broken.py").write_text('raise RuntimeError("50%, a:b,c\\n::error::forged")\n')
    return root


def test_the_header_names_device_versions_and_settings_and_failures_are_annotated_once(project):
    import torch
    import triton

    run = gate(project, "--kernelopt", "--kernelopt-history", "history.json", GITHUB_ACTIONS="true",
               GITHUB_WORKSPACE=str(project))
    assert run.returncode == 1, run.stdout + run.stderr
    # --kernelopt-history: nothing was timed on the CPU, so nothing is appended, and the summary says so
    assert "kernelopt: history history.json: no model was timed in this run" in run.stdout.replace(str(project) + "/", "")
    assert not (project / "history.json").exists()
    assert (f"kernelopt: cpu (Triton interpreter), torch {torch.__version__}, triton {triton.__version__}; "
            f"settings: pyproject.toml [tool.kernelopt]") in run.stdout.splitlines()
    commands = [line for line in run.stdout.splitlines() if line.startswith("::")]
    assert commands == [f"::error file=problems/broken.py,title=kernelopt broken::{project}/problems/broken.py: "
                        r"importing failed (line 1): RuntimeError('50%25, a:b,c\n::error::forged')"]


def test_no_annotations_outside_github_actions_and_no_header_without_the_gate(project, tmp_path):
    (tmp_path / "test_x.py").write_text("def test_x():\n    pass\n")
    (tmp_path / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    plain = gate(tmp_path, GITHUB_ACTIONS="true")
    assert plain.returncode == 0 and "kernelopt:" not in plain.stdout
    (tmp_path / "problems").mkdir()
    (tmp_path / "problems" / "broken.py").write_text((project / "problems" / "broken.py").read_text())
    run = gate(tmp_path, "--kernelopt", "--kernelopt-problems", "problems/*.py")
    assert run.returncode == 1, run.stdout + run.stderr
    assert "; settings: none (defaults)" in run.stdout
    assert "problems/broken.py::model" in run.stdout and not any(line.startswith("::") for line in run.stdout.splitlines())


def test_a_stale_kernel_is_a_warning_and_a_failure_an_error():
    items = [
        ItemResult(nodeid="p/a.py::k1", problem="p/a.py", model="a", kernel="k1", item="kernel", outcome="skipped",
                   status="stale", message="kernel k1: stale (allowed: not verified at this shape)"),
        ItemResult(nodeid="p/a.py::k2", problem="p/a.py", model="a", kernel="k2", item="kernel", outcome="failed",
                   status="rejected", message="kernel stage: 3 values differ\r\n::warning::x"),
        ItemResult(nodeid="p/a.py::model", problem="p/a.py", model="a", item="model", outcome="passed"),
    ]
    lines = annotation_lines(items + items[:1], lambda item: f"kernels/a/{item.kernel}/manifest.json")
    assert lines == [
        "::warning file=kernels/a/k1/manifest.json,title=kernelopt a / k1::kernel k1: stale (allowed: not verified "
        "at this shape)",
        "::error file=kernels/a/k2/manifest.json,title=kernelopt a / k2::kernel stage: 3 values differ",
    ]


def test_github_escaping_rules():
    assert escape_data("50% a\r\nb") == "50%25 a%0D%0Ab"
    assert escape_property("a:b,c%\n") == "a%3Ab%2Cc%25%0A"
    traceback = "def f():\n>   raise ValueError('x')\nE   ValueError: bad\nE   second\n\nfile.py:3: ValueError"
    assert one_line(traceback) == "second"
    assert one_line("\x1b[31mred\x1b[0m") == "\\x1b[31mred\\x1b[0m" and one_line(None) == "no reason given"
