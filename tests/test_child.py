"""pytest_kernelopt.child: how the package starts, bounds and kills its child processes."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

from pytest_kernelopt.child import (
    OUTPUT_TAIL_BYTES, child_env, clip, module_command, run_child, scrubbed_env, tail_lines,
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
