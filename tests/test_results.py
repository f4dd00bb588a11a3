"""results.py and ``kernelopt merge``: the gate's JSON result, and combining the results of shards.

Results are built here by hand (what ``--kernelopt-json`` writes is checked against real
gate runs in test_gate_scale.py); the command runs as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from pytest_kernelopt.runs import gate_result as results
from pytest_kernelopt.gate.output import summary_lines
from pytest_kernelopt.errors import MergeError, UsageError
from pytest_kernelopt.records import dump_json
from pytest_kernelopt.shard import Shard, shard_of

ENV = results.ResultEnvironment(device="cuda", torch="2.11.0", triton="3.6.0", cuda="13.0", python="3.12.3",
                                gpus=["NVIDIA H200"])
SETTINGS = results.GateSettings(seeds=3, timeout=600.0, max_slowdown=0.01, strict=False)
MODELS = ["elementwise_chain", "gather_rows", "rms_norm", "sum_reduce"]  # shards of 2: 2, 1, 1, 2


def _items(model: str, failed: bool = False) -> list[results.ItemResult]:
    problem = f"problems/{model}.py"
    kernel = results.ItemResult(nodeid=f"{problem}::triton_poi_0", problem=problem, model=model, kernel="triton_poi_0",
                                item="kernel", outcome="failed" if failed else "passed",
                                status="rejected" if failed else "committed", version=1, speedup=1.2,
                                speedup_ci=[1.1, 1.3], error_vs_fp64=1e-7, gpu="NVIDIA H200",
                                message="rejected at kernel" if failed else None)
    model_item = results.ItemResult(nodeid=f"{problem}::model", problem=problem, model=model, item="model",
                                    outcome="passed", kernels=1, committed=1, stale=0, baseline=0, speedup=1.2,
                                    speedup_ci=[1.1, 1.3], error_vs_fp64=2e-7, stage_seconds={"speed": 1.5})
    return [kernel, model_item]


def _result(models: list[str], shard: Shard | None, *, env: results.ResultEnvironment = ENV,
            settings: results.GateSettings = SETTINGS, failed: str | None = None) -> results.GateResult:
    items = [i for m in models for i in _items(m, failed=m == failed)]
    # Every result names the run's whole problem list: merge recomputes the shard plan from it.
    return results.gate_result(shard=shard, problems=models, environment=env, settings=settings, items=items,
                               run_problems=MODELS)


def _shard(k: int, n: int = 2, **kwargs: Any) -> results.GateResult:
    return _result([m for m in MODELS if shard_of(m, n) == k], Shard(k, n), **kwargs)


def _strip(result: results.GateResult) -> dict[str, Any]:
    return result.model_dump(exclude={"created", "shards"})


def test_merge_of_shards_is_the_unsharded_result() -> None:
    merged = results.merge([("a.json", _shard(2)), ("b.json", _shard(1))])
    assert _strip(merged) == _strip(_result(MODELS, None))
    assert [str(s) for s in merged.shards] == ["1/2", "2/2"]
    # A merged result merges again, and reads back as it was written.
    again = results.GateResult.model_validate_json(dump_json(merged))
    assert again == merged and merged.rows() == _result(MODELS, None).rows()


def test_properties_round_trip_to_the_terminal_table() -> None:
    kernel, model = _items("rms_norm")
    assert model.properties() == {"model": "rms_norm", "item": "model", "kernels": 1, "committed": 1, "stale": 0,
                                  "baseline": 0, "speedup": 1.2, "speedup_ci": [1.1, 1.3], "error_vs_fp64": 2e-7,
                                  "stage_speed_seconds": 1.5}
    lines = summary_lines(_result(MODELS, None, failed="rms_norm"))
    row = next(line for line in lines if line.startswith("problems/rms_norm.py"))
    assert row.split()[1:6] == ["1", "0", "0", "1", "1.200x"], row
    assert lines[-1].endswith("4 problem(s), shards unsharded, cuda on NVIDIA H200, torch 2.11.0, triton 3.6.0: "
                              "7 passed, 1 failed")


@pytest.mark.parametrize(("given", "message"), [
    (lambda: [_shard(1), _shard(1)], "shard 1/2 is given twice: a.json and b.json"),
    (lambda: [_shard(1)], "shard 2/2 missing: give the result of every shard"),
    (lambda: [_shard(1, 3), _shard(2, 3)], "shard 3/3 missing"),
    (lambda: [_shard(1), _shard(1, 3)], "results of different shard counts"),
    (lambda: [_result(MODELS, None), _shard(1)], "a.json is an unsharded run; it cannot be merged with shards"),
    (lambda: [_result(MODELS[:2], None), _result(MODELS[1:], None)],
     "model gather_rows is in both a.json (unsharded) and b.json (unsharded)"),
    (lambda: [_shard(1), _shard(2, env=ENV.model_copy(update={"torch": "2.13.0"}))],
     "a.json and b.json ran in different environments (torch '2.11.0' vs '2.13.0')"),
    (lambda: [_shard(1), _shard(2, env=ENV.model_copy(update={"gpus": ["NVIDIA A100"]}))],
     "different environments (gpus NVIDIA H200 vs NVIDIA A100)"),
    (lambda: [_shard(1), _shard(2, settings=SETTINGS.model_copy(update={"seeds": 5}))],
     "a.json and b.json ran with different settings (seeds 3 vs 5): not one gate run"),
])
def test_merge_refuses(given: Any, message: str) -> None:
    shards = given()
    with pytest.raises(MergeError) as caught:
        results.merge(list(zip(["a.json", "b.json"], shards)))
    assert message in str(caught.value)


def test_merge_refuses_an_item_in_two_results() -> None:
    a, b = _shard(1), _shard(2)
    b.items.append(a.items[0])
    with pytest.raises(MergeError, match=f"item {a.items[0].nodeid} is in both a.json and b.json"):
        results.merge([("a.json", a), ("b.json", b)])


def test_a_shard_without_gpu_verdicts_merges_with_one_that_has_them() -> None:
    cpu_side = _shard(2, env=ENV.model_copy(update={"gpus": []}))
    assert results.merge([("a.json", _shard(1)), ("b.json", cpu_side)]).environment.gpus == ["NVIDIA H200"]


@pytest.mark.parametrize(("text", "message"), [
    ("not json", "not a gate result written by --kernelopt-json"),
    ('<?xml version="1.0"?><testsuites/>', "not a gate result"),
    ("{}", "not a gate result written by --kernelopt-json (created: Field required)"),
])
def test_read_refuses_what_is_not_a_result(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "r.json"
    path.write_text(text)
    with pytest.raises(UsageError, match=message.replace("(", r"\(").replace(")", r"\)")):
        results.read(path)


def test_read_refuses_an_unknown_schema_version(tmp_path: Path) -> None:
    data = json.loads(dump_json(_shard(1)))
    data["schema_version"] = 99
    (tmp_path / "r.json").write_text(json.dumps(data))
    with pytest.raises(UsageError, match="schema_version 99 is not supported"):
        results.read(tmp_path / "r.json")
    with pytest.raises(UsageError, match="cannot read"):
        results.read(tmp_path / "missing.json")


def test_merge_command(tmp_path: Path, kernelopt: Any) -> None:
    for name, result in (("s1.json", _shard(1)), ("s2.json", _shard(2, failed="elementwise_chain")),
                         ("s2-ok.json", _shard(2)), ("dup.json", _shard(1))):
        results.write(result, tmp_path / name)
    done = kernelopt("merge", "s1.json", "s2.json", "--json", "out/merged.json", cwd=tmp_path)
    assert done.returncode == 1, done.stderr  # an item failed: the merged gate fails
    assert "problems/elementwise_chain.py" in done.stdout and "7 passed, 1 failed" in done.stdout
    merged = results.read(tmp_path / "out" / "merged.json")
    assert _strip(merged) == _strip(_result(MODELS, None, failed="elementwise_chain"))
    passing = kernelopt("merge", "s2-ok.json", "s1.json", cwd=tmp_path)
    assert passing.returncode == 0 and "8 passed" in passing.stdout, passing.stdout + passing.stderr
    missing = kernelopt("merge", "s1.json", cwd=tmp_path)
    assert missing.returncode == 2 and missing.stderr.splitlines() == [
        "kernelopt: error: shard 2/2 missing: give the result of every shard"]
    dup = kernelopt("merge", "s1.json", "dup.json", "s2.json", cwd=tmp_path)
    assert dup.returncode == 2 and dup.stderr.splitlines() == [
        "kernelopt: error: shard 1/2 is given twice: s1.json and dup.json"]
