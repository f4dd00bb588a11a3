"""The gate's failures as GitHub Actions annotations (``::error`` / ``::warning`` workflow commands).

Printed by the gate under GitHub Actions (``GITHUB_ACTIONS=true``), once per gate item at the
end of the run: a failed item is an error, a stale kernel that was skipped (allowed) a
warning. Each points at the file a reviewer fixes: the kernel's ``manifest.json`` when the
kernel is committed, else the problem file. GitHub reads a workflow command from a line of
the step's output, so its parts are escaped by GitHub's rules (``%``, CR and LF in the
message; also ``:`` and ``,`` in properties) and the message is one line: a reason written
by a candidate cannot end the command or start another.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from .untrusted import INLINE_LIMIT, plain


def escape_data(text: str) -> str:
    """A workflow command's message."""
    return text.replace("%", "%25").replace("\r", "%0D").replace("\n", "%0A")


def escape_property(text: str) -> str:
    """A workflow command's property value (``file=``, ``title=``)."""
    return escape_data(text).replace(":", "%3A").replace(",", "%2C")


def on_github_actions() -> bool:
    return os.environ.get("GITHUB_ACTIONS") == "true"


def one_line(message: str | None) -> str:
    """The reason of a failure on one line: for a traceback, its last ``E`` line (the exception), else the
    message's first non-blank line; control characters shown escaped, cut at a limit."""
    lines = [line for line in (message or "").splitlines() if line.strip()]
    errors = [line[1:].strip() for line in lines if line.startswith("E ")]
    text = errors[-1] if errors else (lines[0].strip() if lines else "no reason given")
    return plain(text, INLINE_LIMIT, lines=False).strip()


def command(level: str, file: str, title: str, message: str) -> str:
    return f"::{level} file={escape_property(file)},title={escape_property(title)}::{escape_data(message)}"


def annotation_lines(items: Iterable[Any], file_of: Callable[[Any], str]) -> list[str]:
    """One command per failed item (``error``) and per stale kernel skipped with a note (``warning``);
    ``items``: :class:`~pytest_kernelopt.runs.gate_result.ItemResult`; ``file_of(item)``: its file, from the
    repository's root."""
    lines = []
    seen: set[str] = set()
    for item in items:
        if item.nodeid in seen:
            continue
        if item.outcome == "failed":
            level = "error"
        elif item.status == "stale" or (item.outcome == "skipped" and "stale" in (item.message or "")):
            level = "warning"
        else:
            continue
        seen.add(item.nodeid)
        what = f"kernelopt {item.model}" + (f" / {item.kernel}" if item.kernel else "")
        lines.append(command(level, file_of(item), plain(what, INLINE_LIMIT, lines=False), one_line(item.message)))
    return lines


def repository_path(path: Path, root: Path) -> str:
    """``path`` as GitHub names files in annotations: from the checkout (``$GITHUB_WORKSPACE``), else
    from ``root``; as it is when under neither."""
    path = Path(path).resolve()
    for base in (os.environ.get("GITHUB_WORKSPACE"), root):
        if base and path.is_relative_to(Path(base).resolve()):
            return path.relative_to(Path(base).resolve()).as_posix()
    return path.as_posix()
