"""`pytest --kernelopt` through pytester, in interpreter mode, on a copy of an example problem.

A template repo (pyproject.toml, the problem, and one kernel accepted through
`kernelopt accept`) is built once; each test runs the gate in a fresh copy. Node ids
are the problem file's path from the rootdir: `problems/elementwise_chain.py::<kernel>`
and `problems/elementwise_chain.py::model`. Bad settings and options: test_gate_options.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from collections.abc import Iterable
from typing import Any

import pytest

import forkserver

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "tests" / "problems" / "elementwise_chain.py"
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n'
FILE = "problems/elementwise_chain.py"
ROW = r"problems/elementwise_chain\.py\s+"  # the summary row of the problem (committed stale baseline failed ...)


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forkserver.run([sys.executable, "-m", "pytest_kernelopt.cli", *args], cwd=cwd)


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


def _gate(pytester: pytest.Pytester, *args: str, cache: bool = False) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "2", "-W", "ignore",
                                         *([] if cache else ["-p", "no:cacheprovider"]), *args)


def _junit(path: Path) -> dict[str, dict[str, str]]:
    """Per testcase name: its ``time`` and its properties."""
    cases = {}
    for case in ET.parse(path).getroot().iter("testcase"):
        props = {p.get("name"): p.get("value") for p in case.iter("property")}
        cases[case.get("name")] = {"time": case.get("time"), **props}
    return cases


def test_plain_pytest_does_not_import_torch(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_plain="""
        import sys
        def test_no_torch():
            assert "torch" not in sys.modules and "triton" not in sys.modules
    """)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert "kernelopt" in pytester.runpytest_subprocess("--help").stdout.str()


# --- damaged stores: one gate run ------------------------------------------------------------
# Each kind of damage is done to its own copy of the problem (problems/<damage>.py, its store
# kernels/<damage>/) and one gate run checks them all (a gate run starts Python, torch and a verifier
# worker: seconds each). Every item is judged on its own problem's store, so each test below reads
# its problem's items (outcome and message, from --kernelopt-json) and the run's output.

def _edit_the_store(source: str) -> str:
    edited = re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", source, count=1)
    assert edited != source
    return edited


def _hand_edit(folder: Path) -> None:
    version = folder / "v1.py"
    version.write_text(_edit_the_store(version.read_text()))


def _edit_recorded_in_the_manifest(folder: Path) -> None:
    import hashlib

    version = folder / "v1.py"
    edited = _edit_the_store(version.read_text())
    version.write_text(edited)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["versions"][0]["sha256"] = hashlib.sha256(edited.encode()).hexdigest()
    # Without a recipe (a manifest of schema 2 had none), so the cascade, not the recipe binding, catches it.
    manifest["versions"][0].pop("recipe", None)
    (folder / "manifest.json").write_text(json.dumps(manifest))


def _broken_model_record(folder: Path) -> None:
    (folder.parent / "model.json").write_text("[1,2")


def _corrupt_manifest(folder: Path) -> None:
    (folder / "manifest.json").write_text("{ this is not json")


def _stray_file(folder: Path) -> None:
    (folder / "v2.py").write_text("# not accepted\n")


def _symlinked_version(folder: Path) -> None:
    """A pull request's version file that is a symbolic link (git stores them): to /dev/zero it would be read until
    memory ran out, by the gate and by production."""
    (folder / "v1.py").unlink()
    (folder / "v1.py").symlink_to("/dev/zero")


def _symlinked_folder(folder: Path) -> None:
    """The kernel's folder a symbolic link to one elsewhere (the same files): what is read would depend on it."""
    target = folder.parent.parent / f".stash-{folder.parent.name}"
    shutil.move(folder, target)
    folder.symlink_to(target)


DAMAGES = {f.__name__.lstrip("_"): f for f in (_hand_edit, _edit_recorded_in_the_manifest, _broken_model_record,
                                               _corrupt_manifest, _stray_file, _symlinked_version, _symlinked_folder)}


