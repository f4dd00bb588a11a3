"""``--kernelopt-base-ref REF``: the git revision each model is also compared with.

The revision is resolved to a commit once, when pytest configures (a bad one is a
UsageError). Each model item then reads, at that commit, its problem file and its kernel
store folder (``<kernels_dir>/<model>/``: the committed versions and ``model.json``) and
writes both to a temporary folder for the verifier, which compiles the base as production
at that commit ran it (``verify/base.py``) and times it side by side with the head.
"""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import UsageError
from .failure import GateFailure


class BaseRef:
    """A resolved ``--kernelopt-base-ref``: the name the user gave, its commit, the repository's top folder."""

    def __init__(self, ref: str, rootpath: Path):
        self.ref = ref
        self.commit, self.git_top = _resolve(ref, rootpath)

    def text(self, problem_path: Path) -> bytes | None:
        """The problem file's bytes at the base commit; None when it did not exist there."""
        try:
            rel = problem_path.relative_to(self.git_top).as_posix()
        except ValueError:
            raise GateFailure(f"{problem_path}: outside the git repository {self.git_top}, "
                              f"so it cannot be compared with {self.ref}") from None
        spec = f"{self.commit}:{rel}"
        if subprocess.run(["git", "cat-file", "-e", spec], cwd=self.git_top, capture_output=True).returncode != 0:
            return None
        shown = subprocess.run(["git", "show", spec], cwd=self.git_top, capture_output=True)
        if shown.returncode != 0:
            why = shown.stderr.decode(errors="replace").strip()
            raise GateFailure(f"{rel} at {self.ref}: git show failed: {why}")
        return shown.stdout

    def store_relative(self, kernels_root: Path) -> str | None:
        """The kernel store's folder relative to the repository's top (None: the store is outside it)."""
        try:
            return Path(kernels_root).resolve().relative_to(self.git_top).as_posix()
        except ValueError:
            return None

    def store_files(self, store: str, model: str) -> dict[tuple[str, ...], bytes]:
        """The files of ``<store>/<model>/`` at the base commit, by path inside that folder (empty: nothing there).

        Read from git's objects (``ls-tree``, ``cat-file``), not through ``git archive``: no export
        attributes can drop or rewrite a file, so the bytes are those committed (their sha256 is what
        the manifest records). Symbolic links and submodules are left out (the store holds neither);
        a path that is not a plain relative one is refused.
        """
        folder = f"{store}/{model}" if store not in ("", ".") else model
        listed = self._git("ls-tree", "-r", "-z", self.commit, "--", f"{folder}/", what=f"{folder}/ at {self.ref}")
        entries: list[tuple[tuple[str, ...], str]] = []
        for entry in listed.split(b"\0"):
            if not entry:
                continue
            meta, _, raw = entry.partition(b"\t")
            mode, kind, sha = meta.decode().split()
            name = raw.decode("utf-8", errors="surrogateescape")
            if kind != "blob" or mode == "120000" or not name.startswith(f"{folder}/"):
                continue
            parts = tuple(name[len(folder) + 1:].split("/"))
            if any(p in ("", ".", "..") for p in parts):
                raise GateFailure(f"{name} at {self.ref}: not a plain path inside {folder}/; the base's kernels "
                                  "cannot be read")
            entries.append((parts, sha))
        if not entries:
            return {}
        batch = self._git("cat-file", "--batch", what=f"{folder}/ at {self.ref}",
                          stdin=b"".join(f"{sha}\n".encode() for _, sha in entries))
        files: dict[tuple[str, ...], bytes] = {}
        at = 0
        for parts, _sha in entries:  # "<sha> blob <size>\n<bytes>\n" per object, in order
            header_end = batch.index(b"\n", at)
            size = int(batch[at:header_end].split()[2])
            files[parts] = batch[header_end + 1:header_end + 1 + size]
            at = header_end + 1 + size + 1
        return files

    def _git(self, *args: str, what: str, stdin: bytes | None = None) -> bytes:
        done = subprocess.run(["git", *args], cwd=self.git_top, capture_output=True, input=stdin)
        if done.returncode != 0:
            why = done.stderr.decode(errors="replace").strip()
            raise GateFailure(f"{what}: git {args[0]} failed: {why}")
        return done.stdout


@contextmanager
def base_files(name: str, model: str, text: bytes | None,
               store: dict[tuple[str, ...], bytes] | None) -> Iterator[tuple[str | None, str | None]]:
    """The base revision's problem file and kernel store folder in a temporary folder, removed when the
    check ends, however it ends: (problem file, kernels dir holding ``<model>/``). (None, None): no
    problem file at the base; a kernels dir of None: nothing committed for the model there."""
    if text is None:
        yield None, None
        return
    with tempfile.TemporaryDirectory(prefix="kernelopt-base-") as folder:
        target = Path(folder) / name
        target.write_bytes(text)
        kernels = Path(folder) / "kernels"
        for parts, data in (store or {}).items():
            path = kernels.joinpath(model, *parts)
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
        yield str(target), str(kernels) if store else None


def _resolve(ref: str, rootpath: Path) -> tuple[str, Path]:
    """``ref`` to a commit of the git repository holding the rootdir, and that repository's top folder."""
    def git(*args: str) -> str | None:
        try:
            done = subprocess.run(["git", *args], cwd=rootpath, capture_output=True, text=True)
        except OSError as exc:
            raise UsageError(f"--kernelopt-base-ref {ref}: cannot run git ({exc.strerror})") from None
        return done.stdout.strip() if done.returncode == 0 else None

    top = git("rev-parse", "--show-toplevel")
    if top is None:
        raise UsageError(f"--kernelopt-base-ref {ref}: {rootpath} is not in a git repository")
    commit = git("rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    if commit is None:
        raise UsageError(f"--kernelopt-base-ref {ref}: no such commit in the git repository {top}")
    return commit, Path(top).resolve()
