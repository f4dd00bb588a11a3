"""Guard bands (verify/guards.py): stores outside a candidate's tensors are seen.

Small tensors in the test process; the end-to-end attack (an off-by-one store mask in
a Triton candidate, through the command line) is in ``test_attacks.py``. Python-level
candidates here write outside their output through ``as_strided`` on its storage: on a
guarded copy the storage is the padded buffer, on a real tensor the write raises
instead of corrupting this process's memory.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pytest_kernelopt.verify import guards

# Interpreter mode runs device code in numpy: the compiler's own kernel overflows on the
# x1e4 stress inputs (sigmoid's exp), and numpy says so.
pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")

CHAIN = Path(__file__).resolve().parent / "problems" / "elementwise_chain.py"


def _write_at(t, element: int, value: float = 1.0) -> None:
    """Store ``value`` at ``element`` (relative to ``t``'s first element) of ``t``'s storage."""
    import torch

    torch.as_strided(t, (1,), (1,), t.storage_offset() + element).fill_(value)


@pytest.mark.parametrize("where, element, text", [
    ("past the end", 32, "the nearest is 1 element(s) past its end"),
    ("far past the end", 40, "the nearest is 9 element(s) past its end"),
    ("before the start", -3, "the nearest is 3 element(s) before its start"),
])
def test_a_store_outside_the_argument_is_counted_and_located(interpreter, where, element, text):
    import torch

    t = torch.randn(4, 8)
    for pattern in ("nan", "random"):
        g = guards.Guard(t, "out_ptr0", pattern, seed=7)
        assert torch.equal(g.view, t) and g.view.stride() == t.stride()
        g.view.mul_(2.0)  # its own elements may change
        assert g.breaches() == (0, "")
        _write_at(g.view, element)
        _write_at(g.view, element + (1 if element > 0 else -1))
        assert g.breaches() == (2, text), where


def test_gaps_of_a_strided_layout_are_guarded_too(interpreter):
    import torch

    t = torch.randn(4, 8)[:, :6]  # rows of 6 with a stride of 8: two unused elements per row
    g = guards.Guard(t, "out_ptr0", "random", seed=1)
    assert g.span == 30 and torch.equal(g.view, t) and g.view.stride() == (8, 1)
    g.view.fill_(0.0)
    assert g.breaches() == (0, "")
    _write_at(g.view, 6)  # first row's padding
    assert g.breaches() == (1, "all of them in gaps of its strided layout")
    _write_at(g.view, 31)
    assert g.breaches() == (2, "the nearest is 2 element(s) past its end")


def test_the_copy_keeps_the_address_modulo_512(interpreter):
    import torch

    base = torch.randn(1000)
    for start in (0, 1, 3, 17, 130):
        t = base[start:start + 64]
        g = guards.Guard(t, "x", "nan", seed=start)
        assert (g.view.data_ptr() - t.data_ptr()) % guards.ALIGN == 0
        assert g.offset * 4 >= guards.MIN_PAD_BYTES
        assert g.buffer.numel() - g.offset - g.span >= guards.MIN_PAD_BYTES // 4


def test_canaries(interpreter):
    import torch

    t = torch.zeros(16)
    nan = guards.Guard(t, "x", "nan", seed=3)
    pads = torch.cat([nan.buffer[: nan.offset], nan.buffer[nan.offset + 16:]])
    assert bool(pads.isnan().all())
    bits = pads.view(torch.int32)
    assert len(set(bits.tolist())) > pads.numel() // 2  # random payloads, not one NaN
    rnd = guards.Guard(t, "x", "random", seed=3)
    pads = torch.cat([rnd.buffer[: rnd.offset], rnd.buffer[rnd.offset + 16:]])
    assert bool(pads.isfinite().all()) and float(pads.abs().max()) < 100  # ordinary values: slot + 1 changes them
    flags = guards.Guard(torch.zeros(16, dtype=torch.bool), "m", "nan", seed=3)
    raw = flags.buffer.view(torch.uint8)
    assert bool((raw[: flags.offset] > 1).all())  # neither False nor True
    for dtype in (torch.bool, torch.float16, torch.bfloat16, torch.float64, torch.int64, torch.int8):  # bool: a mask
        g = guards.Guard(torch.zeros(8, dtype=dtype), "x", "nan", seed=5)
        assert g.breaches() == (0, "")
        torch.as_strided(g.view, (1,), (1,), g.offset + 8).zero_()
        assert g.breaches()[0] == 1, dtype
    with pytest.raises(ValueError, match="unknown canary pattern"):
        guards.Guard(t, "x", "zeros", seed=1)


def test_plan_follows_the_cap_and_leaves_aliased_arguments_alone(interpreter):
    import torch

    inp, out = torch.randn(256), torch.empty(64)
    names = ["in_ptr0", "out_ptr0", "xnumel"]
    args = [inp, out, 64]
    everything = guards.plan(args, [0, 1], [1], names, "cpu", limit=1 << 20)
    assert everything.guarded == [0, 1] and everything.note == "guard bands around every tensor argument"
    outputs = guards.plan(args, [0, 1], [1], names, "cpu", limit=512)
    assert outputs.guarded == [1] and outputs.note.startswith("guard bands around the written arguments only")
    none = guards.plan(args, [0, 1], [1], names, "cpu", limit=100)
    assert none.guarded == []
    assert none.note.startswith("no guard bands (written arguments 256 bytes exceed the cap of 100 bytes")
    assert "stores outside them are not detected" in none.note
    shared = torch.randn(128)
    aliased = guards.plan([shared[:64], shared[32:96], torch.randn(8)], [0, 1, 2], [1], ["a", "b", "c"], "cpu",
                          limit=1 << 20)
    assert aliased.guarded == [2] and "not around a, b (they share memory)" in aliased.note
    broadcast = guards.plan([torch.randn(8).expand(4, 8), out, 64], [0, 1], [1], names, "cpu", limit=1 << 20)
    assert broadcast.guarded == [1] and "not around in_ptr0 (they share memory)" in broadcast.note


# --- in the kernel stage ------------------------------------------------------------------


class _StrayStore:
    """The compiler's kernel, then one store ``element`` elements from its output's start."""

    def __init__(self, original, out: int, element: int):
        self.original, self.out, self.element = original, out, element

    def run(self, *args, stream=None, **kwargs):
        self.original.run(*args, stream=stream, **kwargs)
        _write_at(args[self.out], self.element, 123.0)


@pytest.fixture
def chain(compiled_models):
    """(elementwise_chain prepared on seed 1 in this process, kernel name, its handle, index of its output)."""
    from pytest_kernelopt.verify.model import build_references
    from pytest_kernelopt.verify.prepared import Prepared
    from pytest_kernelopt.verify.tensors import checksum

    compiled = compiled_models.live(CHAIN)
    (name, handle), = compiled.kernels.items()
    prepared = Prepared(compiled=compiled, device="cpu", seeds=[1], references={})
    prepared.integrity[1] = [checksum(x) for x in prepared.inputs(1)]
    prepared.references, _, _ = build_references(prepared)
    out = next(i for i, a in enumerate(handle.info.args) if a.written)
    return prepared, name, handle, out


def test_kernel_stage_rejects_a_store_past_the_end(chain, monkeypatch):
    from pytest_kernelopt.verify.kernel import kernel_stage
    from pytest_kernelopt.verify.prepared import StageFailure

    prepared, name, handle, out = chain
    numel = 256  # elementwise_chain's output: 4 x 64
    # Caught in the unchecked runs that come first ...
    with pytest.raises(StageFailure, match=r"^seed 1 \(an unchecked run\): the candidate wrote 1 element\(s\) "
                                           r"outside out_ptr0 \(a store out of bounds; the nearest is 1 element\(s\) "
                                           r"past its end\)"):
        kernel_stage(prepared, name, _StrayStore(handle.original, out, numel), False)
    # ... and in the checked passes on guarded copies when there are none. One pass per launch runs on
    # the model's own tensors, at a drawn place (first in a quarter of the checks), where this Python
    # double's store before the tensor's start raises instead (a Triton kernel's would corrupt the heap).
    monkeypatch.setattr(prepared, "extra_run_count", lambda: 0)
    guarded = r"^seed 1: the candidate wrote 1 element\(s\) outside out_ptr0 \(a store out of bounds; the nearest is " \
              r"2 element\(s\) before its start\)"
    seen = []
    for _ in range(8):
        with pytest.raises(StageFailure) as failure:
            kernel_stage(prepared, name, _StrayStore(handle.original, out, -2), False)
        seen.append(failure.value.detail)
        if re.match(guarded, seen[-1]):
            break
    assert re.match(guarded, seen[-1]), seen
    assert all(re.match(guarded, d) or "invalid storage offset" in d for d in seen), seen
    rows = kernel_stage(prepared, name, handle.original, False)  # the compiler's kernel itself passes
    assert rows.guards == ["guard bands around every tensor argument"]
    assert "; guard bands around every tensor argument; " in rows.describe()
    # One pass per launch of the seed, and one to half of the draws, on the model's own tensors.
    assert 2 <= rows.unguarded <= 1 + (len(rows.stress) + 1) // 2 and rows.compared == 3 + len(rows.stress)
    assert rows.describe().endswith(f"; {rows.unguarded} of {rows.compared} checked run(s) on the model's own "
                                    "tensors (no guard bands)")


def test_kernel_stage_says_when_arguments_are_too_large_to_guard(chain, monkeypatch):
    from pytest_kernelopt.verify.kernel import kernel_stage
    from pytest_kernelopt.verify.prepared import StageFailure

    prepared, name, handle, out = chain
    monkeypatch.setattr(guards, "GUARD_BYTES", 1024)  # out_ptr0 is exactly 1 KiB; with the inputs, more
    rows = kernel_stage(prepared, name, handle.original, False)
    assert rows.guards == ["guard bands around the written arguments only (all arguments 2.2 KiB exceed the cap of "
                           "1.0 KiB)"], rows.guards
    monkeypatch.setattr(guards, "GUARD_BYTES", 512)
    rows = kernel_stage(prepared, name, handle.original, False)
    assert rows.guards == ["no guard bands (written arguments 1.0 KiB exceed the cap of 512 bytes: stores outside "
                           "them are not detected)"], rows.guards
    # Unguarded, the stray store meets the real tensor's bounds here (the storage ends with it):
    # what a Triton kernel would write into allocator slack unseen.
    with pytest.raises(StageFailure, match="candidate raised|model raised"):
        kernel_stage(prepared, name, _StrayStore(handle.original, out, 256), False)


def test_unchecked_runs_carry_the_candidates_results_back(chain):
    import torch

    from pytest_kernelopt.verify.guards import GuardedKernel

    prepared, name, handle, out = chain
    wrapped = GuardedKernel(handle.original, handle.info.args, "seed 1", "cpu")
    inputs = prepared.inputs(1)
    args = [inputs[0], prepared.compiled.model.bias.detach(), torch.full((4, 64), float("nan")), 256]
    wrapped.run(*args)
    expected = torch.full((4, 64), float("nan"))
    handle.original.run(args[0], args[1], expected, 256, stream=None)
    assert wrapped.failure is None and torch.equal(args[2], expected)


def test_a_kernel_writing_a_buffer_in_place_keeps_its_other_elements_under_the_guards(interpreter):
    """A scatter into a buffer an earlier kernel zeroed stores 2 of each row's 8 elements (Inductor marks the buffer
    ``mutated_arg_names``). The guards filled such an argument's copy with poison or random numbers as if the
    kernel wrote all of it, and copied the copy back: the compiler's own kernel, dumped and checked unchanged,
    failed the model stage of a mixture-of-experts training step ("gradient of input 0: NaN/Inf")."""
    import torch

    from conftest import TESTS
    from pytest_kernelopt.capture.swap import swapped
    from pytest_kernelopt.verify.guards import GuardedKernel
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, _ = open_problem(OpenRequest(problem=str(TESTS / "data" / "scatter_rows.py"), device=interpreter,
                                           seeds=[3]))
    compiled = prepared.compiled
    (name,) = [n for n, h in compiled.kernels.items() if any(a.kept for a in h.info.args)]
    handle = compiled.kernel(name)
    assert [a.name for a in handle.info.args if a.kept] == ["out_ptr0"]
    inputs = prepared.inputs(3)
    with torch.no_grad():
        expected = compiled(*inputs)
    for _ in range(4):  # each launch on guarded copies (no unguarded share), its fill drawn
        guard = GuardedKernel(handle.original, handle.info.args, "test", prepared.device, prepared.entropy)
        with swapped(compiled, {name: guard}), torch.no_grad():
            got = compiled(*inputs)
        assert guard.failure is None and guard.unguarded == 0
        assert torch.equal(got, expected), (got, expected)