@dataclass
class DamagedRun:
    result: pytest.RunResult
    items: dict[str, dict[str, Any]]  # gate.json's items by node id
    kernel: str

    def outcomes(self, damage: str) -> dict[str, str]:
        """Item (the kernel's name or "model") -> outcome, of the copy that has ``damage``."""
        prefix = f"problems/{damage}.py::"
        return {i["nodeid"].removeprefix(prefix): i["outcome"] for i in self.items.values()
                if i["nodeid"].startswith(prefix)}

    def message(self, damage: str, item: str) -> str:
        return str(self.items[f"problems/{damage}.py::{item}"]["message"])


def _copies(template: Path, project: Path, names: Iterable[str]) -> str:
    """``project`` with a copy of the template's problem and store per name (problems/<name>.py,
    kernels/<name>/); the template's kernel name."""
    (project / "problems").mkdir()
    shutil.copy(template / "pyproject.toml", project)
    kernel = (template / "kernel_name").read_text()
    for name in names:
        shutil.copy(PROBLEM, project / "problems" / f"{name}.py")
        store = shutil.copytree(template / "kernels" / "elementwise_chain", project / "kernels" / name)
        for record in (store / "model.json", store / kernel / "manifest.json"):  # the records name their model
            record.write_text(json.dumps({**json.loads(record.read_text()), "model": name}))
    return kernel


def _gate_in(project: Path, *args: str, cache: bool = False) -> pytest.RunResult:
    """:func:`_gate` in ``project`` (a module's shared run, where pytester's per-test folder does not fit)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    run = forkserver.run([sys.executable, "-m", "pytest", "--kernelopt", "--kernelopt-seeds", "2", "-W", "ignore",
                          *([] if cache else ["-p", "no:cacheprovider"]), *args], cwd=project, env=env, timeout=900)
    return pytest.RunResult(run.returncode, run.stdout.splitlines(), run.stderr.splitlines(), 0.0)


def _items(path: Path) -> dict[str, dict[str, Any]]:
    """--kernelopt-json's items by node id."""
    return {i["nodeid"]: i for i in json.loads(path.read_text())["items"]}


@pytest.fixture(scope="module")
def damaged(template: Path, tmp_path_factory: pytest.TempPathFactory) -> DamagedRun:
    """The template with one copy of the problem per entry of DAMAGES (none of the original), gated once."""
    project = tmp_path_factory.mktemp("damaged")
    kernel = _copies(template, project, DAMAGES)
    for damage, do in DAMAGES.items():
        do(project / "kernels" / damage / kernel)
    result = _gate_in(project, "--kernelopt-json", "gate.json")
    items = _items(project / "gate.json")
    assert len(items) == 2 * len(DAMAGES), result.stdout.str()  # a kernel item and a model item per copy
    return DamagedRun(result, items, kernel)


@pytest.mark.slow
def test_damaged_stores_fail_only_their_own_items(damaged: DamagedRun) -> None:
    # Two items per copy: every copy's store is damaged, and only two damages leave one item passing.
    damaged.result.assert_outcomes(passed=2, failed=12)
    assert damaged.result.ret == 1


@pytest.mark.slow
def test_hand_edit_of_committed_kernel_blocks(damaged: DamagedRun) -> None:
    assert damaged.outcomes("hand_edit") == {damaged.kernel: "failed", "model": "failed"}
    # The store notices the edit before anything runs: the file no longer has the recorded sha256.
    for item in (damaged.kernel, "model"):
        assert "differ from the sha256 recorded at accept" in damaged.message("hand_edit", item)
    assert "differ from the sha256 recorded at accept" in damaged.result.stdout.str()


@pytest.mark.slow
def test_edit_recorded_in_the_manifest_is_still_reverified(damaged: DamagedRun) -> None:
    """Nothing recorded is trusted: an edit with a matching sha256 in the manifest is caught by the cascade."""
    damage = "edit_recorded_in_the_manifest"
    assert damaged.outcomes(damage) == {damaged.kernel: "failed", "model": "failed"}
    assert "rejected at kernel" in damaged.message(damage, damaged.kernel)
    assert "rejected at model" in damaged.message(damage, "model")
    out = damaged.result.stdout.str()
    assert "rejected at kernel" in out and "rejected at model" in out


