"""The gate's history file as git sees it: this checkout's commit and repository address
appended to the file :mod:`pytest_kernelopt.report.history` reads and draws."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from ..report.history import KEEP, TOOL, Commit, Entry, benches, read_history, suite_name
from ..store import atomic_write
from .github import parse_remote


def _git(root: Path, *args: str) -> str | None:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    return out.stdout.strip() if out.returncode == 0 else None


def repo_url(root: Path) -> str:
    """The repository's web address: GitHub Actions' variables, else the ``origin`` remote's (empty: unknown)."""
    server, slug = os.environ.get("GITHUB_SERVER_URL"), os.environ.get("GITHUB_REPOSITORY")
    if server and slug:
        return f"{server.rstrip('/')}/{slug}"
    remote = _git(root, "remote", "get-url", "origin")
    ref = parse_remote(remote) if remote else None
    return f"{ref.web}/{ref.slug}" if ref is not None else ""


def head_commit(root: Path, url: str) -> Commit:
    """The commit the run checked (``HEAD`` of the repository at ``root``); "unknown" outside git."""
    found = _git(root, "log", "-1", "--format=%H%n%cI%n%s")
    if not found:
        return Commit(id="unknown", message="not a git checkout")
    sha, timestamp, *subject = found.splitlines() + [""]
    return Commit(id=sha, message=subject[0] if subject else "", timestamp=timestamp,
                  url=f"{url}/commit/{sha}" if url else "")


def append_history(result: Any, path: Path, root: Path, *, keep: int = KEEP) -> str:
    """Append the gate ``result``'s model times to the history file ``path`` (commit: ``HEAD`` at ``root``);
    returns what was done. A file that cannot be read is a UsageError and stays as it is."""
    history = read_history(path)
    rows = benches(result)
    if not rows:
        return f"kernelopt: history {path}: no model was timed in this run (interpreter mode?): nothing appended"
    url = history.repoUrl or repo_url(root)
    now = int(datetime.now(timezone.utc).timestamp() * 1000)
    suite = suite_name(result)
    entries = history.entries.setdefault(suite, [])
    entries.append(Entry(commit=head_commit(root, url), date=now, tool=TOOL, benches=rows))
    del entries[:-keep]
    history.lastUpdate, history.repoUrl = now, url
    atomic_write(Path(path), json.dumps(history.model_dump(mode="json", exclude_none=True), indent=2) + "\n")
    return f"kernelopt: history {path}: {len(rows)} model time(s) appended to {suite!r} ({len(entries)} entries)"
