"""The worker's sandbox: Linux namespaces around the process that runs candidate code.

The chain of processes, small on purpose so that it can be audited::

    parent --Popen--> unshare(1) --fork--> init --fork--> [setsid, drop every capability,
    (new session,       (util-linux)       (this file,      no_new_privs] --exec--> worker
     PDEATHSIG,                             PID 1 of a new
     RLIMIT_DATA)                           PID namespace)

* ``unshare --user --map-root-user --pid --fork --kill-child --net --mount --mount-proc
  --ipc``: a user namespace (capabilities count only inside it), a PID namespace with a
  fresh ``/proc`` in a private mount namespace (the worker sees only its own namespace's
  processes: no ``/proc/<parent>/environ``, no parent to signal or trace), a network
  namespace (a loopback that is down, nothing else) and an IPC namespace. The file
  system and ``/dev`` (the GPU's device nodes) stay visible; nothing is pivoted.
* Every capability is dropped before the worker starts. Root of its user namespace
  could otherwise unmount the fresh ``/proc`` and list every process of the machine
  in the host's ``/proc`` underneath, reading the environment of those inside the
  user namespace (measured: util-linux 2.38, Linux 6.18); as real root, without a
  user namespace, it could read every process's.
* init is PID 1 and never runs candidate code. When it dies (the parent killed the
  process group, or ``unshare`` died and ``--kill-child`` followed), the kernel kills
  every process of the namespace, detached (``setsid``) ones included. It is not
  dumpable, so the worker cannot trace it, and as PID 1 it ignores every signal sent
  from inside its namespace: the candidate can stop only itself.

As root, a user namespace is still used (capabilities scoped to it) and, where it
cannot be, plain PID/net/mount/IPC namespaces. Where no namespace can be made (no
``unshare``, user namespaces disabled for this user, ``KERNELOPT_SANDBOX=0``), the
worker runs as before (new session, scrubbed environment, PDEATHSIG) with a warning,
and every verdict says so.

Host memory: ``KERNELOPT_WORKER_MEMORY`` (``8G``, ``1536M``) sets ``RLIMIT_DATA``,
which counts private writable mappings only, so CUDA's ``PROT_NONE`` address-space
reservations (which make ``RLIMIT_AS`` unusable) are not counted. Not yet tried
with CUDA, hence off by default. No cgroup is used: the verifier does not own a
writable cgroup v2 hierarchy on the machines it was measured on.

This file runs as ``python -I -S sandbox.py PROGRAM...`` (init), so it imports only
the standard library, and at module level only what init needs (each worker start
pays for init's imports).
"""

from __future__ import annotations

import os
import signal
import sys

NAMESPACES = ("user", "pid", "net", "mount", "ipc")
_FLAGS = {"user": ("--user", "--map-root-user"), "pid": ("--pid", "--fork", "--kill-child"),
          "net": ("--net",), "mount": ("--mount", "--mount-proc"), "ipc": ("--ipc",)}
SANDBOXED = "KERNELOPT_SANDBOXED"  # set by init for the program it starts
_SWITCH = "KERNELOPT_SANDBOX"      # "0": no namespaces (with a warning)
MEMORY = "KERNELOPT_WORKER_MEMORY"


class SandboxWarning(UserWarning):
    """Candidate workers run without namespaces."""


class Isolation:
    """How workers are started on this machine."""

    def __init__(self, namespaces: tuple[str, ...], prefix: tuple[str, ...], why_not: str | None = None) -> None:
        self.namespaces = namespaces  # empty: no sandbox
        self.prefix = prefix          # what goes before the program
        self.why_not = why_not        # why there are no namespaces

    def __repr__(self) -> str:
        return f"Isolation({self.namespaces!r}, {self.prefix!r}, {self.why_not!r})"

    def describe(self, memory: int | None) -> str:
        cap = f"host memory capped at {_size(memory)} (RLIMIT_DATA)" if memory else "host memory not capped"
        if self.namespaces:
            return f"namespaces: {','.join(self.namespaces)}; no capabilities; {cap}"
        return f"process group only (namespaces unavailable: {self.why_not}); {cap}"


# --- the parent side -------------------------------------------------------------------

def isolation() -> Isolation:
    """Namespaces this process can give its workers, tried once (a probe run of the chain)."""
    if "probed" not in _probed:
        _probed["probed"] = _probe()
    return _probed["probed"]


_probed: dict[str, Isolation] = {}


def disable(why: str) -> None:
    """Start later workers without namespaces (say why, once): used when CUDA cannot start inside them."""
    _probed["probed"] = Isolation((), (), why)
    _warned.clear()
    warn_once(_probed["probed"])