@pytest.mark.slow
def test_a_broken_model_record_fails_the_model_item_without_a_gpu(damaged: DamagedRun) -> None:
    """model.json is read even where nothing is timed: CI on a CPU must not pass a corrupt one."""
    assert damaged.outcomes("broken_model_record") == {damaged.kernel: "passed", "model": "failed"}
    damaged.result.stdout.fnmatch_lines(["FAILED problems/broken_model_record.py::model*"])
    assert "broken_model_record/model.json: invalid model record" in damaged.message("broken_model_record", "model")
    assert "broken_model_record/model.json: invalid model record" in damaged.result.stdout.str()


@pytest.mark.slow
def test_corrupt_manifest_fails_the_item_not_the_run(damaged: DamagedRun) -> None:
    assert damaged.outcomes("corrupt_manifest") == {damaged.kernel: "failed", "model": "failed"}
    assert "manifest.json: invalid manifest" in damaged.message("corrupt_manifest", damaged.kernel)
    assert "manifest.json: invalid manifest" in damaged.result.stdout.str()


@pytest.mark.slow
def test_a_symlinked_version_file_is_refused_not_followed(damaged: DamagedRun) -> None:
    assert damaged.outcomes("symlinked_version") == {damaged.kernel: "failed", "model": "failed"}
    message = damaged.message("symlinked_version", damaged.kernel)
    assert "v1.py: active version file is a symbolic link; a kernel store holds plain files" in message
    assert damaged.outcomes("symlinked_folder") == {damaged.kernel: "failed", "model": "failed"}
    assert "is a symbolic link; a kernel store holds plain folders and files" in damaged.message("symlinked_folder",
                                                                                                damaged.kernel)


@pytest.mark.slow
def test_a_stray_file_in_a_kernel_folder_fails_its_kernel_item(damaged: DamagedRun) -> None:
    """Nothing loads an unrecorded file, but the gate reports what the store holds: a file the
    manifest does not record (here a version nobody verified) fails the kernel item."""
    assert damaged.outcomes("stray_file") == {damaged.kernel: "failed", "model": "passed"}
    damaged.result.stdout.fnmatch_lines(["FAILED problems/stray_file.py::triton_*"])
    assert "v2.py not recorded in manifest.json" in damaged.message("stray_file", damaged.kernel)
    assert "v2.py not recorded in manifest.json" in damaged.result.stdout.str()


# --- stale versions: three gate runs -----------------------------------------------------------
# Two copies of the problem, gated together: problems/stale.py's committed version was accepted for a
# compiler kernel of another fingerprint; problems/orphaned.py also holds versions of a kernel the
# compiler no longer generates. First with --kernelopt-allow-stale, then --kernelopt-strict, then
# --kernelopt-strict --lf (with pytest's cache).

@dataclass
class StaleRuns:
    allowed: pytest.RunResult
    items: dict[str, dict[str, Any]]  # the allowed run's --kernelopt-json items by node id
    strict: pytest.RunResult
    again: pytest.RunResult
    kernel: str


