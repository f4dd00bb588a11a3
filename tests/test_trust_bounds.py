"""Everything a candidate (or a worker it took over) hands the parent is bounded.

Attacks seen: a 2 MB candidate held the static stage 13.6 s, in the parent, outside
``--timeout``, and came back as a 43 MB reason; a worker that printed 1 GiB before it
crashed made the parent read all of it. Most tests here put a fake worker behind the
real :class:`VerifySession` (it answers the protocol with what the attack sends), so no
model is compiled; the static checker's process is the real one.
"""

from __future__ import annotations

import json
import sys
import textwrap
import time
import tracemalloc
from pathlib import Path

import pytest

from pytest_kernelopt.errors import UsageError, VerifierError
from pytest_kernelopt.verify import worker as worker_module
from pytest_kernelopt.verify.worker import TEXT_CHARS, WorkerExited, WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
KERNEL = ROOT / "tests" / "data" / "elementwise_chain_kernel.json"
# The longest reason a verdict can carry: the stage's name and a clipped detail, clipped again.
REASON_CHARS = TEXT_CHARS + 100


def _kernel():
    from pytest_kernelopt.records import KernelInfo

    return KernelInfo.model_validate(json.loads(KERNEL.read_text())["kernel"])


def _dump() -> str:
    from pytest_kernelopt.candidate import render_dump

    return render_dump(_kernel(), "elementwise_chain")


# A worker that opens instantly (the kernel of tests/data) and answers each check as
# its first argument says.
FAKE_WORKER = """
import os, sys, time
from pytest_kernelopt.verify.protocol import (REQUEST, CheckDone, Failure, Opened, StageDone, StageStarted, encode)
from pytest_kernelopt.records import Environment, KernelInfo, StageResult

scenario, kernel_file, in_fd, out_fd = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])

def emit(data):
    while data:
        data = data[os.write(out_fd, data):]

for line in os.fdopen(in_fd, "rb"):
    request = REQUEST.validate_json(line)
    if request.type == "close":
        break
    if request.type == "open":
        import json
        kernel = KernelInfo.model_validate(json.load(open(kernel_file))["kernel"])
        emit(encode(Opened(device="cpu", graphs=1, kernels=[kernel], externs=[], seconds=0.0, reference="float64",
                           environment=Environment(device="cpu", torch="x", triton="x", python="x"))))
        continue
    emit(encode(StageStarted(stage="kernel")))
    if scenario == "long-detail":  # a stage detail quoting 500 kB of the candidate's text
        emit(encode(StageDone(result=StageResult(name="kernel", passed=False, detail="x" * 500_000 + " THE END"))))
    elif scenario == "long-line":  # a 10 MB reply: more than any reply may be
        emit(encode(StageDone(result=StageResult(name="kernel", passed=False, detail="y" * 10_000_000))))
    elif scenario == "long-failure":  # an exception message relayed as the verifier's own failure
        emit(encode(Failure(kind="internal", message="z" * 1_000_000)))
    elif scenario == "flood-and-die":
        chunk = b"spam " * 20_000 + b"\\n"
        for _ in range(200):  # 20 MB
            os.write(1, chunk)
        os.write(2, b"the last words\\n")
        os._exit(7)
    elif scenario == "fill-folder":
        with open("junk.bin", "wb") as f:
            f.write(b"\\0" * (3 << 20))
        emit(encode(StageDone(result=StageResult(name="kernel", passed=True, detail="fine"))))
        emit(encode(StageStarted(stage="model")))
        emit(encode(StageDone(result=StageResult(name="model", passed=True, detail="fine"))))
    emit(encode(CheckDone()))
"""


@pytest.fixture
def fake_session(tmp_path, monkeypatch):
    """``fake_session(scenario)``: a VerifySession whose worker is the fake above."""
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    program = tmp_path / "fake_worker.py"
    program.write_text(FAKE_WORKER)
    sessions = []

    def make(scenario: str, **options):
        class FakeWorker(WorkerProcess):
            def __init__(self, program_=worker_module.WORKER, **kwargs):
                if program_ == worker_module.WORKER:
                    program_ = [sys.executable, str(program), scenario, str(KERNEL)]
                super().__init__(program_, **kwargs)

        monkeypatch.setattr(worker_module, "WorkerProcess", FakeWorker)
        session = VerifySession(tmp_path / "p.py", "cpu", VerifyOptions(seeds=1, **options))
        sessions.append(session)
        return session

    yield make
    for session in sessions:
        session.close()


# --- 1. the size of a candidate ----------------------------------------------------------

def test_an_oversized_candidate_file_is_refused_unread(tmp_path):
    from pytest_kernelopt.verify import CANDIDATE_BYTES, read_candidate

    big = tmp_path / "big.py"
    big.write_bytes(_dump().encode() + b"#" * (20 << 20))  # 20 MiB
    t0 = time.monotonic()
    tracemalloc.start()
    try:
        with pytest.raises(UsageError) as error:
            read_candidate(big)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 * CANDIDATE_BYTES, peak  # never read whole
    assert time.monotonic() - t0 < 1.0
    message = str(error.value)
    assert "\n" not in message and str(big) in message
    assert f"{CANDIDATE_BYTES} bytes" in message and f"{big.stat().st_size} bytes" in message
    # Just under the cap: read, as any kernel is.
    fine = tmp_path / "fine.py"
    fine.write_text(_dump())
    assert read_candidate(fine).source == _dump()


