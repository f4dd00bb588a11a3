"""pytest_kernelopt.child: how the package starts, bounds and kills its child processes."""

from __future__ import annotations

import os
import signal
import sys
import time
from pathlib import Path

from pytest_kernelopt.child import (
    OUTPUT_TAIL_BYTES, Output, child_env, clip, interrupt_group, kill_group, module_command, read_tail, run_child,
    scrubbed_env, start_child, tail_lines,
)

ROOT = str(Path(__file__).resolve().parents[1])


def test_a_child_imports_this_copy_of_the_package_and_keeps_its_pythonpath():
    env = child_env({"PYTHONPATH": "/elsewhere", "PATH": os.environ["PATH"]}, PYTHONDONTWRITEBYTECODE="1")
    assert env["PYTHONPATH"].split(os.pathsep) == [ROOT, "/elsewhere"]
    assert env["PYTHONUNBUFFERED"] == "1" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    done = run_child(module_command("pytest_kernelopt.child"), env=env, timeout=60)
    assert done.returncode == 0 and not done.timed_out
    assert module_command("m", "a", site=False) == (sys.executable, "-S", "-m", "m", "a")


def test_credentials_stay_out_of_a_childs_environment():
    env = scrubbed_env({"GITHUB_TOKEN": "x", "MY_API_KEY": "y", "SSH_AUTH_SOCK": "z", "HOME": "/root"})
    assert env == {"HOME": "/root"}


def test_only_the_tail_of_a_childs_output_is_read(tmp_path):
    code = "import sys\nfor i in range(50000): print('line', i)\nprint('last words', file=sys.stderr)"
    done = run_child([sys.executable, "-c", code], env=child_env(), timeout=60)
    assert done.returncode == 0 and done.output_tail.endswith("line 49999 | last words")
    big = tmp_path / "out.txt"
    big.write_bytes(b"x" * (4 * OUTPUT_TAIL_BYTES) + b"\nend\n")
    assert len(tail_lines(big)) <= 600 and tail_lines(big).endswith("end")
    assert len(clip("y" * 5000, 300)) <= 300


