"""Sealed verification: hidden state, writes into read-only arguments, stress inputs.

* A candidate that counts its calls cannot aim at the number of calls a verification
  makes: unchecked runs of a random count precede every checked one. The static
  stage leaves no host state to count with, so the mechanism is tested one level
  down, with a Python kernel object in the worker's stage functions.
* In the model stage every launch of the candidate is guarded: writing into an
  argument the compiler's kernel only reads (here an intermediate that no later
  kernel reads, so the output stays right) is rejected.
* Input draws (tiny, mid-range, huge, mixed magnitudes, one-signed, NaN/Inf) catch a
  softmax without max-subtraction that randn inputs do not.

Each rejection is followed by a good candidate in the same session (or on the same
prepared problem), which must still be correct: nothing was corrupted.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

import pytest

# Interpreter mode runs device code in numpy: the compiler's own kernels overflow on the
# x1e4 stress inputs (sigmoid's exp), and numpy says so.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

ROOT = Path(__file__).resolve().parent.parent
CHAIN = ROOT / "tests" / "problems" / "elementwise_chain.py"

ROW_SOFTMAX = '''"""Row softmax: Inductor subtracts each row's max before exp."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []
'''

GEMM_REDUCTION = '''"""A GEMM (extern) whose result one Triton reduction reads and nothing later does."""
import torch


