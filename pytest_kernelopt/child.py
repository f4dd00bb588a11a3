"""Child processes: the one way this package starts another process.

A child runs in a session of its own (its whole process group can be killed, with
whatever it started), with this package importable even from a checkout that is not
installed, its stdin closed and its output written to a file, of which the parent
reads only the last :data:`OUTPUT_TAIL_BYTES` (a child may print gigabytes): what it
keeps and how many bytes it dropped before them is an :class:`Output`. Text relayed
from a child is cut to a bounded length (:func:`clip`).

Users: the verifier's worker and the static checker (:mod:`.verify.worker`, which add
the sandbox's prefix, the protocol pipes and resource limits: :mod:`.verify.sandbox`),
``kernelopt bench`` (one child per problem, :mod:`.benchmark.run`), ``tune --workers``
(:mod:`.agents.multi_gpu`), the harvest of Inductor's compiles and Nsight Compute
(:mod:`.agents.harvest`, :mod:`.agents.profiler`), the FLOP ceiling's measurement
(:mod:`.measure.roofline`), the sandbox's probe and the ``nvidia-smi`` queries.
:func:`run_child` is the blocking form (start, wait under a time limit, kill the group,
keep the output's tail); :func:`run_children` runs several so, a bounded number at a time. Git alone runs otherwise (gitpython, or ``git`` whose output is
a file at a revision, read whole on purpose). Standard library only: the static
checker's process (``python -S``) imports this.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

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


def shape_flag(shape: str | None) -> list[str]:
    """A child's argument naming a declared shape (``--shape=NAME``; none for the problem's first)."""
    return [f"--shape={shape}"] if shape else []


def pop_shape(args: list[str]) -> str | None:
    """The declared shape :func:`shape_flag` put first in a child's ``args``, removed from them (None: none)."""
    return args.pop(0).removeprefix("--shape=") if args and args[0].startswith("--shape=") else None


def start_child(argv: Sequence[str], *, env: dict[str, str], output: Path, cwd: str | os.PathLike[str] | None = None,
                stdout_pipe: bool = False, stdout_file: str | os.PathLike[str] | None = None,
                pass_fds: Sequence[int] = (), preexec_fn: Callable[[], None] | None = None) -> subprocess.Popen[bytes]:
    """Start ``argv`` in a new session, stdin closed, stderr into ``output``; stdout into ``output`` too, or
    a pipe (``stdout_pipe``), or a file of its own (``stdout_file``; ``os.devnull`` discards it)."""
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        # An ignored signal stays ignored across exec: a parent started with SIGINT ignored (`nohup`, a
        # background job of a shell without job control, some test runners' workers) would start children
        # that never get the Ctrl-C :func:`interrupt_group` passes on, and never save their records.
        preexec_fn = _with_default_sigint(preexec_fn)
    with contextlib.ExitStack() as files:
        out = files.enter_context(open(output, "wb"))
        stdout: Any = subprocess.PIPE if stdout_pipe else out
        if stdout_file is not None and not stdout_pipe:
            stdout = files.enter_context(open(stdout_file, "wb"))
        return subprocess.Popen(
            list(argv), stdin=subprocess.DEVNULL, stdout=stdout, stderr=out,
            env=env, cwd=cwd, pass_fds=tuple(pass_fds), start_new_session=True, preexec_fn=preexec_fn,
        )


def _with_default_sigint(then: Callable[[], None] | None) -> Callable[[], None]:
    def preexec() -> None:
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        if then is not None:
            then()
    return preexec


def interrupt_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGINT to the child's process group: in a session of its own, a child does not get the
    terminal's Ctrl-C, so a parent that wants it to stop cleanly (save its records) passes it on."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGINT)


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


@dataclass(frozen=True)
class Output:
    """What the parent kept of one output file of a child: its last bytes (decoded), and how many
    bytes the child wrote before them (dropped, never read)."""

    text: str = ""
    dropped: int = 0

    def last_lines(self, lines: int = 3) -> str:
        """The last non-empty lines, each clipped, joined with " | " (at most 600 characters)."""
        kept = [ln for ln in self.text.splitlines() if ln.strip()]
        return " | ".join(clip(ln, 200) for ln in kept[-lines:])[-600:]


def read_tail(path: str | os.PathLike[str], limit: int = OUTPUT_TAIL_BYTES) -> Output:
    """The last ``limit`` bytes of a child's output file and the count of those before them: never
    more than ``limit`` bytes in memory, however much the child wrote. Empty when unreadable."""
    try:
        with open(path, "rb") as f:
            size = f.seek(0, os.SEEK_END)
            f.seek(max(0, size - limit))
            data = f.read(limit)
    except OSError:
        return Output()
    return Output(data.decode(errors="replace"), max(0, size - len(data)))


