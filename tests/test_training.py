"""Training problems (``TRAINING = True``): the step's forward and backward kernels captured, named apart,
judged on every gradient against float64, swapped by production into both graphs, timed by bench, tuned by tune.

The problems live in ``tests/problems_train/`` (not ``tests/problems/``, which other tests glob).
"""

from __future__ import annotations

import re
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest

import forkserver

from conftest import TESTS, add_to_last_store

MLP = TESTS / "problems_train" / "mlp_layernorm_train.py"  # default loss, LayerNorm: forward and backward kernels
XENT = TESTS / "problems_train" / "softmax_xent_train.py"  # its own loss (the mean), an integer input


def write(folder: Path, body: str, name: str = "train_problem") -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(body).lstrip())
    return path


TINY = '''
import torch

{header}


class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.lin = torch.nn.Linear(4, 4)

    def forward(self, x):
        return self.lin(x)


def get_inputs():
    return [torch.randn(2, 4)]


def get_init_inputs():
    return []
'''


# --- the declaration ---------------------------------------------------------------------

@pytest.mark.parametrize("header, message", [
    ("TRAINING = 'yes'", "TRAINING must be True or False"),
    ("TRAINING = True\nTRAIN_MODE = True", "TRAIN_MODE = True (train(): dropout, batch statistics) is not supported yet"),
    ("TRAINING = True\nGRAD_INPUTS = 'x'", "GRAD_INPUTS must be a list of input indices"),
    ("TRAINING = True\nloss = 3", "`loss` must be a function"),
])
def test_a_training_declaration_it_cannot_honour_is_one_problem_error(tmp_path, header, message):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.errors import ProblemError

    path = write(tmp_path, TINY.format(header=header))
    with pytest.raises(ProblemError) as err:
        load_problem(path)
    assert message in str(err.value) and str(path) in str(err.value)


def test_backward_wrappers_are_told_apart_by_their_incoming_gradients():
    from pytest_kernelopt.capture.training import is_backward_wrapper, kernel_base_name

    forward = "def call(self, args):\n        primals_1, primals_2 = args\n        args.clear()\n"
    backward = "def call(self, args):\n        primals_1, addmm, rsqrt, tangents_1 = args\n        args.clear()\n"
    inference = "def call(self, args):\n        arg0_1, arg1_1 = args\n"
    assert is_backward_wrapper(backward)
    assert not is_backward_wrapper(forward) and not is_backward_wrapper(inference)
    assert kernel_base_name("triton_poi_fused_0", True) == "triton_poi_fused_0__bwd"
    assert kernel_base_name("triton_poi_fused_0", False) == "triton_poi_fused_0"


def test_default_loss_weights_are_exact_in_every_dtype_never_zero_and_new_per_draw():
    import torch

    from pytest_kernelopt.capture.training import cotangents

    out = [torch.empty(64, 8)]
    by_dtype = [cotangents(5, [o.to(d) for o in out])[0].double() for d in
                (torch.float16, torch.bfloat16, torch.float32, torch.float64)]
    assert all(torch.equal(by_dtype[0], w) for w in by_dtype)  # the float64 reference gets the same gradients
    assert bool((by_dtype[0] != 0).all()) and float(by_dtype[0].abs().max()) <= 2.0
    assert len(set(by_dtype[0].flatten().tolist())) > 4  # not the constant ones of a plain sum
    # On no coarse grid a backward kernel could round its incoming gradient to and still match.
    w = cotangents(5, [out[0].float()])[0]
    assert not torch.equal(w * 8, (w * 8).round())
    assert not torch.equal(w, w.bfloat16().float())
    from pytest_kernelopt.verify.float64 import Float64Mode

    with Float64Mode():  # how the float64 reference draws them: the very same values
        assert torch.equal(cotangents(5, [out[0].double()])[0], w.double())
    assert torch.equal(cotangents(5, out)[0], cotangents(5, out)[0])
    assert not torch.equal(cotangents(5, out)[0], cotangents(6, out)[0])


def test_the_default_loss_is_never_computed_its_weights_are_drawn_once_per_draw(monkeypatch: pytest.MonkeyPatch) -> None:
    """The backward starts from the weights (a training loop's compiled region gets its incoming gradient
    from upstream): the same gradients, bit for bit in bf16, as autograd through ``(output * w).sum()``."""
    import torch

    from pytest_kernelopt.capture import training
    from pytest_kernelopt.capture.problem import load_problem

    drawn: list[int] = []
    real = training.cotangents
    monkeypatch.setattr(training, "cotangents", lambda seed, outs: drawn.append(seed) or real(seed, outs))
    problem = load_problem(MLP)
    model = problem.build_model().to(torch.bfloat16)
    inputs = [x.to(torch.bfloat16) for x in problem.make_inputs(3)]
    steps = [training.step(model, model, problem, inputs) for _ in range(3)]
    assert drawn == [3]  # once for the draw, not per step
    assert all(torch.equal(a, b) for a, b in zip(steps[0], steps[2]))
    training.step(model, model, problem, [x.to(torch.bfloat16) for x in problem.make_inputs(4)])
    assert drawn == [3, 4]
    x = inputs[0].detach().requires_grad_(True)
    out = model(x)
    (out * real(3, [out])[0]).sum().backward()
    expected = [out.detach(), x.grad, *(p.grad for p in model.parameters())]
    assert all(a.dtype == torch.bfloat16 and torch.equal(a, b) for a, b in zip(steps[0], expected))
    assert len(problem.incoming) <= 2  # what a problem keeps is bounded


