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
"""

from __future__ import annotations

import contextlib
import os
import re
import select
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Sequence

from pydantic import ValidationError

from . import sandbox
from .protocol import REPLY, REQUEST, Failure, Message, encode

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)
_SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GITHUB_", "GH_", "AWS_", "GOOGLE_", "AZURE_", "HF_", "HUGGING", "GIT_ASKPASS", "SSH_")


def worker_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}


class WorkerExited(Exception):
    """The worker process ended (crash, signal, exit) or broke the protocol."""


WORKER = (sys.executable, "-m", "pytest_kernelopt.verify.worker")


class WorkerProcess:
    """One isolated worker and the two pipes to it.

    ``program`` is started with the two pipes' descriptors appended (the worker by
    default; tests run small payloads). ``memory``: a cap on the worker's host memory
    in bytes (``RLIMIT_DATA``); None reads ``KERNELOPT_WORKER_MEMORY`` (unset: no cap).
    ``isolation`` describes what contains it, for the verdict.
    """

    def __init__(self, program: Sequence[str] = WORKER, *, memory: int | None = None) -> None:
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
        env = worker_env()
        # The package must be importable from the worker even when run from a checkout.
        root = str(Path(__file__).resolve().parents[2])
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        self.stderr_path = self.folder / "stderr.txt"
        with open(self.stderr_path, "wb") as err:
            self.proc = subprocess.Popen(
                [*self.sandbox.prefix, *program, str(to_child_r), str(from_child_w)],
                stdin=subprocess.DEVNULL, stdout=err, stderr=err, env=env, cwd=self.folder,
                pass_fds=(to_child_r, from_child_w), start_new_session=True, preexec_fn=sandbox.preexec(self.memory),
            )
        os.close(to_child_r)
        os.close(from_child_w)
        self._out = to_child_w
        self._in = from_child_r
        self._buffer = b""

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def send(self, message: Message) -> None:
        data = encode(message)
        try:
            while data:
                written = os.write(self._out, data)
                data = data[written:]
        except (BrokenPipeError, OSError) as exc:
            raise WorkerExited(self.exit_cause()) from exc

    def receive(self, timeout: float) -> Any | None:
        """The next reply, or None when ``timeout`` seconds pass first."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                return None
            ready, _, _ = select.select([self._in], [], [], min(left, 1.0))
            if not ready:
                continue
            chunk = os.read(self._in, 1 << 20)
            if not chunk:
                self.proc.wait()
                raise WorkerExited(self.exit_cause())
            self._buffer += chunk
        line, self._buffer = self._buffer.split(b"\n", 1)
        try:
            return REPLY.validate_json(line)
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
        try:
            text = [ln for ln in self.stderr_path.read_text(errors="replace").splitlines() if ln.strip()]
        except OSError:
            return ""
        return " | ".join(text[-lines:])[-600:]

    def kill(self) -> None:
        """SIGKILL to the process group: ``unshare`` and PID 1 of the namespace, so everything in it."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        with contextlib.suppress(Exception):
            self.proc.wait(timeout=30)

    def close(self) -> None:
        """Ask the worker to stop, then kill its whole process group and remove its folder."""
        if self.alive:
            from .protocol import CloseRequest

            with contextlib.suppress(WorkerExited):
                self.send(CloseRequest())
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=5)
        self.kill()  # also whatever it started in its group
        for fd in (self._out, self._in):
            with contextlib.suppress(OSError):
                os.close(fd)
        shutil.rmtree(self.folder, ignore_errors=True)


# --- the worker side -------------------------------------------------------------------

def serve(in_fd: int, out_fd: int) -> int:
    """Answer requests until the parent closes the session or goes away."""
    import warnings

    from ..errors import KerneloptError, ProblemError, UsageError
    from . import pipeline

    warnings.filterwarnings("ignore")

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
                from .profile import profile_model

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


if __name__ == "__main__":
    sys.exit(serve(int(sys.argv[1]), int(sys.argv[2])))
