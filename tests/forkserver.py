"""The tests' commands without a Python start each: one process per test worker imports torch once and forks.

Most of the suite's CPU went to process starts (issue 43 item 7, measured 2026-12-05): every ``kernelopt``
command and every gate run through pytester imported torch and Inductor afresh, about 5 CPU-s each, for a
few seconds of work. Here one pre-imported process per xdist worker (the zygote) forks a child per command;
the child is the command's own process (its cwd, environment, ``sys.argv``, ``sys.path``, standard streams;
killed alone on a timeout; exits through the interpreter's own exit), it only skips the imports.

This is test plumbing, not the product: the verifier's workers (``pytest_kernelopt.verify.worker``) are
started by the product code in these children as in any run, fresh, sandboxed. What stays a fresh
interpreter (:func:`forkable` says no): anything but ``python -m pytest``, ``python -m pytest_kernelopt.cli``
and the ``kernelopt`` script; a pytest run that is not a gate run (what plain ``pytest`` imports is a
contract: tests/test_plugin.py); and everything when ``KERNELOPT_TEST_FORK=0``. A command whose environment
differs from the zygote's in a variable read at start-up or at import (``PYTHON*`` but the three the child
sets up, ``TORCH*``, ``TRITON*``, CUDA, OpenMP, ``LD_*``) gets a zygote started with its environment.
"""

from __future__ import annotations

import atexit
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any, BinaryIO, TextIO

SWITCH = "KERNELOPT_TEST_FORK"  # "0": every command starts a fresh interpreter
KERNELOPT = Path(sys.executable).with_name("kernelopt")  # the console script of this venv
# Read by the interpreter at start-up or by torch/triton/OpenMP at import: a child must see the zygote's.
_AT_START = ("PYTHON", "TORCH", "PYTORCH", "TRITON", "INDUCTOR", "CUDA", "NVIDIA", "OMP_", "MKL_", "KMP_", "LD_")
_HANDLED = frozenset({"PYTHONPATH", "PYTHONUNBUFFERED", "PYTHONDONTWRITEBYTECODE"})  # set up in the child

# The zygote. Imports what every command here imports (torch, Inductor, triton, pytest, pydantic),
# then forks a child per request read from the socket; it never runs a command itself.
_ZYGOTE = r'''
import io, json, os, runpy, socket, sys, tempfile
sock = socket.socket(fileno=int(sys.argv[1]))
# Not this package: a pytest plugin (pytest11) imported before pytest marks it for assertion rewriting warns.
import torch, torch._inductor.compile_fx, triton, pytest, pydantic
START_PATH = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
sock.sendall(b"ready\n")


def stream(fd, old, unbuffered):
    raw = io.FileIO(fd, "w", closefd=False)
    return io.TextIOWrapper(raw if unbuffered else io.BufferedWriter(raw), encoding=old.encoding,
                            errors=old.errors, write_through=unbuffered)


def child(request, fds):
    """Become the command: never returns (the command's SystemExit, or its exception, ends the process)."""
    sock.close()
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.dup2(fds[0], 1)
    os.dup2(fds[1], 2)
    for fd in (null, *fds):
        os.close(fd)
    env = request["env"]
    os.environ.clear()
    os.environ.update(env)
    os.chdir(request["cwd"])
    unbuffered = bool(env.get("PYTHONUNBUFFERED"))
    sys.stdout = sys.__stdout__ = stream(1, sys.__stdout__, unbuffered)
    sys.stderr = sys.__stderr__ = stream(2, sys.__stderr__, True)
    sys.dont_write_bytecode = bool(env.get("PYTHONDONTWRITEBYTECODE"))
    tempfile.tempdir = None  # TMPDIR as the command's environment says
    # sys.path as the interpreter builds it: the script's folder or the cwd, PYTHONPATH, then the rest.
    rest = [p for p in sys.path[1:] if p not in START_PATH]
    wanted = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]
    first = os.path.dirname(request["script"]) if request["script"] else os.getcwd()
    sys.path[:] = [first, *wanted, *rest]
    if "numpy" in sys.modules:  # a fresh process seeds numpy's global generator from the OS; `random` is reseeded at fork
        sys.modules["numpy"].random.seed()
    if request["script"]:
        sys.argv = [request["script"], *request["args"]]
        runpy.run_path(request["script"], run_name="__main__")
    else:
        sys.argv = [request["module"], *request["args"]]  # runpy puts the module's file in argv[0]
        # As in a fresh `python -m`: what runs as __main__ (a package's __main__) was not imported before.
        package = hasattr(sys.modules.get(request["module"]), "__path__")
        sys.modules.pop(request["module"] + ".__main__" if package else request["module"], None)
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
    raise SystemExit(0)


while True:
    data, fds, _, _ = socket.recv_fds(sock, 1 << 20, 2)
    if not data:
        break
    request = json.loads(data)
    pid = os.fork()
    if pid == 0:
        child(request, fds)
    for fd in fds:
        os.close(fd)
    sock.sendall(json.dumps({"pid": pid}).encode() + b"\n")
    _, status = os.waitpid(pid, 0)
    sock.sendall(json.dumps({"code": os.waitstatus_to_exitcode(status)}).encode() + b"\n")
'''