def test_the_step_returns_outputs_then_fresh_gradients_of_inputs_and_parameters():
    import torch

    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import cotangents, output_names, step

    problem = load_problem(MLP)
    model = problem.build_model()
    inputs = problem.make_inputs(3)
    first = step(model, model, problem, inputs)
    again = step(model, model, problem, problem.make_inputs(3))
    assert all(torch.equal(a, b) for a, b in zip(first, again))  # nothing accumulates between runs
    assert all(p.grad is None for p in model.parameters())  # never written into .grad
    # By hand: the weighted sum's gradient, through plain autograd.
    x = inputs[0].detach().requires_grad_(True)
    out = model(x)
    (out * cotangents(3, [out])[0]).sum().backward()
    expected = [out.detach(), x.grad, *(p.grad for p in model.parameters())]
    assert len(first) == len(expected) == 8
    assert all(torch.allclose(a, b) for a, b in zip(first, expected))
    names = output_names(problem, model, inputs, len(first))
    assert names[:3] == ["output 0", "gradient of input 0", "gradient of parameter up.weight"]
    assert names[-1] == "gradient of parameter down.bias"


def test_a_files_own_loss_is_used_and_integer_inputs_get_no_gradient():
    import torch

    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import step

    problem = load_problem(XENT)
    model = problem.build_model()
    logits, target = problem.make_inputs(1)
    out, grad_logits, grad_scale = step(model, model, problem, [logits, target])
    x = logits.detach().requires_grad_(True)
    model(x, target).mean().backward()
    assert torch.allclose(grad_logits, x.grad) and torch.allclose(grad_scale, model.scale.grad)


def test_a_steps_floor_counts_its_gradients_its_backward_flops_and_the_incoming_gradients_it_was_given():
    """The memory floor of a step (bench's and the gate's % of limit): inputs and parameters read, outputs and
    every gradient written, and the default loss's incoming gradients read (one per output, in its dtype); a
    file's own loss gives none counted (its gradient may be an expanded scalar). The count is the latest step's:
    a float64 step (the reference's) records wider ones, so callers take the floor right after the model's own."""
    import torch

    from pytest_kernelopt.capture.floor import call_floor
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import step
    from pytest_kernelopt.measure.roofline import min_flops, written_bytes

    def size(tensors: Any) -> int:
        return sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))

    problem = load_problem(MLP)
    model = problem.build_model()
    inputs = problem.make_inputs(3)
    results = step(model, model, problem, inputs)
    floor = call_floor(problem, model, inputs, written_bytes(results))
    out = results[0]
    assert floor.written == size(results)
    assert floor.bytes == size(inputs) + size(model.parameters()) + size(results) + size([out])
    assert floor.flops == min_flops(model, inputs, [0]) and floor.flops["float32"] > min_flops(model, inputs)["float32"]
    step(model.double(), model, problem, [x.double() for x in inputs])  # wider incoming gradients
    assert call_floor(problem, model.float(), inputs, 0).bytes == size(inputs) + size(model.parameters()) + 8 * out.numel()

    problem = load_problem(XENT)  # its own loss: no incoming gradient counted
    model = problem.build_model()
    inputs = problem.make_inputs(1)
    results = step(model, model, problem, inputs)
    assert call_floor(problem, model, inputs, 0).bytes == size(inputs) + size(model.parameters())


def test_a_drawn_incoming_gradient_reaches_the_backward_under_the_default_loss_and_a_files_own():
    """Inside incoming_drawn() the backward runs from the loss's gradient of each output as the draw left it:
    the default loss's weights (whose gradients are then the drawn ones through plain autograd) or the file's own
    loss's gradient; outside, the loss's own again."""
    import torch

    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import incoming_drawn, step
    from pytest_kernelopt.verify.kernel import IncomingDraw

    for path in (MLP, XENT):
        problem = load_problem(path)
        model = problem.build_model()
        inputs = problem.make_inputs(3)
        plain = step(model, model, problem, inputs)
        seen: list[Any] = []
        draw = IncomingDraw("ties", 7)
        with incoming_drawn(problem, lambda g, draw=draw, seen=seen: (draw(g), seen.extend(t.clone() for t in g))):
            drawn = step(model, model, problem, inputs)
        assert problem.incoming_draw is None and all(torch.equal(a, b) for a, b in
                                                     zip(plain, step(model, model, problem, inputs)))
        (g,) = seen  # one output: small integers now (ties), whatever the loss gave
        assert torch.equal(g, g.round()) and float(g.abs().max()) <= 4 and len(set(g.flatten().tolist())) > 1
        assert torch.equal(drawn[0], plain[0])  # the forward is the same
        xs = [x.detach().requires_grad_(True) if x.is_floating_point() else x for x in inputs]
        out = model(*xs)
        expected = torch.autograd.grad(out, [xs[0], *model.parameters()], grad_outputs=g)
        assert all(torch.allclose(a, b) for a, b in zip(drawn[1:], expected))
        assert not torch.allclose(drawn[-1], plain[-1])


