"""``pytest -n N --kernelopt`` on several GPUs, without a GPU: a fake CUDA host.

The fake makes ``torch.cuda.is_available`` and ``torch.cuda.device_count`` answer like
a host with four GPUs, reading ``CUDA_VISIBLE_DEVICES`` once, the first time it is
asked, as CUDA does. Monkeypatched in this process for the runs that stop at configure
(in-process, a fraction of a second each); installed by a conftest.py for the one run
that starts xdist workers.
"""

from __future__ import annotations

import json
import os
import textwrap
from pathlib import Path
from types import SimpleNamespace
from typing import Callable

import pytest

from conftest import gate_project
from pytest_kernelopt.gate.xdist import GPU, GateWorkers
from pytest_kernelopt.shard import CUDA_VISIBLE_DEVICES

pytest_plugins = ["pytester"]

PROBLEM = Path(__file__).resolve().parent / "problems" / "sum_reduce.py"

FAKE_COUNT = '''
import os

_seen = []


def _count():
    if not _seen:  # CUDA reads CUDA_VISIBLE_DEVICES once per process
        listed = os.environ.get("CUDA_VISIBLE_DEVICES")
        _seen.append(4 if listed is None else min(4, len([e for e in listed.split(",") if e.strip()])))
    return _seen[0]
'''
FAKE_CUDA_CONFTEST = FAKE_COUNT + '''
import torch

torch.cuda.is_available = lambda: _count() > 0
torch.cuda.device_count = _count
'''


def _fake_count() -> object:
    """A fresh fake ``device_count``: as in a process where CUDA was not asked yet."""
    namespace: dict = {}
    exec(FAKE_COUNT, namespace)
    return namespace["_count"]

# Each test file records the worker it ran on, its CUDA_VISIBLE_DEVICES, and what a
# verifier worker process (the sandboxed one candidates run in) started from it sees.
PROBE = '''
import json, os, sys, time
from pytest_kernelopt.verify.worker import WorkerProcess


def test_probe(tmp_path):
    payload = tmp_path / "payload.py"
    payload.write_text("import json, os\\nprint(json.dumps(os.environ.get('CUDA_VISIBLE_DEVICES')), flush=True)\\n")
    worker = WorkerProcess((sys.executable, str(payload)))
    try:
        worker.proc.wait(timeout=60)
        seen = json.loads(worker.stderr_path.read_text().splitlines()[-1])
    finally:
        worker.close()
    record = {"worker": os.environ["PYTEST_XDIST_WORKER"], "pinned": os.environ.get("CUDA_VISIBLE_DEVICES"),
              "verifier_worker": seen}
    with open(os.path.join(os.environ["PROBE_OUT"], record["worker"] + ".json"), "w") as f:
        json.dump(record, f)
'''


@pytest.fixture
def repo(pytester: pytest.Pytester) -> Path:
    return gate_project(pytester.path, PROBLEM, "cuda")


@pytest.fixture
def fake_cuda(monkeypatch: pytest.MonkeyPatch) -> Callable[[], None]:
    """Four GPUs in this process, for runs that stop before anything compiles; call it again to start afresh."""
    import torch

    def install() -> None:
        count = _fake_count()
        monkeypatch.setattr(torch.cuda, "is_available", lambda: count() > 0)
        monkeypatch.setattr(torch.cuda, "device_count", count)

    install()
    return install


def _usage_line(result: pytest.RunResult) -> str:
    assert result.ret == pytest.ExitCode.USAGE_ERROR, result.stdout.str() + result.stderr.str()
    lines = [line for line in result.stderr.str().splitlines() if line.strip()]
    assert len(lines) == 1 and lines[0].startswith("ERROR: kernelopt: "), lines
    return lines[0]


def test_more_workers_than_gpus_is_refused(repo: Path, pytester: pytest.Pytester, fake_cuda: Callable[[], None],
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "3,5")
    line = _usage_line(pytester.runpytest("--kernelopt", "-n", "3", "-p", "no:cacheprovider"))
    assert line == ("ERROR: kernelopt: 3 xdist workers but 2 GPUs visible (CUDA_VISIBLE_DEVICES=3,5): each worker "
                    "needs a GPU of its own, so use at most 2")
    monkeypatch.delenv(CUDA_VISIBLE_DEVICES)
    fake_cuda()
    line = _usage_line(pytester.runpytest("--kernelopt", "--dist", "load", "--tx", "3*popen", "--tx", "2*popen",
                                          "-p", "no:cacheprovider"))
    assert "5 xdist workers but 4 GPUs visible (0,1,2,3)" in line


def test_modes_that_split_a_problem_are_refused_on_the_cpu_too(repo: Path, pytester: pytest.Pytester) -> None:
    for mode in ("worksteal", "loadgroup", "each"):
        line = _usage_line(pytester.runpytest("--kernelopt", "--kernelopt-device", "cpu", "-n", "2", "--dist", mode,
                                              "-p", "no:cacheprovider"))
        assert f"--dist {mode} would split a problem's items over several workers" in line


