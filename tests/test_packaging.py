"""Packaging: the dependency ranges we claim are the ones installed and tested; lean core; --version."""

from __future__ import annotations

import email.parser
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tomllib
import zipfile
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
    """A range we claim must include what the test suite runs on."""
    req = _requirements()[name]
    installed = version(name).split("+")[0]
    assert req.specifier.contains(installed, prereleases=True), f"{name} {installed} not in {req.specifier}"


@pytest.mark.parametrize("name", ["torch", "triton"])
def test_the_compiler_has_a_floor_and_no_cap(name):
    """From the oldest release run on to no upper bound: a cap refuses the compiler upgrades users make
    (and `kernelopt refresh` exists for). A known break gets a precise exclusion (``!=``), not a cap."""
    req = _requirements()[name]
    assert any(spec.operator == ">=" for spec in req.specifier), f"{name}: no oldest supported version"
    capped = [str(spec) for spec in req.specifier if spec.operator in ("<", "<=", "~=", "==", "===")]
    assert not capped, f"{name}: capped by {capped}"
    for newer in ("99.0", "2.15.0" if name == "torch" else "3.9.0"):
        assert req.specifier.contains(newer), f"{name} {newer} refused by {req.specifier}"


def test_triton_only_on_linux():
    """triton publishes Linux wheels only: elsewhere (a CPU-only machine on macOS) the install must not ask for it."""
    req = _requirements()["triton"]
    assert req.marker is not None
    assert req.marker.evaluate({"platform_system": "Linux"})
    assert not req.marker.evaluate({"platform_system": "Darwin"})
    assert not req.marker.evaluate({"platform_system": "Windows"})
    assert _requirements()["torch"].marker is None


def test_agent_and_pr_libraries_are_extras_not_core():
    core = _requirements()
    assert "anthropic" not in core and "gitpython" not in core
    extras = PROJECT["optional-dependencies"]
    assert any(r.startswith("anthropic") for r in extras["agents"])
    assert any(r.startswith("gitpython") for r in extras["pr"])
    assert "pytest-xdist" in core  # the README's `pytest -n N --kernelopt` works out of the box


def test_every_agent_backends_sdk_is_an_extra_of_its_own():
    """The SDK a backend declares (its ``BACKEND.sdk``) installs with the extra it names, never with the core,
    and with the dev extra the tests run on."""
    from pytest_kernelopt.agents.backends import backend
    from pytest_kernelopt.settings import AGENT_BACKENDS

    core, extras = _requirements(), PROJECT["optional-dependencies"]
    sdks = {name: backend(name).sdk for name in AGENT_BACKENDS}
    assert sdks["anthropic"] is not None and sdks["anthropic"].extra == "agents" and sdks["search"] is None
    for name, sdk in sdks.items():
        if sdk is None:
            continue
        assert extras.get(sdk.extra), f"backend {name!r}: no extra {sdk.extra!r} in pyproject.toml"
        for requirement in map(Requirement, extras[sdk.extra]):
            assert requirement.name.lower() not in core, f"backend {name!r}: {requirement.name} is a core dependency"
            assert requirement.name in {Requirement(r).name for r in extras["dev"]}, f"{requirement.name} not in dev"


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

    # What a release ships: the license text, the typing marker, the metadata an index page shows.
    [wheel] = tmp_path.glob("pytest_kernelopt-*.whl")
    with zipfile.ZipFile(wheel) as zf:
        names = zf.namelist()
        [metadata] = [n for n in names if n.endswith(".dist-info/METADATA")]
        meta = email.parser.Parser().parsestr(zf.read(metadata).decode())
    assert "pytest_kernelopt/py.typed" in names
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names), names
    assert meta["License-Expression"] == "Apache-2.0"
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL"))
    assert {"Homepage", "Repository", "Issues", "Documentation"} <= set(urls)
    assert "Framework :: Pytest" in meta.get_all("Classifier")
    [triton] = [r for r in meta.get_all("Requires-Dist") if r.startswith("triton")]
    assert 'platform_system == "Linux"' in triton