@pytest.mark.slow
def test_tune_lists_forward_and_backward_kernels_and_says_what_a_training_step_skips(kernelopt, tmp_path):
    """``kernelopt tune`` takes a training problem (tests/test_tune_training.py judges its candidates); here no
    kernel is selected, so only the run record's pass per kernel and the notes said once are checked."""
    import json

    # No compile settings here: tune's compile step on a training problem is test_compile_choice's
    # test_tune_tries_compile_settings_on_a_training_step, the check of a step under one its training_step tests.
    tuned = kernelopt("tune", MLP, "--device", "cpu", "--seeds", "1", "--kernel", "none_such", "--compile-variants",
                      "none", "--runs-dir", tmp_path / "runs", "--kernels-dir", tmp_path / "k", "--json")
    assert tuned.returncode == 0, tuned.stderr
    (problem,) = json.loads(tuned.stdout)["problems"]
    assert problem["training"] is True and problem["error"] is None
    assert {k["backward"] for k in problem["kernels"]} == {False, True}
    assert all(k["kernel"].endswith("__bwd") == k["backward"] for k in problem["kernels"])
    (rewrites,) = problem["notes"]
    assert rewrites.startswith("training step: of kernelopt's graph rewrites only the cross-entropy's has a backward")


# --- capture and the cascade on a compiled step (interpreter mode) -------------------------

@pytest.fixture(scope="module")
def prepared(interpreter):
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, opened = open_problem(OpenRequest(problem=str(MLP), device=interpreter, seeds=[3]))
    assert opened.reference == "float64"
    return prepared


def _backward(prepared: Any, stem: str) -> Any:
    return next(h.info for h in prepared.compiled.kernels.values() if h.info.backward and stem in h.info.name)


def _check(prepared: Any, kernel: str | None, replacements: dict[str, str]) -> list[Any]:
    """The stage results of one check of ``replacements`` ({kernel: source}), run in this process."""
    from pytest_kernelopt.store import sha256_text
    from pytest_kernelopt.verify.pipeline import run_check
    from pytest_kernelopt.verify.protocol import CandidateSource, CheckRequest, StageDone

    done: list[Any] = []
    request = CheckRequest(kernel=kernel, measure_speed=False, entropy=12345, replacements={
        name: CandidateSource(label=f"{name}.py", source=src, sha256=sha256_text(src)) for name, src in replacements.items()})
    run_check(prepared, request, done.append)
    return [d.result for d in done if isinstance(d, StageDone)]


def _scaled(source: str) -> str:
    """``source`` with the value of its last ``tl.store`` multiplied by 1.01."""
    lines = source.splitlines()
    i = max(k for k, line in enumerate(lines) if "tl.store(" in line)
    lines[i] = re.sub(r"tl\.store\(([^,]+), ([^,]+),", r"tl.store(\1, (\2) * 1.01,", lines[i])
    assert "1.01" in lines[i]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_bench_runs_and_judges_the_whole_step_in_every_mode(prepared, kernelopt, tmp_path):
    """A committed backward version that is off (1.0 added) runs in bench's kernelopt mode and a gradient shows it."""
    import json

    from pytest_kernelopt.candidate import render_dump
    from test_production import commit

    info = _backward(prepared, "sum")
    commit(tmp_path / "kernels", "mlp_layernorm_train", info,
           add_to_last_store(render_dump(info, "mlp_layernorm_train"), 1.0))
    out = tmp_path / "bench.json"
    bench = kernelopt("bench", MLP, "--device", "cpu", "--modes", "eager,default,kernelopt", "--kernels-dir",
                      tmp_path / "kernels", "--json", out)
    assert bench.returncode == 0, bench.stderr
    assert "mlp_layernorm_train (training step)" in bench.stdout
    problem = json.loads(out.read_text())["problems"][0]
    assert problem["training"] is True and problem["status"] == "ok"
    modes = {m["mode"]: m for m in problem["modes"]}
    assert modes["eager"]["correct"] is True and modes["default"]["correct"] is True
    assert modes["kernelopt"]["correct"] is False and modes["kernelopt"]["committed_kernels"] == 1
    assert re.search(r"gradient of parameter \w+\.bias", modes["kernelopt"]["correctness_detail"])
    # The step's floor: input and parameters read, the output and every gradient written, the output's incoming
    # gradient (the default loss's) read.
    from pytest_kernelopt.capture.problem import load_problem

    p = load_problem(MLP)
    (x,) = p.make_inputs(0)
    read = 4 * (x.numel() + sum(t.numel() for t in p.build_model().parameters()))
    assert problem["min_bytes"] == 2 * read + 2 * 4 * 8 * 16 and problem["min_written_bytes"] == read + 4 * 8 * 16


