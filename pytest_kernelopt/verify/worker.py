"""Isolation: candidate code runs in a worker process, never in the caller's.

The parent (:class:`WorkerProcess`) starts ``python -m pytest_kernelopt.verify.worker
IN OUT`` in the sandbox of :mod:`.sandbox` (Linux namespaces where the kernel allows:
no view of the parent's processes, environment or network, no way to signal it), in
a new session, in an empty temporary folder, with an environment that holds nothing
that looks like a credential, and talks to it over two pipes (:mod:`.protocol`). The
worker dies with its parent (``PR_SET_PDEATHSIG``); when a time limit runs out or the
session closes its process group is killed, and with it PID 1 of its namespace, so
every process it started dies too; its folder is removed. The worker side
(:func:`serve`) reads requests and hands them to :mod:`.pipeline`; it decides nothing
about the verdict, and inside the sandbox it kills whatever a candidate left running
after each check.

Everything the parent takes from a worker is bounded: one reply line (a longer one
breaks the protocol and kills the worker), the worker's output (a file of at most
:data:`FILE_BYTES`, like every file it writes, ``RLIMIT_FSIZE``; the parent reads its
last :data:`OUTPUT_TAIL_BYTES` only) and every text relayed into a verdict
(:func:`clip`). The same class starts the static checker's short-lived process
(:data:`STATIC_CHECKER`, :func:`serve_static`), which is why this module imports
neither pydantic nor the protocol at module level: that process should start fast.
Starting, killing and reading a child's output are :mod:`pytest_kernelopt.child`'s,
shared with ``kernelopt bench``; what is the worker's own is here and in :mod:`.sandbox`.
"""

from __future__ import annotations

import contextlib
import os
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

# OUTPUT_TAIL_BYTES, TEXT_CHARS, clip and tail_lines are also read from here (verify, gate, tests).
from ..child import OUTPUT_TAIL_BYTES, TEXT_CHARS, child_env, clip, kill_group, module_command, start_child, tail_lines  # noqa: F401 (re-exports, above)
from ..child import scrubbed_env as worker_env  # its name here, for the agents' children and the tests
from . import sandbox

if TYPE_CHECKING:
    from pydantic import TypeAdapter

    from .protocol import Message


class WorkerExited(Exception):
    """The worker process ended (crash, signal, exit) or broke the protocol."""


WORKER = module_command("pytest_kernelopt.verify.worker")
# Stage 1's process: no site (-S: 20 ms to start instead of 60; it needs only the standard library).
STATIC_CHECKER = module_command("pytest_kernelopt.verify.worker", "--static", site=False)

MIB = 1 << 20
REPLY_BYTES = 1 * MIB        # one reply line: stage figures, a profile
OPENED_BYTES = 64 * MIB      # Opened: every kernel's source (a 500-kernel model at 20 KiB each is 10 MiB)
FILE_BYTES = 256 * MIB       # RLIMIT_FSIZE: any one file a worker writes (its output, compiler caches)
FOLDER_BYTES = 64 * MIB      # its temporary folder (its output included), checked after each check
STATIC_PROBLEMS = 20         # problems listed by the static stage, then "and N more"
PROBLEM_CHARS = 300          # one of them


