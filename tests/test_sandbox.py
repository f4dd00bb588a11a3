"""The worker's sandbox: what a hostile candidate can no longer do, seen from both sides.

Most tests start :class:`WorkerProcess` with a small payload program instead of the
worker (no model to compile): the payload attempts the attack and prints what
happened, and the test checks the other side (the listener got nothing, the parent
got no signal, no process is left). A control shows each attack works without the
sandbox, so the test can fail. Tests that need namespaces skip where the kernel
or the machine gives none.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import textwrap
import time
import uuid
import warnings
from pathlib import Path

import pytest

from pytest_kernelopt.verify import sandbox
from pytest_kernelopt.verify.worker import WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "tests" / "problems" / "elementwise_chain.py"


@pytest.fixture
def sandboxed() -> sandbox.Isolation:
    iso = sandbox.isolation()
    if not iso.namespaces:
        pytest.skip(f"no Linux namespaces for workers here: {iso.why_not}")
    return iso


def _payload(tmp_path: Path, code: str) -> Path:
    path = tmp_path / f"payload_{uuid.uuid4().hex[:8]}.py"
    path.write_text(textwrap.dedent(code))
    return path


def _report(worker: WorkerProcess, timeout: float = 30) -> dict:
    """The payload's JSON line (its stdout goes to the worker's stderr file)."""
    deadline = time.monotonic() + timeout
    while True:
        ended = not worker.alive
        for line in worker.stderr_path.read_text(errors="replace").splitlines():
            if line.startswith("{"):
                return json.loads(line)
        if ended or time.monotonic() > deadline:
            raise AssertionError(f"no report from the payload: {worker.exit_cause()}")
        time.sleep(0.02)


def _processes_with(marker: str) -> list[int]:
    """Host processes whose command line holds ``marker``."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if marker.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _gone(marker: str, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while _processes_with(marker):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


CONNECT = """
import json, socket, sys
s = socket.socket()
s.settimeout(2)
try:
    s.connect(("127.0.0.1", int(sys.argv[1])))
    s.sendall(b"ANTHROPIC_API_KEY=stolen")
    print(json.dumps({"connected": True}), flush=True)
except OSError as exc:
    print(json.dumps({"connected": False, "error": str(exc)}), flush=True)
"""


def test_no_network(sandboxed, tmp_path):
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    listener.settimeout(0.5)
    port = listener.getsockname()[1]
    payload = _payload(tmp_path, CONNECT)
    worker = WorkerProcess([sys.executable, "-I", str(payload), str(port)])
    try:
        report = _report(worker)
    finally:
        worker.close()
    assert report["connected"] is False and "unreachable" in report["error"], report
    with pytest.raises(socket.timeout):
        listener.accept()  # nothing arrived
    # Control: the same payload outside the sandbox reaches the listener.
    subprocess.run([sys.executable, "-I", str(payload), str(port)], check=True, capture_output=True, timeout=30)
    conn, _ = listener.accept()
    assert conn.recv(100) == b"ANTHROPIC_API_KEY=stolen"
    conn.close()
    listener.close()


STEAL_ENVIRONMENT = """
import ctypes, json, os, sys
parent, secret = int(sys.argv[1]), sys.argv[2].encode()

def scan():
    hits = []
    for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
        try:
            if secret in open(f"/proc/{pid}/environ", "rb").read():
                hits.append(pid)
        except OSError:
            pass
    return hits

report = {"pids": sorted(int(p) for p in os.listdir("/proc") if p.isdigit()), "found": scan()}
try:
    report["parent"] = secret in open(f"/proc/{parent}/environ", "rb").read()
except OSError as exc:
    report["parent"] = type(exc).__name__
libc = ctypes.CDLL(None, use_errno=True)
# Unmount the fresh /proc to see the host's underneath; then again from a nested user
# namespace. Only inside the sandbox's own mount namespace: outside, as root, this
# would unmount the machine's /proc.
if os.environ.get("KERNELOPT_SANDBOXED") == "1" and os.getpid() == 2:
    report["umount"] = libc.umount2(b"/proc", 2) == 0 or os.strerror(ctypes.get_errno())
    report["found"] += scan()
    if libc.unshare(0x10000000 | 0x00020000) == 0:  # CLONE_NEWUSER | CLONE_NEWNS
        report["nested_umount"] = libc.umount2(b"/proc", 2) == 0 or os.strerror(ctypes.get_errno())
        report["found"] += scan()
print(json.dumps(report), flush=True)
"""

