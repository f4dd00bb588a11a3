"""The gate spread out, in interpreter mode: ``-n 2`` against a serial run, ``--kernelopt-json``,
and the shards of one run merged by ``kernelopt merge`` against what the unsharded run says.

Three small problems, one of each kind of verdict, stored in-process (no ``accept`` run):
elementwise_chain has its kernel's unedited dump committed (the gate verifies it for
real), rms_norm a manifest that is not JSON (both items fail, naming it), sum_reduce a
version for a compiler kernel the compiler no longer generates (stale: skipped). Their
shards of 2 are 2, 1 and 2; of 3, 1, 2 and 2 (shard 3/3 is empty).
"""

from __future__ import annotations

import json
import re
import shutil
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import pytest

from pytest_kernelopt.shard import shard_of

pytest_plugins = ["pytester"]

PROBLEMS_DIR = Path(__file__).resolve().parent / "problems"
PROBLEMS = ["elementwise_chain", "rms_norm", "sum_reduce"]
# sum_reduce's stale version is skipped, not failed: these runs are about spreading the gate out.
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\nallow_stale = true\n'
# The terminal table's row per problem: committed stale baseline failed, speedup, ..., model check.
ROWS = {
    "elementwise_chain": r"problems/elementwise_chain\.py\s+1\s+0\s+0\s+0\s+not measured\s+-\s+\S+\s+passed",
    "rms_norm": r"problems/rms_norm\.py\s+0\s+0\s+0\s+1\s+not measured\s+-\s+n/a\s+failed",
    "sum_reduce": r"problems/sum_reduce\.py\s+0\s+1\s+0\s+0\s+compiler baseline\s+-\s+n/a\s+passed",
}


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, compiled_models: Any) -> dict[str, Any]:
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance
    from test_production import verified_at

    repo = tmp_path_factory.mktemp("scale")
    (repo / "problems").mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    store = KernelStore(repo / "kernels")
    kernels = {}
    for model in PROBLEMS:
        shutil.copy(PROBLEMS_DIR / f"{model}.py", repo / "problems")
        (name, handle), = compiled_models.get(PROBLEMS_DIR / f"{model}.py").kernels.items()
        kernels[model] = name
        dump = render_dump(handle.info, model)
        fingerprint = "0" * 16 if model == "sum_reduce" else handle.info.fingerprint
        store.add_version(model=model, kernel=name, fingerprint=fingerprint, args=handle.info.args,
                          original_source=dump, source=dump,
                          evidence=Evidence(status="correct", speed_measured=False, launches=[verified_at(handle.info)]),
                          provenance=Provenance(proposed_by="test"), environment=None)
    (repo / "kernels" / "rms_norm" / kernels["rms_norm"] / "manifest.json").write_text("{ not json")
    assert [shard_of(m, 2) for m in PROBLEMS] == [2, 1, 2] and [shard_of(m, 3) for m in PROBLEMS] == [1, 2, 2]
    return {"repo": repo, "kernels": kernels}


@pytest.fixture
def repo(template: dict[str, Any], pytester: pytest.Pytester) -> Path:
    shutil.copytree(template["repo"], pytester.path, dirs_exist_ok=True)
    return pytester.path


@pytest.fixture
def problems_only(pytester: pytest.Pytester) -> Path:
    """The three problems and their settings, no kernel store: for runs that stop before anything compiles."""
    (pytester.path / "problems").mkdir()
    for model in PROBLEMS:
        shutil.copy(PROBLEMS_DIR / f"{model}.py", pytester.path / "problems")
    (pytester.path / "pyproject.toml").write_text(PYPROJECT)
    return pytester.path


