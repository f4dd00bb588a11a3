"""The versioned kernel store in the user's repo.

Layout (a contract, documented in the README)::

    kernels/<model id>/model.json                  model-level baselines per environment
    kernels/<model id>/<kernel name>/original.py   the compiler's kernel (candidate format) at the first accept
    kernels/<model id>/<kernel name>/v1.py, v2.py  accepted versions, never overwritten or renumbered
    kernels/<model id>/<kernel name>/manifest.json fingerprint, active version, evidence, provenance

Writes are atomic (temp file + rename); version numbers are allocated under an
exclusive lock and version files are created with O_EXCL, so concurrent accepts
into the same kernel get distinct versions and lose nothing. Nothing read from the
store is trusted as a result: the gate re-verifies every active version.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Iterator, Literal

from pydantic import Field

from .errors import StoreError
from .records import (
    SCHEMA_VERSION,
    ArgInfo,
    Environment,
    Record,
    SeedErrors,
    Timing,
    Verdict,
    dump_json,
    load_json,
)

MANIFEST = "manifest.json"
ORIGINAL = "original.py"
MODEL_RECORD = "model.json"


class Evidence(Record):
    """What the cascade measured when a version was accepted."""

    status: Literal["accepted", "correct"]
    speed_measured: bool
    model_timing: Timing | None = None
    kernel_timing: Timing | None = None
    errors: list[SeedErrors] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    environment: Environment | None = None


class Provenance(Record):
    """Who or what proposed a version."""

    proposed_by: str = "human"
    agent: str | None = None
    backend: str | None = None
    llm_model: str | None = None
    cost_usd: float | None = None
    tokens: int | None = None


class VersionRecord(Record):
    version: int
    file: str
    sha256: str
    created: datetime
    evidence: Evidence
    provenance: Provenance


class Manifest(Record):
    schema_version: int = SCHEMA_VERSION
    model: str
    kernel: str
    # Fingerprint of the compiler kernel the versions replace: when the compiler
    # generates something else, the stored versions are stale.
    fingerprint: str
    active: int | None = None
    args: list[ArgInfo] = Field(default_factory=list)
    environment: Environment | None = None
    versions: list[VersionRecord] = Field(default_factory=list)

    def version(self, number: int) -> VersionRecord:
        for v in self.versions:
            if v.version == number:
                return v
        raise StoreError(f"{self.model}/{self.kernel}: manifest names version {number}, which it does not record")


class ModelBaseline(Record):
    environment: Environment
    measured: datetime
    kernels: dict[str, int] = Field(default_factory=dict)  # kernel -> active version measured
    timing: Timing | None = None
    worst_error_vs_fp64: float | None = None


class ModelRecord(Record):
    schema_version: int = SCHEMA_VERSION
    model: str
    baselines: dict[str, ModelBaseline] = Field(default_factory=dict)


def environment_key(env: Environment) -> str:
    """Baselines are kept per GPU and software stack."""
    return f"{env.gpu or env.device}|torch {env.torch}|triton {env.triton}"


def atomic_write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise


class KernelStore:
    """``kernels/`` of one repo."""

    def __init__(self, root: Path):
        self.root = Path(root)

    def kernel_dir(self, model: str, kernel: str) -> Path:
        return self.root / model / kernel

    def manifest(self, model: str, kernel: str) -> Manifest | None:
        """The manifest, None when nothing is committed; a broken one raises StoreError naming the file."""
        path = self.kernel_dir(model, kernel) / MANIFEST
        if not path.exists():
            return None
        manifest = load_json(Manifest, path)
        if (manifest.model, manifest.kernel) != (model, kernel):
            raise StoreError(f"{path}: records {manifest.model}/{manifest.kernel}, not {model}/{kernel}")
        return manifest

    def active_file(self, model: str, kernel: str) -> tuple[Manifest, Path] | None:
        manifest = self.manifest(model, kernel)
        if manifest is None or manifest.active is None:
            return None
        record = manifest.version(manifest.active)
        path = self.kernel_dir(model, kernel) / record.file
        if not path.is_file():
            raise StoreError(f"{path}: active version file is missing")
        return manifest, path

    @contextlib.contextmanager
    def _locked(self, folder: Path) -> Iterator[None]:
        # Lock the folder itself (Linux/macOS allow flock on a directory) so that no
        # lock file ends up in the user's repo.
        folder.mkdir(parents=True, exist_ok=True)
        fd = os.open(folder, os.O_RDONLY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            fcntl.flock(fd, fcntl.LOCK_UN)
            os.close(fd)

    def add_version(
        self, *, model: str, kernel: str, fingerprint: str, args: list[ArgInfo], original_source: str, source: str,
        evidence: Evidence, provenance: Provenance, environment: Environment | None,
    ) -> VersionRecord:
        """Store ``source`` as the next version and make it active."""
        import hashlib

        folder = self.kernel_dir(model, kernel)
        with self._locked(folder):
            manifest = self.manifest(model, kernel)
            if manifest is None:
                manifest = Manifest(model=model, kernel=kernel, fingerprint=fingerprint, args=args)
            if manifest.fingerprint != fingerprint:
                # The compiler kernel changed since the stored versions were accepted:
                # they replace something that no longer exists. Start over from the new one.
                manifest.fingerprint, manifest.args = fingerprint, args
                atomic_write(folder / ORIGINAL, original_source)
            if not (folder / ORIGINAL).exists():
                atomic_write(folder / ORIGINAL, original_source)
            number = max([v.version for v in manifest.versions] + [0]) + 1
            while True:  # O_EXCL: a version file is never overwritten, even by a hand-made one
                path = folder / f"v{number}.py"
                try:
                    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
                    break
                except FileExistsError:
                    number += 1
            with os.fdopen(fd, "w") as f:
                f.write(source)
            record = VersionRecord(
                version=number, file=path.name, sha256=hashlib.sha256(source.encode()).hexdigest(),
                created=datetime.now(timezone.utc), evidence=evidence, provenance=provenance,
            )
            manifest.versions.append(record)
            manifest.active = number
            manifest.environment = environment
            atomic_write(folder / MANIFEST, dump_json(manifest))
        return record

    def model_record(self, model: str) -> ModelRecord:
        path = self.root / model / MODEL_RECORD
        return load_json(ModelRecord, path) if path.exists() else ModelRecord(model=model)

    def save_baseline(self, model: str, baseline: ModelBaseline) -> None:
        folder = self.root / model
        with self._locked(folder):
            record = self.model_record(model)
            record.baselines[environment_key(baseline.environment)] = baseline
            atomic_write(folder / MODEL_RECORD, dump_json(record))


def accept_verdict(
    problem: Path, kernel: str, candidate: Path, verdict: Verdict, *, allow_no_gain: bool = False,
    proposed_by: str = "human", provenance: Provenance | None = None, kernels_dir: Path | None = None,
) -> tuple[VersionRecord | None, str]:
    """Store a verified candidate; returns (record or None, one line for the user)."""
    from .candidate import render_dump
    from .cascade import sha256
    from .config import load_config
    from .problem import load_problem

    if verdict.status == "rejected":
        return None, "not stored: rejected"
    if verdict.speed_measured and verdict.status != "accepted" and not allow_no_gain:
        return None, "not stored: correct but not faster beyond noise (use --allow-no-gain to store it anyway)"
    store = KernelStore(kernels_dir or load_config().kernels_path)
    loaded = load_problem(problem)
    info = verdict._kernel_info
    if info is None:
        raise StoreError(f"{problem}: the verdict carries no kernel record for {kernel}; not stored")
    evidence = Evidence(
        status="accepted" if verdict.status == "accepted" else "correct", speed_measured=verdict.speed_measured,
        model_timing=verdict.model_timing, kernel_timing=verdict.kernel_timing, errors=verdict.errors,
        seeds=verdict.seeds, environment=verdict.environment,
    )
    source = Path(candidate).read_text()
    if sha256(source) != verdict.candidate_sha256:
        raise StoreError(f"{candidate}: changed while it was being verified; not stored")
    record = store.add_version(
        model=loaded.id, kernel=kernel, fingerprint=info.fingerprint, args=info.args,
        original_source=render_dump(info, loaded.id), source=source, evidence=evidence,
        provenance=provenance or Provenance(proposed_by=proposed_by), environment=verdict.environment,
    )
    if verdict.environment is not None:
        worst = max((e.candidate_vs_fp64 or 0.0 for e in verdict.errors), default=None)
        store.save_baseline(loaded.id, ModelBaseline(
            environment=verdict.environment, measured=record.created, kernels={kernel: record.version},
            timing=verdict.model_timing, worst_error_vs_fp64=worst,
        ))
    where = store.kernel_dir(loaded.id, kernel) / record.file
    return record, f"stored as {where} (active)"
