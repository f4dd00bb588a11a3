"""Packaging: the dependency ranges we claim are the ones installed and tested; lean core; --version."""

from __future__ import annotations

import subprocess
import sys
import tomllib
from importlib.metadata import version
from pathlib import Path

import pytest
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def _requirements() -> dict[str, Requirement]:
    reqs = [Requirement(r) for r in PROJECT["dependencies"]]
    return {r.name.lower(): r for r in reqs}


@pytest.mark.parametrize("name", ["torch", "triton", "pydantic", "pytest"])
def test_installed_versions_are_in_the_claimed_range(name):
    """A range we claim must include what the test suite runs on (and be bounded for torch/triton)."""
    req = _requirements()[name]
    installed = version(name).split("+")[0]
    assert req.specifier.contains(installed, prereleases=True), f"{name} {installed} not in {req.specifier}"
    if name in ("torch", "triton"):
        assert any(spec.operator == "<" for spec in req.specifier), f"{name}: untested future releases are admitted"


def test_agent_and_pr_libraries_are_extras_not_core():
    core = _requirements()
    assert "anthropic" not in core and "gitpython" not in core
    extras = PROJECT["optional-dependencies"]
    assert any(r.startswith("anthropic") for r in extras["agents"])
    assert any(r.startswith("gitpython") for r in extras["pr"])
    assert "pytest-xdist" in core  # the README's `pytest -n N --kernelopt` works out of the box


def test_core_paths_import_neither_anthropic_nor_git():
    code = ("import sys, pytest_kernelopt.cli, pytest_kernelopt.verify, pytest_kernelopt.gate, pytest_kernelopt.store; "
            "print(sorted(m for m in ('anthropic', 'git') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def test_version_flag():
    out = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "--version"], capture_output=True, text=True)
    assert out.returncode == 0
    assert out.stdout.strip() == f"kernelopt {version('pytest-kernelopt')}"


def test_bad_option_is_one_line_with_exit_2():
    out = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "verify", "x.py", "--kernel", "k",
                          "--candidate", "c.py", "--timeout", "nan"], capture_output=True, text=True)
    assert out.returncode == 2
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelopt: error:") and "--timeout" in lines[0], out.stderr
    out = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "verify", "x.py", "--kernel", "k",
                          "--candidate", "c.py", "--seeds", "100000000000000000000"], capture_output=True, text=True)
    assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_dump_into_a_file_or_unwritable_place_is_bad_input(tmp_path, monkeypatch):
    from pytest_kernelopt.candidate import write_dumps
    from pytest_kernelopt.errors import UsageError

    target = tmp_path / "afile"
    target.write_text("x")
    with pytest.raises(UsageError, match="not a folder"):
        write_dumps([], "m", target)

    def refuse(*args, **kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(Path, "mkdir", refuse)
    with pytest.raises(UsageError, match="cannot write .*Permission denied"):
        write_dumps([], "m", tmp_path / "new")


def test_building_gives_no_license_deprecation_warning(tmp_path):
    """``project.license`` in the SPDX string form, with a setuptools that reads it: the TOML-table
    form made every install print setuptools' deprecation box (setuptools >= 77)."""
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "-v", "--no-deps", "--no-build-isolation", "-w",
                          str(tmp_path), str(ROOT)], capture_output=True, text=True, timeout=300)
    if out.returncode != 0 and "No module named" in out.stderr:
        pytest.skip("pip or setuptools missing in this environment")
    assert out.returncode == 0, out.stderr[-2000:]
    assert "license" not in (out.stdout + out.stderr).lower() or "deprecated" not in (out.stdout + out.stderr).lower()
    assert isinstance(PROJECT["license"], str)
