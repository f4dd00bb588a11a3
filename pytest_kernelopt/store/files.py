"""Writing and reading the store's files: atomically (a temp file and a rename), exclusively
(a version file is created once, never overwritten), and read back as a typed record; every
failure is a :class:`~pytest_kernelopt.errors.StoreError` naming the file.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import TypeVar

from ..errors import StoreError
from ..records import load_json, record_kind
from .manifest import Manifest, ModelRecord


def why(exc: OSError) -> str:
    return exc.strerror or str(exc)


def atomic_write(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temp file and a rename; any failure is a StoreError naming ``path``
    and leaves neither a temp file nor a partly written ``path``."""
    tmp: str | None = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
        os.fchmod(fd, 0o644)  # mkstemp's 0600 would keep a serving process of another user out
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
        tmp = None
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {why(exc)}") from exc
    finally:
        if tmp is not None:
            with contextlib.suppress(OSError):
                os.unlink(tmp)


def create_exclusive(path: Path, text: str) -> None:
    """Create ``path`` holding ``text``; FileExistsError if it exists, StoreError on any other failure
    (and then ``path`` is removed again)."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise
    except OSError as exc:
        raise StoreError(f"cannot write {path}: {why(exc)}") from exc
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(text.encode("utf-8"))
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.unlink(path)
        raise StoreError(f"cannot write {path}: {why(exc)}") from exc


_R = TypeVar("_R", Manifest, ModelRecord)


def load_record(cls: type[_R], path: Path) -> _R:
    """load_json, plus: a file that is not UTF-8 is a StoreError naming it too."""
    try:
        return load_json(cls, path)
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: invalid {record_kind(cls)} (not UTF-8 text)") from exc
