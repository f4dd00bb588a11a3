"""Swap: candidates in place of compiler kernels of the live model, and the way back.

Every test runs the whole compiled model: a swap that does not reach the kernels the
model launches, or a restore that leaves a candidate behind, shows in its output.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_kernelopt.candidate import render_dump
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.capture.swap import candidate_kernel, restore, swap, swapped

PROBLEMS = Path(__file__).parent / "problems"
EXAMPLES = sorted(PROBLEMS.glob("*.py"))
SEED = 1  # not the seed the model was compiled with: dumps must not depend on the values

pytestmark = pytest.mark.slow
examples = pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)


def run(compiled):
    return compiled(*compiled.problem.make_inputs(SEED))


def write_candidate(folder: Path, name: str, source: str):
    path = folder / f"{name}.py"
    path.write_text(source)
    return candidate_kernel(path)


def dump(compiled, name: str) -> str:
    return render_dump(compiled.kernel(name).info, compiled.problem.id)


def assert_compiler_kernels_in_place(compiled):
    for handle in compiled.kernels.values():
        assert getattr(handle.module, handle.attr) is handle.original, handle.attr


@examples
def test_unedited_dump_reproduces_the_compiler_kernel_bit_for_bit(path, compiled_models, tmp_path):
    import torch

    compiled = compiled_models.live(path)
    expected = run(compiled)

    differs = []
    for name in compiled.kernels:
        with swapped(compiled, {name: write_candidate(tmp_path, name, dump(compiled, name))}):
            if not torch.equal(run(compiled), expected):
                differs.append(name)
    assert not differs, f"unedited dumps change the model's output: {differs}"


@examples
def test_wrong_candidate_shows_until_restored(path, compiled_models, wrong_candidate, tmp_path):
    import torch

    compiled = compiled_models.live(path)
    expected = run(compiled)

    unnoticed, not_restored = [], []
    for name in compiled.kernels:
        swap(compiled, name, write_candidate(tmp_path, f"{name}_wrong", wrong_candidate(dump(compiled, name))))
        try:
            if torch.equal(run(compiled), expected):
                unnoticed.append(name)
        finally:
            restore(compiled, name)
        if not torch.equal(run(compiled), expected):
            not_restored.append(name)
    assert not unnoticed, f"a wrong candidate did not change the model's output: {unnoticed}"
    assert not not_restored, f"restoring did not bring back the compiler's output: {not_restored}"
    assert_compiler_kernels_in_place(compiled)


def test_swapped_restores_when_the_block_raises(compiled_models, wrong_candidate, tmp_path):
    import torch

    compiled = compiled_models.live(PROBLEMS / "small_mlp_graph_break.py")
    expected = run(compiled)
    wrong = {name: write_candidate(tmp_path, name, wrong_candidate(dump(compiled, name))) for name in compiled.kernels}

    with pytest.raises(RuntimeError, match="agent crashed"), swapped(compiled, wrong):
        assert not torch.equal(run(compiled), expected)
        raise RuntimeError("agent crashed")

    assert_compiler_kernels_in_place(compiled)
    assert torch.equal(run(compiled), expected)


def test_restore_without_a_name_restores_every_kernel(compiled_models, wrong_candidate, tmp_path):
    import torch

    compiled = compiled_models.live(PROBLEMS / "conv_relu_bias.py")
    expected = run(compiled)
    for name in compiled.kernels:
        swap(compiled, name, write_candidate(tmp_path, name, wrong_candidate(dump(compiled, name))))
    assert not torch.equal(run(compiled), expected)

    restore(compiled)

    assert_compiler_kernels_in_place(compiled)
    assert torch.equal(run(compiled), expected)


def test_unknown_kernel_is_a_usage_error_listing_the_known_ones(compiled_models):
    # live: another test in this worker may have compiled a problem since (a Dynamo reset), and swap
    # refuses a model that reset left behind before it looks the name up.
    compiled = compiled_models.live(PROBLEMS / "linear_gelu.py")
    with pytest.raises(UsageError, match="triton_poi_no_such_kernel") as info:
        swap(compiled, "triton_poi_no_such_kernel", object())
    assert all(name in str(info.value) for name in compiled.kernels)
    assert "linear_gelu.py" in str(info.value)