def test_install_hints_name_the_repository_of_the_metadata():
    """Until the first release ``pip install pytest-kernelopt`` finds nothing: every hint installs from the
    repository, the one [project.urls] names."""
    from pytest_kernelopt.errors import REPOSITORY, install_hint

    assert PROJECT["urls"]["Repository"] == REPOSITORY
    assert install_hint("pr") == f'pip install "pytest-kernelopt[pr] @ git+{REPOSITORY}"'
    assert Requirement(install_hint("agents").split('"')[1]).url == f"git+{REPOSITORY}"
    # No hint, doc or workflow names the bare index form (docs/cli.md etc. say how to install today).
    bare = re.compile(r"pip install\s+[\"']?pytest-kernelopt(\[[a-z,]+\])?[\"']?(?!\s*@)(\s|$|`|\))")
    texts = [*ROOT.joinpath("pytest_kernelopt").rglob("*.py"), *ROOT.joinpath("docs").glob("*.md"),
             ROOT / "README.md", *ROOT.joinpath(".github", "workflows").glob("*.yml")]
    found = [f"{t.relative_to(ROOT)}: {m.group(0)!r}" for t in texts for m in bare.finditer(t.read_text())]
    assert not found, found


_BUILD_OUTPUT = shutil.ignore_patterns(".git", ".venv*", "build", "dist", "*.egg-info", "__pycache__", ".kernelopt",
                                       "out", ".pytest_cache")


def test_the_sdist_carries_what_its_tests_need(tmp_path):
    """Unpacked, the sdist's tests collect without an error: conftest.py, data and problem files,
    the committed kernels and docs some tests read are all in it."""
    tree = tmp_path / "tree"
    shutil.copytree(ROOT, tree, ignore=_BUILD_OUTPUT)  # build in a copy: the checkout gets no egg-info
    build = "import sys; from setuptools import build_meta; print(build_meta.build_sdist(sys.argv[1]))"
    out = subprocess.run([sys.executable, "-c", build, str(tmp_path / "dist")], cwd=tree, capture_output=True,
                         text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    sdist = tmp_path / "dist" / out.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist) as tar:
        tar.extractall(tmp_path / "unpacked", filter="data")
    [unpacked] = (tmp_path / "unpacked").iterdir()

    def files(top: Path, under: str) -> set[str]:
        return {p.relative_to(top).as_posix() for p in (top / under).rglob("*")
                if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"}

    for under in ("tests", "kernels", "docs", "templates", "pytest_kernelopt", ".github"):
        missing = files(tree, under) - files(unpacked, under)
        assert not missing, f"not in the sdist: {sorted(missing)[:10]}"
    for name in ("LICENSE", "CHANGELOG.md", "README.md", "Makefile", "pyproject.toml", "pytest_kernelopt/py.typed"):
        assert (unpacked / name).is_file(), name
    env = {**os.environ, "PYTHONPATH": str(unpacked)}
    collect = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:xdist", "tests"],
                             cwd=unpacked, env=env, capture_output=True, text=True, timeout=300)
    assert collect.returncode == 0 and " error" not in collect.stdout.splitlines()[-1], collect.stdout[-3000:]


def test_merge_needs_neither_torch_nor_triton(tmp_path):
    """gate-matrix.yml merges on a GitHub-hosted machine without torch: ``kernelopt merge --report`` imports neither."""
    code = """
import sys
from pytest_kernelopt.runs import gate_result as results
env = results.ResultEnvironment(device="cpu", torch="2.13.0", triton="3.7.1", python="3.11.7")
settings = results.GateSettings(seeds=1, timeout=600.0, max_slowdown=0.01, strict=True)
item = results.ItemResult(nodeid="problems/r.py::model", problem="problems/r.py", model="r", item="model",
                          outcome="passed", kernels=0, committed=0, stale=0, baseline=0)
results.write(results.gate_result(shard=None, problems=["r"], environment=env, settings=settings, items=[item]),
              "s.json")
from pytest_kernelopt.cli import main
assert main(["merge", "s.json", "--report", "gate.md", "--json", "merged.json"]) == 0
print(sorted(m for m in ("torch", "triton") if m in sys.modules))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"
    assert "# kernelopt gate: passed" in (tmp_path / "gate.md").read_text()
