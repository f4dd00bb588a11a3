"""Git operations for publishing, through GitPython (imported only when publishing).

Commits are built without a checkout: blobs are written to the object database, a
tree is assembled in a temporary index file (``GIT_INDEX_FILE``) starting from the
base commit, and ``commit-tree`` makes the commit. The user's working tree, index,
HEAD and other branches are never touched; the only refs written are
``refs/heads/kernelopt/<model>/<kernel>`` (locally, when it is ours and not checked
out), its remote-tracking ref, and the remote branch of that name (pushed with a
lease on the tip we inspected).

Our commits carry the trailers ``Kernelopt-Run: <run id>`` and
``Kernelopt-Kernel: <model>/<kernel>``; a branch is ours to replace only while every
commit on it that is not on the base branch carries them.
"""

from __future__ import annotations

import re
import tempfile
from dataclasses import dataclass
from io import BytesIO
from pathlib import Path, PurePosixPath
from typing import Any

from ..errors import install_hint
from .errors import PublishError, RefusedError
from .github import redact

BRANCH_PREFIX = "kernelopt"
RUN_TRAILER = "Kernelopt-Run"
KERNEL_TRAILER = "Kernelopt-Kernel"
# Used only when git has no identity configured (a CI runner, a fresh container).
FALLBACK_IDENTITY = ("kernelopt", "kernelopt@localhost")


def branch_name(model: str, kernel: str) -> str:
    return f"{BRANCH_PREFIX}/{model}/{kernel}"


def trailers(message: str) -> dict[str, str]:
    """``Key: value`` lines of the message's last paragraph."""
    last = message.strip().split("\n\n")[-1]
    found = {}
    for line in last.splitlines():
        match = re.match(r"^([A-Za-z0-9-]+):\s*(.+?)\s*$", line)
        if match:
            found[match[1]] = match[2]
    return found


def is_ours(message: str, model: str, kernel: str) -> bool:
    marks = trailers(message)
    return RUN_TRAILER in marks and marks.get(KERNEL_TRAILER) == f"{model}/{kernel}"


@dataclass(frozen=True)
class Foreign:
    """A commit on a branch that kernelopt did not make."""

    sha: str
    summary: str
    author: str

    def describe(self) -> str:
        return f"{self.sha[:10]} \"{self.summary}\" by {self.author}"