def test_the_optimizer_step_follows_the_backward_with_the_steps_own_gradients():
    """bench --optimizer: each call of a mode is the step, then a torch.optim step (torch's defaults) over the
    trained parameters with the gradients that step returned; a model with no such parameter is one error."""
    import torch

    from pytest_kernelopt.benchmark.one_problem import _parameters_kept, _with_optimizer
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import step, trained_parameters
    from pytest_kernelopt.errors import KerneloptError

    problem = load_problem(MLP)
    model = problem.build_model()
    inputs = problem.make_inputs(1)
    params = trained_parameters(model)
    before = [p.detach().clone() for p in params]
    expected = step(model, model, problem, inputs)
    for name, kind in (("sgd", torch.optim.SGD), ("adam", torch.optim.Adam)):
        call = _with_optimizer(lambda *xs: step(model, model, problem, xs), model, name)
        with _parameters_kept(model, True):
            results = call(*inputs)
            assert all(torch.equal(a, b) for a, b in zip(results, expected))  # judged before the update
            assert all(p.grad is g for p, g in zip(params, results[-len(params):]))
            assert all(not torch.equal(p, b) for p, b in zip(params, before))  # stepped
            if kind is torch.optim.SGD:  # torch's default learning rate, its gradient
                lr = kind([torch.zeros(1, requires_grad=True)]).defaults["lr"]
                assert all(torch.allclose(p, b - lr * g) for p, b, g in zip(params, before, results[-len(params):]))
        assert all(torch.equal(p, b) for p, b in zip(params, before))  # put back for the next mode
    frozen = problem.build_model().requires_grad_(False)
    with pytest.raises(KerneloptError, match="--optimizer adam: the model has no parameter that requires grad"):
        _with_optimizer(lambda *xs: xs, frozen, "adam")


@pytest.mark.slow
def test_bench_times_an_optimizer_step_inside_each_training_modes_step(kernelopt, tmp_path):
    """In interpreter mode (no timings): every mode ran the step and the optimizer step and is judged correct from
    the weights the reference had (each mode's update put back); the JSON names the optimizer; an inference
    problem beside it is benched as always (optimizer null)."""
    import json

    inference = write(tmp_path, "import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                      "        return torch.relu(x) * 2.0\ndef get_inputs():\n    return [torch.randn(8, 16)]\n"
                      "def get_init_inputs():\n    return []\n", name="plain")
    out = tmp_path / "bench.json"
    bench = kernelopt("bench", MLP, inference, "--device", "cpu", "--modes", "eager,default", "--optimizer", "adam",
                      "--kernels-dir", tmp_path / "kernels", "--json", out)
    assert bench.returncode == 0, bench.stderr
    assert "mlp_layernorm_train (training step + adam step)" in bench.stdout
    result = json.loads(out.read_text())
    assert result["settings"]["optimizer"] == "adam" and result["speed_measured"] is False
    train, plain = result["problems"]
    assert train["training"] is True and train["optimizer"] == "adam" and train["status"] == "ok"
    assert [(m["mode"], m["correct"], m["error"]) for m in train["modes"]] == [("eager", True, None),
                                                                              ("default", True, None)]
    assert plain["training"] is False and plain["optimizer"] is None and plain["status"] == "ok"


@pytest.mark.slow
def test_capture_names_backward_kernels_apart_and_lists_their_pass(prepared):
    from rich.console import Console

    from pytest_kernelopt.report import kernels_table

    infos = [h.info for h in prepared.compiled.kernels.values()]
    backward = [k for k in infos if k.backward]
    forward = [k for k in infos if not k.backward]
    assert forward and backward and len(prepared.compiled.graphs) == 2
    assert all(k.name.endswith("__bwd") and k.graph == 1 for k in backward)
    assert all("__bwd" not in k.name and k.graph == 0 for k in forward)
    assert any("layer_norm_backward" in k.name for k in backward)
    console = Console(width=400, record=True)
    console.print(kernels_table(prepared.compiled.summary()))
    text = console.export_text()
    assert re.search(r"\b" + re.escape(backward[0].name) + r"\b.*\bbackward\b", text)
    assert re.search(r"\b" + re.escape(forward[0].name) + r"\b.*\bforward\b", text)
    # The reference holds the output and every gradient: 1 output, 1 input, 6 parameters.
    assert len(prepared.references[3].outputs) == 8


