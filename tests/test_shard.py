"""shard.py: which shard a model belongs to, and which GPU a worker gets. Pure functions, no torch."""

from __future__ import annotations

import subprocess
import sys

import pytest

from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.shard import (CUDA_VISIBLE_DEVICES, GpuPool, Shard, check_workers, gpu_for_worker, parse_shard,
                                    select, shard_of, visible_gpus, worker_number)

MODELS = [f"model_{i:03d}" for i in range(200)]


@pytest.mark.parametrize(("text", "shard"), [("1/4", Shard(1, 4)), ("4/4", Shard(4, 4)), (" 2 / 3 ", Shard(2, 3)),
                                             ("1/1", Shard(1, 1))])
def test_parse_shard(text: str, shard: Shard) -> None:
    assert parse_shard(text) == shard
    assert str(parse_shard(text)) == f"{shard.index}/{shard.count}"


@pytest.mark.parametrize(("text", "why"), [
    ("0/2", "K must be from 1 to 2"),
    ("3/2", "K must be from 1 to 2"),
    ("1/0", "N must be at least 1"),
    ("2", "expected K/N"),
    ("", "expected K/N"),
    ("a/b", "expected K/N"),
    ("-1/2", "expected K/N"),
    ("1/2/3", "expected K/N"),
    ("1.5/2", "expected K/N"),
])
def test_parse_shard_refuses(text: str, why: str) -> None:
    with pytest.raises(UsageError) as caught:
        parse_shard(text)
    message = str(caught.value)
    assert why in message and "\n" not in message
    assert message.startswith(repr(text) if "expected" in why else text), message


def test_shard_of_is_fixed_by_the_id() -> None:
    # Every runner of a CI matrix must agree, whatever version of Python or order of files:
    # these values pin the hash (sha256 of the id, first 8 bytes, mod N, plus 1).
    assert [shard_of(m, 2) for m in ("elementwise_chain", "gather_rows", "rms_norm", "sum_reduce")] == [2, 1, 1, 2]
    assert shard_of("rms_norm", 3) == 2 and shard_of("anything", 1) == 1


def test_adding_a_model_moves_no_other_model() -> None:
    for count in (2, 3, 8):
        before = {k: select(MODELS, k, count) for k in range(1, count + 1)}
        grown = sorted([*MODELS, "new_model", "another_one"])  # new ids land between the old ones
        after = {k: select(grown, k, count) for k in range(1, count + 1)}
        for k in before:
            assert [m for m in after[k] if m in MODELS] == before[k]
        assert sum(len(v) for v in after.values()) == len(grown)
        # Removing models leaves the others where they were, too.
        shrunk = MODELS[::3]
        assert all(select(shrunk, k, count) == [m for m in before[k] if m in shrunk] for k in before)


def test_select_splits_models_into_disjoint_shards() -> None:
    shards = [select(MODELS, k, 4) for k in range(1, 5)]
    assert sorted(m for s in shards for m in s) == MODELS
    assert all(s == sorted(s) for s in shards)  # input order kept
    # A hash, not a balance: 200 ids over 4 shards land within a loose band of 50 each.
    assert all(30 <= len(s) <= 70 for s in shards), [len(s) for s in shards]
    with pytest.raises(UsageError, match="K must be from 1 to 4"):
        select(MODELS, 5, 4)


def test_visible_gpus() -> None:
    assert visible_gpus(lambda: 2, {}) == ["0", "1"]
    assert visible_gpus(lambda: 0, {}) == []
    # An existing list is respected: its entries are handed out as they are.
    assert visible_gpus(lambda: 2, {CUDA_VISIBLE_DEVICES: "3,5"}) == ["3", "5"]
    assert visible_gpus(lambda: 2, {CUDA_VISIBLE_DEVICES: "GPU-aa, GPU-bb"}) == ["GPU-aa", "GPU-bb"]
    # CUDA stops at an invalid entry: only as many as it counts.
    assert visible_gpus(lambda: 2, {CUDA_VISIBLE_DEVICES: "3,5,99"}) == ["3", "5"]
    assert visible_gpus(lambda: 0, {CUDA_VISIBLE_DEVICES: ""}) == []


def test_importing_shard_does_not_import_torch() -> None:
    code = "import sys, pytest_kernelopt.shard, pytest_kernelopt.runs.gate_result; assert 'torch' not in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_worker_ids_map_to_gpus() -> None:
    assert worker_number("gw0") == 0 and worker_number("gw12") == 12
    for bad in ("master", "gw", "gwx", "gw1a"):
        with pytest.raises(UsageError, match="not a pytest-xdist worker id"):
            worker_number(bad)
    assert gpu_for_worker("gw1", ["3", "5"]) == "5"
    with pytest.raises(UsageError, match="worker gw2 has no GPU of its own: 2 GPUs visible"):
        gpu_for_worker("gw2", ["3", "5"])


def test_more_workers_than_gpus_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    check_workers(2, ["3", "5"])
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "3,5")
    with pytest.raises(UsageError) as caught:
        check_workers(3, ["3", "5"], what="xdist workers")
    assert str(caught.value) == ("3 xdist workers but 2 GPUs visible (CUDA_VISIBLE_DEVICES=3,5): each worker needs a "
                                 "GPU of its own, so use at most 2")
    monkeypatch.delenv(CUDA_VISIBLE_DEVICES)
    with pytest.raises(UsageError, match=r"1 workers but 0 GPUs visible \(none\)"):
        check_workers(1, [])


def test_gpu_pool_gives_a_crashed_workers_gpu_to_its_replacement() -> None:
    pool = GpuPool(["3", "5"])
    assert pool.assign("gw0") == "3" and pool.assign("gw1") == "5"
    assert pool.assign("gw1") == "5"  # asked again: the same
    with pytest.raises(UsageError, match="all 2 GPUs visible .* are held by gw0, gw1"):
        pool.assign("gw2")
    pool.release("gw0")  # gw0 crashed; xdist starts gw2 in its place
    assert pool.assign("gw2") == "3"
    assert sorted(pool.held.values()) == ["3", "5"]
    named = GpuPool(["3", "5"])
    assert named.assign("gw1") == "5" and named.assign("box") == "3"  # --tx popen//id=box
