"""The versioned kernel store in the user's repo (``kernels/``; the layout is a contract, docs/store.md).

    kernel_store.py  KernelStore (reading, checking and adding versions) and accept_verdict
    manifest.py      the records on disk: manifest.json, model.json
    files.py         atomic and exclusive writes, typed reads
    recipe.py        how a stored version was made, replayed by ``kernelopt refresh``
    production.py    pytest_kernelopt.compile and the ``kernelopt`` torch.compile backend

This file only re-exports.
"""

from __future__ import annotations

from .files import atomic_write
from .kernel_store import AcceptOutcome, ActiveVersion, KernelStore, accept_verdict, baseline_key, model_baseline
from .manifest import (
    MANIFEST,
    MANIFEST_SCHEMA_VERSION,
    MODEL_RECORD,
    ORIGINAL,
    CompileChoice,
    Evidence,
    Manifest,
    ModelBaseline,
    ModelRecord,
    OriginalName,
    Provenance,
    Retirement,
    VersionRecord,
    environment_key,
    sha256_text,
    verified_elsewhere,
)
from .recipe import Recipe

__all__ = [
    "MANIFEST", "MANIFEST_SCHEMA_VERSION", "MODEL_RECORD", "ORIGINAL", "AcceptOutcome", "ActiveVersion", "CompileChoice",
    "Evidence",
    "KernelStore", "Manifest", "ModelBaseline", "ModelRecord", "OriginalName", "Provenance", "Recipe", "Retirement",
    "VersionRecord", "accept_verdict", "atomic_write", "baseline_key", "environment_key", "model_baseline",
    "sha256_text", "verified_elsewhere",
]