def test_n_auto_is_one_worker_per_gpu(repo: Path, pytester: pytest.Pytester, fake_cuda: Callable[[], None],
                                      monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("PYTEST_XDIST_AUTO_NUM_WORKERS", raising=False)
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "1,2,3")
    config = pytester.parseconfig("--kernelopt", "-n", "auto")
    assert config.hook.pytest_xdist_auto_num_workers(config=config) == 3
    # Without --kernelopt, or on the CPU, xdist counts CPUs as usual.
    plain = pytester.parseconfig("-n", "auto")
    cpu = pytester.parseconfig("--kernelopt", "--kernelopt-device", "cpu", "-n", "auto")
    cpus = plain.hook.pytest_xdist_auto_num_workers(config=plain)
    assert cpu.hook.pytest_xdist_auto_num_workers(config=cpu) == cpus


def test_a_worker_whose_pin_came_too_late_checks_nothing(fake_cuda: Callable[[], None], monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.delenv(CUDA_VISIBLE_DEVICES, raising=False)
    torch.cuda.device_count()  # CUDA started (and read the variable) before the worker was pinned
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "unset by the test")  # restored afterwards
    workers = GateWorkers(SimpleNamespace(workerinput={"workerid": "gw1", GPU: "5"}))
    assert os.environ[CUDA_VISIBLE_DEVICES] == "5"
    workers.check("cuda")
    assert workers.unpinned == ("xdist worker gw1 sees 4 GPUs, not only GPU 5: CUDA started in it before "
                                "pytest-kernelopt could set CUDA_VISIBLE_DEVICES (a conftest.py or plugin used CUDA "
                                "at import); nothing is checked on it")


def test_a_worker_pinned_in_time_sees_one_gpu(monkeypatch: pytest.MonkeyPatch) -> None:
    import torch

    monkeypatch.setattr(torch.cuda, "device_count", _fake_count())
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "unset by the test")
    workers = GateWorkers(SimpleNamespace(workerinput={"workerid": "gw0", GPU: "GPU-aa"}))
    workers.check("cuda")
    assert workers.unpinned is None and os.environ[CUDA_VISIBLE_DEVICES] == "GPU-aa"
    # On the CPU the controller hands out nothing, and the worker changes nothing.
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "7")
    GateWorkers(SimpleNamespace(workerinput={"workerid": "gw0", GPU: None})).check("cpu")
    assert os.environ[CUDA_VISIBLE_DEVICES] == "7"


def test_each_worker_and_its_verifier_workers_get_their_own_gpu(repo: Path, pytester: pytest.Pytester,
                                                                monkeypatch: pytest.MonkeyPatch) -> None:
    """Two workers on GPUs 3 and 5 of CUDA_VISIBLE_DEVICES=3,5; the gate's items are not collected
    (test files named on the command line), so nothing compiles on the fake GPUs."""
    (repo / "conftest.py").write_text(FAKE_CUDA_CONFTEST)
    for name in ("test_a.py", "test_b.py"):
        (repo / name).write_text(textwrap.dedent(PROBE))
    out = repo / "probes"
    out.mkdir()
    monkeypatch.setenv("PROBE_OUT", str(out))
    monkeypatch.setenv(CUDA_VISIBLE_DEVICES, "3,5")
    result = pytester.runpytest_subprocess("--kernelopt", "-n", "2", "-p", "no:cacheprovider", "test_a.py", "test_b.py")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines(["kernelopt: 2 xdist workers, --dist loadfile (a problem's items stay on one worker), "
                                 "one GPU each (CUDA_VISIBLE_DEVICES=3,5)"])
    seen = {p.stem: json.loads(p.read_text()) for p in out.glob("*.json")}
    assert seen == {"gw0": {"worker": "gw0", "pinned": "3", "verifier_worker": "3"},
                    "gw1": {"worker": "gw1", "pinned": "5", "verifier_worker": "5"}}, seen


def test_the_next_problems_worker_starts_while_this_problems_items_run(monkeypatch):
    """Each session after the first opens on a worker started ahead (its torch import overlaps the last problem's
    checks); none is started when no problem is left to open, and the run's end closes an unused one."""
    from types import SimpleNamespace

    from pytest_kernelopt.gate.checks import VerifySessions

    events: list[str] = []

    class Worker:
        count = 0

        def __init__(self):
            Worker.count += 1
            self.name = f"w{Worker.count}"
            events.append(f"start {self.name}")

        def close(self):
            events.append(f"close {self.name}")

    class Session:
        def __init__(self, path, device, options, *, variant, shape, worker, launch_configs):
            self.path, self.worker = path, worker
            events.append(f"session {path} on {worker.name if worker else 'its own'}")

        def open(self):
            pass

        def close(self):
            events.append(f"close session {self.path}")

    monkeypatch.setattr("pytest_kernelopt.verify.worker.WorkerProcess", Worker)
    monkeypatch.setattr("pytest_kernelopt.verify.VerifySession", Session)
    item = SimpleNamespace(prop=lambda *a: None)
    a, b = (SimpleNamespace(key=(name, None), path=name, variant=None, launch_configs=None, shape=None)
            for name in ("a", "b"))
    sessions = VerifySessions("cpu", None)
    sessions.expect([a, a, b])
    sessions.get(a, item)
    sessions.get(a, item)
    sessions.item_done(a)
    sessions.item_done(a)
    sessions.get(b, item)
    sessions.item_done(b)
    assert events == ["session a on its own", "start w1", "close session a", "session b on w1", "close session b"]
    # Rerun of a's items after it closed (a rerun plugin): its session reopens; the run's end closes the spare.
    events.clear()
    sessions.expect([a, b])
    sessions.get(a, item)
    sessions.close()
    assert events == ["session a on its own", "start w2", "close session a", "close w2"]