@pytest.fixture(scope="module")
def stale_runs(template: Path, tmp_path_factory: pytest.TempPathFactory) -> StaleRuns:
    project = tmp_path_factory.mktemp("stale")
    kernel = _copies(template, project, ["stale", "orphaned"])
    manifest_path = project / "kernels" / "stale" / kernel / "manifest.json"
    manifest = json.loads(manifest_path.read_text())
    manifest["fingerprint"] = "0" * 16  # as if accepted when the compiler generated another kernel
    for version in manifest["versions"]:
        version["fingerprint"] = "0" * 16
        # ... under another torch (verified in this very environment, it would not be stale: test_trust_gate.py)
        assert version["evidence"]["environment"] is not None
        version["evidence"]["environment"]["torch"] = "2.0.0"
    manifest_path.write_text(json.dumps(manifest))
    gone = shutil.copytree(project / "kernels" / "orphaned" / kernel, project / "kernels" / "orphaned" / GONE)
    manifest = json.loads((gone / "manifest.json").read_text())
    for version in manifest["versions"]:  # renamed by a compiler change (verified in this environment: never skipped)
        version["evidence"]["environment"]["torch"] = "2.0.0"
    (gone / "manifest.json").write_text(json.dumps({**manifest, "kernel": GONE}))
    # Skipped only where the user opts out (stale kernels fail by default: tests/test_trust_gate.py).
    allowed = _gate_in(project, "-rs", "--kernelopt-allow-stale", "--kernelopt-json", "gate.json")
    strict = _gate_in(project, "--kernelopt-strict", cache=True)
    again = _gate_in(project, "--kernelopt-strict", "--lf", cache=True)
    return StaleRuns(allowed, _items(project / "gate.json"), strict, again, kernel)


GONE = "triton_poi_fused_gone_0"


@pytest.mark.slow
def test_stale_runs_judge_each_copy_on_its_own(stale_runs: StaleRuns) -> None:
    # stale.py: its kernel skipped, its model passes; orphaned.py: both pass (its orphans noted, not failed).
    stale_runs.allowed.assert_outcomes(passed=3, skipped=1)
    # Strict: stale.py's kernel item and orphaned.py's model item fail, nothing else.
    stale_runs.strict.assert_outcomes(passed=2, failed=2)
    stale_runs.again.assert_outcomes(failed=2)


@pytest.mark.slow
def test_stale_kernel_is_reported_and_fails_when_strict(stale_runs: StaleRuns) -> None:
    kernel = stale_runs.kernel
    outcomes = {i["item"]: i["outcome"] for i in stale_runs.items.values() if i["problem"] == "problems/stale.py"}
    assert outcomes == {"kernel": "skipped", "model": "passed"}, outcomes
    assert stale_runs.items[f"problems/stale.py::{kernel}"]["status"] == "stale"
    assert "stale" in stale_runs.allowed.stdout.str()
    assert "stale" in stale_runs.strict.stdout.str()
    stale_runs.strict.stdout.fnmatch_lines([f"FAILED problems/stale.py::{kernel}*"])
    assert "FAILED problems/stale.py::model" not in stale_runs.strict.stdout.str()
    # The failed items' ids are real node ids: --lf re-runs exactly them, and the row still counts it.
    stale_runs.again.stdout.fnmatch_lines(["collected 2 items", "run-last-failure: rerun previous 2 failures*"])
    stale_runs.again.stdout.fnmatch_lines([f"FAILED problems/stale.py::{kernel}*"])
    assert re.search(r"problems/stale\.py\s+0\s+1\s+0\s+1\s", stale_runs.again.stdout.str()), \
        stale_runs.again.stdout.str()


@pytest.mark.slow
def test_committed_kernels_the_compiler_no_longer_generates_are_reported_and_fail_when_strict(
        stale_runs: StaleRuns) -> None:
    out = stale_runs.allowed.stdout.str()
    assert (f"problems/orphaned.py: committed versions of {GONE} are not used: the compiler no longer "
            "generates these kernels") in out
    assert re.search(r"problems/orphaned\.py\s+1\s+1\s+0\s+0\s", out), out  # counted as stale in the summary
    model = stale_runs.items["problems/orphaned.py::model"]
    assert model["orphaned"] == [GONE] and model["stale"] == 1
    assert model["status"] == "committed"  # passed with the committed kernel swapped in (it was null)
    assert stale_runs.items[f"problems/orphaned.py::{stale_runs.kernel}"]["outcome"] == "passed"
    strict = stale_runs.strict
    strict.stdout.fnmatch_lines(["FAILED problems/orphaned.py::model*"])
    assert f"FAILED problems/orphaned.py::{stale_runs.kernel}" not in strict.stdout.str()
    assert f"holds committed versions of {GONE}, which the compiler no longer generates" in strict.stdout.str()
    stale_runs.again.stdout.fnmatch_lines(["FAILED problems/orphaned.py::model*"])


