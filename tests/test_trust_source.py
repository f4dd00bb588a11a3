"""The text the static stage checked is the text that runs, for every reader of it.

Triton reads a kernel's source again after Python compiled it: ``inspect`` (through
``linecache``) for ``JITFunction.src`` on the GPU, and in the interpreter from the last
line of that text that starts with ``def``. Each attack here makes one of those readers
see text the static stage never judged; each test asserts the rejection *and* that the
hidden text did not run (it would write a marker file). The controls switch the
defences off to show that the attack is real.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from conftest import REPO

ARGS = ["in_ptr0", "out_ptr0", "xnumel"]

# A small candidate in the language: out = 2 * in, 64 elements.
BASE = '''"""A doubling kernel."""
import triton
import triton.language as tl


@triton.jit
def double_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xindex = tl.program_id(0) * XBLOCK + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, tmp0 * 2.0, xmask)
    LAST


def run(in_ptr0, out_ptr0, xnumel, *, stream=None):
    XBLOCK = 64
    double_kernel[(triton.cdiv(xnumel, XBLOCK),)](in_ptr0, out_ptr0, xnumel, XBLOCK=XBLOCK)
'''

# Hidden after the real body, inside a string that the real parse sees as a constant: the
# interpreter, reading from the last `def` line, runs it as the kernel.
HIDDEN_DEF = '''tmp9 = 3
    _note = """ reference shape of the kernel, for reviewers:
  def double_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    open("MARK", "w").write("hidden text ran")
    _rest = """
    tmp9 = tmp9 + 1  # """'''

# A kernel kept in a string constant, and a character on which the parser and
# str.splitlines() disagree: linecache's line numbers shift and inspect reads the string.
SHIFTED = '''