class Repository:
    """The user's repository and one of its remotes."""

    def __init__(self, path: Path, remote: str = "origin"):
        try:
            import git
        except ImportError:
            raise PublishError(f"publishing branches needs GitPython: {install_hint('pr')}") from None
        self._git = git
        try:
            self.repo = git.Repo(Path(path), search_parent_directories=True)
        except (git.InvalidGitRepositoryError, git.NoSuchPathError):
            raise PublishError(f"{path}: not inside a git repository") from None
        if self.repo.bare or self.repo.working_tree_dir is None:
            raise PublishError(f"{path}: a bare repository (publishing reads the files a run wrote into a working tree)")
        self.top = Path(self.repo.working_tree_dir).resolve()
        names = [r.name for r in self.repo.remotes]
        if remote not in names:
            raise PublishError(f"{self.top}: no git remote named {remote!r}"
                               f"{f' (remotes: {chr(44).join(names)})' if names else ' (the repository has none)'}")
        self.remote = remote

    # --- plumbing ----------------------------------------------------------------------

    def git(self, *args: str, env: dict[str, str] | None = None, stdin: bytes | None = None) -> str:
        """Run git in the repository; a failure is one PublishError line with git's own message."""
        try:
            return self.repo.git.execute(["git", *args], env=env, with_extended_output=False)
        except self._git.GitCommandError as exc:
            raise PublishError(f"git {args[0]} failed: {redact(_why(exc))}") from None

    def remote_url(self) -> str:
        """The remote's URL as configured (not rewritten by ``url.*.insteadOf``)."""
        return str(self.repo.remote(self.remote).url)

    def default_branch(self) -> str:
        """The remote's default branch (its HEAD), else the branch checked out here."""
        try:
            out = self.git("ls-remote", "--symref", self.remote, "HEAD")
        except PublishError:
            out = ""
        match = re.search(r"^ref: refs/heads/(\S+)\s+HEAD", out, re.M)
        if match:
            return match[1]
        if not self.repo.head.is_detached:
            return self.repo.active_branch.name
        raise PublishError(f"cannot tell the base branch: {self.remote} names no default branch and HEAD is detached "
                           f"(pass base=...)")

    def remote_tip(self, branch: str) -> str | None:
        """The commit ``branch`` points to on the remote (None: no such branch), fetched into
        ``refs/remotes/<remote>/<branch>`` so that it can be read here."""
        out = self.git("ls-remote", "--heads", self.remote, f"refs/heads/{branch}")
        sha = next((line.split()[0] for line in out.splitlines() if line.endswith(f"\trefs/heads/{branch}")), None)
        if sha is not None:
            self.git("fetch", "--no-tags", "--quiet", self.remote,
                     f"+refs/heads/{branch}:refs/remotes/{self.remote}/{branch}")
        return sha

    def local_tip(self, branch: str) -> str | None:
        try:
            return self.git("rev-parse", "--verify", "--quiet", f"refs/heads/{branch}^{{commit}}").strip() or None
        except PublishError:
            return None

    def checked_out(self, branch: str) -> bool:
        """Whether any worktree of this repository has ``branch`` checked out."""
        out = self.git("worktree", "list", "--porcelain")
        return f"branch refs/heads/{branch}" in out.splitlines()

    def read(self, commit: str, path: str) -> bytes | None:
        """The file ``path`` (relative to the top) in ``commit``; None when it has none."""
        try:
            tree = self.repo.commit(commit).tree
            return tree[path].data_stream.read()
        except (KeyError, ValueError, self._git.BadName):
            return None

    def head_commit(self) -> str | None:
        try:
            return self.repo.head.commit.hexsha
        except ValueError:  # a repository without commits
            return None

    def dirty(self, paths: list[str]) -> dict[str, str]:
        """Of ``paths`` (relative to the top), those with uncommitted changes: path -> porcelain status
        (``??`` untracked, `` M`` modified, ``A `` staged new, ``D`` deleted ...)."""
        if not paths:
            return {}
        out = self.git("status", "--porcelain=v1", "-z", "--untracked-files=all", "--", *paths)
        found: dict[str, str] = {}
        entries = out.split("\0")
        i = 0
        while i < len(entries):
            entry = entries[i]
            i += 1
            if len(entry) < 4:
                continue
            code, path = entry[:2], entry[3:]
            found[path] = code
            if code[0] in "RC":  # renames and copies name the source next
                i += 1
        return found

    def foreign_commits(self, base: str, tip: str, model: str, kernel: str) -> list[Foreign]:
        """Commits in ``base..tip`` that kernelopt did not make for this kernel, newest first."""
        foreign = []
        for commit in self.repo.iter_commits(f"{base}..{tip}"):
            if not is_ours(commit.message if isinstance(commit.message, str) else "", model, kernel):
                foreign.append(Foreign(commit.hexsha, commit.summary if isinstance(commit.summary, str) else "",
                                       f"{commit.author.name} <{commit.author.email}>"))
        return foreign

    def tree_of(self, commit: str) -> str:
        return self.repo.commit(commit).tree.hexsha

    def parents_of(self, commit: str) -> list[str]:
        return [p.hexsha for p in self.repo.commit(commit).parents]

    def _identity(self) -> dict[str, str]:
        """Environment for commit-tree: git's own identity when one is configured, else ours.

        Asked of git itself (``git var``), not read with GitPython's config reader: that one reads
        ``~/.gitconfig`` even where git does not (``GIT_CONFIG_GLOBAL``), so a runner could pass the
        check and then fail in commit-tree with "unable to auto-detect email address"."""
        try:
            for ident in ("GIT_AUTHOR_IDENT", "GIT_COMMITTER_IDENT"):
                self.repo.git.execute(["git", "var", ident])
            return {}
        except self._git.GitCommandError:
            pass
        name, mail = FALLBACK_IDENTITY
        return {"GIT_AUTHOR_NAME": name, "GIT_AUTHOR_EMAIL": mail, "GIT_COMMITTER_NAME": name,
                "GIT_COMMITTER_EMAIL": mail}

    def build_commit(self, base: str, files: dict[str, bytes], message: str) -> str:
        """A commit whose parent is ``base`` and whose tree is ``base``'s with ``files`` (path relative to the
        top -> bytes) written in; nothing outside the object database changes."""
        from gitdb import IStream

        with tempfile.TemporaryDirectory(prefix="kernelopt-index-") as tmp:
            env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **self._identity()}
            self.git("read-tree", base, env=env)
            for path, data in sorted(files.items()):
                posix = PurePosixPath(path)
                if posix.is_absolute() or ".." in posix.parts:
                    raise PublishError(f"refusing to write {path}: outside the repository")
                blob = self.repo.odb.store(IStream("blob", len(data), BytesIO(data))).hexsha
                blob = blob.decode("ascii") if isinstance(blob, bytes) else blob  # gitdb gives bytes
                self.git("update-index", "--add", "--cacheinfo", f"100644,{blob},{posix}", env=env)
            tree = self.git("write-tree", env=env).strip()
            with tempfile.NamedTemporaryFile("w", encoding="utf-8", suffix=".txt", dir=tmp, delete=False) as f:
                f.write(message)
            return self.git("commit-tree", tree, "-p", base, "-F", f.name, env=env).strip()

    def push(self, commit: str, branch: str, expect: str | None) -> None:
        """Set the remote's ``branch`` to ``commit``, only if it is still at ``expect`` (None: absent)."""
        self.git("push", "--quiet", "--no-verify", f"--force-with-lease=refs/heads/{branch}:{expect or ''}",
                 self.remote, f"{commit}:refs/heads/{branch}")

    def set_local(self, branch: str, commit: str, expect: str | None) -> None:
        """Point the local ``branch`` at ``commit`` if it is still at ``expect`` (None: absent)."""
        self.git("update-ref", "-m", "kernelopt publish", f"refs/heads/{branch}", commit, expect or "0" * 40)

    def check_ref_name(self, branch: str) -> None:
        try:
            self.git("check-ref-format", "--branch", branch)
        except PublishError:
            raise RefusedError(f"{branch!r} is not a valid git branch name") from None


def _why(exc: Any) -> str:
    """The informative line of git's stderr: a push's ``! [rejected] ...``, else the first ``fatal:``/``error:``."""
    text = str(exc.stderr or "").strip()
    text = text.removeprefix("stderr:").strip().removeprefix("'").removesuffix("'")  # GitPython's wrapping
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    for prefix in ("! ", "fatal:", "error:"):
        found = next((line for line in lines if line.startswith(prefix)), None)
        if found:
            return found
    return lines[-1] if lines else f"exit status {exc.status}"


def describe_foreign(where: str, branch: str, foreign: list[Any]) -> str:
    shown = "; ".join(f.describe() for f in foreign[:3]) + ("; ..." if len(foreign) > 3 else "")
    return (f"{where} branch {branch} has {len(foreign)} commit(s) kernelopt did not make ({shown}): not overwritten; "
            f"merge or delete that branch, then publish again")
