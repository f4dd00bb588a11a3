"""Verification sessions: one compile, many candidates; restarts; verifier failures; full-size bookkeeping.

Sessions run in interpreter mode on ``elementwise_chain`` (one pointwise kernel, the
fastest example to compile). The chunked comparison helpers are tested on small
tensors with a small chunk size, so every chunk boundary is crossed.
"""

from __future__ import annotations

import re
import sys
import time
from pathlib import Path

import pytest


ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "tests" / "problems" / "elementwise_chain.py"


@pytest.fixture(scope="module")
def dump(compiled_models, tmp_path_factory) -> tuple[str, Path]:
    """(kernel name, unedited dump file) of elementwise_chain."""
    from pytest_kernelopt.candidate import render_dump

    compiled = compiled_models.get(PROBLEM)
    (name, handle), = compiled.kernels.items()
    path = tmp_path_factory.mktemp("session") / f"{name}.py"
    path.write_text(render_dump(handle.info, compiled.problem.id))
    return name, path


def _edit(source: str, old: str, new: str) -> str:
    edited = source.replace(old, new, 1)
    assert edited != source, old
    return edited


def _broken(source: str) -> str:
    """The last tl.store writes its value times 1.001."""
    return re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", source, count=1)


def _hanging(source: str) -> str:
    """Device code that never ends (interpreter mode runs it as Python)."""
    lines = source.splitlines()
    at = next(i for i, line in enumerate(lines) if "xoffset = tl.program_id(0)" in line)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines[at:at] = [f"{indent}spin = 0", f"{indent}while spin >= 0:", f"{indent}    spin = spin + 1"]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_one_session_verifies_many_candidates_and_survives_a_hang(dump, tmp_path, interpreter):
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    name, path = dump
    good = path.read_text()
    # 5 s: the unedited dump's checks take about a second, so this is a hang, not a slow check; the hang
    # spins for the whole limit (interpreter mode runs it as Python), so a longer one only costs CPU.
    with VerifySession(PROBLEM, interpreter, VerifyOptions(seeds=2, timeout=5)) as session:
        t0 = time.monotonic()
        first = session.verify(name, path)
        opened = time.monotonic() - t0
        assert first.status == "correct", first.reason
        assert first.reference == "float64" and first.reference_note is None
        broken = session.verify(name, source_of(_broken(good), "broken.py"))
        assert broken.status == "rejected" and broken.reason.startswith("kernel:"), broken.reason
        t0 = time.monotonic()
        hung = session.verify(name, source_of(_hanging(good), "hang.py"))
        assert hung.status == "rejected", hung.reason
        assert "timed out after 5 s" in hung.reason
        assert time.monotonic() - t0 < 60
        # The session starts a fresh worker and goes on: the dump is still correct.
        again = session.verify(name, path)
        assert again.status == "correct", again.reason
        assert session.restarts == 1
        t0 = time.monotonic()
        session.verify(name, path)
        further = time.monotonic() - t0
    # A further candidate does not pay for starting the worker and compiling again.
    assert further < opened, (further, opened)


@pytest.mark.slow
def test_verified_bytes_are_the_bytes_read(dump, tmp_path, interpreter):
    """What runs is what was read and hashed: later edits of the file and stale bytecode do not count."""
    import hashlib

    from pytest_kernelopt.verify import VerifyOptions, read_candidate, verify

    name, path = dump
    candidate = tmp_path / "candidate.py"
    candidate.write_text(path.read_text())
    source = read_candidate(candidate)
    candidate.write_text(_broken(path.read_text()))  # swapped after reading
    cache = tmp_path / "__pycache__"
    cache.mkdir()
    (cache / f"candidate.cpython-{sys.version_info[0]}{sys.version_info[1]}.pyc").write_bytes(b"\x00" * 64)
    verdict = verify(PROBLEM, name, source, interpreter, VerifyOptions(seeds=1))
    assert verdict.status == "correct", verdict.reason
    assert verdict.candidate_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert verdict.verified_source == path.read_text()