# The verifier's process, started (like the CLI) with a credential in its environment.
PARENT = """
import json, sys, time
from pytest_kernelopt.verify.worker import WorkerProcess
import os
worker = WorkerProcess([sys.executable, "-I", sys.argv[1], str(os.getpid()), sys.argv[2]])
worker.proc.wait(timeout=30)
time.sleep(0.05)
print(worker.stderr_path.read_text())
worker.close()
"""


def test_parent_environment_cannot_be_read(sandboxed, tmp_path):
    secret = f"sk-ant-fake-{uuid.uuid4().hex}"
    payload = _payload(tmp_path, STEAL_ENVIRONMENT)

    def run(**extra: str) -> dict:
        env = {**os.environ, "ANTHROPIC_API_KEY": secret, **extra}
        out = subprocess.run([sys.executable, "-c", PARENT, str(payload), secret], env=env, cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
        line = next((ln for ln in out.stdout.splitlines() if ln.startswith("{")), None)
        assert line, out.stdout + out.stderr
        return json.loads(line)

    inside = run()
    assert inside["pids"] == [1, 2], inside  # only init and itself
    assert inside["parent"] != True and inside["found"] == [], inside  # noqa: E712
    assert inside.get("umount") == "Operation not permitted", inside
    assert inside.get("nested_umount", "Invalid argument") != True, inside  # noqa: E712
    # Control: without namespaces the same payload reads the parent's secret.
    outside = run(KERNELOPT_SANDBOX="0")
    assert outside["parent"] is True and outside["found"], outside


SIGNAL_PARENT = """
import json, os, signal, sys, time
parent = int(sys.argv[1])
signal.signal(signal.SIGUSR1, lambda *a: None)
report = {"ppid": os.getppid()}
for name, target in (("parent", parent), ("init", os.getppid()), ("group", 0)):
    try:
        os.kill(target, signal.SIGUSR1)
        report[name] = "sent"
    except OSError as exc:
        report[name] = type(exc).__name__
if os.getppid() != parent:
    os.kill(os.getppid(), signal.SIGSTOP)  # init ignores it: the worker still ends normally
print(json.dumps(report), flush=True)
"""


def test_cannot_signal_the_parent(sandboxed, tmp_path):
    received = []
    previous = signal.signal(signal.SIGUSR1, lambda *a: received.append(a[0]))
    try:
        worker = WorkerProcess([sys.executable, "-I", str(_payload(tmp_path, SIGNAL_PARENT)), str(os.getpid())])
        try:
            report = _report(worker)
            assert worker.proc.wait(timeout=10) == 0, worker.exit_cause()  # init was not stopped
        finally:
            worker.close()
        assert report["ppid"] == 1 and report["parent"] == "ProcessLookupError", report
        time.sleep(0.1)
        assert received == []
        os.kill(os.getpid(), signal.SIGUSR1)  # control: the handler does count
        time.sleep(0.01)
        assert received == [signal.SIGUSR1]
    finally:
        signal.signal(signal.SIGUSR1, previous)


SPAWN_AND_HANG = """
import json, os, signal, subprocess, sys, time
marker = sys.argv[1]
open("left-behind.txt", "w").write("x")
sleeper = [sys.executable, "-I", "-c", "import time; time.sleep(600)", marker + "-sleeper"]
subprocess.Popen(sleeper, start_new_session=True)          # detached
if os.fork() == 0:                                          # orphaned (double fork)
    if os.fork() == 0:
        os.execv(sys.executable, sleeper)
    os._exit(0)
signal.pthread_sigmask(signal.SIG_BLOCK, set(signal.Signals) - {signal.SIGKILL, signal.SIGSTOP})
print(json.dumps({"ready": True, "cwd": os.getcwd()}), flush=True)
while True:
    pass
"""


def test_killing_the_worker_ends_every_process_it_started(sandboxed, tmp_path):
    marker = f"kernelopt-marker-{uuid.uuid4().hex}"
    worker = WorkerProcess([sys.executable, "-I", str(_payload(tmp_path, SPAWN_AND_HANG)), marker])
    try:
        report = _report(worker)
        assert Path(report["cwd"]) == worker.folder and (worker.folder / "left-behind.txt").exists()
        deadline = time.monotonic() + 10
        while len(_processes_with(f"{marker}-sleeper")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_processes_with(f"{marker}-sleeper")) == 2  # control: both run, one detached, one orphaned
        assert worker.receive(0.3) is None  # it hangs, signals blocked
        t0 = time.monotonic()
        worker.kill()  # what the session does when the time limit runs out
        assert time.monotonic() - t0 < 5 and not worker.alive
        assert _gone(marker), _processes_with(marker)
    finally:
        worker.close()
    assert _gone(marker), _processes_with(marker)
    assert not worker.alive and not worker.folder.exists()


DIE_WITH_PARENT = """
import sys, time
from pytest_kernelopt.verify.worker import WorkerProcess
worker = WorkerProcess([sys.executable, "-I", sys.argv[1], sys.argv[2]])
print("started", flush=True)
time.sleep(600)
"""


def test_everything_dies_with_the_parent(sandboxed, tmp_path):
    marker = f"kernelopt-marker-{uuid.uuid4().hex}"
    payload = _payload(tmp_path, SPAWN_AND_HANG)
    parent = subprocess.Popen([sys.executable, "-c", DIE_WITH_PARENT, str(payload), marker], cwd=ROOT,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert parent.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 20
        while len(_processes_with(f"{marker}-sleeper")) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert len(_processes_with(f"{marker}-sleeper")) == 2  # control: both run
    finally:
        parent.kill()
        parent.wait()
    assert _gone(marker), _processes_with(marker)


SWEEP = """
import json, os, subprocess, sys
from pytest_kernelopt.verify import sandbox
marker = sys.argv[1]
keep = sandbox.processes()
sleeper = [sys.executable, "-I", "-c", "import time; time.sleep(600)", marker + "-sleeper"]
subprocess.Popen(sleeper, start_new_session=True)
subprocess.Popen(sleeper)
before = sorted(sandbox.processes() - keep)
swept = sandbox.sweep(keep)
print(json.dumps({"before": before, "swept": swept, "after": sorted(sandbox.processes() - keep)}), flush=True)
import time; time.sleep(600)  # stay alive (stdin is /dev/null: input() returned at once, a race): only the sweep may have ended the sleepers
"""


def test_strays_are_killed_after_each_check(sandboxed, tmp_path):
    """Inside the sandbox the worker kills what a candidate left running before the next one."""
    marker = f"kernelopt-marker-{uuid.uuid4().hex}"
    worker = WorkerProcess([sys.executable, str(_payload(tmp_path, SWEEP)), marker])
    try:
        report = _report(worker)
        assert len(report["before"]) == 2 and report["swept"] is True and report["after"] == [], report
        assert _processes_with(f"{marker}-sleeper") == [] and worker.alive
    finally:
        worker.close()


def test_a_crash_is_reported_with_its_signal(sandboxed, tmp_path):
    payload = _payload(tmp_path, "import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    worker = WorkerProcess([sys.executable, "-I", str(payload)])
    try:
        worker.proc.wait(timeout=30)
        assert worker.exit_cause().startswith("worker killed by signal SIGSEGV"), worker.exit_cause()
    finally:
        worker.close()


ALLOCATE = """
import json
try:
    data = bytes(1_500_000_000)  # the size of a large module constant (zero pages: fast when allowed)
    outcome = "allocated"
except MemoryError:
    outcome = "MemoryError"
status = {ln.split(":")[0]: int(ln.split()[1]) // 1024 for ln in open("/proc/self/status") if ln.startswith("Vm")}
print(json.dumps({"outcome": outcome, "peak_mib": status["VmHWM"], "data_mib": status["VmData"]}), flush=True)
"""


def test_memory_cap_stops_a_large_allocation(tmp_path):
    payload = _payload(tmp_path, ALLOCATE)

    def run(memory: int) -> tuple[dict, str]:
        worker = WorkerProcess([sys.executable, "-I", str(payload)], memory=memory)
        try:
            return _report(worker), worker.isolation
        finally:
            worker.close()

    capped, isolation = run(1 << 30)
    assert capped["outcome"] == "MemoryError" and capped["peak_mib"] < 200 and capped["data_mib"] < 200, capped
    assert "host memory capped at 1 GiB (RLIMIT_DATA)" in isolation
    free, isolation = run(0)  # control: no cap
    assert free["outcome"] == "allocated" and free["data_mib"] > 1400, free
    assert "host memory not capped" in isolation


def test_memory_limit_setting(monkeypatch):
    from pytest_kernelopt.errors import UsageError

    assert sandbox.memory_limit("8G") == 8 << 30
    assert sandbox.memory_limit("1536MiB") == 1536 << 20
    assert sandbox.memory_limit("off") is None and sandbox.memory_limit("") is None
    monkeypatch.setenv(sandbox.MEMORY, "lots")
    with pytest.raises(UsageError, match="KERNELOPT_WORKER_MEMORY='lots'"):
        WorkerProcess([sys.executable, "-c", "pass"])


def test_without_namespaces_it_warns_and_the_verdict_says_so(monkeypatch, tmp_path):
    monkeypatch.setenv("KERNELOPT_SANDBOX", "0")
    monkeypatch.setattr(sandbox, "_warned", [])
    monkeypatch.setattr(sandbox, "_probed", {})  # probe again, and forget it afterwards
    with pytest.warns(sandbox.SandboxWarning, match="without Linux namespaces"):
        worker = WorkerProcess([sys.executable, "-I", "-c", "import os; print(os.getppid())"])
    worker.proc.wait(timeout=30)
    assert worker.stderr_tail() == str(os.getpid())  # no init in between: started directly by us
    worker.close()
    assert worker.isolation.startswith("process group only (namespaces unavailable: switched off by "
                                       "KERNELOPT_SANDBOX=0)"), worker.isolation
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        WorkerProcess([sys.executable, "-c", "pass"]).close()  # once per process


def test_a_failing_probe_names_the_cause(monkeypatch, tmp_path):
    fake = tmp_path / "unshare"
    fake.write_text("#!/bin/sh\necho 'unshare: unshare failed: Operation not permitted' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.setattr(sandbox, "_probed", {})
    iso = sandbox.isolation()
    assert iso.namespaces == () and iso.prefix == ()
    assert iso.why_not.startswith("unshare: unshare failed: Operation not permitted"), iso.why_not
    assert iso.describe(None).startswith("process group only (namespaces unavailable: unshare: unshare failed")
    monkeypatch.setenv("PATH", str(tmp_path / "nothing-here"))
    monkeypatch.setattr(sandbox, "_probed", {})
    assert sandbox.isolation().why_not == "the unshare command (util-linux) is not installed"


@pytest.mark.slow
def test_session_verdicts_carry_the_isolation(compiled_models, interpreter, tmp_path, monkeypatch):
    """End to end, with host memory capped: the dump verifies; a 1.5 GB module constant is stopped."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    compiled = compiled_models.get(PROBLEM)
    (name, handle), = compiled.kernels.items()
    dump = render_dump(handle.info, compiled.problem.id)
    monkeypatch.setenv(sandbox.MEMORY, "1G")
    expected = sandbox.isolation().describe(1 << 30)
    with VerifySession(PROBLEM, interpreter, VerifyOptions(seeds=1)) as session:
        verdict = session.verify(name, source_of(dump, "dump.py"))
        assert verdict.status == "correct", verdict.reason
        assert verdict.isolation == expected and "host memory capped at 1 GiB" in expected
        if sandbox.isolation().namespaces:
            assert expected.startswith("namespaces: ") and "pid,net,mount" in expected
        big = session.verify(name, source_of(dump + '\nPAD = "x" * 1_500_000_000\n', "big.py"))
        assert big.status == "rejected" and "MemoryError" in big.reason, big.reason
        assert big.isolation == expected
        again = session.verify(name, source_of(dump, "dump.py"))
        assert again.status == "correct", again.reason
    assert json.loads(verdict.model_dump_json())["isolation"] == expected