class WorkerProcess:
    """One isolated worker and the two pipes to it.

    ``program`` is started with the two pipes' descriptors appended (the worker by
    default, :data:`STATIC_CHECKER`; tests run small payloads). ``memory``: a cap on
    the worker's host memory in bytes (``RLIMIT_DATA``); None reads
    ``KERNELOPT_WORKER_MEMORY`` (unset: no cap). ``address_space``: ``RLIMIT_AS``
    (unusable with CUDA, fine for the static checker). ``file_size``: ``RLIMIT_FSIZE``,
    the largest file it may write. ``isolation`` describes what contains it, for the verdict.
    """

    def __init__(self, program: Sequence[str] = WORKER, *, memory: int | None = None,
                 address_space: int | None = None, file_size: int = FILE_BYTES) -> None:
        from ..errors import UsageError

        try:
            self.memory = sandbox.memory_limit() if memory is None else (memory or None)
        except ValueError as exc:
            raise UsageError(str(exc)) from exc
        self.sandbox = sandbox.isolation()
        sandbox.warn_once(self.sandbox)
        self.isolation = self.sandbox.describe(self.memory)
        self.folder = Path(tempfile.mkdtemp(prefix="kernelopt-worker-"))
        to_child_r, to_child_w = os.pipe()
        from_child_r, from_child_w = os.pipe()
        # No credentials; the package importable even when run from a checkout.
        env = child_env(worker_env(), PYTHONDONTWRITEBYTECODE="1")
        self.stderr_path = self.folder / "stderr.txt"
        # Its stdout and stderr both go to stderr_path; a session of its own; die with the parent, limits.
        self.proc = start_child(
            [*self.sandbox.prefix, *program, str(to_child_r), str(from_child_w)],
            env=env, output=self.stderr_path, cwd=self.folder, pass_fds=(to_child_r, from_child_w),
            preexec_fn=sandbox.preexec(self.memory, address_space=address_space, file_size=file_size),
        )
        os.close(to_child_r)
        os.close(from_child_w)
        os.set_blocking(to_child_w, False)  # a worker that stops reading cannot block the parent in send()
        self._out = to_child_w
        self._in = from_child_r
        self._buffer = bytearray()
        self._scanned = 0  # bytes of the buffer known to hold no newline
        self._sent = 0  # requests written: one started ahead and never used is killed without a goodbye

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: Message, timeout: float = 60.0) -> None:
        """Write one request; a worker that reads none of it for ``timeout`` seconds is killed."""
        from .protocol import encode

        data = memoryview(encode(message))
        self._sent += 1
        deadline = time.monotonic() + timeout
        try:
            while data:
                try:
                    data = data[os.write(self._out, data):]
                except BlockingIOError:
                    left = deadline - time.monotonic()
                    if left <= 0:
                        self.kill()
                        raise WorkerExited(f"the worker stopped reading its requests for {timeout:g} s") from None
                    select.select([], [self._out], [], min(left, 1.0))
        except OSError as exc:  # BrokenPipeError: it is gone
            raise WorkerExited(self.exit_cause()) from exc

    def receive(self, timeout: float, *, adapter: TypeAdapter[Any] | None = None, limit: int = REPLY_BYTES) -> Any | None:
        """The next reply (validated by ``adapter``, the worker's replies by default), or None when
        ``timeout`` seconds pass first. A line longer than ``limit`` bytes breaks the protocol."""
        from pydantic import ValidationError

        from .protocol import REPLY

        deadline = time.monotonic() + timeout
        while (end := self._buffer.find(b"\n", self._scanned)) < 0:
            self._scanned = len(self._buffer)
            if len(self._buffer) > limit:
                self.kill()
                raise WorkerExited(f"the worker broke the protocol (a message longer than {limit} bytes)")
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._in], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._in, min(1 << 20, limit + 1))
            if not chunk:  # its end of the pipe closed: it exits, or it is made to
                try:
                    self.proc.wait(timeout=5)
                except subprocess.TimeoutExpired:
                    self.kill()
                raise WorkerExited(self.exit_cause())
            self._buffer += chunk
        if end > limit:
            self.kill()
            raise WorkerExited(f"the worker broke the protocol (a message longer than {limit} bytes)")
        line = bytes(self._buffer[:end])
        del self._buffer[:end + 1]
        self._scanned = 0
        try:
            return (adapter or REPLY).validate_json(line)
        except ValidationError as exc:
            self.kill()
            raise WorkerExited(f"the worker broke the protocol ({exc.error_count()} error(s) in a message)") from exc

    def exit_cause(self) -> str:
        code = sandbox.exit_code(self.sandbox, self.proc.poll())
        if code is None:
            return "the worker stopped answering"
        if code < 0:
            try:
                cause = f"worker killed by signal {signal.Signals(-code).name}"
            except ValueError:
                cause = f"worker killed by signal {-code}"
        else:
            cause = f"worker exited with code {code}"
        tail = self.stderr_tail()
        return f"{cause}: {tail}" if tail else cause

    def stderr_tail(self, lines: int = 3) -> str:
        """The last lines the worker printed (its stdout and stderr), from the file's last 64 KiB only."""
        return tail_lines(self.stderr_path, lines)

    def folder_bytes(self) -> int:
        """What the worker left in its temporary folder (its output file included), in bytes."""
        total = 0
        for path, _, files in os.walk(self.folder):
            for name in files:
                with contextlib.suppress(OSError):
                    total += os.lstat(os.path.join(path, name)).st_size
        return total

    def kill(self) -> None:
        """SIGKILL to the process group: ``unshare`` and PID 1 of the namespace, so everything in it."""
        kill_group(self.proc, timeout=30)

    def close(self) -> None:
        """Ask the worker to stop (if it was ever asked anything), then kill its whole process group and remove
        its folder. Once: a second call (a worker started ahead is closed by its session and by its starter)
        does nothing, never a signal to a process group whose number may be another's by then."""
        if self._out < 0:
            return
        if self.alive and self._sent:
            from .protocol import CloseRequest

            with contextlib.suppress(WorkerExited):
                self.send(CloseRequest(), timeout=1.0)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()  # also whatever it started in its group
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError):
                os.close(fd)
        self._out = self._in = -1
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the worker side -------------------------------------------------------------------