@dataclass
class ForgedRun:
    result: pytest.RunResult
    items: dict[str, dict[str, Any]]
    kernel: str
    subset: pytest.RunResult
    subset_items: dict[str, dict[str, Any]]


@pytest.fixture(scope="module")
def forged(template: Path, tmp_path_factory: pytest.TempPathFactory) -> ForgedRun:
    """A pull request's edits under kernels/ alone, each on its own copy of the template, gated once with
    --kernelopt-allow-stale (the opt-out must not let any of them through): a launch added to a version's
    evidence; a version made stale in this very environment (its fingerprint another kernel's, as one committed
    for a batch size the problem does not run); a folder of a shape the problem does not declare; a folder, verified
    here, of a kernel the problem does not generate (a backward); and a model folder no problem owns (production
    would swap it into any model of that name)."""
    project = tmp_path_factory.mktemp("forged")
    kernel = _copies(template, project, ["a_launch", "b_same_env", "c_shape", "d_orphan"])
    kernels = project / "kernels"
    manifest = kernels / "a_launch" / kernel / "manifest.json"
    data = json.loads(manifest.read_text())
    launch = data["versions"][0]["evidence"]["launches"][0]
    data["versions"][0]["evidence"]["launches"].append([a.replace("(", "(3, ", 1) if a.startswith("float") else a
                                                        for a in launch])
    manifest.write_text(json.dumps(data))
    manifest = kernels / "b_same_env" / kernel / "manifest.json"
    data = json.loads(manifest.read_text())
    data["fingerprint"] = data["versions"][0]["fingerprint"] = data["versions"][0]["evidence"]["fingerprint"] = "1" * 16
    manifest.write_text(json.dumps(data))
    folder = kernels / "c_shape" / kernel
    data = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**data, "kernel": f"{kernel}@big"}))
    folder.rename(folder.with_name(f"{kernel}@big"))
    folder = kernels / "d_orphan" / kernel  # a kernel the problem does not generate (a training step's backward)
    data = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**data, "kernel": f"{kernel}__bwd"}))
    folder.rename(folder.with_name(f"{kernel}__bwd"))
    ghost = shutil.copytree(kernels / "a_launch", kernels / "ghost")
    for record in (ghost / "model.json", ghost / kernel / "manifest.json"):
        record.write_text(json.dumps({**json.loads(record.read_text()), "model": "ghost"}))
    shutil.copytree(kernels / "a_launch", kernels / ".not-a-model")  # no model id can name it: production never reads it
    result = _gate_in(project, "--kernelopt-allow-stale", "--kernelopt-json", "gate.json")
    # A subset of the items (-k): the store-wide check goes with the first one selected.
    subset = _gate_in(project, "--kernelopt-allow-stale", "-k", "c_shape and not model", "--kernelopt-json", "k.json")
    return ForgedRun(result, _items(project / "gate.json"), kernel, subset, _items(project / "k.json"))


@pytest.mark.slow
def test_a_launch_added_to_a_manifest_fails_the_gate(forged: ForgedRun) -> None:
    item = forged.items[f"problems/a_launch.py::{forged.kernel}"]
    assert item["outcome"] == "failed" and item["status"] == "unverified"
    assert "records 1 launch(es) this run did not verify it at" in item["message"]
    assert "production runs it at every launch recorded there" in item["message"]


@pytest.mark.slow
def test_a_version_stale_in_this_very_environment_is_not_skipped(forged: ForgedRun) -> None:
    item = forged.items[f"problems/b_same_env.py::{forged.kernel}"]
    assert item["outcome"] == "failed", item
    assert "No compiler change explains it" in item["message"]
    assert "--kernelopt-allow-stale does not skip it" in item["message"]


@pytest.mark.slow
def test_a_folder_of_an_undeclared_shape_is_not_skipped(forged: ForgedRun) -> None:
    item = forged.items["problems/c_shape.py::model"]
    assert item["outcome"] == "failed"
    assert f"{forged.kernel}@big, of a shape c_shape.py does not declare (no SHAPES)" in item["message"]


