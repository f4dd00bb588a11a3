"""The kernel store: versions never overwritten, atomic manifests, concurrent accepts, broken files."""

from __future__ import annotations

import json
import multiprocessing
from pathlib import Path

import pytest

from pytest_kernelopt.errors import StoreError
from pytest_kernelopt.records import ArgInfo
from pytest_kernelopt.store import Evidence, KernelStore, Manifest, Provenance


def _add(root: str, tag: str) -> int:
    store = KernelStore(Path(root))
    record = store.add_version(
        model="m", kernel="k", fingerprint="f" * 16, args=[ArgInfo(name="out_ptr0", kind="tensor", written=True)],
        original_source="# original\n", source=f"# candidate {tag}\n",
        evidence=Evidence(status="correct", speed_measured=False), provenance=Provenance(proposed_by=tag),
        environment=None,
    )
    return record.version


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
        ("{not json", ["manifest.json", "invalid Manifest"]),
        (json.dumps({"schema_version": 1, "model": "m"}), ["manifest.json", "kernel"]),
        (json.dumps({"schema_version": 99, "model": "m", "kernel": "k", "fingerprint": "x"}), ["schema_version 99"]),
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