class Model(torch.nn.Module):
    def __init__(self, dim):
        super().__init__()
        self.w = torch.nn.Parameter(torch.randn(dim, dim) * 0.1)

    def forward(self, x):
        return torch.tanh(x @ self.w).sum(-1)


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return [32]
'''


def _kernel_and_dump(session: Any) -> tuple[str, str]:
    """(kernel name, unedited dump) of a one-kernel problem, as the session's worker compiled it (no
    second compile in this process)."""
    from pytest_kernelopt.candidate import render_dump

    (name, info), = session.kernels.items()
    return name, render_dump(info, session.problem.stem)


def _without_max_subtraction(dump: str) -> str:
    """The softmax's exp takes the loaded logits, not logits minus the row max."""
    loaded = re.search(r"(tmp\d+) = tl\.load\(in_ptr0", dump).group(1)
    edited, n = re.subn(r"libdevice\.exp\(tmp\d+\)", f"libdevice.exp({loaded})", dump)
    assert n == 1 and edited != dump
    return edited


def _also_writes_its_input(dump: str) -> str:
    """After its last store, the kernel stores into ``in_ptr0`` (which it may only read)."""
    lines = dump.splitlines()
    load = next(line for line in lines if "tl.load(in_ptr0" in line)
    call = ast.parse(load.split("=", 1)[1].strip(), mode="eval").body
    pointer, mask = ast.unparse(call.args[0]), ast.unparse(call.args[1])
    value = load.split("=", 1)[0].strip()
    at = max(i for i, line in enumerate(lines) if "tl.store(" in line)
    indent = lines[at][: len(lines[at]) - len(lines[at].lstrip())]
    lines.insert(at + 1, f"{indent}tl.store({pointer}, {value} + 1.0, {mask})")
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_stress_inputs_reject_a_softmax_without_max_subtraction(tmp_path, interpreter):
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    problem = tmp_path / "row_softmax.py"
    problem.write_text(ROW_SOFTMAX)
    with VerifySession(problem, interpreter, VerifyOptions(seeds=2)) as session:
        name, dump = _kernel_and_dump(session)
        naive = _without_max_subtraction(dump)
        verdict = session.verify(name, source_of(naive, "naive_softmax.py"))
        assert verdict.status == "rejected", verdict.reason
        # The seeded (randn) inputs pass; an input draw of large magnitudes catches it, in the kernel stage.
        assert re.match(r"kernel: draw '(mid|huge|mixed|special|offset\w*|near_max|constant|sorted|reversed|special_rows|coarse)'",
                        verdict.reason), verdict.reason
        assert "NaN/Inf where the expected result has none, or not where it has them" in verdict.reason
        good = session.verify(name, source_of(dump, "dump.py"))
        assert good.status == "correct", good.reason


@pytest.mark.slow
def test_model_stage_rejects_a_write_into_a_read_only_intermediate(tmp_path, interpreter):
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    problem = tmp_path / "gemm_reduction.py"
    problem.write_text(GEMM_REDUCTION)
    with VerifySession(problem, interpreter, VerifyOptions(seeds=2)) as session:
        name, dump = _kernel_and_dump(session)
        writer = source_of(_also_writes_its_input(dump), "writer.py")
        good = source_of(dump, "dump.py")
        before = session.verify_model({name: good})
        assert before.status == "correct", before.reason
        # The model stage alone (the gate's model item): the output stays right, the
        # model's inputs and weights are untouched; only the per-launch guard sees it.
        verdict = session.verify_model({name: writer})
        assert verdict.status == "rejected", verdict.reason
        # Caught at the launch, in an unchecked run or the checked one (the guard is the same in both).
        assert re.match(r"model: seed \d+( \(an unchecked run\))?, kernel ", verdict.reason), verdict.reason
        assert "read-only argument in_ptr0: changed" in verdict.reason
        # The full cascade stops it earlier, at the kernel stage.
        early = session.verify(name, writer)
        assert early.status == "rejected" and early.reason.startswith("kernel:"), early.reason
        # Nothing corrupted: the reference is the one taken at opening, and the dump
        # measures the same error against it as before.
        after = session.verify_model({name: good})
        assert after.status == "correct", after.reason
        assert [e.candidate_vs_fp64 for e in after.errors] == [e.candidate_vs_fp64 for e in before.errors]
        assert session.verify(name, good).status == "correct"
        assert session.restarts == 0


# --- hidden state, one level down ---------------------------------------------------------


class _Counting:
    """The compiler's kernel, right for its first ``honest`` calls and off afterwards (x1.5 + 1: relative,
    so that a huge input draw does not hide it)."""

    def __init__(self, original, out: int, honest: int):
        self.original, self.out, self.honest = original, out, honest
        self.calls = 0

    def run(self, *args, stream=None, **kwargs):
        self.calls += 1
        self.original.run(*args, stream=stream, **kwargs)
        if self.calls > self.honest:
            args[self.out].mul_(1.5).add_(1.0)


def _prepare(compiled, seeds: list[int]):
    """What ``pipeline.open_problem`` prepares, on a compiled model this process keeps live.

    (``open_problem`` compiles afresh and resets Dynamo, which would leave the other
    tests' compiled models stale.)
    """
    from pytest_kernelopt.verify.model import build_references
    from pytest_kernelopt.verify.prepared import Prepared, weight_sums
    from pytest_kernelopt.verify.tensors import checksum

    prepared = Prepared(compiled=compiled, device="cpu", seeds=seeds, references={})
    for seed in seeds:
        prepared.integrity[seed] = [checksum(x) for x in prepared.inputs(seed)]
    prepared.references, kind, _ = build_references(prepared)
    assert kind == "float64"
    prepared.weights = weight_sums(compiled.model)
    return prepared


@pytest.fixture
def chain(compiled_models):
    """(prepared elementwise_chain on one seed, kernel name, its handle, index of its output)."""
    compiled = compiled_models.live(CHAIN)
    (name, handle), = compiled.kernels.items()
    out = next(i for i, a in enumerate(handle.info.args) if a.written)
    return _prepare(compiled, [1]), name, handle, out


def test_kernel_stage_calls_the_candidate_an_unpredictable_number_of_times(chain, monkeypatch):
    from pytest_kernelopt.verify.kernel import FRESH, kernel_stage
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.tensors import STRESS_VARIANTS

    prepared, name, handle, out = chain
    # Without the unchecked runs, the stage's call count is fixed, and a counter that
    # is right for exactly that many calls passes.
    monkeypatch.setattr(prepared, "extra_run_count", lambda: 0)
    probe = _Counting(handle.original, out, honest=10**9)
    kernel_stage(prepared, name, probe, False)
    predictable = probe.calls
    kernel_stage(prepared, name, _Counting(handle.original, out, honest=predictable), False)
    monkeypatch.undo()
    for _ in range(3):
        with pytest.raises(StageFailure, match="outside the allowance"):
            kernel_stage(prepared, name, _Counting(handle.original, out, honest=predictable), False)
        probe = _Counting(handle.original, out, honest=10**9)
        kernel_stage(prepared, name, probe, False)
        assert probe.calls - predictable in (1, 2, 3)  # one launch per run
    assert {prepared.extra_run_count() for _ in range(60)} == {1, 2, 3}
    # Nothing corrupted: the compiler's kernel, as a candidate, still matches; every stress variant ran.
    rows = kernel_stage(prepared, name, handle.original, False)
    assert rows[0].kernel_max_abs == 0.0
    draws = [FRESH, *STRESS_VARIANTS]  # the plain draw under a fresh seed, and every stress draw
    assert sorted(d.split(" ")[0] for d in rows.stress) == sorted(draws) and rows.skipped == []
    assert rows.describe().startswith(f"{len(draws)} input draw(s): ")


def test_model_stage_checks_a_run_the_candidate_cannot_count_on(chain, monkeypatch):
    from pytest_kernelopt.verify.model import model_stage
    from pytest_kernelopt.verify.prepared import StageFailure

    prepared, name, handle, out = chain
    monkeypatch.setattr(prepared, "extra_run_count", lambda: 0)
    model_stage(prepared, {name: _Counting(handle.original, out, honest=1)}, 4.0, False)  # one seed, one launch
    monkeypatch.undo()
    with pytest.raises(StageFailure, match="against the float64 reference: .* outside the allowance"):
        model_stage(prepared, {name: _Counting(handle.original, out, honest=1)}, 4.0, False)
    rows, _ = model_stage(prepared, {name: handle.original}, 4.0, False)
    assert rows[0].candidate_vs_fp64 == rows[0].baseline_vs_fp64


def test_model_stage_guard_sees_a_write_into_the_models_input(chain):
    """A Python kernel that writes into its read-only input is stopped at the launch."""
    from pytest_kernelopt.verify.model import model_stage
    from pytest_kernelopt.verify.prepared import StageFailure

    prepared, name, handle, out = chain
    read = next(i for i, a in enumerate(handle.info.args) if a.kind == "tensor" and not a.written)

    class Writer:
        def run(self, *args, stream=None, **kwargs):
            handle.original.run(*args, stream=stream, **kwargs)
            args[read].mul_(2.0)

    with pytest.raises(StageFailure, match=f"read-only argument {handle.info.args[read].name}: changed"):
        model_stage(prepared, {name: Writer()}, 4.0, False)
    assert model_stage(prepared, {name: handle.original}, 4.0, False)[0][0].candidate_vs_fp64 is not None


# --- the pieces ---------------------------------------------------------------------------


def test_stress_variants_transform_floats_in_place_and_leave_integers(interpreter):
    import torch

    from pytest_kernelopt.verify.tensors import stress, views

    base = torch.randn(48, 64)
    strided = base.clone().t()  # not contiguous: pieces are row blocks, views not copies
    pieces = list(views(strided, limit=100))
    assert len(pieces) > 1 and sum(p.numel() for p in pieces) == strided.numel()
    for p in pieces:
        p.fill_(3.0)
    assert bool((strided == 3.0).all())
    for variant, expect in (("signed", lambda t: t.abs()), ("signed", lambda t: -t.abs())):
        seed = next(s for s in range(100) if torch.equal(_stressed(base, variant, s), expect(base.t())))
        assert torch.equal(_stressed(base, variant, seed), expect(base.t()))  # the same seed, the same draw
    y = torch.randn(1000, 3).t()
    stress(y, "mixed", 7)
    assert 200 < int((y == 0).sum()) < 550  # about an eighth of 3000
    indices = torch.randint(0, 10, (100,))
    kept = indices.clone()
    for variant in ("huge", "signed", "mixed", "special"):
        stress(indices, variant, 0)
    assert torch.equal(indices, kept)


def _stressed(base, variant: str, seed: int):
    from pytest_kernelopt.verify.tensors import stress

    y = base.clone().t()
    stress(y, variant, seed)
    return y


def test_unchanged_is_bitwise_and_compare_matches_nonfinite(interpreter):
    import torch

    from pytest_kernelopt.verify.kernel import compare
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.tensors import snapshot, unchanged

    t = torch.tensor([1.0, float("nan"), -0.0])
    snap = snapshot(t)
    assert unchanged(t, snap)  # a NaN is not a change
    t[2] = 0.0
    assert not unchanged(t, snap)  # -0.0 -> 0.0 is a write

    expected = torch.tensor([1.0, float("inf"), float("nan"), 2.0])
    # NaN/Inf of the compiler's output must be matched, in place and sign ...
    compare(expected, torch.tensor([1.0, float("inf"), float("nan"), 2.0]), None, "x")
    with pytest.raises(StageFailure, match=r"NaN/Inf where the expected result has none, or not where it has them; "
                                           r"the first at flat index 1 \[1\]"):
        compare(expected, torch.tensor([1.0, 5.0, float("nan"), 2.0]), None, "x")
    # ... where it is finite, the candidate must be finite and close.
    with pytest.raises(StageFailure, match=r"the first at flat index 3 \[3\]: expected 2.0, got nan"):
        compare(expected, torch.tensor([1.0, float("inf"), float("nan"), float("nan")]), None, "x")
    with pytest.raises(StageFailure, match="outside the allowance"):
        compare(expected, torch.tensor([1.0, float("inf"), float("nan"), 2.1]), None, "x")


def test_python_numbers_in_a_models_output_are_compared_like_0d_tensors():
    """``return float(loss)``: the model stage once compared nothing and printed an error of 0."""
    import torch

    from pytest_kernelopt.verify.model import flatten

    out = flatten({"b": (torch.ones(2), 2.5), "a": [True, 3], "c": None})
    assert [(t.dtype, t.tolist()) for t in out] == [(torch.bool, True), (torch.int64, 3), (torch.float32, [1.0, 1.0]),
                                                     (torch.float32, 2.5)]


def test_dataclass_fields_are_outputs_and_anything_unknown_is_an_error():
    """A dataclass of outputs was flattened to nothing (the model stage judged no element); a string or an object
    of the model's own class would be too: now an error naming the type."""
    import dataclasses
    from typing import NamedTuple

    import torch

    from pytest_kernelopt.capture.outputs import UnsupportedOutput
    from pytest_kernelopt.verify.model import flatten

    class Pair(NamedTuple):
        second: torch.Tensor
        first: torch.Tensor

    @dataclasses.dataclass
    class Out:
        pair: Pair
        norm: torch.Tensor
        extra: object = None

    out = Out(Pair(torch.full((1,), 2.0), torch.full((1,), 1.0)), torch.full((1,), 3.0))
    assert [t.item() for t in flatten(out)] == [2.0, 1.0, 3.0]  # declaration order, fields and tuple items
    for bad in ("text", Out, object()):
        with pytest.raises(UnsupportedOutput, match="which kernelopt cannot compare"):
            flatten([torch.ones(1), bad])
