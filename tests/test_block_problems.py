"""The bf16 whole-block suite in bench/blocks/ (issue 41): each file is a valid problem that declares
2-3 shapes, keeps its weights in bfloat16, and runs at every declared shape. Run on meta tensors
(shapes and dtypes only: the full sizes need no memory and no time here); the GPU benchmark runs them
for real (`kernelopt bench bench/blocks/*.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

BLOCKS = sorted((Path(__file__).resolve().parent.parent / "bench" / "blocks").glob("*.py"))


def test_the_suite_is_there():
    assert {p.stem for p in BLOCKS} == {"bert_encoder", "gpt2_block", "llama_block", "vocab_cross_entropy", "vit_block",
                                        "convnet_bn_pool", "moe_router", "nanogpt_block"}


@pytest.mark.parametrize("path", BLOCKS, ids=lambda p: p.stem)
def test_every_declared_shape_runs_in_bfloat16(path):
    import torch

    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(path)
    assert 2 <= len(problem.shapes) <= 3
    model = problem.module.Model(*problem.module.get_init_inputs()).to("meta").eval()
    assert all(p.dtype == torch.bfloat16 for p in model.parameters())
    seen = set()
    for shape in problem.shapes:
        inputs = problem.make_inputs(0, "meta", shape=shape)
        floating = [x for x in inputs if isinstance(x, torch.Tensor) and x.is_floating_point()]
        assert floating and all(x.dtype == torch.bfloat16 for x in floating)
        with torch.no_grad():
            out = model(*inputs)
        outs = out if isinstance(out, tuple) else (out,)
        assert outs[0].is_floating_point() and outs[0].device.type == "meta"
        seen.add(tuple(tuple(x.shape) for x in floating))
    assert len(seen) == len(problem.shapes)  # each shape is another input size