_SPARE = """
@triton.jit
def double_kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    open("MARK", "w").write("hidden text ran")
"""
# spare kernel kept for reference\u2028 (see above)
'''


def _hidden_def(mark: Path) -> str:
    return BASE.replace("LAST", HIDDEN_DEF.replace("MARK", str(mark)))


def _shifted(mark: Path) -> str:
    text = BASE.replace("    LAST\n", "")
    return text.replace("\n\n@triton.jit", SHIFTED.replace("MARK", str(mark)) + "@triton.jit", 1)


def _run(module) -> object:
    import torch

    from pytest_kernelopt.candidate import CandidateKernel

    x = torch.randn(64)
    out = torch.full((64,), float("nan"))
    CandidateKernel(module, "test").run(x, out, 64)
    return x, out


def test_the_base_candidate_runs(interpreter):
    from pytest_kernelopt.candidate import load_candidate_source
    from pytest_kernelopt.verify.static import check_candidate

    text = BASE.replace("    LAST\n", "")
    assert check_candidate(text, ARGS).ok
    x, out = _run(load_candidate_source(text, "base.py"))
    assert (out == 2 * x).all()


def test_def_line_in_a_string_is_rejected_statically_on_its_line():
    from pytest_kernelopt.verify.static import check_candidate

    text = _hidden_def(Path("/nonexistent"))
    line = next(i for i, t in enumerate(text.splitlines(), 1) if t.startswith("  def double_kernel"))
    report = check_candidate(text, ARGS)
    assert not report.ok
    assert any(p.startswith(f"line {line}: ") and "starts with 'def'" in p for p in report.problems), report.problems


def test_hidden_def_is_refused_by_the_loader_and_never_runs(interpreter, tmp_path, monkeypatch):
    """Even with the static stage's line rule off, the loader sees that the interpreter would
    compile other text, and refuses before anything runs."""
    from pytest_kernelopt.candidate import format as candidate
    from pytest_kernelopt.errors import CandidateError

    mark = tmp_path / "mark"
    with pytest.raises(CandidateError, match="the interpreter's re-read gives other source than was checked"):
        candidate.load_candidate_source(_hidden_def(mark), "hidden_def.py")
    assert not mark.exists()


def test_hidden_def_control_really_runs_without_the_loader_check(interpreter, tmp_path, monkeypatch):
    from pytest_kernelopt.candidate import format as candidate

    mark = tmp_path / "mark"
    monkeypatch.setattr(candidate, "_rereads_agree", lambda *a: None)
    module = candidate.load_candidate_source(_hidden_def(mark), "hidden_def_control.py")
    try:
        _run(module)
    except Exception:  # noqa: BLE001 - the hidden kernel need not finish; it ran
        pass
    assert mark.read_text() == "hidden text ran"


@pytest.mark.parametrize("char", ["\u2028", "\u2029", "\x0c", "\x0b", "\x1c", "\x85", "\r", "\u202e", "\u200b"])
def test_characters_readers_disagree_on_are_rejected(char):
    from pytest_kernelopt.verify.static import check_candidate

    text = BASE.replace("LAST", f"tmp9 = 1  # x{char}y")
    line = next(i for i, t in enumerate(text.split("\n"), 1) if "tmp9 = 1" in t)
    report = check_candidate(text, ARGS)
    assert not report.ok
    assert any(p.startswith(f"line {line}: character U+{ord(char):04X}") for p in report.problems), report.problems


def test_crlf_line_endings_are_accepted():
    from pytest_kernelopt.verify.static import check_candidate

    assert check_candidate(BASE.replace("    LAST\n", "").replace("\n", "\r\n"), ARGS).ok


def test_shifted_lines_are_refused_by_the_loader_and_never_run(interpreter, tmp_path):
    from pytest_kernelopt.candidate import load_candidate_source
    from pytest_kernelopt.errors import CandidateError

    mark = tmp_path / "mark"
    with pytest.raises(CandidateError, match="U\\+2028"):
        load_candidate_source(_shifted(mark), "shifted.py")
    assert not mark.exists()


# The GPU path (no interpreter): JITFunction.src and inspect, in a fresh process where
# triton is imported without TRITON_INTERPRET. Creating a JITFunction needs no GPU.
JIT_PROBE = """
import os, sys
os.environ.pop("TRITON_INTERPRET", None)
import pytest_kernelopt.verify.static as static
static.text_problems = lambda source: []  # the character rule off: the loader's re-read check alone
from pytest_kernelopt.candidate import load_candidate_source
from pytest_kernelopt.errors import CandidateError
text = open(sys.argv[1]).read()
try:
    load_candidate_source(text, "probe.py")
    print("LOADED")
except CandidateError as exc:
    print("REJECTED", exc)
"""


@pytest.mark.parametrize("attack", ["shifted", "base"])
def test_jit_readers_see_the_checked_text(tmp_path, attack):
    mark = tmp_path / "mark"
    path = tmp_path / "probe.py"
    path.write_text(_shifted(mark) if attack == "shifted" else BASE.replace("    LAST\n", ""))
    out = subprocess.run([sys.executable, "-c", JIT_PROBE, str(path)], capture_output=True, text=True, cwd=REPO,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    if attack == "base":
        assert out.stdout.startswith("LOADED"), out.stdout + out.stderr[-1000:]
    else:
        assert out.stdout.startswith("REJECTED"), out.stdout
        assert "other source than was checked" in out.stdout or "inspect places it" in out.stdout, out.stdout
    assert not mark.exists()


@pytest.mark.parametrize("head", [
    "\x0c# -*- coding: latin-1 -*-\n",       # a form feed before the declaration
    "#!/usr/bin/env python\n# vim: set fileencoding=cp1252 :\n",
    "# coding=utf_7\n",
])
def test_only_utf8_coding_declarations(head):
    from pytest_kernelopt.verify.static import check_candidate

    report = check_candidate(head + BASE.replace("    LAST\n", ""), ARGS)
    assert not report.ok
    assert any("coding" in p or "U+000C" in p for p in report.problems), report.problems


def test_utf8_coding_declaration_is_fine():
    from pytest_kernelopt.verify.static import check_candidate

    assert check_candidate("# -*- coding: utf-8 -*-\n" + BASE.replace("    LAST\n", ""), ARGS).ok


def test_every_example_dump_passes_the_text_rules(compiled_models):
    """No kernel Inductor writes (dumped as a candidate) trips the new rules."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify.static import check_candidate

    for path in sorted((REPO / "tests" / "problems").glob("*.py")):
        compiled = compiled_models.get(path)
        for name, handle in compiled.kernels.items():
            report = check_candidate(render_dump(handle.info, compiled.problem.id), [a.name for a in handle.info.args])
            assert report.ok, (path.name, name, report.problems)


def test_the_loader_refuses_an_oversized_text_before_reading_it_as_code(interpreter):
    """Every path that runs a candidate (worker, gate, production) goes through the loader,
    so the size cap holds there too, not only where a file is read."""
    from pytest_kernelopt.candidate import load_candidate_source
    from pytest_kernelopt.errors import CandidateError
    from pytest_kernelopt.verify import CANDIDATE_BYTES

    text = BASE.replace("    LAST\n", "") + "#" * CANDIDATE_BYTES + "\n"
    with pytest.raises(CandidateError, match="over the .* limit"):
        load_candidate_source(text, "huge.py")


def test_host_code_cannot_read_an_address():
    """Guarded copies and the model's own buffers differ in where they lie (production's
    consecutive allocations sit a rounded size apart): host code that could read an address
    could launch differently outside verification."""
    from pytest_kernelopt.verify.static import check_candidate

    text = BASE.replace("    LAST\n", "").replace(
        "    XBLOCK = 64\n",
        "    XBLOCK = 64\n    if out_ptr0.data_ptr() - in_ptr0.data_ptr() == 512:\n        XBLOCK = 32\n")
    report = check_candidate(text, ARGS)
    assert not report.ok
    assert any("data_ptr" in p for p in report.problems), report.problems