@pytest.mark.slow
def test_opening_too_slowly_is_the_verifiers_failure(dump, interpreter):
    from pytest_kernelopt.errors import VerifierError
    from pytest_kernelopt.verify import VerifyOptions, verify

    name, path = dump
    with pytest.raises(VerifierError, match="no candidate ran"):
        verify(PROBLEM, name, path, interpreter, VerifyOptions(open_timeout=0.5))


FP64_HOSTILE = '''
import torch


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(16, 16)

    def forward(self, x):
        # A model that refuses anything but fp32 (the verifier's float64 mode maps casts such as
        # .float() to float64, so only a check of the dtype itself keeps a float64 copy from running).
        if x.dtype != torch.float32:
            raise RuntimeError(f"fp32 only, not {x.dtype}")
        return torch.softmax(self.lin(x) * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_a_missing_float64_reference_is_never_silent(tmp_path, interpreter):
    """The verdict says the judge was the fp32 eager model, and why."""
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.verify import VerifyOptions, verify

    problem = tmp_path / "fp32_pinned.py"
    problem.write_text(FP64_HOSTILE)
    compiled = compile_problem(load_problem(problem), interpreter, reset=False)
    name, handle = next(iter(compiled.kernels.items()))
    candidate = tmp_path / "cand.py"
    candidate.write_text(render_dump(handle.info, "fp32_pinned"))
    verdict = verify(problem, name, candidate, interpreter, VerifyOptions(seeds=1))
    assert verdict.status == "correct", verdict.reason
    assert verdict.reference == "eager"
    assert "float64 reference failed" in verdict.reference_note and "RuntimeError" in verdict.reference_note


STATEFUL = {
    "input": ('''
import torch
class Model(torch.nn.Module):
    def forward(self, x, y):
        x.mul_(2.0)                      # writes into the caller's input
        return torch.tanh(x + y)
def get_inputs():
    return [torch.randn(16, 32), torch.randn(16, 32)]
def get_init_inputs():
    return []
''', "input 0"),
    "buffer": ('''
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("cache", torch.zeros(4, 8, 16))
    def forward(self, k):
        self.cache.copy_(torch.roll(self.cache, 1, dims=1))   # a rolling cache, kept in the module
        self.cache[:, 0] = k
        return torch.softmax(self.cache.sum(-1), dim=-1)
def get_inputs():
    return [torch.randn(4, 16)]
def get_init_inputs():
    return []