def _at_start(env: Mapping[str, str]) -> dict[str, str]:
    return {k: v for k, v in env.items() if k.startswith(_AT_START) and k not in _HANDLED}


class _Zygote:
    """The pre-imported process of this test worker and the socket to it, started with ``env``."""

    def __init__(self, env: Mapping[str, str]) -> None:
        self.env = dict(env)
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)  # a request is one message
        self.proc = subprocess.Popen([sys.executable, "-c", _ZYGOTE, str(theirs.fileno())], pass_fds=(theirs.fileno(),),
                                     stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, env=self.env, cwd="/")
        theirs.close()
        self.sock = ours
        self._buffer = b""
        if self.readline(None) != b"ready\n":
            raise RuntimeError(f"the tests' zygote did not start (exit {self.proc.wait()})")

    def readline(self, timeout: float | None) -> bytes:
        """One line from the zygote; :class:`subprocess.TimeoutExpired` (argv left empty) after ``timeout`` s."""
        deadline = None if timeout is None else time.monotonic() + timeout
        while b"\n" not in self._buffer:
            left = None if deadline is None else max(0.0, deadline - time.monotonic())
            if not select.select([self.sock], [], [], left)[0]:
                raise subprocess.TimeoutExpired([], timeout or 0)
            data = self.sock.recv(1 << 16)
            if not data:
                raise RuntimeError("the tests' zygote died")
            self._buffer += data
        line, _, self._buffer = self._buffer.partition(b"\n")
        return line + b"\n"

    def close(self) -> None:
        if self.sock.fileno() >= 0:
            self.sock.close()
            self.proc.wait(timeout=30)


_zygote: _Zygote | None = None


def _the_zygote(env: Mapping[str, str]) -> _Zygote:
    """The zygote, started afresh when the one running was started with other values of the variables read
    at start-up or import (in-process compiles set TRITON_CACHE_DIR, torch 2.13; a test may set one)."""
    global _zygote
    if _zygote is not None and (_zygote.proc.poll() is not None or _at_start(_zygote.env) != _at_start(env)):
        _zygote.close()
        _zygote = None
    if _zygote is None:
        _zygote = _Zygote(env)
        atexit.register(_zygote.close)
    return _zygote


def _command(argv: Sequence[str]) -> tuple[str | None, str | None, list[str]] | None:
    """(module, script, args) of a command the zygote can run, else None."""
    argv = [os.fspath(a) for a in argv]
    if argv and argv[0] == str(KERNELOPT):
        return None, argv[0], argv[1:]
    if len(argv) >= 2 and argv[0] == sys.executable:
        if argv[1] in ("-mpytest", "-m") and (argv[1] == "-mpytest" or argv[2] in ("pytest", "pytest_kernelopt.cli")):
            module = "pytest" if argv[1] == "-mpytest" else argv[2]
            return module, None, argv[2:] if argv[1] == "-mpytest" else argv[3:]
    return None


