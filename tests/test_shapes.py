"""Shapes as part of a problem (issue 41, item 1): ``SHAPES`` in a problem file, a version per declared shape
(``kernels/<model>/<kernel>@<shape>/``), gate items per shape, and production picking the version verified for
the compiler kernel it generated at each batch size."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import warnings
from pathlib import Path
from typing import Any

import pytest

import forkserver

pytest_plugins = ["pytester"]

PROBLEM = '''"""A pointwise model sized by module globals, at two declared batch sizes."""
import torch

batch_size = 3
dim = 32

SHAPES = {"b2": {"batch_size": 2}, "b4": {"batch_size": 4}}
SHAPE_WEIGHTS = {"b2": 3, "b4": 1}


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(batch_size, dim)]


def get_init_inputs():
    return []
'''
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n'
FILE = "problems/rows_sin.py"


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return forkserver.run([sys.executable, "-m", "pytest_kernelopt.cli", *args], cwd=cwd)


def _problem(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "shaped.py"
    path.write_text(text)
    return path


# --- the problem file API (no compile) ------------------------------------------------------

def test_each_shape_sizes_the_inputs_and_the_globals_come_back(tmp_path):
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(_problem(tmp_path, PROBLEM))
    assert list(problem.shapes) == ["b2", "b4"] and problem.shape == "b2"  # the first declared by default
    assert problem.shape_weights == {"b2": 3.0, "b4": 1.0}
    assert problem.make_inputs(0)[0].shape == (2, 32)
    assert problem.make_inputs(0, shape="b4")[0].shape == (4, 32)
    assert problem.at("b4").make_inputs(0)[0].shape == (4, 32)
    assert problem.module.batch_size == 3  # restored: only get_inputs() sees a shape
    assert problem.store_name("k") == "k@b2" and problem.at("b4").store_name("k") == "k@b4"
    # The same seed gives the same numbers at a shape, whichever shape was drawn before.
    again = load_problem(tmp_path / "shaped.py", shape="b4")
    assert problem.make_inputs(5, shape="b4")[0].equal(again.make_inputs(5)[0])


def test_a_problem_without_shapes_is_as_before(tmp_path):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.errors import ProblemError

    text = PROBLEM.replace("SHAPES = ", "_S = ").replace("SHAPE_WEIGHTS = ", "_W = ")
    problem = load_problem(_problem(tmp_path, text))
    assert problem.shapes == {} and problem.shape is None and problem.store_name("k") == "k"
    assert problem.make_inputs(0)[0].shape == (3, 32)
    with pytest.raises(ProblemError, match="declares no SHAPES, so it has no shape 'b2'"):
        load_problem(tmp_path / "shaped.py", shape="b2")


@pytest.mark.parametrize("declared, expected", [
    ('SHAPES = {"b 2": {"batch_size": 2}}', r"shape name 'b 2' is not an identifier"),
    ('SHAPES = {"b2": {"batch_sz": 2}}', r"SHAPES\['b2'\] overrides batch_sz, but the file defines no global batch_sz"),
    ('SHAPES = {"b2": {"get_inputs": 2}}', r"overrides get_inputs, which a shape may not replace"),
    ('SHAPES = {}', r"SHAPES must be a non-empty dict"),
    ('SHAPES = [("b2", {})]', r"SHAPES must be a non-empty dict .* not list"),
    ('SHAPES = {"b2": 2}', r"SHAPES\['b2'\] must be a dict"),
    ('SHAPES = {"b2": {"batch_size": 2}}\nSHAPE_WEIGHTS = {"b4": 1}', r"not in SHAPES: 'b4'; missing: b2"),
    ('SHAPES = {"b2": {"batch_size": 2}}\nSHAPE_WEIGHTS = {"b2": 0}', r"SHAPE_WEIGHTS\['b2'\] = 0: a weight is a"),
    ('SHAPE_WEIGHTS = {"b2": 1}', r"SHAPE_WEIGHTS without SHAPES"),
])
def test_bad_shapes_are_a_problem_error_naming_the_file(tmp_path, declared, expected):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.errors import ProblemError

    text = PROBLEM.replace('SHAPES = {"b2": {"batch_size": 2}, "b4": {"batch_size": 4}}\n'
                           'SHAPE_WEIGHTS = {"b2": 3, "b4": 1}', declared)
    path = _problem(tmp_path, text)
    with pytest.raises(ProblemError, match=expected) as caught:
        load_problem(path)
    assert str(path) in str(caught.value)


def test_bench_reads_the_declared_names_from_the_text(tmp_path):
    from pytest_kernelopt.capture.shapes import declared_names

    assert declared_names(_problem(tmp_path, PROBLEM)) == ["b2", "b4"]
    assert declared_names(_problem(tmp_path, "import torch\nSHAPES = dict(b2={})\n")) is None  # the child decides
    assert declared_names(_problem(tmp_path, "import torch\n")) == []
    # Chosen at import (an environment variable's sizes), assigned twice: only loading the file tells.
    for text in ("import os\nif os.environ.get('BIG'):\n    SHAPES = {'l1': {}}\nelse:\n    SHAPES = {'s1': {}}\n",
                 "SHAPES = {'l1': {}}\nif True:\n    SHAPES = {'s1': {}}\n", "globals()['SHAPES'] = {'b2': {}}\n"):
        assert declared_names(_problem(tmp_path, text)) is None, text


def test_an_undeclared_shape_is_refused_naming_the_declared_ones(tmp_path):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.errors import ProblemError

    with pytest.raises(ProblemError, match="no shape 'b8'; its SHAPES declare b2, b4"):
        load_problem(_problem(tmp_path, PROBLEM), shape="b8")


def test_the_store_takes_a_folder_per_shape_and_refuses_a_bad_shape_name(tmp_path):
    from pytest_kernelopt.errors import StoreError
    from pytest_kernelopt.store import KernelStore

    store = KernelStore(tmp_path / "kernels")
    assert store.kernel_dir("m", "k@b64").name == "k@b64"
    for bad in ("k@b-2", "k@", "k@b2@b4", "k@../x"):
        with pytest.raises(StoreError):
            store.kernel_dir("m", bad)


def test_each_gate_part_reports_its_own_folders_and_the_first_those_of_undeclared_shapes(tmp_path):
    from pytest_kernelopt.gate.problems import Problem

    b2, b4 = (Problem(path=tmp_path / "m.py", id="m", shape=s, declared=["b2", "b4"], kernels=["k"])
              for s in ("b2", "b4"))
    assert [f for f in ("k@b2", "k@b4", "k@b8", "k", "j@b4") if b2.owns(f)] == ["k@b2", "k@b8", "k"]
    assert [f for f in ("k@b2", "k@b4", "k@b8", "k", "j@b4") if b4.owns(f)] == ["k@b4", "j@b4"]
    plain = Problem(path=tmp_path / "m.py", id="m", kernels=["k"])
    assert [f for f in ("k", "j", "k@b2") if plain.owns(f)] == ["k", "j", "k@b2"]


def test_tune_tunes_each_shape_with_its_share_of_the_budget_and_stores_per_shape(tmp_path):
    """Against the scripted verifier of test_agents: each declared shape gets its own session (opened at the
    shape), a share of each kernel's budget by SHAPE_WEIGHTS (3:1), and its versions in <kernel>@<shape>/."""
    from test_agents import FakeSession, _inductor_info, _tuner

    from pytest_kernelopt.agents import shape_shares
    from pytest_kernelopt.runs.trace import load_run

    class ShapedSession(FakeSession):
        def __call__(self, problem, device, options, progress=None, variant=None, shape=None, launch_configs=None):
            self.shapes.append(shape)
            return super().__call__(problem, device, options, progress, variant, launch_configs=launch_configs)

    path = tmp_path / "m.py"  # the scripted verdicts are of model "m"
    path.write_text(PROBLEM)
    assert shape_shares(path) == [("b2", 0.75), ("b4", 0.25)]
    session = ShapedSession(_inductor_info(), {8: 1.2, 16: 1.4, 2: 1.1, 1: 1.0}, seconds=0.1)
    session.shapes = []
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.8)
    prepared = []
    tuner.coder.prepare = lambda problem, device, kernels, shape=None: prepared.append(shape)
    outcomes = [tuner.tune_problem(path, shape, share) for shape, share in shape_shares(path)]
    run.close()
    # Each shape in turn: its compile trials (in a session at it), then its kernel search.
    assert session.shapes == ["b2", "b2", "b4", "b4"]
    assert prepared == ["b2", "b4"] and [o.shape for o in outcomes] == ["b2", "b4"]
    name = _inductor_info().name
    assert not any(o.error for o in outcomes), [o.error for o in outcomes]
    assert store.kernel_names("m") == [f"{name}@b2", f"{name}@b4"]
    for o in outcomes:
        (k,) = o.kernels
        assert k.stored_version == 1 and k.stored_file.startswith(f"m/{name}@{o.shape}/")
        # The run's candidates and profile of each shape are its own, named as the store names them.
        assert k.history and all(a.file.startswith(f"candidates/m/{name}@{o.shape}/") for a in k.history if a.file)
        assert (run.root / "profile" / f"m@{o.shape}.json").is_file()
    spent = [o.kernels[0].gpu_seconds for o in outcomes]
    assert spent[0] <= 0.6 + 0.2 and spent[1] <= 0.2 + 0.2 and spent[0] > spent[1]  # 0.75 and 0.25 of 0.8 s
    _, events = load_run(run.root)
    reasons = [str(e.data.get("reason") or "") for e in events if e.event == "stop"]
    assert any("kernel budget" in r and "of 0.2 s" in r for r in reasons), reasons