def _expected(kernels: dict[str, str]) -> list[tuple[Any, ...]]:
    """(node id, outcome, status, version, committed, stale, baseline) of every item, sorted by node id."""
    ec, rms, sr = (f"problems/{m}.py" for m in PROBLEMS)
    return sorted([
        (f"{ec}::{kernels['elementwise_chain']}", "passed", "committed", 1, None, None, None),
        (f"{ec}::model", "passed", "committed", None, 1, 0, 0),
        (f"{rms}::{kernels['rms_norm']}", "failed", "broken", None, None, None, None),
        (f"{rms}::model", "failed", None, None, 0, 0, 0),
        (f"{sr}::{kernels['sum_reduce']}", "skipped", "stale", 1, None, None, None),
        (f"{sr}::model", "passed", "baseline", None, 0, 1, 0),
    ])


def _verdicts(result: dict[str, Any]) -> list[tuple[Any, ...]]:
    keys = ("nodeid", "outcome", "status", "version", "committed", "stale", "baseline")
    return [tuple(item[k] for k in keys) for item in result["items"]]


def _errors(result: dict[str, Any]) -> dict[str, float]:
    return {i["nodeid"]: i["error_vs_fp64"] for i in result["items"] if i["error_vs_fp64"] is not None}


def _gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "--kernelopt-seed", "20261202", "-W", "ignore",
                                         "-p", "no:cacheprovider", *args)