@pytest.mark.slow
def test_a_folder_of_a_kernel_not_generated_verified_here_is_not_skipped(forged: ForgedRun) -> None:
    """Production would run it wherever the compiler generates that kernel (here: a training step's backward of an
    inference problem); only a compiler change (another environment in its evidence) makes such a folder stale."""
    item = forged.items["problems/d_orphan.py::model"]
    assert item["outcome"] == "failed"
    assert f"committed versions of {forged.kernel}__bwd, verified on cpu with this torch and triton" in item["message"]


@pytest.mark.slow
def test_a_model_folder_no_problem_owns_fails_one_item(forged: ForgedRun) -> None:
    """The first gate item selected checks the store once: ghost/ is named, the hidden folder is not; a run of
    one item (-k) checks it too."""
    failing = [i for i in forged.items.values() if "no configured problem owns" in (i.get("message") or "")]
    assert [i["nodeid"] for i in failing] == [f"problems/a_launch.py::{forged.kernel}"], forged.result.stdout.str()
    (only,) = forged.subset_items.values()
    assert only["nodeid"] == "problems/c_shape.py::" + forged.kernel and only["outcome"] == "failed", only
    assert "ghost/ (1 kernel folder(s) with an active version)" in only["message"]
    assert "ghost/ (1 kernel folder(s) with an active version)" in failing[0]["message"]
    assert ".not-a-model" not in failing[0]["message"]
    assert forged.result.ret == 1


@pytest.mark.slow
def test_k_selects_the_model_item(repo: Path, pytester: pytest.Pytester) -> None:
    # -W default after the helper's -W ignore: warnings torch raises while the gate compiles
    # and verifies must not reach the summary.
    result = _gate(pytester, "-k", "model", "-W", "default", "--junitxml=gate.xml")
    result.assert_outcomes(passed=1, deselected=1)
    result.stdout.fnmatch_lines(["collected 2 items / 1 deselected / 1 selected", "*1 passed, 1 deselected*"])
    out = result.stdout.str()
    assert "warnings summary" not in out, out
    # The kernel item did not run; the model item still knows what the store holds.
    assert re.search(ROW + r"1\s+0\s+0\s+0\s+not measured", out), out
    (case,) = _junit(repo / "gate.xml").values()
    # The model item opened the problem's verification session: its wall time includes that.
    wall, opened = float(case["kernelopt_wall_seconds"]), float(case["kernelopt_open_seconds"])
    assert 0.5 < opened <= wall <= float(case["time"]) + 0.05, case
    assert float(case["kernelopt_verify_seconds"]) <= wall


@pytest.mark.slow
def test_collects_problem_files_outside_testpaths(repo: Path, pytester: pytest.Pytester) -> None:
    with (repo / "pyproject.toml").open("a") as f:
        f.write('\n[tool.pytest.ini_options]\ntestpaths = ["tests"]\n')
    pytester.mkdir("tests")
    (repo / "tests" / "test_other.py").write_text("def test_other():\n    pass\n")
    kernel = (repo / "kernel_name").read_text()
    # Three items collected (the user's test and the gate's two), a kernel selected by its name.
    listed = _gate(pytester, "--co", "-q", "-k", f"{kernel} or test_other")
    assert listed.ret == 0, listed.stdout.str()
    listed.stdout.fnmatch_lines(["tests/test_other.py::test_other", f"{FILE}::{kernel}",
                                 "2/3 tests collected (1 deselected)*"])
    # Plain pytest still collects only the user's tests.
    pytester.runpytest_subprocess("-p", "no:cacheprovider").assert_outcomes(passed=1)


def _commit_all(repo: Path) -> None:
    for args in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "x"]):
        subprocess.run(["git", *args], cwd=repo, check=True, capture_output=True)


