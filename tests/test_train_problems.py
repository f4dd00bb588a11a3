"""The GPU-sized training suite in bench/train/ (issue 42's benchmark): each file is a valid training problem
(`TRAINING = True`) whose whole step (forward, the loss, every gradient) runs at its full size. Run on meta
tensors (shapes and dtypes only); the GPU benchmark runs them for real (`kernelopt bench bench/train/*.py`)."""

from __future__ import annotations

from pathlib import Path

import pytest

TRAIN = sorted((Path(__file__).resolve().parent.parent / "bench" / "train").glob("*.py"))


def test_the_suite_covers_norms_softmax_mlp_block_and_conv_in_both_dtypes():
    import torch

    from pytest_kernelopt.capture.problem import load_problem

    assert len(TRAIN) >= 6
    dtypes = set()
    for path in TRAIN:
        problem = load_problem(path)
        model = problem.module.Model(*problem.module.get_init_inputs()).to("meta")
        dtypes |= {p.dtype for p in model.parameters()}
    assert {torch.float32, torch.bfloat16} <= dtypes


@pytest.mark.parametrize("path", TRAIN, ids=lambda p: p.stem)
def test_every_training_step_runs_with_gradients_of_the_declared_dtype(path, monkeypatch):
    import torch

    from pytest_kernelopt.capture import training
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(path)
    assert training.is_training(problem)
    # The default loss's weights come from a seeded generator, which meta tensors have not: ones of each
    # output's shape stand in (only shapes and dtypes are checked here).
    monkeypatch.setattr(training, "cotangents", lambda seed, outs: [torch.ones_like(o) for o in outs])
    model = problem.module.Model(*problem.module.get_init_inputs()).to("meta").eval()
    inputs = problem.make_inputs(0, "meta")
    results = training.step(model, model, problem, inputs)
    params = training.trained_parameters(model)
    wanted = training.grad_input_indices(problem, inputs)
    grads = results[len(results) - len(params) - len(wanted):]
    assert len(grads) == len(params) + len(wanted) and (params or wanted)
    for g, wrt in zip(grads, [inputs[i] for i in wanted] + params):
        assert g.shape == wrt.shape and g.dtype == wrt.dtype and g.device.type == "meta"
