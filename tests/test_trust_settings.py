"""Compile settings and graph rewrites are judged on the kernels' input draws (issue 40, class 7).

The attack: a compile setting whose graph rewrite is right on the problem's own inputs and
wrong on structured ones. Registered for the test only (``capture/variants.py``'s catalogue
is a dict; a setting's ``patches`` may carry an Inductor pre-grad pass), it rewrites every
softmax as ``exp(x) / sum(exp(x))``, without subtracting the row's maximum: exact enough on
``randn`` rows, Inf/Inf = NaN where a row holds values past ~88 (the compiler's softmax is
finite there). Run in the worker's own code, in this process (the sandboxed worker knows only
the shipped catalogue).
"""

from __future__ import annotations

import re

import pytest

from conftest import TESTS

SOFTMAX = TESTS / "problems" / "softmax_rows.py"
RMS = TESTS / "problems" / "rms_norm.py"
NAIVE = "test-naive-softmax"
LOOPED = "looped-reductions"


def _naive_softmax(graph) -> None:
    """Every softmax of Dynamo's graph as exp(x) / sum(exp(x)) (no max subtracted): wrong on large rows."""
    import torch

    for node in list(graph.nodes):
        softmax = node.op == "call_function" and node.target in (torch.softmax, torch.nn.functional.softmax) \
            or node.op == "call_method" and node.target == "softmax"
        if not softmax:
            continue
        x = node.args[0]
        dim = node.args[1] if len(node.args) > 1 else node.kwargs["dim"]
        with graph.inserting_before(node):
            e = graph.call_function(torch.exp, (x,))
            s = graph.call_function(torch.sum, (e,), {"dim": dim, "keepdim": True})
            y = graph.call_function(torch.div, (e, s))
        node.replace_all_uses_with(y)
        graph.erase_node(node)


def _variant():
    from pytest_kernelopt.capture import variants

    return variants.CompileVariant(NAIVE, None, {"pre_grad_custom_pass": _naive_softmax, "fx_graph_cache": False},
                                   about="test only: softmax without the max subtracted")


@pytest.fixture
def naive_setting(monkeypatch):
    """The attack's setting in the catalogue (this process only) while the test runs."""
    from pytest_kernelopt.capture import variants

    monkeypatch.setitem(variants.VARIANTS, NAIVE, _variant())
    return NAIVE


@pytest.fixture(scope="module")
def softmax_prepared(interpreter):
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, _ = open_problem(OpenRequest(problem=str(SOFTMAX), device=interpreter, seeds=[3, 4]))
    return prepared


def _verify_compile(prepared, variant):
    """The verdict of the real compile check, run in this process (a pass given a GPU-like 1.30x)."""
    from pytest_kernelopt.records import Timing, Verdict
    from pytest_kernelopt.verify.pipeline import environment, run_check
    from pytest_kernelopt.verify.protocol import CheckRequest, StageDone

    done: list = []
    run_check(prepared, CheckRequest(kernel=None, replacements={}, compile_variant=variant, measure_speed=False),
              done.append)
    stages = [d.result for d in done if isinstance(d, StageDone)]
    failed = [s for s in stages if s.passed is False]
    timing = Timing(baseline_ms=1.3, candidate_ms=1.0, speedup=1.3, ci_low=1.25, ci_high=1.35, pairs=40,
                    method="cuda-graph")
    verdict = Verdict(model="softmax_rows", kernel=f"compile:{variant}", candidate=variant, candidate_sha256="",
                      status="rejected" if failed else "accepted", stages=stages, seeds=list(prepared.seeds),
                      reason=failed[0].detail if failed else None, model_timing=None if failed else timing,
                      speed_measured=not failed, environment=environment("cpu"))
    return verdict


def _tune_and_store(tmp_path, prepared, variant):
    """tune's compile step (``compile_choice.choose`` as on a GPU, then ``record``) with the real check."""
    from contextlib import nullcontext
    from types import SimpleNamespace

    from pytest_kernelopt.agents import compile_choice
    from pytest_kernelopt.store import KernelStore

    class Session:
        def open(self, budget_s=None):
            return SimpleNamespace(kernels=[], externs=[])

        def verify_compile(self, name):
            return _verify_compile(prepared, name)

    store = KernelStore(tmp_path / "kernels")
    outcome, verdict, _ = compile_choice.choose(lambda: nullcontext(Session()), [variant], previous=None,
                                                measured=True, say=lambda text: None, ev=lambda *a, **k: None)
    compile_choice.record(store, "softmax_rows", outcome, verdict)
    return outcome, store