@pytest.mark.slow
def test_node_id_with_base_ref(repo: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> None:
    """An item's id runs exactly that item; the base revision's file lives only as long as the check."""
    from torch._inductor.runtime.cache_dir_utils import default_cache_dir

    _commit_all(repo)
    temp = repo / "tmp"
    temp.mkdir()
    # Keep Inductor's compile cache where it was (it follows TMPDIR, torch 2.13): only the
    # gate's own temporary files move.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", default_cache_dir())
    monkeypatch.setenv("TMPDIR", str(temp))
    result = _gate(pytester, f"{FILE}::model", "--kernelopt-base-ref", "HEAD")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["collected 1 item"])
    assert list(temp.iterdir()) == []
    # A problem file that did not exist at the base revision is said to be new there.
    subprocess.run(["git", "mv", FILE, "problems/renamed_chain.py"], cwd=repo, check=True)
    # Its committed kernels go too: a folder no problem owns fails the gate (test_a_model_folder_no_problem_owns_...).
    subprocess.run(["git", "rm", "-rq", "kernels/elementwise_chain"], cwd=repo, check=True)
    renamed = _gate(pytester, "-k", "model", "--kernelopt-base-ref", "HEAD")
    renamed.assert_outcomes(passed=1, deselected=1)
    assert re.search(r"problems/renamed_chain\.py\s+0\s+0\s+1\s+0\s+compiler baseline\s+new at HEAD: nothing to "
                     r"compare", renamed.stdout.str()), renamed.stdout.str()
    assert list(temp.iterdir()) == []


@pytest.mark.slow
def test_a_seed_pinned_in_addopts_only_adds_fresh_seeds(repo: Path, pytester: pytest.Pytester) -> None:
    """A pull request that pins --kernelopt-seed in addopts still gets seeds and draws from the OS."""
    import hashlib

    folder = _kernel_dir(repo)
    version = folder / "v1.py"
    edited = re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", version.read_text(), count=1)
    version.write_text(edited)
    manifest = json.loads((folder / "manifest.json").read_text())
    manifest["versions"][0]["sha256"] = hashlib.sha256(edited.encode()).hexdigest()
    (folder / "manifest.json").write_text(json.dumps(manifest))
    (repo / "pyproject.toml").write_text(PYPROJECT + '\n[tool.pytest.ini_options]\naddopts = "--kernelopt-seed 7"\n')
    result = _gate(pytester, "--kernelopt-json", "gate.json", "--kernelopt-report", "gate.md")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert json.loads((repo / "gate.json").read_text())["settings"]["pinned_seed"] == 7  # the report says so too
    assert "pinned seed" in (repo / "gate.md").read_text() and "7" in (repo / "gate.md").read_text()
    assert "kernelopt: pinned seed 7 (--kernelopt-seed, from the command line or addopts): its 2 seed(s) were " \
           "checked in addition to 2 drawn from the OS" in out, out
    roots = {int(r) for r in re.findall(r"reproduce with `kernelopt verify --seed (\d+)`; of the pinned ones: "
                                        r"--seed 7;", out)}
    assert roots and 7 not in roots, out  # the fresh seeds' root, drawn from the OS; the pinned one beside it


@pytest.mark.slow
def test_items_are_selected_by_kind_whatever_the_folder_is_called(pytester: pytest.Pytester) -> None:
    """Under `models/`, `-k model` would match every item (pytest matches folder names too, docs/gate.md): the
    kind markers select model or kernel items, and `-k` with the file name one problem's."""
    (pytester.path / "models").mkdir()
    shutil.copy(PROBLEM, pytester.path / "models")
    (pytester.path / "pyproject.toml").write_text(PYPROJECT.replace("problems/*.py", "models/*.py"))
    # One collection (a compile): `-k` names and `-m` markers select together, the markers registered.
    listed = _gate(pytester, "--co", "-q", "-k", "elementwise", "-m", "kernelopt_model", "--strict-markers")
    assert listed.ret == 0, listed.stdout.str()
    listed.stdout.fnmatch_lines(["models/elementwise_chain.py::model", "1/2 tests collected (1 deselected)*"])
