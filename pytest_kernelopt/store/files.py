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
from ..records import parse_json, record_kind
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


# The largest manifest or model.json read (a manifest with hundreds of versions and their launches is well under).
RECORD_BYTES = 16 << 20


def read_plain(path: Path, limit: int, what: str) -> bytes:
    """The bytes of ``path``, a regular file of at most ``limit`` bytes; anything else is a StoreError naming it.

    A store is data from a repository: a symbolic link (git stores them; to /dev/zero it would be read until memory
    runs out), a FIFO (it would block) or a device is refused, not followed, and no more than ``limit`` + 1 bytes are
    ever read. FileNotFoundError passes through."""
    import stat

    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except FileNotFoundError:
        raise
    except OSError as exc:
        if os.path.islink(path):
            raise StoreError(f"{path}: {what} is a symbolic link; a kernel store holds plain files") from exc
        raise StoreError(f"{path}: cannot read {what} ({why(exc)})") from exc
    with os.fdopen(fd, "rb") as f:
        if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
            raise StoreError(f"{path}: {what} is not a regular file; a kernel store holds plain files")
        data = f.read(limit + 1)
    if len(data) > limit:
        from ..verify.limits import human_bytes

        raise StoreError(f"{path}: {what} is over the {human_bytes(limit)} a store file may hold; not read")
    return data


def load_record(cls: type[_R], path: Path) -> _R:
    """A manifest or model.json from ``path`` (:func:`read_plain`: a regular file, bounded); a broken one, one that
    is not UTF-8, or a schema this version does not read is a StoreError naming it."""
    try:
        text = read_plain(path, RECORD_BYTES, record_kind(cls)).decode("utf-8")
    except FileNotFoundError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from exc
    except UnicodeDecodeError as exc:
        raise StoreError(f"{path}: invalid {record_kind(cls)} (not UTF-8 text)") from exc
    return parse_json(cls, text, path)
