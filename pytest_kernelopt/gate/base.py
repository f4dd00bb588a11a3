"""``--kernelopt-base-ref REF``: the git revision each model is also compared with.

The revision is resolved to a commit once, when pytest configures (a bad one is a
UsageError); each model item then reads its problem file at that commit and writes it
to a temporary folder for the verifier, which compiles and times both side by side.
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


@contextmanager
def base_file(name: str, text: bytes | None) -> Iterator[str | None]:
    """The base revision's problem file in a temporary folder, removed when the check ends, however it ends."""
    if text is None:
        yield None
        return
    with tempfile.TemporaryDirectory(prefix="kernelopt-base-") as folder:
        target = Path(folder) / name
        target.write_bytes(text)
        yield str(target)


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