@pytest.mark.slow
def test_the_unedited_backward_dump_passes_the_kernel_and_model_stages(prepared):
    from pytest_kernelopt.candidate import render_dump

    info = _backward(prepared, "layer_norm_backward")
    stages = _check(prepared, info.name, {info.name: render_dump(info, "mlp_layernorm_train")})
    assert [(s.name, s.passed) for s in stages] == [("kernel", True), ("model", True)], stages
    # Every stress variant drawn on the inputs and, in draws of their own, on the incoming gradients.
    from pytest_kernelopt.verify.tensors import STRESS_VARIANTS

    drawn = re.findall(r"(\w+) of the incoming gradients \(seed \d+\)", stages[0].detail)
    skipped = re.findall(r"(\w+) of the incoming gradients \(the compiler's kernel wrote no finite number\)",
                         stages[0].detail)
    assert sorted(drawn + skipped) == sorted(STRESS_VARIANTS) and len(skipped) <= 1, stages[0].detail


@pytest.mark.slow
def test_a_backward_kernel_off_by_one_percent_fails_the_kernel_stage(prepared):
    from pytest_kernelopt.candidate import render_dump

    info = _backward(prepared, "sum")
    stages = _check(prepared, info.name, {info.name: _scaled(render_dump(info, "mlp_layernorm_train"))})
    assert [(s.name, s.passed) for s in stages] == [("kernel", False)]
    assert "outside the allowance" in stages[0].detail


@pytest.mark.slow
def test_a_backward_kernel_wrong_only_on_zero_incoming_gradients_is_rejected_by_a_gradient_draw(prepared,
                                                                                                monkeypatch):
    """The bias gradient's kernel (a sum of the incoming gradient over the batch), edited to read an exactly zero
    incoming gradient as 1. The default loss's weights are never zero, so the seeds and the draws of the inputs
    alone pass it (as before the gradient draws); a draw of the incoming gradients rejects it. (Honest backward
    dumps pass every draw: test_the_unedited_backward_dump_passes_the_kernel_and_model_stages.)"""
    from pytest_kernelopt.candidate import CandidateKernel, load_candidate_source, render_dump
    from pytest_kernelopt.verify import kernel
    from pytest_kernelopt.verify.prepared import StageFailure

    info = _backward(prepared, "sum")
    assert info.name == "triton_per_fused_sum_0__bwd"  # reads the incoming gradient (tangents_1) alone
    honest = render_dump(info, "mlp_layernorm_train")
    load = next(line for line in honest.splitlines() if "tl.load(in_ptr0" in line)
    variable = load.split("=")[0].strip()
    attack = honest.replace(load, f"{load}\n    {variable} = tl.where({variable} == 0.0, 1.0, {variable})")

    def stage(source: str) -> Any:
        prepared.begin_check(12345)
        return kernel.kernel_stage(prepared, info.name, CandidateKernel(load_candidate_source(source, "c.py"), label="c.py"),
                                   False)

    module_before = {h.attr: getattr(h.module, h.attr) for h in prepared.compiled.kernels.values()}
    # One variant (zeros: one in its own draw, one of the incoming gradients), fewer runs in interpreter mode.
    monkeypatch.setattr(kernel, "STRESS_VARIANTS", ("zeros",))
    monkeypatch.setattr(prepared, "extra_run_count", lambda: 1)
    with monkeypatch.context() as before:  # incoming gradients as the loss gives them: accepted
        before.setattr(kernel.IncomingDraw, "__call__", lambda self, gradients: None)
        assert len(stage(attack).stress) == 3
    with pytest.raises(StageFailure, match=r"draw 'zeros' of the incoming gradients .* outside the allowance"):
        stage(attack)
    # No side effect: the compiler's kernels back in both wrappers, the step's loss its own again.
    assert {h.attr: getattr(h.module, h.attr) for h in prepared.compiled.kernels.values()} == module_before
    assert prepared.compiled.problem.incoming_draw is None
    # The step's drawn incoming gradients live for one check: a candidate cannot leave them written for the next.
    assert prepared.compiled.problem.incoming
    prepared.begin_check(54321)
    assert not prepared.compiled.problem.incoming


@pytest.mark.slow
def test_a_backward_kernel_that_writes_its_incoming_gradient_is_rejected_at_either_stage(prepared):
    """The incoming gradients are drawn once per draw and reused by its steps (capture/training.py): a kernel that
    reads them correctly, then overwrites them for the runs after it, is caught as a write to an argument the
    compiler's kernel only reads, by the kernel stage and by the model stage alone (the gate's model item)."""
    from pytest_kernelopt.candidate import render_dump

    info = _backward(prepared, "sum")
    honest = render_dump(info, "mlp_layernorm_train")
    load = next(line for line in honest.splitlines() if "tl.load(in_ptr0" in line)
    indent = load[: len(load) - len(load.lstrip())]
    offsets, mask = load.split("tl.load(")[1].split(", ")[:2]  # in_ptr0 + (...), its mask
    attack = honest.replace(load, f"{load}\n{indent}tl.store({offsets}, tmp0 * 0.0 + 0.5, {mask})")
    assert attack != honest
    for kernel in (info.name, None):
        stages = _check(prepared, kernel, {info.name: attack})
        assert not stages[-1].passed and "read-only argument in_ptr0: changed" in stages[-1].detail, stages[-1].detail