# --- end to end: list, accept per shape, gate, production (compiles) -----------------------

@pytest.fixture(scope="module")
def repo(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A project with the two-shape problem and a version accepted at each shape (the compiler's kernel as
    the candidate: correct, and stored on a CPU without a speed comparison)."""
    repo = tmp_path_factory.mktemp("shapes")
    (repo / "problems").mkdir()
    (repo / FILE).write_text(PROBLEM)
    (repo / "pyproject.toml").write_text(PYPROJECT)
    listing = _cli("kernels", FILE, "--json", "--dump", "dumps", cwd=repo)
    assert listing.returncode == 0, listing.stderr
    rows = [r for r in json.loads(listing.stdout) if r["kind"] == "triton"]
    (repo / "listing.json").write_text(json.dumps(rows))
    kernel = rows[0]["name"]
    (repo / "kernel_name").write_text(kernel)
    refused = _cli("accept", FILE, "--kernel", kernel, "--candidate", f"dumps/b2/{kernel}.py", cwd=repo)
    assert refused.returncode == 2 and "declares 2 shapes (b2, b4); name one with --shape" in refused.stderr
    unknown = _cli("verify", FILE, "--shape", "b4", "--kernel", "triton_no_such", "--candidate",
                   f"dumps/b2/{kernel}.py", "--seeds", "1", cwd=repo)
    assert unknown.returncode == 2 and "no Triton kernel named 'triton_no_such' at shape b4" in unknown.stderr
    assert "is it another shape's?" in unknown.stderr, unknown.stderr
    for shape in ("b2", "b4"):
        accepted = _cli("accept", FILE, "--shape", shape, "--kernel", kernel, "--candidate",
                        f"dumps/{shape}/{kernel}.py", "--seeds", "2", cwd=repo)
        assert accepted.returncode == 0, accepted.stdout + accepted.stderr
        assert f"{kernel}@{shape}/v1.py (v1, active)" in accepted.stdout
    return repo


@pytest.mark.slow
def test_kernels_are_listed_and_stored_per_shape(repo):
    from pytest_kernelopt.store import KernelStore

    rows = json.loads((repo / "listing.json").read_text())
    kernel = (repo / "kernel_name").read_text()
    assert [(r["name"], r["shape"]) for r in rows] == [(kernel, "b2"), (kernel, "b4")]
    assert rows[0]["fingerprint"] != rows[1]["fingerprint"]  # the batch size is compiled into the kernel
    assert [a["shape"] for a in rows[0]["args"] if a["kind"] == "tensor"][0] == [2, 32]
    assert [a["shape"] for a in rows[1]["args"] if a["kind"] == "tensor"][0] == [4, 32]
    store = KernelStore(repo / "kernels")
    assert store.kernel_names("rows_sin") == [f"{kernel}@b2", f"{kernel}@b4"]
    for row in rows:
        manifest = store.check("rows_sin", f"{kernel}@{row['shape']}")
        assert manifest is not None and manifest.fingerprint == row["fingerprint"] and manifest.active == 1
    baselines = json.loads((repo / "kernels" / "rows_sin" / "model.json").read_text())["baselines"]
    assert sorted(k.rsplit("|", 1)[1] for k in baselines) == ["shape b2", "shape b4"]


@pytest.mark.slow
def test_the_gate_has_items_per_shape_and_passes(repo, pytester):
    shutil.copytree(repo, pytester.path, dirs_exist_ok=True)
    kernel = (repo / "kernel_name").read_text()
    result = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "2", "-W", "ignore", "-p",
                                           "no:cacheprovider", "--kernelopt-json", "gate.json")
    assert result.ret == 0, result.stdout.str()
    items = json.loads((pytester.path / "gate.json").read_text())["items"]
    assert sorted((i["nodeid"], i["shape"], i["status"]) for i in items) == [
        (f"{FILE}::model@b2", "b2", "committed"), (f"{FILE}::model@b4", "b4", "committed"),
        (f"{FILE}::{kernel}@b2", "b2", "committed"), (f"{FILE}::{kernel}@b4", "b4", "committed")]
    assert all(i["outcome"] == "passed" and i["version"] in (1, None) for i in items)
    result.stdout.re_match_lines([rf"{FILE}@b2\s+1\s+0\s+0\s+0\s", rf"{FILE}@b4\s+1\s+0\s+0\s+0\s"])
    # A folder of a shape the file does not declare: test_the_gate_refreshes_the_stale_shape_in_its_session.


@pytest.mark.slow
def test_production_runs_each_shapes_version_and_the_compiler_kernel_at_an_undeclared_one(repo, interpreter):
    """dynamic=False: batch 2 and batch 4 recompile into two compiler kernels; each gets the version verified
    for it (counted by its VerifiedLaunches), and batch 8, declared nowhere, the compiler's kernel with one
    warning."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.store.production import KerneloptWarning, VerifiedLaunches

    kernel = (repo / "kernel_name").read_text()
    problem = load_problem(repo / FILE)
    model = problem.build_model("cpu")
    compiled = pytest_kernelopt.compile(model, repo / "kernels", model_id="rows_sin", quiet=True, dynamic=False)

    def call(batch: int) -> tuple[Any, list[str]]:
        x = torch.randn(batch, 32)
        with warnings.catch_warnings(record=True) as caught, torch.no_grad():
            warnings.simplefilter("always")
            out = compiled(x)
            assert torch.allclose(out, model(x), atol=1e-5)
        return out, [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]

    assert call(2)[1] == [] and call(4)[1] == []
    _, said = call(8)
    assert len(said) == 1 and f"rows_sin/{kernel}" in said[0] and "no committed version replaces" in said[0] \
        and f"{kernel}@b2" in said[0] and f"{kernel}@b4" in said[0], said
    assert call(2)[1] == [] and call(8)[1] == []  # said once; back at batch 2 without a recompile
    records = pytest_kernelopt.status(compiled).kernels
    assert [(k.folder, k.runs) for k in records] == [(f"{kernel}@b2", "committed"), (f"{kernel}@b4", "committed"),
                                                     (None, "compiler")]
    guards = [getattr(k.module, k.attr) for k in records]
    assert isinstance(guards[0], VerifiedLaunches) and guards[0].runs == {"committed": 2, "compiler": 0}
    assert isinstance(guards[1], VerifiedLaunches) and guards[1].runs == {"committed": 1, "compiler": 0}
    assert not isinstance(guards[2], VerifiedLaunches)
    from pytest_kernelopt.store.production import status_line

    assert f"({kernel}@b4 v1)" in status_line("rows_sin", repo / "kernels", 0, records[1:2])


@pytest.mark.slow
def test_bench_has_a_row_group_per_shape(repo, tmp_path):
    result = _cli("bench", FILE, "--modes", "default,kernelopt", "--json", str(tmp_path / "bench.json"), cwd=repo)
    assert result.returncode == 0, result.stderr
    kernel = (repo / "kernel_name").read_text()
    problems = json.loads((tmp_path / "bench.json").read_text())["problems"]
    assert [(p["model"], p["shape"], p["status"]) for p in problems] == [("rows_sin", "b2", "ok"),
                                                                          ("rows_sin", "b4", "ok")]
    for p in problems:  # each shape's row runs the version stored for it
        (ours,) = [m for m in p["modes"] if m["mode"] == "kernelopt"]
        assert f"{kernel}@{p['shape']} v1" in ours["kernels_note"], ours
    assert "rows_sin@b2" in result.stdout and "rows_sin@b4" in result.stdout


def test_bench_benches_every_shape_of_a_shapes_chosen_at_import(tmp_path):
    # As the bundled examples size themselves: SHAPES picked under an `if` by an environment variable. The text
    # cannot say which branch runs (the other's names would be asked for): the first child loads the file and
    # says its shapes; the others are benched after it.
    text = PROBLEM.replace('SHAPES = {"b2": {"batch_size": 2}, "b4": {"batch_size": 4}}', (
        'import os\nif os.environ.get("KERNELOPT_SIZE") == "large":\n    SHAPES = {"l64": {"batch_size": 64}}\n'
        'else:\n    SHAPES = {"b2": {"batch_size": 2}, "b4": {"batch_size": 4}}')).replace("SHAPE_WEIGHTS", "# ")
    problem = _problem(tmp_path, text)
    result = _cli("bench", str(problem), "--device", "cpu", "--modes", "default", "--seconds", "0.2", "--json",
                  str(tmp_path / "bench.json"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    problems = json.loads((tmp_path / "bench.json").read_text())["problems"]
    assert [(p["shape"], p["status"]) for p in problems] == [("b2", "ok"), ("b4", "ok")], problems
    assert "shaped@b2" in result.stdout and "shaped@b4" in result.stdout


def _stale_at_b2(repo: Path, to: Path) -> tuple[Path, str]:
    """A copy of ``repo`` in which shape b2 now runs at batch 3 (as a compiler upgrade changes one shape's
    kernel): its version is stale, b4's is not; and a folder of b8, a shape the file does not declare."""
    shutil.copytree(repo, to, dirs_exist_ok=True)
    problem = to / FILE
    problem.write_text(PROBLEM.replace('"b2": {"batch_size": 2}', '"b2": {"batch_size": 3}'))
    kernel = (repo / "kernel_name").read_text()
    model_dir = to / "kernels" / "rows_sin"
    shutil.copytree(model_dir / f"{kernel}@b4", model_dir / f"{kernel}@b8")
    manifest = model_dir / f"{kernel}@b8" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(f'"{kernel}@b4"', f'"{kernel}@b8"'))
    return problem, kernel


def _folders(model_dir: Path) -> dict[str, bytes]:
    return {str(f.relative_to(model_dir)): f.read_bytes() for f in sorted(model_dir.rglob("*")) if f.is_file()
            and f.parent != model_dir}


@pytest.mark.slow
def test_refresh_carries_a_stale_version_over_at_its_shape_only(repo, tmp_path):
    """The b2 version is replayed on the kernel compiled at b2's new inputs, verified there and stored as v2 in
    <kernel>@b2/; b4's folder (current) and b8's (undeclared: reported) are left byte for byte."""
    from pytest_kernelopt.store import KernelStore

    _, kernel = _stale_at_b2(repo, tmp_path)
    model_dir = tmp_path / "kernels" / "rows_sin"
    before = _folders(model_dir)
    result = _cli("refresh", FILE, "--seeds", "1", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr
    record = json.loads(result.stdout)
    rows = [(p["shape"], [(k["kernel"], k["status"], k["new_version"]) for k in p["kernels"]], p["current"],
             p["undeclared"]) for p in record["problems"]]
    assert rows == [("b2", [(f"{kernel}@b2", "refreshed", 2)], [], [f"{kernel}@b8"]),
                    ("b4", [], [f"{kernel}@b4"], [])], rows
    (k,) = record["problems"][0]["kernels"]
    assert k["stored_file"] == f"rows_sin/{kernel}@b2/v2.py" and k["successor"] == kernel
    store = KernelStore(tmp_path / "kernels")
    manifest = store.check("rows_sin", f"{kernel}@b2")
    assert manifest.active == 2 and manifest.versions[1].provenance.refreshed_from == 1
    assert f"{kernel}@b8: active version(s) at a shape rows_sin.py does not declare" in result.stderr
    after = _folders(model_dir)
    for folder in (f"{kernel}@b4", f"{kernel}@b8"):  # untouched
        assert {f: b for f, b in after.items() if f.startswith(folder + "/")} == {
            f: b for f, b in before.items() if f.startswith(folder + "/")}
    (run,) = (tmp_path / ".kernelopt" / "runs").iterdir()  # publish reads the shape's folder from the run
    outcomes = json.loads((run / "run.json").read_text())["problems"]
    assert [(o["shape"], [k["kernel"] for k in o["kernels"]]) for o in outcomes] == [("b2", [kernel]), ("b4", [])]
    from rich.console import Console

    from pytest_kernelopt.agents.refresh import RefreshRecord
    from pytest_kernelopt.report.terminal import refresh_table

    console = Console(width=400, record=True)
    console.print(refresh_table(RefreshRecord.model_validate(record)))
    lines = console.export_text().splitlines()
    assert any("rows_sin@b2" in line and f"{kernel}@b2 v1" in line and "refreshed" in line for line in lines)
    assert any("rows_sin@b4" in line and "current" in line for line in lines)
    assert any(f"{kernel}@b8" in line and "undeclared shape" in line for line in lines)


@pytest.mark.slow
def test_the_gate_refreshes_the_stale_shape_in_its_session(repo, pytester):
    """b2's stale version is refreshed in the gate's session; the folder of b8, a shape the file does not
    declare, is verified at no shape and fails the first shape's model item (--kernelopt-allow-stale or not)
    (one gate run for both: each costs a Python start, torch's import and the compiles)."""
    problem, kernel = _stale_at_b2(repo, pytester.path)
    result = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p",
                                           "no:cacheprovider", "--kernelopt-refresh", "--kernelopt-json", "gate.json")
    out = result.stdout.str()
    assert result.ret == 1, out
    result.stdout.fnmatch_lines([f"*{FILE}::model@b2*", f"*holds committed versions of {kernel}@b8, of a shape "
                                 "rows_sin.py does not declare (its SHAPES: b2, b4)*"])
    outcomes = {i["nodeid"]: i["outcome"] for i in json.loads((pytester.path / "gate.json").read_text())["items"]}
    assert outcomes == {f"{FILE}::model@b2": "failed", f"{FILE}::model@b4": "passed",
                        f"{FILE}::{kernel}@b2": "passed", f"{FILE}::{kernel}@b4": "passed"}, outcomes
    result.stdout.re_match_lines([r".*1 failed, 3 passed.*"])
    assert f"kernelopt refresh: rows_sin/{kernel}@b2 v1: refreshed" in out and f"{kernel}@b4 v1" not in out
    manifest = json.loads((pytester.path / "kernels" / "rows_sin" / f"{kernel}@b2" / "manifest.json").read_text())
    assert manifest["active"] == 2
