"""tests/forkserver.py: a forked command behaves as the same command started fresh, or is started fresh."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

import forkserver

ROOT = Path(__file__).resolve().parent.parent
CLI = [sys.executable, "-m", "pytest_kernelopt.cli"]


def test_what_may_be_forked() -> None:
    assert forkserver.forkable([*CLI, "kernels", "x.py"])
    assert forkserver.forkable([forkserver.KERNELOPT, "verify"])
    assert forkserver.forkable([sys.executable, "-m", "pytest", "--kernelopt"])
    assert forkserver.forkable([sys.executable, "-mpytest", "--kernelopt-seeds", "1"])
    # What a plain pytest run imports is checked: it starts fresh. So does anything else.
    assert not forkserver.forkable([sys.executable, "-m", "pytest", "-q"])
    assert not forkserver.forkable([sys.executable, "-c", "pass"])


def test_a_variable_read_at_start_up_gets_a_zygote_started_with_it() -> None:
    seeded = forkserver.run([*CLI, "--version"], env={**os.environ, "PYTHONHASHSEED": "7"}, timeout=60)
    assert seeded.returncode == 0 and forkserver._zygote is not None
    assert forkserver._zygote.env.get("PYTHONHASHSEED") == "7"
    plain = forkserver.run([*CLI, "--version"], timeout=60)
    assert plain.stdout == seeded.stdout
    assert forkserver._zygote.env.get("PYTHONHASHSEED") == os.environ.get("PYTHONHASHSEED") != "7"


def test_a_forked_command_exits_and_writes_as_a_fresh_one(tmp_path: Path) -> None:
    argv = [*CLI, "verify", str(tmp_path / "missing.py"), "--kernel", "k", "--candidate", "c.py"]
    forked = forkserver.run(argv, cwd=tmp_path, timeout=120)
    fresh = subprocess.run(argv, cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert forked.returncode == fresh.returncode != 0, (forked, fresh)
    assert (forked.stdout, forked.stderr) == (fresh.stdout, fresh.stderr)


def test_a_timeout_kills_the_child_and_the_next_command_runs(interpreter: str) -> None:
    problem = ROOT / "tests" / "problems" / "elementwise_chain.py"
    with pytest.raises(subprocess.TimeoutExpired):
        forkserver.run([*CLI, "kernels", str(problem), "--device", "cpu"], timeout=0.05)
    after = forkserver.run([*CLI, "--version"], timeout=60)
    assert after.returncode == 0 and after.stdout.strip(), after