@pytest.mark.slow
def test_the_model_stage_alone_judges_every_gradient_and_names_the_one_that_is_wrong(prepared):
    """The gate's model item swaps every committed kernel at once: a wrong backward kernel shows in a gradient."""
    from pytest_kernelopt.candidate import render_dump

    info = _backward(prepared, "sum")
    module_before = {h.attr: getattr(h.module, h.attr) for h in prepared.compiled.kernels.values()}
    stages = _check(prepared, None, {info.name: _scaled(render_dump(info, "mlp_layernorm_train"))})
    assert [(s.name, s.passed) for s in stages] == [("model", False)]
    assert re.search(r"gradient of parameter \w+\.bias", stages[0].detail), stages[0].detail
    # No side effect: the compiler's kernels are back in both wrappers, the weights are the problem's own.
    assert {h.attr: getattr(h.module, h.attr) for h in prepared.compiled.kernels.values()} == module_before
    from pytest_kernelopt.verify.prepared import weight_sums

    assert weight_sums(prepared.compiled.model) == prepared.weights


@pytest.mark.slow
def test_production_swaps_a_committed_backward_kernel_into_the_backward_graph(prepared, tmp_path):
    """The kernelopt backend compiles the backward with the forward and names its kernels as capture does."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture.training import step
    from pytest_kernelopt.store.production import KerneloptWarning, status
    from test_production import commit, fresh

    info = _backward(prepared, "sum")
    commit(tmp_path, "mlp_layernorm_train", info, add_to_last_store(render_dump(info, "mlp_layernorm_train"), 1.0))
    problem, model = fresh(MLP)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id="mlp_layernorm_train", quiet=True)
    inputs = problem.make_inputs(prepared.seeds[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", KerneloptWarning)  # every kernel found by its name: nothing stale, no warning
        tuned = step(compiled, model, problem, inputs)
    eager = step(model, model, problem, inputs)
    ran = {k.name: k.runs for k in status(compiled).kernels}
    assert ran[info.name] == "committed" and all(r == "compiler" for n, r in ran.items() if n != info.name)
    assert set(ran) == set(prepared.compiled.kernels)  # the same names as capture's, in both graphs
    differs = [k for k, (a, b) in enumerate(zip(tuned, eager)) if not torch.allclose(a, b, atol=1e-4)]
    assert len(differs) == 1 and torch.allclose(tuned[differs[0]] - eager[differs[0]], torch.ones(()), atol=1e-4)


def _forward(prepared: Any) -> Any:
    return next(h.info for h in prepared.compiled.kernels.values() if not h.info.backward)


@pytest.mark.slow
def test_a_model_tuned_for_training_validates_with_the_compilers_kernels_and_no_stale_warning(prepared, tmp_path,
                                                                                              caplog):
    """model.eval() under no_grad (a validation pass) compiles an inference graph whose kernel is named like the
    training forward's but differs (it saves nothing for a backward): the stored version is of the other pass, not
    stale, so the compiler's kernel runs, said in the status and at INFO only; the training step still runs it."""
    import logging

    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture.training import step
    from pytest_kernelopt.store.production import KerneloptWarning, status
    from test_production import commit, fresh

    info, backward = _forward(prepared), _backward(prepared, "sum")
    assert info.training is True  # capture's flag, which accept records in the evidence
    for kernel in (info, backward):
        commit(tmp_path, "mlp_layernorm_train", kernel, add_to_last_store(render_dump(kernel, "mlp_layernorm_train"),
                                                                          1.0), training=kernel.training)
    problem, model = fresh(MLP)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id="mlp_layernorm_train", quiet=True)
    inputs = problem.make_inputs(prepared.seeds[0])
    model.eval()
    with warnings.catch_warnings(), caplog.at_level(logging.INFO, "pytest_kernelopt.store.production"):
        warnings.simplefilter("error", KerneloptWarning)
        with torch.no_grad():
            validated, expected = compiled(*inputs), model(*inputs)
            compiled(*inputs)
    assert torch.allclose(validated, expected, atol=1e-5)  # the compiler's kernel ran, not the marked version
    (record,) = [k for k in status(compiled).kernels if k.name == info.name]
    assert (record.training, record.runs, record.why) == (False, "compiler", "stored for the training step")
    said = [r for r in caplog.records if "nothing is stale" in r.getMessage()]  # once, though called twice
    assert len(said) == 1 and info.name in said[0].getMessage() and said[0].levelno == logging.INFO
    lines = str(status(compiled))
    assert "stored for the training step" in lines and "not generated by the compiler here" not in lines
    assert f"for the training step's backward, which this process has not compiled: {backward.name}" in lines
    with warnings.catch_warnings():
        warnings.simplefilter("error", KerneloptWarning)
        trained = step(compiled, model, problem, inputs)
    ran = {k.name: k.runs for k in status(compiled).kernels if k.training}
    assert ran[info.name] == ran[backward.name] == "committed"  # the same store serves the training step
    assert not torch.allclose(trained[0], step(model, model, problem, inputs)[0], atol=1e-4)