def serve(in_fd: int, out_fd: int) -> int:
    """Answer requests until the parent closes the session or goes away."""
    import warnings

    from ..errors import KerneloptError, ProblemError, UsageError
    from . import pipeline
    from .protocol import REQUEST, Failure, encode

    warnings.filterwarnings("ignore")
    # What opening any problem imports, before the first request: a worker started ahead (the session's
    # ``worker``) does this while the parent still loads the problem.
    import torch._inductor.compile_fx  # noqa: F401

    def emit(message: Message) -> None:
        data = encode(message)
        while data:
            data = data[os.write(out_fd, data):]

    requests = os.fdopen(in_fd, "rb")
    prepared = None
    keep: set[int] | None = None  # inside the sandbox: the processes there once the problem is open
    for line in requests:
        request = REQUEST.validate_json(line)
        try:
            if request.type == "close":
                return 0
            if request.type == "open":
                prepared, opened = pipeline.open_problem(request)
                if os.environ.get(sandbox.SANDBOXED) == "1":
                    keep = sandbox.processes()
                emit(opened)
            elif prepared is None:
                emit(Failure(kind="internal", message="check before open"))
            elif request.type == "profile":
                from .time_by_kernel import profile_model

                emit(profile_model(prepared, request.runs))
            else:
                pipeline.run_check(prepared, request, emit)
                if not pipeline.healthy(prepared):
                    return 3  # a candidate broke the CUDA context: the parent starts a fresh worker
        except pipeline.VerifierOutOfMemory as exc:
            emit(Failure(kind="memory", message=str(exc)))
        except UsageError as exc:
            emit(Failure(kind="usage", message=str(exc)))
        except ProblemError as exc:
            emit(Failure(kind="problem", message=exc.cause))
        except KerneloptError as exc:
            emit(Failure(kind="internal", message=str(exc)))
        except Exception as exc:  # our own bug: say so, never blame the candidate
            import traceback

            where = traceback.extract_tb(exc.__traceback__)[-1]
            emit(Failure(kind="internal", message=f"{type(exc).__name__}: {str(exc)[:300]} "
                                                  f"({Path(where.filename).name}:{where.lineno})"))
        if keep is not None and request.type == "check" and not sandbox.sweep(keep):
            return 3  # candidate code keeps starting processes: the namespace dies with this worker
    return 0


def serve_static(in_fd: int, out_fd: int) -> int:
    """The static checker's process: stage 1 for each request, until the parent closes the pipe.

    It reads :class:`~.protocol.StaticRequest` and writes :class:`~.protocol.StaticDone` with
    :mod:`json`: importing pydantic and the records would triple its start-up, and the
    parent validates each reply against the model. Runs without site-packages (``-S``).
    """
    import json

    from .static import check_candidate

    for line in os.fdopen(in_fd, "rb"):
        request = json.loads(line)
        if request.get("type") != "static":
            return 0  # CloseRequest
        report = check_candidate(request["source"], entry_args=request["entry_args"])
        shown = [clip(p, PROBLEM_CHARS) for p in report.problems[:STATIC_PROBLEMS]]
        data = (json.dumps({"type": "static_done", "problems": shown, "more": len(report.problems) - len(shown)})
                + "\n").encode()
        while data:
            data = data[os.write(out_fd, data):]
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--static":
        sys.exit(serve_static(int(sys.argv[2]), int(sys.argv[3])))
    code = serve(int(sys.argv[1]), int(sys.argv[2]))
    # Without the interpreter's teardown (torch's and Inductor's exit handlers: about 1.2 s of CPU on the CPU
    # machine, for each session closed): the parent kills what is left in the namespace and removes the folder.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
