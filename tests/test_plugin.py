"""`pytest --kernelopt` through pytester, in interpreter mode, on a copy of an example problem.

A template repo (pyproject.toml, the problem, and one kernel accepted through
`kernelopt accept`) is built once; each test runs the gate in a fresh copy.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "tests" / "problems" / "elementwise_chain.py"
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n'


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", *args], cwd=cwd, capture_output=True, text=True)


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    (repo / "problems").mkdir()
    shutil.copy(PROBLEM, repo / "problems")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    listing = _cli("kernels", "problems/elementwise_chain.py", "--json", "--dump", "dumps", cwd=repo)
    assert listing.returncode == 0, listing.stderr
    kernel = next(k["name"] for k in json.loads(listing.stdout) if k["kind"] == "triton")
    accepted = _cli("accept", "problems/elementwise_chain.py", "--kernel", kernel, "--candidate", f"dumps/{kernel}.py",
                    "--seeds", "2", cwd=repo)
    assert accepted.returncode == 0, accepted.stdout + accepted.stderr
    record = json.loads((repo / "kernels" / "elementwise_chain" / "model.json").read_text())
    (baseline,) = record["baselines"].values()  # one environment: this CPU, interpreter mode
    assert baseline["kernels"] == {kernel: 1} and baseline["timing"] is None
    (repo / "kernel_name").write_text(kernel)
    return repo


@pytest.fixture
def repo(template: Path, pytester: pytest.Pytester) -> Path:
    shutil.copytree(template, pytester.path, dirs_exist_ok=True)
    return pytester.path


def _kernel_dir(repo: Path) -> Path:
    return repo / "kernels" / "elementwise_chain" / (repo / "kernel_name").read_text()


def _gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "2", "-p", "no:cacheprovider",
                                         "-W", "ignore", *args)


def test_plain_pytest_does_not_import_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="""
        import sys
        def test_no_torch():
            assert "torch" not in sys.modules and "triton" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "kernelopt" in pytester.runpytest_subprocess("--help").stdout.str()


@pytest.mark.slow
def test_gate_passes_with_committed_kernel_under_xdist(repo: Path, pytester: pytest.Pytester) -> None:
    result = _gate(pytester, "-n", "2", "--junitxml=gate.xml")
    result.assert_outcomes(passed=2)
    out = result.stdout.str()
    assert re.search(r"elementwise_chain\s+1\s+0\s+0\s+0\s+not measured", out), out
    props = {p.get("name"): p.get("value") for p in ET.parse(repo / "gate.xml").getroot().iter("property")}
    assert props["kernelopt_status"] == "committed"
    assert float(props["kernelopt_error_vs_fp64"]) < 1e-5


@pytest.mark.slow
def test_hand_edit_of_committed_kernel_blocks(repo: Path, pytester: pytest.Pytester) -> None:
    version = _kernel_dir(repo) / "v1.py"
    source = version.read_text()
    edited = re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", source, count=1)
    assert edited != source
    version.write_text(edited)
    result = _gate(pytester)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    # The store notices the edit before anything runs: the file no longer has the recorded sha256.
    assert out.count("differ from the sha256 recorded at accept") >= 2, out
    assert result.ret == 1


@pytest.mark.slow
def test_edit_recorded_in_the_manifest_is_still_reverified(repo: Path, pytester: pytest.Pytester) -> None:
    """Nothing recorded is trusted: an edit with a matching sha256 in the manifest is caught by the cascade."""
    import hashlib

    folder = _kernel_dir(repo)
    version = folder / "v1.py"
    source = version.read_text()
    edited = re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", source, count=1)
    assert edited != source
    version.write_text(edited)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["versions"][0]["sha256"] = hashlib.sha256(edited.encode()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    result = _gate(pytester)
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "rejected at kernel" in out and "rejected at model" in out
    assert result.ret == 1


@pytest.mark.slow
def test_stale_kernel_is_reported_and_fails_when_strict(repo: Path, pytester: pytest.Pytester) -> None:
    manifest_path = _kernel_dir(repo) / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["fingerprint"] = "0" * 16
    manifest_path.write_text(json.dumps(manifest))
    result = _gate(pytester, "-rs")
    result.assert_outcomes(passed=1, skipped=1)
    assert "stale" in result.stdout.str()
    strict = _gate(pytester, "--kernelopt-strict")
    strict.assert_outcomes(passed=1, failed=1)
    assert "stale" in strict.stdout.str()


@pytest.mark.slow
def test_corrupt_manifest_fails_the_item_not_the_run(repo: Path, pytester: pytest.Pytester) -> None:
    (_kernel_dir(repo) / "manifest.json").write_text("{ this is not json")
    result = _gate(pytester)
    result.assert_outcomes(failed=2)
    assert "manifest.json: invalid Manifest" in result.stdout.str()


@pytest.mark.slow
def test_k_selects_gate_items(repo: Path, pytester: pytest.Pytester) -> None:
    result = _gate(pytester, "-k", "model")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["*1 passed, 1 deselected*"])


def test_no_problems_is_a_usage_error(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", pyproject='[tool.kernelopt]\nproblems = ["nothing/*.py"]\n')
    result = pytester.runpytest_subprocess("--kernelopt", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "matches no problem files" in result.stderr.str()