@pytest.mark.slow
def test_a_model_tuned_for_inference_trains_with_the_compilers_forward_kernel_and_no_stale_warning(interpreter,
                                                                                                   tmp_path):
    """The reverse: a store tuned on the problem as inference (TRAINING off), then the model trained. Its forward
    version runs in the inference compile; the training step's forward kernel differs, so the compiler's runs there,
    with no stale warning, and every gradient is the compiler's."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import step
    from pytest_kernelopt.store.production import KerneloptWarning, status
    from test_production import commit, fresh

    (tmp_path / "inference").mkdir()
    as_inference = write(tmp_path / "inference", MLP.read_text().replace("TRAINING = True", "TRAINING = False"),
                         MLP.stem)
    (info,) = [h.info for h in compile_problem(load_problem(as_inference), interpreter).kernels.values()]
    assert info.training is False
    commit(tmp_path, MLP.stem, info, add_to_last_store(render_dump(info, MLP.stem), 1.0), training=info.training)
    problem, model = fresh(MLP)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id=MLP.stem, quiet=True)
    inputs = problem.make_inputs(1)
    with warnings.catch_warnings():
        warnings.simplefilter("error", KerneloptWarning)
        with torch.no_grad():
            assert not torch.allclose(compiled(*inputs), model(*inputs), atol=1e-4)  # the marked version ran
        trained, eager = step(compiled, model, problem, inputs), step(model, model, problem, inputs)
    assert all(torch.allclose(a, b, atol=1e-4) for a, b in zip(trained, eager))
    runs = {k.training: (k.runs, k.why) for k in status(compiled).kernels if k.name == info.name}
    assert runs == {False: ("committed", None), True: ("compiler", "stored for inference")}


@pytest.mark.slow
@pytest.mark.parametrize("recorded", [None, False], ids=["not-recorded", "same-pass"])
def test_a_stored_version_of_another_kernel_is_stale_unless_recorded_for_the_other_pass(prepared, tmp_path, recorded):
    """The training forward's version with no pass recorded (a manifest written before it was), or recorded as
    verified for inference, is stale in an inference compile whose kernel differs: warned as before."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store.production import KerneloptWarning
    from test_production import commit, fresh

    info = _forward(prepared)
    commit(tmp_path, "mlp_layernorm_train", info, render_dump(info, "mlp_layernorm_train"), training=recorded)
    problem, model = fresh(MLP)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id="mlp_layernorm_train", quiet=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        compiled(*problem.make_inputs(1))
    said = [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]
    assert len(said) == 1 and f"{info.name}: " in said[0] and "stale" in said[0] and "kernelopt refresh" in said[0]


@pytest.mark.slow
@pytest.mark.parametrize("passes, stale", [((True, True), False), ((True, None), True)],
                         ids=["both-training", "one-not-recorded"])
