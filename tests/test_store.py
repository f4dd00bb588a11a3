"""The kernel store: versions never overwritten, atomic manifests, concurrent accepts, and every
inconsistency (missing manifest, edited file, traversal, failed write) a StoreError naming the file."""

from __future__ import annotations

import errno
import hashlib
import json
import multiprocessing
import os
from datetime import datetime, timezone
from pathlib import Path

import pytest

from pytest_kernelopt.candidate import render_dump
from pytest_kernelopt.errors import StoreError
from pytest_kernelopt.records import ArgInfo, Environment, KernelInfo, LaunchConfig, SeedErrors, Timing, Verdict
from pytest_kernelopt.store import (
    AcceptOutcome,
    Evidence,
    KernelStore,
    Manifest,
    ModelBaseline,
    Provenance,
    accept_verdict,
)

FP_A, FP_B = "a" * 16, "b" * 16
ARGS = [ArgInfo(name="out_ptr0", kind="tensor", written=True)]


def _add(root: str, tag: str, *, fingerprint: str = FP_A, original: str = "# original\n",
         source: str | None = None) -> int:
    outcome = _add_outcome(Path(root), tag, fingerprint=fingerprint, original=original, source=source)
    assert outcome.stored and outcome.record is not None
    return outcome.record.version


def _add_outcome(root: Path, tag: str, *, fingerprint: str = FP_A, original: str = "# original\n",
                 source: str | None = None, model: str = "m", kernel: str = "k") -> AcceptOutcome:
    return KernelStore(root).add_version(
        model=model, kernel=kernel, fingerprint=fingerprint, args=ARGS, original_source=original,
        source=source if source is not None else f"# candidate {tag}\n",
        evidence=Evidence(status="correct", speed_measured=False), provenance=Provenance(proposed_by=tag),
        environment=None,
    )