def tail_lines(path: str | os.PathLike[str], lines: int = 3) -> str:
    """The last non-empty lines of a child's output file, joined with " | ", read from the
    file's last :data:`OUTPUT_TAIL_BYTES` only (a child may have printed gigabytes)."""
    return read_tail(path).last_lines(lines)


@dataclass(frozen=True)
class ChildRun:
    """How a :func:`run_child` ended: its exit status (None: killed at the time limit), the last
    lines of its output (stdout and stderr together, or stderr alone when stdout was kept apart),
    that output's kept tail, and stdout's when it was kept apart; how long it ran (:func:`run_children`
    fills it), and whether it was started at all (one not started before its time ran out was not)."""

    returncode: int | None
    output_tail: str
    output: Output = Output()
    stdout: Output | None = None
    seconds: float = 0.0
    started: bool = True

    @property
    def timed_out(self) -> bool:
        return self.returncode is None


def run_child(argv: Sequence[str], *, env: dict[str, str], timeout: float, cwd: str | os.PathLike[str] | None = None,
              lines: int = 3, keep: int = OUTPUT_TAIL_BYTES, separate_stdout: bool = False) -> ChildRun:
    """Run ``argv`` to its end or ``timeout`` seconds, whichever comes first; its process group is
    killed either way (nothing it started outlives it) and only its output's last ``keep`` bytes
    are read (``separate_stdout``: stdout's apart from stderr's, each up to ``keep``)."""
    with tempfile.TemporaryDirectory(prefix="kernelopt-child-") as folder:
        output, stdout = Path(folder) / "output.txt", Path(folder) / "stdout.txt"
        proc = start_child(argv, env=env, output=output, cwd=cwd, stdout_file=stdout if separate_stdout else None)
        try:
            code: int | None = proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            code = None
        finally:
            kill_group(proc)
        kept = read_tail(output, keep)
        return ChildRun(code, kept.last_lines(lines), kept, read_tail(stdout, keep) if separate_stdout else None)


def run_children(commands: Sequence[Sequence[str]], *, env: dict[str, str], timeout: float, jobs: int,
                 cwd: str | os.PathLike[str] | None = None, lines: int = 3, keep: int = OUTPUT_TAIL_BYTES,
                 poll: float = 0.05) -> list[ChildRun]:
    """Run ``commands``, at most ``jobs`` at a time, started in their order; one :class:`ChildRun` each, in
    that order. ``timeout`` bounds the whole: a child still running then is killed (``timed_out``), one not
    started by then never is (``started`` false). Each child's process group is killed when it ends, and
    every running one's when this returns or raises (Ctrl-C, :class:`~.errors.Terminated`): none outlives it."""
    if jobs < 1:
        raise ValueError(f"jobs must be at least 1, not {jobs}")
    deadline = time.monotonic() + timeout
    done: list[ChildRun | None] = [None] * len(commands)
    running: dict[int, tuple[subprocess.Popen[bytes], float]] = {}
    pending = list(range(len(commands)))
    with tempfile.TemporaryDirectory(prefix="kernelopt-children-") as folder:
        outputs = [Path(folder) / f"output-{i}.txt" for i in range(len(commands))]
        try:
            while pending or running:
                while pending and len(running) < jobs and time.monotonic() < deadline:
                    i = pending.pop(0)
                    running[i] = (start_child(commands[i], env=env, output=outputs[i], cwd=cwd), time.monotonic())
                if time.monotonic() >= deadline:
                    for i in pending:
                        done[i] = ChildRun(None, f"not started: the {timeout:g} s had run out", started=False)
                    pending.clear()
                for i, (proc, began) in list(running.items()):
                    code = proc.poll()
                    if code is None and time.monotonic() < deadline:
                        continue
                    kill_group(proc)  # what it started goes with it (and a child at the deadline is killed)
                    kept = read_tail(outputs[i], keep)
                    done[i] = ChildRun(code, kept.last_lines(lines), kept, seconds=round(time.monotonic() - began, 2))
                    del running[i]
                if running:
                    time.sleep(max(0.0, min(poll, deadline - time.monotonic())))
        finally:
            for proc, _ in running.values():
                kill_group(proc)
    finished = [run for run in done if run is not None]
    assert len(finished) == len(commands), "every command ends in a ChildRun"
    return finished