def test_at_its_time_limit_a_child_and_what_it_started_are_killed(tmp_path):
    pid_file = tmp_path / "pid"
    code = ("import subprocess, sys, time\n"
            f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(600)'])\n"
            f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
            "time.sleep(600)")
    started = time.monotonic()
    done = run_child([sys.executable, "-c", code], env=child_env(), timeout=3)
    assert done.timed_out and time.monotonic() - started < 60
    grandchild = int(pid_file.read_text())
    for _ in range(100):  # init reaps it; give that a moment
        try:
            state = Path(f"/proc/{grandchild}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        raise AssertionError(f"process {grandchild}, started by the child, outlived it")


def test_a_child_that_prints_more_than_the_bound_costs_the_parent_only_the_bound():
    """The kept tail is the last ``keep`` bytes, the dropped count is exact, and the parent's memory
    does not grow with what the child printed (reading it whole, as ``capture_output`` did, costs 8 MiB)."""
    import tracemalloc

    size, keep = 8 << 20, 1000
    code = f"import sys\nsys.stdout.buffer.write(b'a' * {size} + b'TAIL')"
    tracemalloc.start()
    try:
        done = run_child([sys.executable, "-c", code], env=child_env(), timeout=60, keep=keep)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert done.returncode == 0
    assert done.output.text == "a" * (keep - 4) + "TAIL" and done.output.dropped == size + 4 - keep
    assert done.output_tail.endswith("TAIL") and len(done.output_tail) <= 600
    assert peak < 512 * 1024, f"the parent held {peak} bytes for a child's {size}"


def test_stdout_kept_apart_from_stderr_each_bounded(tmp_path):
    code = ("import sys\nprint('x' * 5000)\nprint('{\"answer\": 42}')\n"
            "print('warning: ' + 'w' * 3000, file=sys.stderr)\nprint('the cause', file=sys.stderr)")
    done = run_child([sys.executable, "-c", code], env=child_env(), timeout=60, keep=2048, separate_stdout=True)
    assert done.stdout is not None and done.stdout.text.endswith('{"answer": 42}\n')
    assert done.stdout.dropped == 5001 + 15 - 2048 and len(done.stdout.text) == 2048
    assert done.output.text.endswith("the cause\n") and "answer" not in done.output.text
    assert done.output.dropped == 3010 + 10 - 2048 and done.output_tail.endswith("the cause")
    assert read_tail(tmp_path / "missing") == Output()


def test_a_child_in_its_own_session_stops_cleanly_on_a_passed_on_ctrl_c(tmp_path):
    """``tune --workers``: the workers do not get the terminal's SIGINT; the parent passes it on."""
    ready, saved = tmp_path / "ready", tmp_path / "saved"
    code = ("import pathlib, time\ntry:\n"
            f"    pathlib.Path({str(ready)!r}).write_text('1')\n    time.sleep(60)\n"
            f"except KeyboardInterrupt:\n    pathlib.Path({str(saved)!r}).write_text('records')\n")
    proc = start_child([sys.executable, "-c", code], env=child_env(), output=tmp_path / "log", stdout_file=os.devnull)
    try:
        for _ in range(600):
            if ready.exists():
                break
            time.sleep(0.05)
        interrupt_group(proc)
        assert proc.wait(timeout=30) == 0 and saved.read_text() == "records"
    finally:
        kill_group(proc)


def test_a_harvest_child_that_fails_reports_its_last_line(tmp_path):
    from pytest_kernelopt.agents.harvest import harvest

    result = harvest(tmp_path / "no_such_problem.py", "cpu", ["default"], timeout=120)
    assert set(result.errors) == {"default"} and "no_such_problem" in result.errors["default"], result.errors


def test_a_child_gets_the_passed_on_ctrl_c_even_when_its_parent_ignores_sigint(tmp_path):
    """A parent started with SIGINT ignored (nohup, a shell's background job) must not hand that on to the
    children it means to interrupt: the ignored disposition survives exec, and the child would never stop."""
    import signal

    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        test_a_child_in_its_own_session_stops_cleanly_on_a_passed_on_ctrl_c(tmp_path)
    finally:
        signal.signal(signal.SIGINT, previous)


def _intervals(log: Path) -> dict[str, list[float]]:
    """{name: [start, end]} from the lines "start NAME T" / "end NAME T" children append to ``log``."""
    spans: dict[str, list[float]] = {}
    for line in log.read_text().splitlines():
        what, name, at = line.split()
        spans.setdefault(name, [0.0, 0.0])[what == "end"] = float(at)
    return spans


def _most_at_once(spans: dict[str, list[float]]) -> int:
    return max(sum(1 for s, e in spans.values() if s <= start < e) for start, _ in spans.values())


def test_children_run_a_bounded_number_at_a_time_and_come_back_in_their_order(tmp_path):
    from pytest_kernelopt.child import run_children

    log = tmp_path / "log.txt"
    # The first sleeps longest: the children finish in another order than they were given.
    code = ("import sys, time\nname, pause = sys.argv[1], float(sys.argv[2])\n"
            f"open({str(log)!r}, 'a').write(f'start {{name}} {{time.monotonic()}}\\n')\n"
            "time.sleep(pause)\n"
            f"open({str(log)!r}, 'a').write(f'end {{name}} {{time.monotonic()}}\\n')\n"
            "print('done', name); sys.exit(int(name == 'c'))")
    names = ["a", "b", "c", "d", "e"]
    runs = run_children([[sys.executable, "-S", "-c", code, n, str(0.8 if n == "a" else 0.2)] for n in names],
                        env=child_env(), timeout=60, jobs=2)
    assert [r.output_tail for r in runs] == [f"done {n}" for n in names]
    assert [r.returncode for r in runs] == [0, 0, 1, 0, 0] and all(r.started and r.seconds > 0 for r in runs)
    assert _most_at_once(_intervals(log)) == 2


def test_children_share_one_time_limit(tmp_path):
    from pytest_kernelopt.child import run_children

    started = time.monotonic()
    first, second = run_children([[sys.executable, "-S", "-c", "import time; time.sleep(600)"]] * 2,
                                 env=child_env(), timeout=1.5, jobs=1)
    assert time.monotonic() - started < 30
    assert first.timed_out and first.started and first.seconds >= 1.0
    assert second.timed_out and not second.started and "not started" in second.output_tail


def test_ctrl_c_kills_every_running_child(tmp_path):
    """Ctrl-C (and SIGTERM, which the command line turns into a KeyboardInterrupt) reaches only the parent:
    the children run in sessions of their own, so the parent kills every one before the interrupt goes on."""
    import _thread
    import threading

    from pytest_kernelopt.child import run_children

    pid_files = [tmp_path / f"pid{i}" for i in range(2)]
    code = "import os, sys, time\nopen(sys.argv[1], 'w').write(str(os.getpid()))\ntime.sleep(600)"

    def interrupt_once_started() -> None:
        deadline = time.monotonic() + 30
        while not all(f.is_file() and f.read_text() for f in pid_files) and time.monotonic() < deadline:
            time.sleep(0.02)
        _thread.interrupt_main()

    # Python's own Ctrl-C handler for the test: a runner started with SIGINT ignored (nohup) would make
    # interrupt_main() a no-op.
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    threading.Thread(target=interrupt_once_started, daemon=True).start()
    started = time.monotonic()
    try:
        run_children([[sys.executable, "-S", "-c", code, str(f)] for f in pid_files], env=child_env(),
                     timeout=120, jobs=2)
    except KeyboardInterrupt:
        pass
    else:
        raise AssertionError("the interrupt did not reach run_children")
    finally:
        signal.signal(signal.SIGINT, previous)
    assert time.monotonic() - started < 30
    for f in pid_files:
        pid = int(f.read_text())
        assert not Path(f"/proc/{pid}").exists(), f"child {pid} outlived the interrupt"