def test_an_oversized_candidate_in_memory_is_rejected_before_parsing(fake_session, monkeypatch):
    """Tuning's proposals and the store's versions reach the session as text: stage 1 rejects them unparsed."""
    from pytest_kernelopt.verify import CANDIDATE_BYTES, source_of

    session = fake_session("long-detail")
    session.open()
    monkeypatch.setattr("pytest_kernelopt.verify.session._static_checker",
                        lambda: pytest.fail("a static checker started for an oversized candidate"))
    spare = session._checker
    text = _dump() + "#" * (2 << 20)
    t0 = time.monotonic()
    verdict = session.verify(_kernel().name, source_of(text, "proposals/big.py"))
    assert time.monotonic() - t0 < 1.0
    assert verdict.status == "rejected" and verdict.reason.startswith("static: big.py: candidate is 2.0 MiB")
    assert f"{CANDIDATE_BYTES} bytes" in verdict.reason and "not parsed" in verdict.reason
    assert session._checker is spare and session._used is None  # no checker was used


# --- 2. the static stage: its own process, bounded ----------------------------------------

def test_the_static_stage_runs_in_a_fresh_process_and_passes_a_dump(fake_session, monkeypatch):
    from pytest_kernelopt.verify import source_of
    from pytest_kernelopt.verify import static as static_module

    monkeypatch.setattr(static_module, "check_candidate", lambda *a, **k: pytest.fail("checked in the parent"))
    session = fake_session("long-detail")
    session.open()
    for _ in range(2):
        verdict = session.verify(_kernel().name, source_of(_dump(), "dump.py"))
        assert verdict.stages[0].name == "static" and verdict.stages[0].passed, verdict.stages[0].detail
        assert verdict.stages[0].seconds < 5


def test_a_pathological_candidate_is_stopped_at_the_static_bound(fake_session, monkeypatch):
    """Under the size cap but slow to check (many functions): stage 1 stops at its bound and rejects."""
    import pytest_kernelopt.verify as verify
    from pytest_kernelopt.verify import source_of

    monkeypatch.setattr(verify.session, "STATIC_SECONDS", 0.3)  # where the session reads it
    helpers = "".join(f"\n@triton.jit\ndef helper_{i}(x):\n    y = x * 2.0\n    return tl.where(y > 0, y, 0.0) + x\n"
                      for i in range(5500))
    text = _dump() + helpers
    assert len(text) < verify.CANDIDATE_BYTES
    session = fake_session("long-detail")
    session.open()
    t0 = time.monotonic()
    verdict = session.verify(_kernel().name, source_of(text, "slow.py"))
    assert time.monotonic() - t0 < 0.3 + 2.0  # the bound, and starting/stopping the checker
    assert verdict.status == "rejected"
    assert verdict.reason == "static: slow.py: the static check took longer than 0.3 s (its bound); stopped"


def test_a_static_checker_out_of_memory_rejects(fake_session, monkeypatch):
    import pytest_kernelopt.verify as verify
    from pytest_kernelopt.verify import source_of

    monkeypatch.setattr(verify.session, "STATIC_MEMORY", 96 << 20)  # where the session reads it
    text = _dump() + "".join(f"\nX{i} = {i}" for i in range(36_000))  # ~410 kB of module constants
    session = fake_session("long-detail")
    session.open()
    verdict = session.verify(_kernel().name, source_of(text, "fat.py"))
    assert verdict.status == "rejected" and verdict.stages[0].name == "static"
    assert "MemoryError" in verdict.reason or "static check failed" in verdict.reason, verdict.reason
    assert len(verdict.reason) <= REASON_CHARS


def test_the_static_problems_are_listed_up_to_a_cap(fake_session):
    from pytest_kernelopt.verify import source_of
    from pytest_kernelopt.verify.worker import STATIC_PROBLEMS

    body = "".join(f"    y{i} = unknown_{i} + xnumel\n" for i in range(3000))
    text = _dump() + f"\n@triton.jit\ndef noisy(xnumel):\n{body}"
    session = fake_session("long-detail")
    session.open()
    verdict = session.verify(_kernel().name, source_of(text, "noisy.py"))
    assert verdict.status == "rejected" and verdict.stages[0].name == "static"
    detail = verdict.stages[0].detail
    assert "unknown name 'unknown_0'" in detail
    assert f"noisy.py: and {3000 - STATIC_PROBLEMS} more problem(s)" in detail
    assert len(verdict.reason) <= REASON_CHARS


# --- 3. texts and messages from the worker -------------------------------------------------