def _probe() -> Isolation:
    import shutil

    from ..child import run_child

    if os.environ.get(_SWITCH, "").strip().lower() in ("0", "off", "no", "false"):
        return Isolation((), (), f"switched off by {_SWITCH}={os.environ[_SWITCH]}")
    if sys.platform != "linux":
        return Isolation((), (), f"not Linux ({sys.platform})")
    unshare = shutil.which("unshare")
    if unshare is None:
        return Isolation((), (), "the unshare command (util-linux) is not installed")
    tries: list[tuple[str, ...]] = [NAMESPACES]
    if os.geteuid() == 0:  # root can make the others without a user namespace
        tries.append(tuple(n for n in NAMESPACES if n != "user"))
    why = ""
    for names in tries:
        prefix = (unshare, *(f for n in names for f in _FLAGS[n]), "--",
                  sys.executable, "-I", "-S", os.path.realpath(__file__))
        try:
            probe = run_child([*prefix, sys.executable, "-I", "-S", "-c", _PROBE], env=_probe_env(), timeout=30,
                              cwd="/", separate_stdout=True)
        except OSError as exc:
            why = str(exc)
            continue
        stdout = probe.stdout.text if probe.stdout is not None else ""
        if probe.returncode == 0 and stdout.strip() == "sandbox ok":
            return Isolation(names, prefix)
        lines = (probe.output.text + stdout).strip().splitlines()
        why = ("timed out after 30 s" if probe.timed_out else
               lines[-1] if lines else f"exit status {probe.returncode}")
    return Isolation((), (), why + _userns_hint())


def warn_once(iso: Isolation) -> None:
    """Never silently: the first worker started without namespaces says so."""
    if not iso.namespaces and not _warned:
        import warnings

        _warned.append(True)
        warnings.warn(f"kernelopt: candidate workers run without Linux namespaces ({iso.why_not}): they can see "
                      f"this machine's processes and network; only a new session, a scrubbed environment and "
                      f"a time limit contain them", SandboxWarning, stacklevel=3)


_warned: list[bool] = []


def memory_limit(value: str | None = None) -> int | None:
    """Bytes from ``KERNELOPT_WORKER_MEMORY`` (``8G``, ``1536M``, ``1073741824``); None: no cap."""
    import re

    text = (os.environ.get(MEMORY, "") if value is None else value).strip()
    if not text or text.lower() in ("0", "off", "none"):
        return None
    match = re.fullmatch(r"(\d+(?:\.\d+)?)\s*([kmgt]?)i?b?", text, re.I)
    if not match:
        raise ValueError(f"{MEMORY}={text!r}: expected a size such as 8G or 1536M")
    scale = 1024 ** " kmgt".index(match.group(2).lower() or " ")
    return int(float(match.group(1)) * scale)


def preexec(memory: int | None, *, address_space: int | None = None,
            file_size: int | None = None):  # noqa: ANN201 - a callable for Popen(preexec_fn=...)
    """Runs in the child between fork and exec: die with the parent; cap host memory
    (``RLIMIT_DATA``; ``RLIMIT_AS`` where no GPU driver needs to reserve address space)
    and the size of any file it writes (``RLIMIT_FSIZE``: past it a write fails with
    EFBIG, as Python ignores SIGXFSZ)."""
    import resource

    limits = [(resource.RLIMIT_DATA, memory), (resource.RLIMIT_AS, address_space), (resource.RLIMIT_FSIZE, file_size)]

    def setup() -> None:  # pragma: no cover - runs in the child
        _libc().prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        for which, value in limits:
            if value:
                resource.setrlimit(which, (value, value))
    return setup


def exit_code(iso: Isolation, code: int | None) -> int | None:
    """The worker's status as Popen would give it: init reports a signal N as 128 + N."""
    if iso.namespaces and code is not None and 128 < code < 128 + 65:
        return 128 - code
    return code


def _size(n: int) -> str:
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20)):
        if n >= scale:
            return f"{n / scale:g} {unit}"
    return f"{n} bytes"


def _probe_env() -> dict[str, str]:
    return {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "LANG": "C"}


def _userns_hint() -> str:
    if os.geteuid() == 0:
        return ""
    for path, off in (("/proc/sys/kernel/unprivileged_userns_clone", "0"), ("/proc/sys/user/max_user_namespaces", "0"),
                      ("/proc/sys/kernel/apparmor_restrict_unprivileged_userns", "1")):
        try:
            if _read(path).strip() == off:
                return f" ({path} is {off})"
        except OSError:
            pass
    return ""


