"""pytest_kernelopt.child: how the package starts, bounds and kills its child processes."""

from __future__ import annotations

import os
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