''', "buffer cache"),
}


@pytest.mark.slow
@pytest.mark.parametrize("kind", sorted(STATEFUL))
def test_a_model_that_writes_into_its_state_is_the_problems_error_before_any_candidate(kind, tmp_path, interpreter):
    """A forward that updates its input or a buffer in place makes every run start from another state: the
    unedited dump was rejected, "the candidate wrote into ...", after minutes. Now the session does not open,
    naming what changed."""
    from pytest_kernelopt.errors import ProblemError
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    source, changed = STATEFUL[kind]
    problem = tmp_path / f"stateful_{kind}.py"
    problem.write_text(source)
    with pytest.raises(ProblemError) as info, VerifySession(problem, interpreter, VerifyOptions(seeds=1)) as session:
        session.open()
    text = str(info.value)
    assert f"{changed} changed during one run" in text and "writes into its own state" in text, text
    assert "candidate" not in text


OUTPUTS = """
import dataclasses
import torch
@dataclasses.dataclass
class Out:
    probs: torch.Tensor
    norm: torch.Tensor
class Opaque:
    def __init__(self, t):
        self.t = t
class Model(torch.nn.Module):
    def forward(self, x):
        h = torch.tanh(x) * 3.0
        return {RETURN}
def get_inputs():
    return [torch.randn(16, 32)]
def get_init_inputs():
    return []
"""


@pytest.mark.slow
def test_outputs_in_a_dataclass_are_judged_and_an_opaque_object_is_the_problems_error(tmp_path, interpreter):
    """A model returning a dataclass had every output left out of the comparison (the model stage judged
    nothing: "scale 0", bench's error 0): now its fields are compared, and an output of a type that cannot be
    compared is the problem's error at opening, naming the type."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.errors import ProblemError
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    problem = tmp_path / "boxed.py"
    problem.write_text(OUTPUTS.replace("{RETURN}", "Out(torch.softmax(h, -1), h.norm(dim=-1))"))
    with VerifySession(problem, interpreter, VerifyOptions(seeds=1)) as session:
        (name,) = session.kernels
        verdict = session.verify(name, source_of(render_dump(session.kernel_info(name), "boxed"), "dump.py"))
    assert verdict.status == "correct", verdict.reason
    model_errors = [e for e in verdict.errors if e.scale is not None]
    assert model_errors and all(e.scale > 1.0 for e in model_errors)  # max |reference| over both fields

    problem.write_text(OUTPUTS.replace("{RETURN}", "Opaque(h)"))
    with pytest.raises(ProblemError) as info, VerifySession(problem, interpreter, VerifyOptions(seeds=1)) as session:
        session.open()
    assert "the model returns an object of type Opaque, which kernelopt cannot compare" in str(info.value)


@pytest.mark.slow
def test_a_problem_whose_inputs_or_outputs_a_seed_does_not_fix_is_the_problems_error_not_the_candidates(tmp_path, interpreter):
    """A file drawing from a generator of its own (numpy's default_rng) gave other inputs at every draw: the
    compiler's own kernel was rejected at the kernel stage, "the candidate wrote into memory it may only read".
    The session now refuses the problem when it opens, saying why and how to draw; and a model that draws random
    numbers itself (dropout in training mode) likewise, naming the op."""
    from pytest_kernelopt.errors import ProblemError
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    problem = tmp_path / "own_rng.py"
    problem.write_text(OUTPUTS.replace("{RETURN}", "h").replace(
        "return [torch.randn(16, 32)]",
        "import numpy as np\n    return [torch.from_numpy(np.random.default_rng().standard_normal((16, 32)))]"))
    with pytest.raises(ProblemError) as info, VerifySession(problem, interpreter, VerifyOptions(seeds=1)) as session:
        session.open()
    text = str(info.value)
    assert "get_inputs() is not reproducible: two draws under seed" in text and "(input 0)" in text, text
    assert "candidate" not in text

    # Random numbers drawn inside the model (dropout left in training mode): other outputs at every run.
    problem.write_text(OUTPUTS.replace("{RETURN}", "torch.nn.functional.dropout(h, 0.1, training=True)"))
    with pytest.raises(ProblemError) as info, VerifySession(problem, interpreter, VerifyOptions(seeds=1)) as session:
        session.open()
    assert "the model draws random numbers when it runs (bernoulli_" in str(info.value), str(info.value)

    # A graph that specialises on an input's value (a Python number from .item()): compiled again for every draw,
    # its kernels not launched on the next draw ("rejected at kernel: ... was not launched", the unedited dump).
    problem.write_text(OUTPUTS.replace("{RETURN}", "torch.softmax(h / x.abs().max().item(), -1)"))
    with pytest.raises(ProblemError) as info, VerifySession(problem, interpreter, VerifyOptions(seeds=2)) as session:
        session.open()
    text = str(info.value)
    assert "the compiled model compiled again for another input draw (Dynamo: " in text, text
    assert "capture_scalar_outputs = True" in text and "candidate" not in text


# `kernelopt verify --candidate A B ...` (one session for several candidates, exit 1 when one is rejected, --json
# printing nothing but the JSON list): tests/test_cascade.py's pointwise_verdicts run, on this problem.


# --- full-size bookkeeping, at small sizes with small chunks ------------------------------

@pytest.fixture
def small_chunks(monkeypatch):
    from pytest_kernelopt.verify import tensors

    monkeypatch.setattr(tensors, "CHUNK", 64)


def test_compare_finds_one_bad_element_in_the_last_chunk(small_chunks):
    import torch

    from pytest_kernelopt.verify.kernel import compare
    from pytest_kernelopt.verify.prepared import StageFailure

    expected = torch.randn(1000, dtype=torch.float32)
    assert compare(expected, expected.clone(), 1e-4, "x").worst_ratio == 0.0
    actual = expected.clone()
    actual[999] += 1.0
    with pytest.raises(StageFailure, match="1 of 1000 element"):
        compare(expected, actual, 1e-4, "x")
    actual = expected.clone()
    actual[700] = float("nan")
    with pytest.raises(StageFailure, match=r"NaN/Inf where the expected result has none.*flat index 700 \[700\]"):
        compare(expected, actual, 1e-4, "x")


def test_compare_walks_strided_tensors(small_chunks):
    import torch

    from pytest_kernelopt.verify.kernel import compare
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.tensors import chunks

    base = torch.randn(40, 30)
    expected = base.t()  # not contiguous, 1200 elements
    assert sum(p[0].numel() for p in chunks(expected)) == 1200
    actual = expected.clone()
    actual[29, 39] = 5.0
    with pytest.raises(StageFailure):
        compare(expected, actual, 1e-4, "x")
    ints = torch.arange(1000).reshape(10, 100)
    other = ints.clone()
    other[9, 99] = -1
    with pytest.raises(StageFailure, match="flat index 999"):
        compare(ints, other, 0.0, "i")


def test_checksum_notices_one_changed_element(small_chunks):
    import torch

    from pytest_kernelopt.verify.tensors import checksum

    x = torch.randn(5000)
    before = checksum(x)
    assert checksum(x.clone()) == before
    y = x.clone()
    y[4321] = y[4321] + 1e-3
    assert checksum(y) != before
    swapped = x.clone()  # the same values in another order
    swapped[0], swapped[4999] = x[4999].item(), x[0].item()
    assert checksum(swapped) != before


def test_reference_keeps_float64_only_when_small(monkeypatch):
    import torch

    from pytest_kernelopt.verify import model

    ref = torch.randn(100, dtype=torch.float64)
    base = ref.float()
    small = model._output_reference(base, ref)
    assert small.ref_hi.dtype == torch.float64 and small.residue == 0.0
    monkeypatch.setattr(model, "EXACT_REFERENCE_BYTES", 64)
    large = model._output_reference(base, ref)
    assert large.ref_hi.dtype == torch.float32
    # The rounding is bounded element by element (one fp32 ulp of each), not by the largest
    # element's: |ref - ref_hi| <= residue * |ref_hi| + residue_abs everywhere.
    assert large.residue == torch.finfo(torch.float32).eps and large.residue_abs == 0.0
    assert bool(((ref - large.ref_hi.double()).abs() <= large.residue * large.ref_hi.double().abs()).all())
    assert large.nonfinite is None
    base[3] = float("inf")
    assert model._output_reference(base, ref).nonfinite.sum() == 1


def test_out_of_memory_is_the_verifiers_failure_not_a_rejection():
    """A Failure(kind="memory") from the worker becomes exit 2 with the size, never a verdict."""
    from pathlib import Path

    from pytest_kernelopt.errors import VerifierError
    from pytest_kernelopt.verify.session import _failure
    from pytest_kernelopt.verify.prepared import out_of_memory
    from pytest_kernelopt.verify.protocol import Failure

    exc = out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 16.00 GiB"), "kernel stage")
    assert "not enough GPU memory to verify at this size (kernel stage): needed about 16.0 GiB" in str(exc)
    error = _failure(Failure(kind="memory", message=str(exc)), Path("p.py"))
    assert isinstance(error, VerifierError) and error.exit_code == 2
    assert "p.py" in str(error) and "needed about 16.0 GiB" in str(error)


def test_cuda_failing_inside_the_namespaces_falls_back_once_and_says_so(monkeypatch):
    """Opening (before any candidate runs) is retried without namespaces when CUDA cannot start in them."""
    import warnings

    from pytest_kernelopt.errors import VerifierError
    from pytest_kernelopt.verify import VerifySession, sandbox

    monkeypatch.setattr(sandbox, "_probed", {"probed": sandbox.Isolation(("pid",), ("unshare",))})
    monkeypatch.setattr(sandbox, "_warned", [])
    calls = []

    def fake_open(self, budget_s=None):
        calls.append(tuple(sandbox.isolation().namespaces))
        if len(calls) == 1:
            raise VerifierError("p.py: the verifier's worker failed while opening the problem (RuntimeError: "
                                "CUDA driver initialization failed)")
        return "opened"

    monkeypatch.setattr(VerifySession, "_open_worker", fake_open)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert VerifySession("p.py", "cuda").open() == "opened"
    assert calls == [("pid",), ()]
    assert "CUDA failed inside the namespaces" in sandbox.isolation().why_not
    assert any("without Linux namespaces" in str(w.message) for w in caught)
    # On the CPU, or for a failure that is not about CUDA, nothing is retried.
    monkeypatch.setattr(sandbox, "_probed", {"probed": sandbox.Isolation(("pid",), ("unshare",))})
    calls.clear()

    def broken(self, budget_s=None):
        calls.append(1)
        raise VerifierError("p.py: opening took longer than 5 s")

    monkeypatch.setattr(VerifySession, "_open_worker", broken)
    with pytest.raises(VerifierError):
        VerifySession("p.py", "cuda").open()
    assert calls == [1]


def test_a_write_into_the_references_rejects_and_retires_the_worker():
    """Pointer arithmetic reaches any device memory: the judge is checksummed after every stage."""
    import torch

    from pytest_kernelopt.verify.model import OutputReference, SeedReference
    from pytest_kernelopt.verify.pipeline import healthy
    from pytest_kernelopt.verify.prepared import Prepared

    ref = OutputReference(shape=(64,), dtype=torch.float32, floating=True, ref_hi=torch.randn(64))
    prepared = Prepared(compiled=None, device="cpu", seeds=[1], references={1: SeedReference([ref])})
    prepared.seal_references()
    assert prepared.references_intact() and healthy(prepared)
    ref.ref_hi[17] += 1.0  # what a stray store would do
    assert not prepared.references_intact()
    assert not healthy(prepared)  # the worker exits and the session starts a fresh one


def test_a_rounded_reference_judges_small_elements_by_their_own_rounding(monkeypatch):
    """The H200 case: a 2^25-element output rounded to fp32 for the judge. The baseline's own
    output passes element by element, also where elements are 1e6 times smaller than the
    largest (a bound taken from the largest element's rounding failed those); a 1e-4 error on a
    small element still fails."""
    import torch

    from pytest_kernelopt.verify import model
    from pytest_kernelopt.verify.numerics import NumericsRule
    from pytest_kernelopt.verify.prepared import StageFailure

    monkeypatch.setattr(model, "EXACT_REFERENCE_BYTES", 64)
    gen = torch.Generator().manual_seed(7)
    ref = torch.randn(4096, generator=gen, dtype=torch.float64) * torch.logspace(-6, 0, 4096, dtype=torch.float64)
    base = ref.float()
    out = model._output_reference(base, ref)
    assert out.ref_hi.dtype == torch.float32
    assert model.judge_output(base.clone(), out, NumericsRule(), "baseline").worst_ratio <= 1.0
    off = base.clone()
    off[10] *= 1 + 1e-4
    with pytest.raises(StageFailure, match=r"flat index 10|\[10\]"):
        model.judge_output(off, out, NumericsRule(), "off")


def test_opening_is_stopped_where_the_callers_budget_ends_never_as_the_problems_error(interpreter):
    # tune's --run-budget-s bounds opening a session (a full-size model on a CPU: minutes of compiling and float64
    # references); the 30-minute opening limit is the bound without a budget.
    from pytest_kernelopt.errors import BudgetSpent
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    started = time.monotonic()
    with VerifySession(PROBLEM, "cpu", VerifyOptions(model_seconds=0.1, kernel_seconds=0.1)) as session, \
            pytest.raises(BudgetSpent, match=r"into opening the problem .*: the budget it was given ran out"):
        session.open(budget_s=0.2)  # opening takes seconds here: torch's import alone
    assert time.monotonic() - started < 30