# What the probe checks from inside: PID 2 under init, a fresh /proc that shows only
# the namespace, no capabilities, no network.
_PROBE = """
import errno, os, socket
assert (os.getpid(), os.getppid()) == (2, 1), "not in a new PID namespace"
assert sorted(p for p in os.listdir("/proc") if p.isdigit()) == ["1", "2"], "/proc shows other processes"
caps = [ln for ln in open("/proc/self/status") if ln.startswith(("CapEff", "CapPrm", "CapBnd"))]
assert all(int(ln.split()[1], 16) == 0 for ln in caps), "capabilities left: " + " ".join(caps)
s = socket.socket()
try:
    s.connect(("127.0.0.1", 9))
except OSError as exc:
    assert exc.errno == errno.ENETUNREACH, "network: " + str(exc)
else:
    raise AssertionError("network reachable")
print("sandbox ok")
"""


# --- inside: init and the sealed program -----------------------------------------------

_PR_SET_PDEATHSIG, _PR_SET_DUMPABLE, _PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _PR_CAP_AMBIENT = 1, 4, 24, 38, 47
_CAP_AMBIENT_CLEAR_ALL = 4
_CAP_VERSION_3 = 0x20080522


def _libc():  # noqa: ANN202 - ctypes.CDLL, imported here: init should start fast
    import ctypes

    return ctypes.CDLL(None, use_errno=True)


def _read(path: str) -> str:
    with open(path) as f:
        return f.read()


def seal() -> None:
    """Drop every capability (bounding, ambient, permitted, effective, inheritable) for good."""
    import ctypes

    libc = _libc()
    last = int(_read("/proc/sys/kernel/cap_last_cap"))
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)
    libc.prctl(_PR_CAP_AMBIENT, _CAP_AMBIENT_CLEAR_ALL, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAP_VERSION_3, 0)
    data = (ctypes.c_uint32 * 6)()  # two {effective, permitted, inheritable}, all zero
    if libc.capset(header, data) != 0:
        raise OSError(ctypes.get_errno(), "capset")
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        raise OSError(ctypes.get_errno(), "PR_SET_NO_NEW_PRIVS")
    left = [ln for ln in _read("/proc/self/status").splitlines()
            if ln.startswith(("CapEff", "CapPrm", "CapInh", "CapBnd", "CapAmb")) and int(ln.split()[1], 16)]
    if left:
        raise OSError(f"capabilities left after dropping them: {left}")


def _init(program: list[str]) -> None:
    """PID 1: start ``program`` sealed, reap orphans, exit with its status (the namespace dies with us)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)  # no handler: PID 1 ignores signals from inside
    _libc().prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)   # the worker may not trace or read us
    child = os.fork()
    if child == 0:
        try:
            os.setsid()  # kill(0, ...) from candidate code reaches its own session only
            seal()
            os.execve(program[0], list(program), {**os.environ, SANDBOXED: "1"})
        except BaseException as exc:  # noqa: BLE001 - anything: the worker must not start unsealed
            os.write(2, f"kernelopt sandbox: cannot start the worker: {exc}\n".encode())
        os._exit(127)
    os.closerange(3, 1 << 16)  # the protocol pipes belong to the worker alone
    while True:
        try:
            pid, status = os.wait()
        except ChildProcessError:
            os._exit(1)
        if pid == child:
            break
    code = os.waitstatus_to_exitcode(status)
    os._exit(code if code >= 0 else 128 - code)  # PID 1 cannot kill itself with the signal


def processes() -> set[int]:
    """Processes of this PID namespace (inside the sandbox ``/proc`` shows only those)."""
    return {int(p) for p in os.listdir("/proc") if p.isdigit()}


def sweep(keep: set[int], rounds: int = 5) -> bool:
    """Kill what candidate code left running; False when something keeps coming back.

    Killed: processes in another session (detached) or orphaned (parent: init), and
    children of this worker that were not there when ``keep`` was taken. Kept: what
    the compiler started while the problem was opened (Inductor's compile workers).
    Only inside the sandbox, where this namespace holds nothing else.
    """
    import time

    me, session = os.getpid(), os.getsid(0)
    for _ in range(rounds):
        found = []
        for pid in processes() - {1, me}:
            try:
                fields = _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()
            except (OSError, IndexError):
                continue
            state, ppid, sid = fields[0], int(fields[1]), int(fields[3])
            if state == "Z" and ppid != me:
                continue  # init reaps it
            if sid != session or ppid == 1 or (ppid == me and pid not in keep):
                found.append(pid)
        if not found:
            return True
        for pid in found:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
        deadline = time.monotonic() + 2.0
        for pid in found:
            try:
                os.waitpid(pid, 0)  # our own children: reap them
            except ChildProcessError:
                # Not ours: a killed process can take a moment to go (seen under load, in the
                # middle of an exec), and the next round would count it as coming back.
                while time.monotonic() < deadline and _running(pid):
                    time.sleep(0.01)
    return False


def _running(pid: int) -> bool:
    try:
        return _read(f"/proc/{pid}/stat").rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


if __name__ == "__main__":
    _init(sys.argv[1:])