def forkable(argv: Sequence[str]) -> bool:
    """Whether the zygote may run ``argv`` as a fresh interpreter would (see the module's docstring)."""
    command = _command(argv)
    if command is None or os.environ.get(SWITCH) == "0":
        return False
    module, _, args = command
    # A plain pytest run: what it imports is checked, it starts fresh.
    return module != "pytest" or any(a == "--kernelopt" or a.startswith("--kernelopt-") for a in args)


class Forked:
    """A child of the zygote, as much of :class:`subprocess.Popen` as pytester and :func:`run` use."""

    stdin = None

    def __init__(self, argv: Sequence[str], *, cwd: str | os.PathLike[str] | None, env: Mapping[str, str],
                 stdout: int, stderr: int) -> None:
        command = _command(argv)
        assert command is not None, argv
        module, script, args = command
        self.args = list(argv)
        self.returncode: int | None = None
        self._zygote = _the_zygote(env)
        request = {"module": module, "script": script, "args": args, "env": dict(env),
                   "cwd": os.fspath(cwd) if cwd is not None else os.getcwd()}
        socket.send_fds(self._zygote.sock, [json.dumps(request).encode()], [stdout, stderr])
        self.pid: int = json.loads(self._zygote.readline(None))["pid"]

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            try:
                line = self._zygote.readline(timeout)
            except subprocess.TimeoutExpired:
                raise subprocess.TimeoutExpired(self.args, timeout or 0) from None
            self.returncode = json.loads(line)["code"]
        return self.returncode

    def kill(self) -> None:
        if self.returncode is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def _fd(stream: int | TextIO | BinaryIO) -> int:
    return stream if isinstance(stream, int) else stream.fileno()


def popen(argv: Sequence[str], *, stdout: int | TextIO | BinaryIO, stderr: int | TextIO | BinaryIO,
          cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None) -> Forked:
    """A forked child running ``argv`` (:func:`forkable` must say yes), its output into two open files."""
    return Forked(argv, cwd=cwd, env=os.environ if env is None else env, stdout=_fd(stdout), stderr=_fd(stderr))


def run(argv: Sequence[str | os.PathLike[str]], *, cwd: str | os.PathLike[str] | None = None,
        env: Mapping[str, str] | None = None, timeout: float | None = None) -> subprocess.CompletedProcess[str]:
    """``subprocess.run(argv, capture_output=True, text=True, ...)``, forked from the zygote where it may be."""
    args = [os.fspath(a) for a in argv]
    environ = dict(os.environ if env is None else env)
    if not forkable(args):
        return subprocess.run(args, cwd=cwd, env=environ, capture_output=True, text=True, timeout=timeout)
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        child = popen(args, stdout=out, stderr=err, cwd=cwd, env=environ)
        try:
            code = child.wait(timeout)
        except subprocess.TimeoutExpired:
            child.kill()
            child.wait()
            raise
        texts = []
        for f in (out, err):
            f.seek(0)
            texts.append(f.read().decode(errors="replace"))
    return subprocess.CompletedProcess(args, code, texts[0], texts[1])


def patch_pytester(pytester: Any, monkeypatch: Any) -> None:
    """Route ``pytester.runpytest_subprocess`` gate runs through the zygote (plain runs stay fresh)."""
    original = pytester.popen

    def forking_popen(cmdargs: Sequence[Any], stdout: Any = subprocess.PIPE, stderr: Any = subprocess.PIPE,
                      stdin: Any = pytester.CLOSE_STDIN, **kw: Any) -> Any:
        args = [os.fspath(a) for a in cmdargs]
        env = os.environ.copy()  # as pytester's own popen: the cwd on PYTHONPATH
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [os.getcwd(), env.get("PYTHONPATH", "")]))
        if kw or stdin is not pytester.CLOSE_STDIN or not forkable(args) or isinstance(stdout, int) \
                or isinstance(stderr, int):
            return original(cmdargs, stdout=stdout, stderr=stderr, stdin=stdin, **kw)
        return popen(args, stdout=stdout, stderr=stderr, env=env)

    monkeypatch.setattr(pytester, "popen", forking_popen)