def _table(result: pytest.RunResult) -> list[list[str]]:
    """The rows of the gate's terminal table, split into cells (column widths follow the longest path)."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if re.fullmatch(r"=+ kernelopt =+", line))
    header = next(i for i in range(start, len(lines)) if lines[i].startswith("problem "))
    end = next((i for i in range(header, len(lines)) if lines[i].startswith("==")), len(lines))
    return [line.split() for line in lines[header + 1:end]]


def _check_rows(rows: list[list[str]], models: list[str]) -> None:
    assert len(rows) == len(models), rows
    for row, model in zip(rows, models):
        assert re.fullmatch(ROWS[model], " ".join(row)), row


def _check_junit(path: Path, result: dict[str, Any]) -> None:
    """The figures of ``result`` (--kernelopt-json) are the junit properties of ``path``, one for one."""
    from pytest_kernelopt.runs.gate_result import ItemResult

    by_id = {i["nodeid"]: i for i in result["items"]}
    cases = list(ET.parse(path).getroot().iter("testcase"))
    assert len(cases) == len(by_id), path
    for case in cases:
        nodeid = case.get("classname").replace(".", "/") + ".py::" + case.get("name")
        junit = {p.get("name")[len("kernelopt_"):]: p.get("value") for p in case.iter("property")}
        figures = ItemResult.model_validate(by_id[nodeid]).properties()
        assert {k: str(v) for k, v in figures.items()} == junit, nodeid


@pytest.mark.slow
def test_json_and_two_workers_match_the_serial_run(repo: Path, pytester: pytest.Pytester,
                                                    template: dict[str, Any]) -> None:
    serial = _gate(pytester, "--kernelopt-json", "serial.json", "--junitxml", "serial.xml")
    serial.assert_outcomes(passed=3, failed=2, skipped=1)
    _check_rows(_table(serial), PROBLEMS)
    result = json.loads((repo / "serial.json").read_text())
    assert (result["schema_version"], result["kind"], result["shards"], result["problems"]) == (
        1, "kernelopt-gate-result", [], PROBLEMS)
    assert result["environment"]["device"] == "cpu" and result["environment"]["gpus"] == []
    assert result["settings"] == {"seeds": 1, "timeout": 600.0, "max_slowdown": 0.01, "max_regression": 0.05,
                                  "strict": False,
                                  "base_ref": None, "base_commit": None, "pinned_seed": 20261202,
                                  "thresholds": {}, "accepted_regressions": {}}
    assert _verdicts(result) == _expected(template["kernels"])
    by_id = {i["nodeid"]: i for i in result["items"]}
    rms_kernel = by_id[f"problems/rms_norm.py::{template['kernels']['rms_norm']}"]
    assert "manifest.json: invalid manifest" in rms_kernel["message"]
    assert by_id[f"problems/sum_reduce.py::{template['kernels']['sum_reduce']}"]["message"].startswith("stale: ")
    errors = _errors(result)
    assert sorted(errors) == sorted(f"problems/elementwise_chain.py::{k}"
                                    for k in (template["kernels"]["elementwise_chain"], "model"))
    assert all(e < 1e-5 for e in errors.values()), errors
    _check_junit(repo / "serial.xml", result)

    spread = _gate(pytester, "-n", "2", "-v", "--kernelopt-json", "n2.json", "--junitxml", "n2.xml")
    spread.assert_outcomes(passed=3, failed=2, skipped=1)
    spread.stdout.fnmatch_lines(["kernelopt: 2 xdist workers, --dist loadfile (a problem's items stay on one "
                                 "worker), no GPU pinning on the CPU"])
    _check_rows(_table(spread), PROBLEMS)  # the error column is of other fresh seeds: alike, not equal
    parallel = json.loads((repo / "n2.json").read_text())
    assert _verdicts(parallel) == _verdicts(result)
    # Items that ran on the xdist workers keep their figures in the controller's junit file (a committed kernel
    # verified on a worker says so there: tests/test_plugin.py relies on this test for it).
    _check_junit(repo / "n2.xml", parallel)
    # The pinned seed only adds to seeds drawn afresh for each run: the errors are alike, not equal.
    assert sorted(_errors(parallel)) == sorted(errors) and all(e < 1e-5 for e in _errors(parallel).values())
    # Every problem's items ran on one worker.
    workers: dict[str, set[str]] = {}
    for worker, nodeid in re.findall(r"\[(gw\d+)\] \[\s*\d+%\] (?:PASSED|FAILED|SKIPPED) (\S+)",
                                  spread.stdout.str()):
        workers.setdefault(nodeid.split("::")[0], set()).add(worker)
    assert sorted(workers) == [f"problems/{m}.py" for m in PROBLEMS] and all(len(w) == 1 for w in workers.values())


@pytest.mark.slow
def test_merged_shards_equal_the_unsharded_run(repo: Path, pytester: pytest.Pytester, template: dict[str, Any],
                                               kernelopt: Any) -> None:
    runs = {k: _gate(pytester, "--kernelopt-shard", f"{k}/2", "--kernelopt-json", f"s{k}.json") for k in (1, 2)}
    runs[1].assert_outcomes(failed=2)
    runs[1].stdout.fnmatch_lines(["kernelopt: shard 1/2: 1 of 3 problems (rms_norm); 2 in other shards, "
                                  "not collected", "collected 2 items"])
    runs[2].assert_outcomes(passed=3, skipped=1)
    runs[2].stdout.fnmatch_lines(["kernelopt: shard 2/2: 2 of 3 problems (elementwise_chain, sum_reduce); 1 in other "
                                  "shards, not collected", "collected 4 items"])

    merged = kernelopt("merge", "s2.json", "s1.json", "--json", "merged.json", cwd=repo)
    assert merged.returncode == 1, merged.stdout + merged.stderr  # rms_norm failed
    lines = merged.stdout.splitlines()
    rows = [line.split() for line in lines if line.startswith("problems/")]
    _check_rows(rows, PROBLEMS)
    assert rows == sorted(_table(runs[1]) + _table(runs[2]))
    assert lines[-1] == ("3 problem(s), shards 1/2, 2/2, cpu, torch {torch}, triton {triton}: 3 passed, 2 failed, "
                         "1 skipped").format(**json.loads((repo / "s1.json").read_text())["environment"])
    result = json.loads((repo / "merged.json").read_text())
    assert result["problems"] == PROBLEMS and [s["index"] for s in result["shards"]] == [1, 2]
    assert _verdicts(result) == _expected(template["kernels"])  # what the unsharded run gives (test above)
    # A shard given twice is refused, naming both files.
    twice = kernelopt("merge", "s1.json", "s2.json", "s1.json", cwd=repo)
    assert twice.returncode == 2 and twice.stderr.splitlines() == [
        "kernelopt: error: shard 1/2 is given twice: s1.json and s1.json"]


def test_an_empty_shard_passes_and_writes_an_empty_result(problems_only: Path, pytester: pytest.Pytester) -> None:
    """A hash, not a balance: shard 3/3 holds none of the three problems. Nothing compiles (run in-process)."""
    result = pytester.runpytest("--kernelopt", "--kernelopt-shard", "3/3", "--kernelopt-json", "out.json",
                                "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    result.stdout.fnmatch_lines(["kernelopt: shard 3/3: 0 of 3 problems (none); 3 in other shards, not collected",
                                 "collected 0 items"])
    # Above pytest's "no tests ran", the summary says what it means here.
    result.stdout.fnmatch_lines(["kernelopt: shard 3/3 holds none of the 3 problem(s) (each goes to one shard by its "
                                 "name); nothing to check on this runner, which passes (exit 0)", "*no tests ran*"])
    written = json.loads((problems_only / "out.json").read_text())
    assert (written["shards"], written["problems"], written["items"]) == ([{"index": 3, "count": 3}], [], [])


@pytest.mark.parametrize(("args", "message"), [
    (("--kernelopt-shard", "0/3"), "--kernelopt-shard 0/3: K must be from 1 to 3"),
    (("--kernelopt-shard", "two"), "--kernelopt-shard 'two': expected K/N"),
    (("--kernelopt-json", "no/such/folder/r.json"), "--kernelopt-json no/such/folder/r.json: cannot write a file there"),
    (("--kernelopt-json", "problems"), "--kernelopt-json problems: cannot write a file there"),
])
def test_bad_shard_or_json_option_is_a_usage_error(problems_only: Path, pytester: pytest.Pytester,
                                                   args: tuple[str, ...], message: str) -> None:
    result = pytester.runpytest("--kernelopt", *args, "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    lines = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith(f"ERROR: kernelopt: {message}"), lines


def test_the_matrix_workflow_runs_every_shard_then_merges() -> None:
    """.github/workflows/gate-matrix.yml (test_workflows.py checks that its commands and options exist)."""
    import yaml

    path = Path(__file__).resolve().parent.parent / ".github" / "workflows" / "gate-matrix.yml"
    workflow = yaml.safe_load(path.read_text())
    gate, merge = workflow["jobs"]["gate"], workflow["jobs"]["merge"]
    assert set(gate["runs-on"]) == {"self-hosted", "h200"} and gate["strategy"]["fail-fast"] is False
    shards = gate["strategy"]["matrix"]["shard"]
    assert shards == list(range(1, len(shards) + 1)) and len(shards) > 1
    [step] = [s for s in gate["steps"] if "--kernelopt-shard" in s.get("run", "")]
    # Expressions reach the shell through env:, never spliced into the script (zizmor's template-injection rule).
    assert step["env"]["SHARD"] == "${{ matrix.shard }}" and step["env"]["SHARDS"] == "${{ strategy.job-total }}"
    assert '--kernelopt-shard "$SHARD/$SHARDS"' in step["run"] and "${{" not in step["run"]
    assert '--kernelopt-json "kernelopt-shard-$SHARD.json"' in step["run"]
    uploaded = [s["with"]["path"] for s in gate["steps"] if s.get("uses", "").startswith("actions/upload-artifact")]
    assert uploaded == ["kernelopt-shard-${{ matrix.shard }}.*"]
    # The merge job waits for every shard, runs also when one failed, and merges what they uploaded.
    assert merge["needs"] == "gate" and "always()" in merge["if"]
    [download] = [s for s in merge["steps"] if s.get("uses", "").startswith("actions/download-artifact")]
    assert download["with"] == {"pattern": "kernelopt-shard-*", "merge-multiple": True, "path": "shards"}
    [merge_run] = [s["run"] for s in merge["steps"] if "kernelopt merge" in s.get("run", "")]
    assert merge_run.split()[1:] == ["merge", "shards/kernelopt-shard-*.json", "--json", "kernelopt-gate.json",
                                     "--report", "kernelopt-gate.md"]