def test_a_kernel_stored_per_shape_is_stale_only_where_a_shape_folder_is_not_of_the_other_pass(prepared, tmp_path,
                                                                                                passes, stale):
    """With a folder per declared shape (``<kernel>@<shape>``), an inference compile whose kernel none of them
    replaces is quiet when every one was verified in the training step, and stale when one does not say."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store.production import KerneloptWarning, status
    from test_production import commit, fresh

    info = _forward(prepared)
    for shape, training in zip(("b8", "b16"), passes):
        commit(tmp_path, MLP.stem, info.model_copy(update={"name": f"{info.name}@{shape}"}),
               render_dump(info, MLP.stem), training=training)
    problem, model = fresh(MLP)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id=MLP.stem, quiet=True)
    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        compiled(*problem.make_inputs(1))
    said = [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]
    (record,) = [k for k in status(compiled).kernels if k.name == info.name]
    assert record.runs == "compiler" and (record.why == "stale") == stale and len(said) == stale
    assert not stale or f"{info.name}@b8 (replaces {info.fingerprint}, stored for the training step)" in said[0]


@pytest.mark.slow
def test_a_compile_setting_reaches_the_backward_kernels(interpreter):
    """A training step compiled under a setting has the setting in its backward kernels too (AOTAutograd compiles
    the backward with the forward, inside the setting's patches: capture, the compile check and production share
    that), so a setting judged on the step is the setting the backward runs: under looped reductions every
    reduction kernel of both passes is a looped one."""
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(XENT)
    kinds = {variant: {n.split("_fused_")[1]: (h.info.backward, n.split("_fused_")[0])
                       for n, h in compile_problem(problem, interpreter, variant=variant).kernels.items()}
             for variant in (None, "looped-reductions")}
    assert kinds[None].keys() == kinds["looped-reductions"].keys()
    assert {backward for backward, _ in kinds[None].values()} == {False, True}
    assert {kind for _, kind in kinds[None].values()} == {"triton_per"}
    assert {kind for _, kind in kinds["looped-reductions"].values()} == {"triton_red"}


@pytest.mark.slow
def test_across_a_graph_break_production_numbers_and_names_graphs_as_capture_does(interpreter, tmp_path):
    """Forward, backward, next forward, next backward: both compile each backward with its forward."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.training import step
    from pytest_kernelopt.store.production import status
    from test_production import fresh

    path = TESTS / "problems_train" / "graph_break_train.py"
    captured = {n: (h.info.graph, h.info.backward) for n, h in compile_problem(load_problem(path), "cpu").kernels.items()}
    assert sorted({g for g, _ in captured.values()}) == [0, 1, 2, 3]
    assert {g for g, backward in captured.values() if backward} == {1, 3}
    assert any(n.endswith("__bwd__g3") for n in captured)  # a backward name repeated in the second backward graph
    problem, model = fresh(path)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id="graph_break_train", quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # nothing committed: said once, not what this test is about
        step(compiled, model, problem, problem.make_inputs(1))
    assert {k.name: k.graph for k in status(compiled).kernels} == {n: g for n, (g, _) in captured.items()}
    # Called under no_grad first (a validation pass before training): the inference graphs are numbered apart,
    # so the training step's kernels keep capture's names and graphs (before, the first frame's backward took
    # the number of the second frame's inference graph and every later name moved).
    problem, model = fresh(path)
    compiled = pytest_kernelopt.compile(model, tmp_path, model_id="graph_break_train", quiet=True)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with torch.no_grad():
            compiled(*problem.make_inputs(1))
        step(compiled, model, problem, problem.make_inputs(1))
    kernels = status(compiled).kernels
    assert {k.training for k in kernels} == {False, True}
    assert {k.name: k.graph for k in kernels if k.training} == {n: g for n, (g, _) in captured.items()}
    assert sorted({k.graph for k in kernels if not k.training}) == [0, 1]


@pytest.mark.slow
def test_the_gate_has_items_for_backward_kernels_and_fails_a_wrong_committed_one(prepared, tmp_path):
    """A committed backward version off by 1% fails its gate item (and the model item names the gradient)."""
    import json
    import os
    import shutil
    import sys

    from pytest_kernelopt.candidate import render_dump
    from test_production import commit

    (tmp_path / "problems").mkdir()
    shutil.copy(MLP, tmp_path / "problems")
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    info = _backward(prepared, "sum")
    commit(tmp_path / "kernels", "mlp_layernorm_train", info, _scaled(render_dump(info, "mlp_layernorm_train")))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    gate = forkserver.run([sys.executable, "-m", "pytest", "--kernelopt", "--kernelopt-seeds", "1", "-p",
                           "no:cacheprovider", "--kernelopt-json", "gate.json", "-q"], cwd=tmp_path, env=env,
                          timeout=600)
    assert gate.returncode == 1, gate.stdout + gate.stderr
    items = {item["kernel"] or "model": item for item in json.loads((tmp_path / "gate.json").read_text())["items"]}
    backward = [n for n in items if n.endswith("__bwd")]
    assert len(backward) == 4 and len(items) == 6  # 1 forward kernel, 4 backward kernels, the model
    assert items[info.name]["outcome"] == "failed"
    assert all(items[n]["outcome"] == "passed" for n in items if n not in (info.name, "model"))
    assert items["model"]["outcome"] == "failed" and "gradient of parameter" in items["model"]["message"]


@pytest.mark.slow
def test_a_backward_kernel_that_writes_nothing_cannot_pass_on_stale_gradients(prepared):
    """Its output buffer may hold the last run's gradient (same inputs, memory reused): the model stage alone
    must still reject it, as the kernel stage does."""
    from pytest_kernelopt.candidate import render_dump

    info = _backward(prepared, "sum")
    lines = render_dump(info, "mlp_layernorm_train").splitlines()
    i = max(k for k, line in enumerate(lines) if "tl.store(" in line)
    lines[i] = lines[i].replace("xmask)", "xmask & (x0 < 0))")  # every store masked off
    assert "(x0 < 0)" in lines[i]
    idle = "\n".join(lines) + "\n"
    for kernel in (None, info.name):
        stages = _check(prepared, kernel, {info.name: idle})
        assert stages[-1].passed is False, stages