@pytest.mark.slow
def test_a_rewrite_wrong_only_on_structured_inputs_is_rejected_and_not_stored(softmax_prepared, naive_setting,
                                                                               tmp_path, monkeypatch):
    from pytest_kernelopt.verify import tensors

    # Control: on the seeded runs alone (no draw kind listed) the setting passes, and tune stores it.
    kinds = tensors.STRESS_VARIANTS
    monkeypatch.setattr(tensors, "STRESS_VARIANTS", ())
    outcome, store = _tune_and_store(tmp_path / "control", softmax_prepared, naive_setting)
    assert [t.status for t in outcome.tried] == ["accepted"]
    assert outcome.stored and store.compile_variant("softmax_rows") == naive_setting

    # With the draws (every kind the tuple lists): rejected by a draw, and nothing stored.
    monkeypatch.setattr(tensors, "STRESS_VARIANTS", kinds)
    outcome, store = _tune_and_store(tmp_path / "attack", softmax_prepared, naive_setting)
    (trial,) = outcome.tried
    assert trial.status == "rejected", trial.reason
    # Any kind of large or shifted values catches it; what tune keeps of the reason names no seed.
    assert re.search(r"draw '\w+' \(input seed (\d+|<hidden>).*, output 0: NaN/Inf (where the default "
                     r"compile is finite|positions differ from the default compile)", trial.reason), trial.reason
    assert not outcome.stored and outcome.chosen is None and store.compile_variant("softmax_rows") is None
    assert not (tmp_path / "attack" / "kernels" / "softmax_rows" / "model.json").exists()


def _baking(model):
    """A pre-grad pass that replaces the model's ``weight`` parameter by a constant of its values now."""
    import torch

    def bake(graph) -> None:
        for node in list(graph.nodes):
            if node.op == "placeholder" and node.name.endswith("_weight_"):
                with graph.inserting_after(node):
                    const = graph.call_function(torch.tensor, (model.weight.detach().tolist(),),
                                                {"dtype": model.weight.dtype})
                node.replace_all_uses_with(const)

    return bake


@pytest.mark.slow
def test_a_setting_that_bakes_the_weights_in_is_rejected_on_a_draw_with_other_weights(interpreter, monkeypatch):
    """Weights are varied on half the draws, for both compiles and the reference: an honest setting still
    passes (both compiles read the live parameters), one that folded the session's weights into its
    graph does not; the weights are put back bit for bit either way."""
    from pytest_kernelopt.capture import variants
    from pytest_kernelopt.verify import compile_check, tensors
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.prepared import StageFailure, weight_sums
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, _ = open_problem(OpenRequest(problem=str(RMS), device=interpreter, seeds=[5]))
    rows = compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)
    assert sorted(d.split(" ")[0] for d in rows.draws) == sorted(tensors.STRESS_VARIANTS), rows.describe()
    n = len(tensors.STRESS_VARIANTS)  # every other draw, from the first or the second (drawn)
    assert sum("weights varied (seed" in d for d in rows.draws) in (n // 2, (n + 1) // 2)
    assert weight_sums(prepared.compiled.model) == prepared.weights

    monkeypatch.setitem(variants.VARIANTS, "test-baked-weights", variants.CompileVariant(
        "test-baked-weights", None, {"pre_grad_custom_pass": _baking(prepared.compiled.model), "fx_graph_cache": False}))
    kinds = tensors.STRESS_VARIANTS
    monkeypatch.setattr(tensors, "STRESS_VARIANTS", ())  # the seeded runs alone: the session's weights, exact
    assert compile_check.compile_stage(prepared, "test-baked-weights", 4.0, False).worst <= 1.0
    monkeypatch.setattr(tensors, "STRESS_VARIANTS", kinds)
    # Every draw runs weights drawn for it (Prepared.inputs), half of them scaled further: whichever comes first.
    with pytest.raises(StageFailure, match=r"draw '\w+' \(input seed \d+, transform seed \d+(, weights varied "
                                           r"\(seed \d+\))?\), output 0 against the float64 reference: \d+ of"):
        compile_check.compile_stage(prepared, "test-baked-weights", 4.0, False)
    assert weight_sums(prepared.compiled.model) == prepared.weights
