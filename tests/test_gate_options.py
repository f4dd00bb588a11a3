"""`pytest --kernelopt` refuses bad settings and options with one line and pytest's usage exit (4).

All of these stop while pytest configures, before anything is imported from torch or
compiled, so they run in-process and take a fraction of a second each.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from conftest import gate_project

pytest_plugins = ["pytester"]

PROBLEM = Path(__file__).resolve().parent / "problems" / "elementwise_chain.py"


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    return gate_project(pytester.path, PROBLEM)


def _usage_error(result: pytest.RunResult, *needles: str) -> str:
    """The one ``ERROR:`` line of a usage exit, checked to name every needle."""
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    err = result.stderr.str()
    assert "INTERNALERROR" not in err and "Traceback" not in err, err
    lines = [line for line in err.splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: kernelopt: "), err
    assert all(needle in lines[0] for needle in needles), lines[0]
    assert "collected" not in result.stdout.str()  # stopped before collection: nothing compiled
    return lines[0]


@pytest.mark.parametrize(("setting", "needles"), [
    ('device = "tpu"', ("device", "'tpu'")),
    ("kernels_dir = 5", ("kernels_dir", "5")),
    ('problems = "problems/*.py"', ("problems", "a list of glob strings")),
])
def test_bad_setting_is_a_usage_error(pytester: pytest.Pytester, setting: str, needles: tuple[str, ...]) -> None:
    pytester.makefile(".toml", pyproject=f"[tool.kernelopt]\n{setting}\n")
    _usage_error(pytester.runpytest("--kernelopt", "-p", "no:cacheprovider"), "pyproject.toml", *needles)


@pytest.mark.parametrize(("option", "value"), [
    ("--kernelopt-seeds", "0"),
    ("--kernelopt-seeds", "1001"),
    ("--kernelopt-timeout", "-1"),
    ("--kernelopt-timeout", "nan"),
    ("--kernelopt-timeout", "inf"),
    ("--kernelopt-max-slowdown", "-1"),
    ("--kernelopt-max-slowdown", "1"),
    ("--kernelopt-max-slowdown", "nan"),
    ("--kernelopt-max-regression", "1"),
    ("--kernelopt-max-regression", "-0.1"),
])
def test_bad_option_is_a_usage_error(repo: Path, pytester: pytest.Pytester, option: str, value: str) -> None:
    _usage_error(pytester.runpytest("--kernelopt", option, value, "-p", "no:cacheprovider"), option, value)


def test_base_ref_outside_git_is_a_usage_error(repo: Path, pytester: pytest.Pytester) -> None:
    result = pytester.runpytest("--kernelopt", "--kernelopt-base-ref", "HEAD", "-p", "no:cacheprovider")
    _usage_error(result, "--kernelopt-base-ref HEAD", "not in a git repository")


def test_unknown_base_ref_is_a_usage_error_and_leaves_nothing(repo: Path, pytester: pytest.Pytester,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    subprocess.run(["git", "init", "-q"], cwd=repo, check=True)
    subprocess.run(["git", "add", "-A"], cwd=repo, check=True)
    subprocess.run(["git", "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "problems"], cwd=repo,
                   check=True)
    temp = repo / "tmp"
    temp.mkdir()
    monkeypatch.setenv("TMPDIR", str(temp))
    result = pytester.runpytest("--kernelopt", "--kernelopt-base-ref", "no-such-ref", "-p", "no:cacheprovider")
    _usage_error(result, "--kernelopt-base-ref no-such-ref", "no such commit")
    assert list(temp.iterdir()) == []


def test_problem_files_sharing_a_store_id_are_a_usage_error(repo: Path, pytester: pytest.Pytester) -> None:
    (repo / "more").mkdir()
    shutil.copy(PROBLEM, repo / "more")
    result = pytester.runpytest("--kernelopt", "--kernelopt-problems", "problems/*.py", "more/*.py",
                                "-p", "no:cacheprovider")
    line = _usage_error(result, "problems/elementwise_chain.py", "more/elementwise_chain.py", "elementwise_chain")
    assert "kernels/elementwise_chain" in line


def test_no_problems_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject='[tool.kernelopt]\nproblems = ["nothing/*.py"]\n')
    _usage_error(pytester.runpytest("--kernelopt", "-p", "no:cacheprovider"), "matches no problem files")


def test_without_settings_the_error_says_what_to_do(pytester: pytest.Pytester) -> None:
    """No pyproject.toml (or one without [tool.kernelopt]): say so, not "problems matches no problem files"."""
    if any((p / "pyproject.toml").is_file() for p in pytester.path.parents):
        pytest.skip("a pyproject.toml above the temp folder")
    line = _usage_error(pytester.runpytest("--kernelopt", "-p", "no:cacheprovider"),
                        f"no pyproject.toml found above {pytester.path}", "pass problem files", "--kernelopt-problems")
    assert "matches no problem files" not in line
    pytester.makefile(".toml", pyproject='[project]\nname = "x"\n')
    _usage_error(pytester.runpytest("--kernelopt", "-p", "no:cacheprovider"),
                 f"{pytester.path / 'pyproject.toml'} has no [tool.kernelopt] table", "--kernelopt-problems")


def test_without_settings_a_problem_file_on_the_command_line_is_gated(pytester: pytest.Pytester) -> None:
    """``pytest --kernelopt my_model.py`` in a repository without [tool.kernelopt]: the file named is the problem
    (one defining get_inputs); a test file named is not."""
    if any((p / "pyproject.toml").is_file() for p in pytester.path.parents):
        pytest.skip("a pyproject.toml above the temp folder")
    shutil.copy(PROBLEM, pytester.path)
    pytester.makepyfile(test_plain="def test_one():\n    assert True\n")
    result = pytester.runpytest("--kernelopt", PROBLEM.name, "-p", "no:cacheprovider")
    assert result.ret == 0, result.stdout.str()
    result.stdout.fnmatch_lines([f"*{PROBLEM.stem}*compiler baseline*"])
    _usage_error(pytester.runpytest("--kernelopt", "test_plain.py", "-p", "no:cacheprovider"),
                 "no pyproject.toml found above")


@pytest.mark.parametrize(("tables", "needles"), [
    ("[tool.kernelopt.thresholds.elementwise_chian]\nmax_slowdown = 0.05\n",
     ("thresholds.elementwise_chian", "matches no problem of the run (elementwise_chain)")),
    ('[tool.kernelopt.accepted_regressions.elementwise_chain]\nmax_slowdown = 0.05\nreason = "r"\nby = "b"\n'
     "expires = 2999-01-01\n", ("accepted_regressions.elementwise_chain.expires", "2999-01-01 is more than")),
])
def test_bad_thresholds_are_a_usage_error(repo: Path, pytester: pytest.Pytester, tables: str,
                                          needles: tuple[str, ...]) -> None:
    """Names in [tool.kernelopt] thresholds and accepted_regressions must be problems of the run; an acceptance
    must expire within reach."""
    with (repo / "pyproject.toml").open("a") as f:
        f.write(tables)
    _usage_error(pytester.runpytest("--kernelopt", "-p", "no:cacheprovider"), "pyproject.toml", *needles)
