"""Child processes: the one way this package starts ``python -m pytest_kernelopt.<module>``.

A child runs in a session of its own (its whole process group can be killed, with
whatever it started), with this package importable even from a checkout that is not
installed, its stdin closed and its output written to a file, of which the parent
reads only the last :data:`OUTPUT_TAIL_BYTES` (a child may print gigabytes). Text
relayed from a child is cut to a bounded length (:func:`clip`).

Users: the verifier's worker and the static checker (:mod:`.verify.worker`, which add
the sandbox's prefix, the protocol pipes and resource limits: :mod:`.verify.sandbox`)
and ``kernelopt bench`` (one child per problem, :mod:`.benchmark.run`). :func:`run_child`
is the blocking form (start, wait under a time limit, kill the group, keep the output's
tail). Standard library only: the static checker's process (``python -S``) imports this.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

KIB = 1 << 10
OUTPUT_TAIL_BYTES = 64 * KIB  # what the parent ever reads of a child's stdout/stderr
TEXT_CHARS = 2000             # a text relayed from a child (a verdict's reason, stage detail, error message)

# The package's folder's parent: put on PYTHONPATH so that children import this very copy.
_ROOT = str(Path(__file__).resolve().parents[1])

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)
_SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GITHUB_", "GH_", "AWS_", "GOOGLE_", "AZURE_", "HF_", "HUGGING", "GIT_ASKPASS", "SSH_")


def scrubbed_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}


def child_env(environ: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """``environ`` (default: this process's), with this package importable, unbuffered output, and ``extra``."""
    env = dict(os.environ if environ is None else environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in (_ROOT, env.get("PYTHONPATH", "")) if p)
    env["PYTHONUNBUFFERED"] = "1"
    env.update(extra)
    return env


def module_command(module: str, *args: str, site: bool = True) -> tuple[str, ...]:
    """``python [-S] -m module args...`` with this interpreter (``site=False``: no site-packages, faster)."""
    return (sys.executable, *(() if site else ("-S",)), "-m", module, *args)


def start_child(argv: Sequence[str], *, env: dict[str, str], output: Path, cwd: str | os.PathLike[str] | None = None,
                stdout_pipe: bool = False, pass_fds: Sequence[int] = (),
                preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdin closed, stderr (and stdout, unless ``stdout_pipe``) into ``output``."""
    with open(output, "wb") as out:
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE if stdout_pipe else out, stderr=out,
            env=env, cwd=cwd, pass_fds=tuple(pass_fds), start_new_session=True, preexec_fn=preexec_fn,
        )


def kill_group(proc: subprocess.Popen[bytes], timeout: float | None = None) -> None:
    """SIGKILL to the child's process group (the child and everything it started), then reap it:
    waits until it is gone, or at most ``timeout`` seconds (then errors waiting are ignored)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    if timeout is None:
        proc.wait()
        return
    with contextlib.suppress(Exception):
        proc.wait(timeout=timeout)


def clip(text: str, limit: int = TEXT_CHARS) -> str:
    """``text`` cut to ``limit`` characters, keeping its head and its tail (the cause is often last)."""
    if len(text) <= limit:
        return text
    left = max(0, limit - 40)
    head, tail = left // 2, left - left // 2
    return f"{text[:head]} ...[{len(text) - head - tail} characters cut]... {text[len(text) - tail:]}"


def tail_lines(path: str | os.PathLike[str], lines: int = 3) -> str:
    """The last non-empty lines of a child's output file, joined with " | ", read from the
    file's last :data:`OUTPUT_TAIL_BYTES` only (a child may have printed gigabytes)."""
    try:
        with open(path, "rb") as f:
            f.seek(max(0, f.seek(0, os.SEEK_END) - OUTPUT_TAIL_BYTES))
            data = f.read(OUTPUT_TAIL_BYTES)
    except OSError:
        return ""
    text = [ln for ln in data.decode(errors="replace").splitlines() if ln.strip()]
    return " | ".join(clip(ln, 200) for ln in text[-lines:])[-600:]


@dataclass(frozen=True)
class ChildRun:
    """How a :func:`run_child` ended: its exit status (None: killed at the time limit) and the
    last lines of its output (stdout and stderr together)."""

    returncode: int | None
    output_tail: str

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_child(argv: Sequence[str], *, env: dict[str, str], timeout: float, cwd: str | os.PathLike[str] | None = None,
              lines: int = 3) -> ChildRun:
    """Run ``argv`` to its end or ``timeout`` seconds, whichever comes first; its process group is
    killed either way (nothing it started outlives it) and only its output's last lines are kept."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-child-") as folder:
        output = Path(folder) / "output.txt"
        proc = start_child(argv, env=env, output=output, cwd=cwd)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc)
        return ChildRun(code, tail_lines(output, lines))