def _files(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_versions_are_numbered_and_never_overwritten(tmp_path: Path) -> None:
    assert [_add(str(tmp_path), t) for t in "abc"] == [1, 2, 3]
    folder = tmp_path / "m" / "k"
    assert (folder / "v1.py").read_text() == "# candidate a\n"
    assert (folder / "original.py").read_text() == "# original\n"
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None and manifest.active == 3
    assert [v.provenance.proposed_by for v in manifest.versions] == ["a", "b", "c"]
    # A hand-made v4.py is not overwritten: the next version skips it.
    (folder / "v4.py").write_text("# hand made\n")
    assert _add(str(tmp_path), "d") == 5
    assert (folder / "v4.py").read_text() == "# hand made\n"
    assert not list(folder.glob(".*tmp")), "no temp files left behind"


def test_concurrent_accepts_get_distinct_versions(tmp_path: Path) -> None:
    ctx = multiprocessing.get_context("spawn")
    with ctx.Pool(4) as pool:
        versions = pool.starmap(_add, [(str(tmp_path), f"p{i}") for i in range(12)])
    assert sorted(versions) == list(range(1, 13))
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None
    assert sorted(v.version for v in manifest.versions) == list(range(1, 13))
    for v in manifest.versions:
        assert (tmp_path / "m" / "k" / v.file).read_text() == f"# candidate {v.provenance.proposed_by}\n"


@pytest.mark.parametrize(
    "text, words",
    [
        ("{not json", ["manifest.json", "invalid manifest"]),
        (json.dumps({"schema_version": 1, "model": "m"}), ["manifest.json", "kernel"]),
        (json.dumps({"schema_version": 99, "model": "m", "kernel": "k", "fingerprint": "x"}), ["schema_version 99"]),
        (json.dumps({"model": "m", "kernel": "k", "fingerprint": "x", "active": 3}), ["manifest.json", "active version 3"]),
    ],
)
def test_broken_manifest_names_the_file(tmp_path: Path, text: str, words: list[str]) -> None:
    folder = tmp_path / "m" / "k"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(text)
    with pytest.raises(StoreError) as err:
        KernelStore(tmp_path).manifest("m", "k")
    for word in words:
        assert word in str(err.value)


def test_missing_active_file_is_an_error(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    (tmp_path / "m" / "k" / "v1.py").unlink()
    with pytest.raises(StoreError, match="v1.py"):
        KernelStore(tmp_path).active_file("m", "k")


def test_manifest_for_another_kernel_is_rejected(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "k"
    folder.mkdir(parents=True)
    (folder / "manifest.json").write_text(Manifest(model="m", kernel="other", fingerprint="x").model_dump_json())
    with pytest.raises(StoreError, match="not m/k"):
        KernelStore(tmp_path).manifest("m", "k")


# --- 1. a deleted manifest does not turn committed versions into "nothing committed" --------------

def test_deleted_manifest_with_version_files_is_an_error(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    folder = tmp_path / "m" / "k"
    (folder / "manifest.json").unlink()
    store = KernelStore(tmp_path)
    for read in (store.manifest, store.active_file, store.check):
        with pytest.raises(StoreError) as err:
            read("m", "k")
        assert str(folder) in str(err.value) and "manifest.json is missing" in str(err.value)
        assert "original.py, v1.py" in str(err.value)
    with pytest.raises(StoreError, match="manifest.json is missing"):  # nor can an accept start over silently
        _add(str(tmp_path), "b")
    assert _files(folder) == ["original.py", "v1.py"]


def test_folder_without_store_files_is_nothing_committed(tmp_path: Path) -> None:
    (tmp_path / "m" / "k").mkdir(parents=True)
    (tmp_path / "m" / "k" / "notes.txt").write_text("draft\n")
    store = KernelStore(tmp_path)
    assert store.manifest("m", "k") is None and store.active_file("m", "k") is None
    assert store.manifest("m", "absent") is None and store.active_file("absent", "k") is None


# --- 2. model.json ----------------------------------------------------------------------------

@pytest.mark.parametrize("data, words", [
    (b"{ garbage", ["invalid model record"]),
    (b"\xff\xfe not utf-8", ["not UTF-8"]),
    (json.dumps({"model": "other"}).encode(), ["records model other, not m"]),
], ids=["garbage", "not_utf8", "other_model"])
def test_broken_model_record_names_the_file(tmp_path: Path, data: bytes, words: list[str]) -> None:
    path = tmp_path / "m" / "model.json"
    path.parent.mkdir()
    path.write_bytes(data)
    store = KernelStore(tmp_path)
    baseline = ModelBaseline(environment=_env(), measured=datetime.now(timezone.utc))
    for call in (lambda: store.model_record("m"), lambda: store.save_baseline("m", baseline)):
        with pytest.raises(StoreError) as err:
            call()
        assert str(path) in str(err.value)
        for word in words:
            assert word in str(err.value)
    assert path.read_bytes() == data, "a broken model.json is not overwritten"
    # An accept fails before it writes anything.
    with pytest.raises(StoreError, match="model.json"):
        accept_verdict(store, "m", KERNEL, CANDIDATE, _verdict())
    assert not (tmp_path / "m" / KERNEL).exists()


# --- 3. the recorded sha256 is checked; the checked bytes are returned ---------------------------

def test_active_file_returns_the_checked_source(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    _add(str(tmp_path), "b")
    active = KernelStore(tmp_path).active_file("m", "k")
    assert active is not None
    assert (active.manifest.active, active.record.version) == (2, 2)
    assert active.path == tmp_path / "m" / "k" / "v2.py"
    assert active.source == "# candidate b\n"
    assert active.record.sha256 == hashlib.sha256(active.path.read_bytes()).hexdigest()


def test_hand_edited_active_version_is_an_error(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    path = tmp_path / "m" / "k" / "v1.py"
    path.write_text("# candidate a, improved by hand\n")
    store = KernelStore(tmp_path)
    for read in (store.active_file, store.check):
        with pytest.raises(StoreError) as err:
            read("m", "k")
        assert str(path) in str(err.value)
        assert "contents differ from the sha256 recorded at accept (edited by hand?)" in str(err.value)


def test_check_covers_inactive_versions_and_the_original(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    _add(str(tmp_path), "b")
    store, folder = KernelStore(tmp_path), tmp_path / "m" / "k"
    assert store.check("m", "k") is not None and store.check("m", "absent") is None
    (folder / "v1.py").write_text("# edited\n")
    assert store.active_file("m", "k") is not None  # the active v2 is intact
    with pytest.raises(StoreError, match="v1.py: contents differ"):
        store.check("m", "k")
    (folder / "v1.py").write_text("# candidate a\n")
    (folder / "original.py").unlink()
    with pytest.raises(StoreError, match="original.py: original file recorded in .* is missing"):
        store.check("m", "k")
    with pytest.raises(StoreError, match="original.py: original file recorded in .* is missing"):
        _add(str(tmp_path), "c")
    assert "v3.py" not in _files(folder)


def test_check_names_files_the_manifest_does_not_record(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    store, folder = KernelStore(tmp_path), tmp_path / "m" / "k"
    (folder / "v9.py").write_text("# never accepted\n")
    (folder / "notes").mkdir()
    with pytest.raises(StoreError, match=r"notes, v9.py not recorded in manifest.json"):
        store.check("m", "k")
    assert store.active_file("m", "k") is not None  # production and accept still read the active version


# --- 4. manifest file names cannot leave the kernel's folder -------------------------------------

@pytest.mark.parametrize("version, file, words", [
    (1, "../../../../tmp/x.py", ["versions.0.file", "not a version file name"]),
    (1, "/etc/passwd", ["not a version file name"]),
    (1, "v2.py", ["version 1 must be stored as v1.py, not v2.py"]),
    (1, "v01.py", ["not a version file name"]),
    (0, "v0.py", ["versions.0.version"]),
], ids=["traversal", "absolute", "other_version", "leading_zero", "version_zero"])
def test_manifest_file_must_be_its_version_file(tmp_path: Path, version: int, file: str, words: list[str]) -> None:
    folder = tmp_path / "m" / "k"
    folder.mkdir(parents=True)
    record = {"version": version, "file": file, "sha256": "0" * 64, "created": "2025-01-01T00:00:00Z",
              "evidence": {"status": "correct", "speed_measured": False}, "provenance": {}}
    (folder / "manifest.json").write_text(json.dumps(
        {"schema_version": 1, "model": "m", "kernel": "k", "fingerprint": FP_A, "active": version, "versions": [record]}))
    with pytest.raises(StoreError) as err:
        KernelStore(tmp_path).active_file("m", "k")
    assert str(folder / "manifest.json") in str(err.value)
    for word in words:
        assert word in str(err.value)


# --- 5. model ids and kernel names cannot leave the store ----------------------------------------

@pytest.mark.parametrize("model, kernel, bad", [
    ("..", "k", "model id '..'"), (".", "k", "model id '.'"), ("m", "..", "kernel name '..'"),
    ("a/b", "k", "model id 'a/b'"), ("m", "../../x", "kernel name '../../x'"), ("", "k", "model id ''"),
    ("m", "-rf", "kernel name '-rf'"),
])
def test_names_that_are_not_folder_names_are_refused(tmp_path: Path, model: str, kernel: str, bad: str) -> None:
    root = tmp_path / "repo" / "kernels"
    store = KernelStore(root)
    with pytest.raises(StoreError, match="cannot name a folder") as err:
        _add_outcome(root, "a", model=model, kernel=kernel)
    assert bad in str(err.value)
    for call in (store.manifest, store.active_file, store.kernel_dir):
        with pytest.raises(StoreError):
            call(model, kernel)
    if "model id" in bad:
        with pytest.raises(StoreError, match="cannot name a folder"):
            store.model_record(model)
    assert not list(tmp_path.rglob("*.py")), "nothing written anywhere"


def test_symlink_out_of_the_store_is_refused(tmp_path: Path) -> None:
    root, outside = tmp_path / "kernels", tmp_path / "elsewhere"
    root.mkdir()
    outside.mkdir()
    (root / "m").symlink_to(outside)
    with pytest.raises(StoreError, match="outside the kernel store"):
        _add_outcome(root, "a")
    assert list(outside.iterdir()) == []


def test_ordinary_names_are_accepted(tmp_path: Path) -> None:
    outcome = _add_outcome(tmp_path, "a", model="19_ReLU.v2+x", kernel="triton_poi_fused_add_0__g1")
    assert outcome.stored and (tmp_path / "19_ReLU.v2+x" / "triton_poi_fused_add_0__g1" / "v1.py").is_file()


# --- 6. write failures: a StoreError naming the file, nothing half-written ----------------------

def _enospc(*args: object, **kwargs: object) -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def test_failed_manifest_write_removes_the_new_version(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _add(str(tmp_path), "a")
    folder = tmp_path / "m" / "k"
    before = (folder / "manifest.json").read_text()
    monkeypatch.setattr(os, "replace", _enospc)
    with pytest.raises(StoreError) as err:
        _add(str(tmp_path), "b")
    assert str(err.value) == f"cannot write {folder / 'manifest.json'}: No space left on device"
    monkeypatch.undo()
    assert _files(folder) == ["manifest.json", "original.py", "v1.py"], "no orphan v2.py, no temp file"
    assert (folder / "manifest.json").read_text() == before
    assert _add(str(tmp_path), "b") == 2


def test_failed_first_accept_leaves_nothing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "fsync", _enospc)  # the disk fills while the first files are written
    with pytest.raises(StoreError, match=r"cannot write .*original.py: No space left on device"):
        _add(str(tmp_path), "a")
    monkeypatch.undo()
    folder = tmp_path / "m" / "k"
    assert _files(folder) == []
    assert KernelStore(tmp_path).manifest("m", "k") is None


def test_failed_version_write_removes_the_partial_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _add(str(tmp_path), "a")
    folder = tmp_path / "m" / "k"
    monkeypatch.setattr(os, "fsync", _enospc)
    with pytest.raises(StoreError) as err:
        _add(str(tmp_path), "b")
    assert str(err.value) == f"cannot write {folder / 'v2.py'}: No space left on device"
    monkeypatch.undo()
    assert _files(folder) == ["manifest.json", "original.py", "v1.py"]


def test_read_only_folder_is_a_store_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Tests run as root, which chmod does not stop: refuse file creation the way
    # `chattr +i` on the folder would.
    _add(str(tmp_path), "a")
    folder = tmp_path / "m" / "k"
    real_open = os.open

    def refuse(path: object, flags: int, *args: object, **kwargs: object) -> int:
        if flags & os.O_CREAT:
            raise OSError(errno.EPERM, os.strerror(errno.EPERM), str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", refuse)
    with pytest.raises(StoreError) as err:
        _add(str(tmp_path), "b")
    assert str(err.value) == f"cannot write {folder / 'v2.py'}: Operation not permitted"
    monkeypatch.setattr("tempfile.mkstemp", lambda *a, **k: _enospc())
    baseline = ModelBaseline(environment=_env(), measured=datetime.now(timezone.utc))
    with pytest.raises(StoreError, match=r"cannot write .*m/model.json: No space left on device"):
        KernelStore(tmp_path).save_baseline("m", baseline)
    monkeypatch.undo()
    assert _files(folder) == ["manifest.json", "original.py", "v1.py"]
    assert not (tmp_path / "m" / "model.json").exists()


# --- 7. a re-accept after the compiler kernel changed keeps original.py ---------------------------

def test_stale_reaccept_keeps_the_first_original(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "k"
    assert _add(str(tmp_path), "a", fingerprint=FP_A, original="# compiler kernel A\n") == 1
    assert _add(str(tmp_path), "b", fingerprint=FP_B, original="# compiler kernel B\n") == 2
    assert (folder / "original.py").read_text() == "# compiler kernel A\n"
    assert (folder / f"original-{FP_B}.py").read_text() == "# compiler kernel B\n"
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None
    assert (manifest.fingerprint, manifest.original, manifest.active) == (FP_B, f"original-{FP_B}.py", 2)
    assert [(v.version, v.fingerprint, v.original) for v in manifest.versions] == [
        (1, FP_A, "original.py"), (2, FP_B, f"original-{FP_B}.py")]
    # Same fingerprint again: the original for it is kept, not rewritten.
    assert _add(str(tmp_path), "c", fingerprint=FP_B, original="# B, other launch config\n") == 3
    assert (folder / f"original-{FP_B}.py").read_text() == "# compiler kernel B\n"
    # The compiler goes back to A: its original is original.py again.
    assert _add(str(tmp_path), "d", fingerprint=FP_A, original="# compiler kernel A again\n") == 4
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None and (manifest.fingerprint, manifest.original) == (FP_A, "original.py")
    assert (folder / "original.py").read_text() == "# compiler kernel A\n"
    assert KernelStore(tmp_path).check("m", "k") is not None


def test_manifest_without_original_field_reads_as_original_py(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    path = tmp_path / "m" / "k" / "manifest.json"
    data = json.loads(path.read_text())
    del data["original"]
    for v in data["versions"]:
        del v["fingerprint"], v["original"]
    path.write_text(json.dumps(data))
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None and manifest.original == "original.py"
    assert _add(str(tmp_path), "b", fingerprint=FP_B, original="# B\n") == 2
    assert (tmp_path / "m" / "k" / "original.py").read_text() == "# original\n"


def test_original_field_cannot_leave_the_folder(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    path = tmp_path / "m" / "k" / "manifest.json"
    data = json.loads(path.read_text())
    data["original"] = "../../../etc/passwd"
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match="not an original file name"):
        KernelStore(tmp_path).manifest("m", "k")


# --- 8. the same bytes are not stored twice ----------------------------------------------------------

def test_same_bytes_are_not_stored_again(tmp_path: Path) -> None:
    folder = tmp_path / "m" / "k"
    _add(str(tmp_path), "a", source="# same\n")
    again = _add_outcome(tmp_path, "a2", source="# same\n")
    assert (again.stored, again.active, again.record and again.record.version) == (False, True, 1)
    assert again.message.startswith("already stored as v1 (active)") and again.message.endswith("nothing stored")
    _add(str(tmp_path), "b")
    old = _add_outcome(tmp_path, "a3", source="# same\n")
    assert (old.stored, old.active) == (False, False)
    assert old.message.startswith("already stored as v1 (not active)")
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None and manifest.active == 2 and len(manifest.versions) == 2
    assert _files(folder) == ["manifest.json", "original.py", "v1.py", "v2.py"]


# --- accept_verdict -----------------------------------------------------------------------------------

KERNEL = "triton_poi_fused_add_0"
CANDIDATE = "# a candidate\n"
KERNEL_SOURCE = '''
import triton
import triton.language as tl

@triton.jit
def triton_poi_fused_add_0(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)[:]
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, tmp0 + 1.0, xmask)
'''


def _env() -> Environment:
    return Environment(device="cuda", gpu="H200", torch="2.11", triton="3.6", python="3.12")


def _info() -> KernelInfo:
    return KernelInfo(
        name=KERNEL, function=KERNEL, graph=0, fingerprint=FP_A, source=KERNEL_SOURCE,
        args=[ArgInfo(name="in_ptr0", kind="tensor", read=True), ArgInfo(name="out_ptr0", kind="tensor", written=True),
              ArgInfo(name="xnumel", kind="int", value=1024)],
        launch=LaunchConfig(kwargs={"XBLOCK": 128}, num_warps=4, grid=["triton.cdiv(xnumel, XBLOCK)", "1", "1"]),
    )


def _verdict(status: str = "accepted", *, source: str = CANDIDATE, speed_measured: bool = True,
             environment: Environment | None = None) -> Verdict:
    timing = Timing(baseline_ms=1.0, candidate_ms=0.8, speedup=1.25, ci_low=1.2, ci_high=1.3, pairs=20)
    verdict = Verdict(model="m", kernel=KERNEL, fingerprint=FP_A, candidate="/work/cand.py",
                      candidate_sha256=hashlib.sha256(source.encode()).hexdigest(), status=status,  # type: ignore[arg-type]
                      speed_measured=speed_measured, model_timing=timing if speed_measured else None,
                      errors=[SeedErrors(seed=1, candidate_vs_fp64=1e-6)], seeds=[1], environment=environment)
    verdict.kernel_info = _info()
    return verdict


def test_what_accept_needs_rides_on_the_verdict_but_not_in_its_json() -> None:
    verdict = _verdict()
    verdict.verified_source = CANDIDATE
    data = json.loads(verdict.model_dump_json())
    assert "kernel_info" not in data and "verified_source" not in data and data["kernel"] == KERNEL
    again = Verdict.model_validate_json(verdict.model_dump_json())
    assert again.kernel_info is None and again.verified_source is None
    assert verdict.model_copy().verified_source == CANDIDATE


def test_accept_stores_source_original_and_baseline(tmp_path: Path) -> None:
    store = KernelStore(tmp_path / "kernels")
    outcome = accept_verdict(store, "m", KERNEL, CANDIDATE, _verdict(environment=_env()),
                             provenance=Provenance(proposed_by="agent", backend="search"))
    folder = store.root / "m" / KERNEL
    assert outcome.stored and outcome.active and outcome.record is not None and outcome.record.version == 1
    assert outcome.message == f"stored as {folder / 'v1.py'} (v1, active)" and folder.is_absolute()
    assert (folder / "v1.py").read_text() == CANDIDATE
    assert (folder / "original.py").read_text() == render_dump(_info(), "m")
    assert outcome.record.evidence.status == "accepted" and outcome.record.provenance.backend == "search"
    baseline = store.model_record("m").baselines["H200|torch 2.11|triton 3.6"]
    assert baseline.kernels == {KERNEL: 1} and baseline.worst_error_vs_fp64 == 1e-6
    again = accept_verdict(store, "m", KERNEL, CANDIDATE, _verdict(environment=_env()))
    assert (again.stored, again.active) == (False, True) and "already stored as v1 (active)" in again.message


@pytest.mark.parametrize("training", [True, False, None])
def test_accept_records_the_pass_the_kernel_was_captured_in_and_an_old_manifest_reads_without_it(
        tmp_path: Path, training: bool | None) -> None:
    """The evidence says whether the version was verified in a training step or for inference (capture's flag on
    the kernel record), which production reads; a manifest written before it was recorded reads as None."""
    store = KernelStore(tmp_path)
    verdict = _verdict()
    verdict.kernel_info = _info().model_copy(update={"training": training})
    assert accept_verdict(store, "m", KERNEL, CANDIDATE, verdict).stored
    path = tmp_path / "m" / KERNEL / "manifest.json"
    data = json.loads(path.read_text())
    assert data["versions"][0]["evidence"]["training"] is training
    del data["versions"][0]["evidence"]["training"]
    path.write_text(json.dumps(data))
    manifest = store.manifest("m", KERNEL)
    assert manifest is not None and manifest.versions[0].evidence.training is None


@pytest.mark.parametrize("status, speed_measured, allow, stored, words", [
    ("rejected", False, False, False, "not stored: rejected"),
    ("correct", True, False, False, "not stored: correct but not faster"),
    ("correct", True, True, True, "stored as"),
    ("correct", False, False, True, "stored as"),  # interpreter mode: speed not measured
])
def test_accept_policy(tmp_path: Path, status: str, speed_measured: bool, allow: bool, stored: bool, words: str) -> None:
    store = KernelStore(tmp_path)
    outcome = accept_verdict(store, "m", KERNEL, CANDIDATE, _verdict(status, speed_measured=speed_measured),
                             allow_no_gain=allow)
    assert outcome.stored is stored and words in outcome.message
    assert (tmp_path / "m" / KERNEL / "v1.py").exists() is stored


def test_accept_refuses_source_that_was_not_verified(tmp_path: Path) -> None:
    store = KernelStore(tmp_path)
    with pytest.raises(StoreError, match="not the one that was verified"):
        accept_verdict(store, "m", KERNEL, CANDIDATE + "# changed after verify\n", _verdict())
    verdict = _verdict()
    verdict.kernel_info = None
    with pytest.raises(StoreError, match="no kernel record"):
        accept_verdict(store, "m", KERNEL, CANDIDATE, verdict)
    with pytest.raises(StoreError, match="the verdict is for m/"):
        accept_verdict(store, "m", "triton_other", CANDIDATE, _verdict())
    assert not (tmp_path / "m").exists()


def test_files_the_store_rewrites_are_readable_by_others(tmp_path: Path) -> None:
    """manifest.json, model.json and JSON results go through atomic_write: not mkstemp's 0600."""
    from pytest_kernelopt.store import atomic_write

    atomic_write(tmp_path / "manifest.json", "{}")
    assert (tmp_path / "manifest.json").stat().st_mode & 0o777 == 0o644
    assert [p.name for p in tmp_path.iterdir()] == ["manifest.json"]  # no temp file left


def test_a_manifest_whose_active_version_replaces_another_kernel_is_an_error(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    path = tmp_path / "m" / "k" / "manifest.json"
    data = json.loads(path.read_text())
    data["fingerprint"] = FP_B  # hand-edited: the versions still say FP_A
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError, match=f"active version 1 replaces compiler kernel {FP_A}, but the manifest names {FP_B}"):
        KernelStore(tmp_path).active_file("m", "k")


def test_accepting_bytes_of_a_hand_edited_version_is_an_error_not_already_stored(tmp_path: Path) -> None:
    _add(str(tmp_path), "a")
    _add(str(tmp_path), "b")
    (tmp_path / "m" / "k" / "v1.py").write_text("# edited\n")
    with pytest.raises(StoreError, match="v1.py: contents differ from the sha256 recorded"):
        _add_outcome(tmp_path, "a")


# --- 9. what a version was verified at: fingerprints of schema 4, launches ---------------------------

LAUNCH = ["float16 (4, 16) (16, 1)", "float16 (4, 16) (16, 1)", "int 64"]


def _verified(fingerprint: str, source: str, launches: list[list[str]] | None = None) -> Evidence:
    return Evidence(status="correct", speed_measured=False, fingerprint=fingerprint,
                    sha256=hashlib.sha256(source.encode()).hexdigest(),
                    launches=[LAUNCH] if launches is None else launches)


def test_accept_records_the_launches_the_kernel_stage_verified(tmp_path: Path) -> None:
    verdict = _verdict()
    verdict.launches = [LAUNCH]
    outcome = accept_verdict(KernelStore(tmp_path), "m", KERNEL, CANDIDATE, verdict)
    assert outcome.record is not None and outcome.record.evidence.launches == [LAUNCH]
    assert outcome.record.unverified_reason(FP_A) is None
    manifest = KernelStore(tmp_path).manifest("m", KERNEL)
    assert manifest is not None and manifest.schema_version == 4 and manifest.old_fingerprints() is None
    # Without them (a verdict of the model stage only, a hand-written entry) production would run it nowhere.
    verdict = _verdict(source="# another\n")
    outcome = accept_verdict(KernelStore(tmp_path), "m", KERNEL, "# another\n", verdict)
    assert outcome.record is not None
    assert "no launches it was verified at" in (outcome.record.unverified_reason(FP_A) or "")


def test_a_manifest_of_schema_3_is_stale_until_verified_again(tmp_path: Path) -> None:
    """Its fingerprint hashed the text alone (float16 and bfloat16 alike): never compared, and said so
    with the way out; re-verifying the same bytes against the compiler kernel now records the new
    fingerprint and launches on the same entry, without a new file."""
    folder = tmp_path / "m" / "k"
    source = "# tuned at float16\n"
    KernelStore(tmp_path).add_version(model="m", kernel="k", fingerprint=FP_A, args=ARGS, original_source="# A\n",
                                      source=source, evidence=_verified(FP_A, source), provenance=Provenance(),
                                      environment=None)
    data = json.loads((folder / "manifest.json").read_text())
    data["schema_version"] = 3
    for v in data["versions"]:
        del v["evidence"]["launches"]
    (folder / "manifest.json").write_text(json.dumps(data))
    active = KernelStore(tmp_path).active_file("m", "k")
    assert active is not None
    why = active.manifest.old_fingerprints()
    assert why is not None and "`kernelopt refresh`" in why and "dtypes" in why
    assert "no launches" in (active.record.unverified_reason(FP_A) or "")
    assert KernelStore(tmp_path).already_stored("m", "k", source) is None  # accept verifies it again

    again = KernelStore(tmp_path).add_version(model="m", kernel="k", fingerprint=FP_B, args=ARGS,
                                              original_source="# B\n", source=source,
                                              evidence=_verified(FP_B, source), provenance=Provenance(),
                                              environment=None)
    assert (again.stored, again.active) == (False, True) and "now recorded" in again.message
    manifest = KernelStore(tmp_path).manifest("m", "k")
    assert manifest is not None
    assert (manifest.schema_version, manifest.fingerprint, manifest.active) == (4, FP_B, 1)
    assert manifest.old_fingerprints() is None and manifest.version(1).unverified_reason(FP_B) is None
    assert _files(folder) == sorted(["manifest.json", "original.py", f"original-{FP_B}.py", "v1.py"])
    assert KernelStore(tmp_path).check("m", "k") is not None


def test_same_bytes_verified_against_another_compile_are_recorded_against_it(tmp_path: Path) -> None:
    """The bfloat16 compile's kernel has the float16 one's text: a version verified on both is active for the
    compile it was verified on last, never by the other's record."""
    source = "# same text both ways\n"
    store = KernelStore(tmp_path)
    store.add_version(model="m", kernel="k", fingerprint=FP_A, args=ARGS, original_source="# A\n", source=source,
                      evidence=_verified(FP_A, source), provenance=Provenance(), environment=None)
    store.add_version(model="m", kernel="k", fingerprint=FP_A, args=ARGS, original_source="# A\n",
                      source="# v2\n", evidence=_verified(FP_A, "# v2\n"), provenance=Provenance(), environment=None)
    bf16 = [["bfloat16 (4, 16) (16, 1)", "bfloat16 (4, 16) (16, 1)", "int 64"]]
    outcome = store.add_version(model="m", kernel="k", fingerprint=FP_B, args=ARGS, original_source="# B\n",
                                source=source, evidence=_verified(FP_B, source, bf16), provenance=Provenance(),
                                environment=None)
    assert (outcome.stored, outcome.active) == (False, True)
    manifest = store.manifest("m", "k")
    assert manifest is not None and (manifest.fingerprint, manifest.active) == (FP_B, 1)
    assert manifest.version(1).evidence.launches == bf16 and manifest.version(1).unverified_reason(FP_A) is not None