def test_a_long_stage_detail_is_cut_keeping_its_end(fake_session):
    from pytest_kernelopt.verify import source_of

    session = fake_session("long-detail")
    session.open()
    verdict = session.verify(_kernel().name, source_of(_dump(), "dump.py"))
    assert verdict.status == "rejected" and verdict.reason.startswith("kernel: xxx")
    assert verdict.reason.endswith("THE END") and "characters cut" in verdict.reason
    assert len(verdict.reason) <= REASON_CHARS and len(verdict.stages[-1].detail) <= TEXT_CHARS


def test_a_reply_over_the_cap_breaks_the_protocol(fake_session):
    from pytest_kernelopt.verify import source_of

    session = fake_session("long-line")
    session.open()
    worker = session._worker
    verdict = session.verify(_kernel().name, source_of(_dump(), "dump.py"))
    assert verdict.status == "rejected"
    assert verdict.reason.startswith("kernel: the worker broke the protocol (a message longer than")
    assert not worker.alive  # killed; the next check starts a fresh one
    assert len(worker._buffer) <= worker_module.REPLY_BYTES + (1 << 20)


def test_a_long_failure_message_is_cut(fake_session):
    from pytest_kernelopt.verify import source_of

    session = fake_session("long-failure")
    session.open()
    with pytest.raises(VerifierError) as error:
        session.verify(_kernel().name, source_of(_dump(), "dump.py"))
    assert "characters cut" in str(error.value) and len(str(error.value)) <= REASON_CHARS + 200


def test_a_worker_that_floods_its_output_and_dies(fake_session):
    """20 MB printed, then a crash: the parent reads 64 KiB of it at most, and the reason is short."""
    from pytest_kernelopt.verify import source_of

    session = fake_session("flood-and-die")
    session.open()
    tracemalloc.start()
    try:
        verdict = session.verify(_kernel().name, source_of(_dump(), "dump.py"))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 2 << 20, peak  # reading the whole file would take 20 MB
    assert verdict.status == "rejected" and "worker exited with code 7" in verdict.reason
    assert "the last words" in verdict.reason and len(verdict.reason) <= 700


def test_legitimate_large_messages_still_fit():
    """Opened of a model with 500 kernels of 20 kB each (10 MB) is read whole."""
    from pytest_kernelopt.records import Environment
    from pytest_kernelopt.verify.protocol import Opened, encode
    from pytest_kernelopt.verify.worker import OPENED_BYTES

    kernel = _kernel()
    kernels = [kernel.model_copy(update={"name": f"k{i}", "source": kernel.source + "#" * 20_000}) for i in range(500)]
    opened = Opened(device="cpu", graphs=1, kernels=kernels, externs=[], seconds=0.0, reference="float64",
                    environment=Environment(device="cpu", torch="x", triton="x", python="x"))
    data = encode(opened)
    assert 10 << 20 < len(data) < OPENED_BYTES
    code = "import os, sys; data = open(sys.argv[1], 'rb').read(); os.write(int(sys.argv[3]), data)"
    path = Path(__import__("tempfile").mkdtemp()) / "opened.json"
    path.write_bytes(data)
    worker = WorkerProcess([sys.executable, "-c", code, str(path)])
    try:
        reply = worker.receive(60, limit=OPENED_BYTES)
        assert isinstance(reply, Opened) and len(reply.kernels) == 500
    finally:
        worker.close()
        path.unlink()


def test_a_worker_that_stops_reading_cannot_block_the_parent():
    from pytest_kernelopt.verify.protocol import StaticRequest

    worker = WorkerProcess([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        t0 = time.monotonic()
        with pytest.raises(WorkerExited, match="stopped reading its requests for 0.5 s"):
            worker.send(StaticRequest(source="#" * (4 << 20)), timeout=0.5)  # far more than a pipe holds
        assert time.monotonic() - t0 < 5
        assert not worker.alive
    finally:
        worker.close()


# --- 4. the worker's scratch space ----------------------------------------------------------

def test_a_file_the_worker_writes_is_capped(tmp_path):
    code = textwrap.dedent("""
        import os, sys
        try:
            with open("big.bin", "wb") as f:
                for _ in range(64):
                    f.write(b"\\0" * (1 << 20))
        except OSError as exc:
            print("stopped:", exc.errno, os.path.getsize("big.bin"), flush=True)
    """)
    worker = WorkerProcess([sys.executable, "-c", code], file_size=4 << 20)
    try:
        worker.proc.wait(timeout=30)
        assert "stopped: 27" in worker.stderr_tail()  # EFBIG
        assert worker.folder_bytes() <= (4 << 20) + 4096
    finally:
        worker.close()


def test_a_worker_that_fills_its_folder_is_rejected_and_replaced(fake_session, monkeypatch):
    from pytest_kernelopt.verify import source_of

    monkeypatch.setattr(worker_module, "FOLDER_BYTES", 1 << 20)
    session = fake_session("fill-folder")
    session.open()
    worker = session._worker
    verdict = session.verify(_kernel().name, source_of(_dump(), "dump.py"))
    assert verdict.status == "rejected" and "into its folder" in verdict.reason and "limit 1.0 MiB" in verdict.reason
    assert not worker.alive
