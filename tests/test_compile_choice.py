"""The model's compile settings (``model.json``'s ``compile``): the catalogue, the check, tune, gate, production.

Interpreter mode: the variant used is ``looped-reductions`` (the one cheap enough to compile
on a CPU); it turns softmax_rows' persistent reduction (``triton_per_``) into a looped one
(``triton_red_``), so which compile ran is visible in the kernel names.
"""

from __future__ import annotations

import json
import warnings
from datetime import datetime, timezone
from pathlib import Path

from types import SimpleNamespace

import pytest

from conftest import TESTS

pytest_plugins = ["pytester"]

SOFTMAX = TESTS / "problems" / "softmax_rows.py"
LOOPED = "looped-reductions"


def _choice(variant: str, graphs: list[list[str]] | None = None) -> dict:
    """model.json's compile entry as tune writes it here (production applies it only in the environment it records)."""
    from pytest_kernelopt.verify.pipeline import environment

    return {"variant": variant, "measured": datetime(2026, 12, 2, tzinfo=timezone.utc).isoformat(), "seeds": [1],
            "graphs": graphs, "environment": environment("cpu").model_dump(mode="json")}


def _small_softmax(folder: Path, stem: str = "softmax_rows") -> Path:
    """softmax_rows at 2 rows instead of 8, as ``folder/<stem>.py``: the 128-long reduction, which is what
    the looped compile changes, is kept; its rows are independent programs the interpreter runs one by one."""
    text = SOFTMAX.read_text()
    assert "else (8, 128)" in text
    path = folder / f"{stem}.py"
    path.write_text(text.replace("else (8, 128)", "else (2, 128)"))
    return path


@pytest.fixture(scope="module")
def small_softmax(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return _small_softmax(tmp_path_factory.mktemp("softmax"))


def _write_choice(kernels: Path, model: str, variant: str, graphs: list[list[str]] | None = None) -> None:
    folder = kernels / model
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "model.json").write_text(json.dumps({"schema_version": 1, "model": model,
                                                   "compile": _choice(variant, graphs)}))


# --- the catalogue and the store --------------------------------------------------------

def test_the_catalogue_refuses_unknown_names_and_gives_each_variant_its_patches():
    from pytest_kernelopt.capture.variants import (HARVEST_VARIANTS, MODEL_VARIANTS, VARIANTS, inductor_patches,
                                                   unknown_variant)

    assert unknown_variant("max-autotune") is None
    assert "unknown compile variant 'cpp.cxx'" in unknown_variant("cpp.cxx")
    assert set(MODEL_VARIANTS) <= set(VARIANTS) and set(HARVEST_VARIANTS) <= set(VARIANTS)
    assert "max-autotune-nd-tiling" not in HARVEST_VARIANTS  # its kernels never fit the default's arguments
    # max-autotune's Triton kernels are harvested without its GEMM/convolution templates
    assert "max-autotune-extern" in HARVEST_VARIANTS and "max-autotune" not in HARVEST_VARIANTS
    assert inductor_patches("max-autotune-extern")["max_autotune_gemm_backends"] == "ATEN"
    assert inductor_patches(None) == {}
    assert inductor_patches("max-autotune")["max_autotune"] is True
    assert inductor_patches(LOOPED) == {"triton.persistent_reductions": False}
    # The choices handler is in no FX graph cache key: that compile bypasses that cache.
    assert inductor_patches("persistent-rows")["fx_graph_cache"] is False


def test_model_json_stores_a_name_the_store_checks_against_the_catalogue(tmp_path):
    from pydantic import ValidationError

    from pytest_kernelopt.errors import StoreError
    from pytest_kernelopt.store import CompileChoice, KernelStore

    store = KernelStore(tmp_path / "kernels")
    assert store.compile_variant("m") is None
    store.save_compile("m", CompileChoice(variant="max-autotune", measured=datetime.now(timezone.utc)))
    assert store.compile_variant("m") == "max-autotune"
    store.save_compile("m", None)
    assert store.compile_variant("m") is None and store.model_record("m").compile is None
    _write_choice(tmp_path / "kernels", "m", "no-such-setting")
    with pytest.raises(StoreError, match=r"model\.json: unknown compile variant 'no-such-setting'"):
        store.compile_variant("m")
    with pytest.raises(ValidationError):  # never a path, a dict of options or anything but a short name
        CompileChoice(variant="../triton.cudagraphs", measured=datetime.now(timezone.utc))


# --- the check in the verifier ----------------------------------------------------------

@pytest.mark.slow
def test_verify_compile_judges_the_variant_against_the_default_compile_from_either_side(interpreter, small_softmax):
    from pytest_kernelopt.errors import BudgetSpent, UsageError
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    options = VerifyOptions(seeds=2, seed=7)
    with VerifySession(small_softmax, interpreter, options) as session:  # tune's side: the defaults
        assert [k.name.startswith("triton_per_") for k in session.open().kernels] == [True]
        # The memory limit's floor (the gate's note): the input read once, the softmax written once.
        from pytest_kernelopt.capture.problem import load_problem

        (x,) = load_problem(small_softmax).make_inputs(0, "cpu")
        assert session.opened.min_bytes == 2 * x.numel() * x.element_size()
        assert session.opened.min_flops == {}  # counted in the worker: a softmax has no matrix product
        verdict = session.verify_compile(LOOPED)
        assert verdict.status == "correct" and verdict.kernel == f"compile:{LOOPED}"
        assert [s.name for s in verdict.stages] == ["static", "model", "speed"]
        # A given seed only adds: its two seeds and two fresh ones.
        assert "the default compile's own error" in verdict.stages[1].detail and len(verdict.errors) == 4
        # What the setting's compile launched, per kernel fingerprint (what tune records with the setting).
        ((fp, point),) = verdict.launch_configs.items()
        assert point["R0_BLOCK"] >= 64 and {"XBLOCK", "num_warps", "num_stages"} <= set(point)
        chunks = {**point, "XBLOCK": 1, "R0_BLOCK": 32}
        # Tune's second compile of a setting launches what the first ran: given, they are what it runs and records.
        again = session.verify_compile(LOOPED, launch_configs={fp: chunks})
        assert again.status == "correct", again.reason
        assert again.launch_configs == {fp: chunks}
        # The run's budget ends while a check still compiles: stopped there, said as the budget's, no verdict;
        # the next check runs in a fresh worker.
        with pytest.raises(BudgetSpent, match=r"the run's budget \(--run-budget-s\) ran out"):
            session.verify_compile(LOOPED, budget_s=0.01)
        assert session.verify_compile(LOOPED, budget_s=600.0).status == "correct"
    with VerifySession(small_softmax, interpreter, options, variant=LOOPED,  # the gate's side: the variant, as
                       launch_configs={fp: chunks}) as session:                # recorded (4 chunks a row)
        assert [k.launch.kwargs for k in session.open().kernels] == [{"XBLOCK": 1, "R0_BLOCK": 32}]
        assert session.opened.launches_fixed == 1 and session.opened.launches_refused == []
        verdict = session.verify_compile(LOOPED)
        assert verdict.status == "correct", verdict.reason
        assert verdict.launch_configs is None  # given, not raced
        with pytest.raises(UsageError, match="cannot check 'max-autotune'"):
            session.verify_compile("max-autotune")
    with pytest.raises(UsageError, match="unknown compile variant"):
        VerifySession(small_softmax, interpreter, options, variant="nope")


@pytest.mark.slow
def test_a_variant_outside_the_default_compiles_error_is_rejected(interpreter, small_softmax):
    """In the worker's own code: the other compile's outputs nudged by 1e-3 fail the model stage's rule."""
    from pytest_kernelopt.verify import compile_check
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, _ = open_problem(OpenRequest(problem=str(small_softmax), device=interpreter, seeds=[3]))
    rows = compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)
    assert rows[0].model_ratio <= 1.0  # the real looped compile passes
    looped = prepared.others[LOOPED]
    prepared.others[LOOPED] = lambda *xs: looped(*xs) + 1e-3
    with pytest.raises(StageFailure, match="seed 3, output 0"):
        compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)


def test_both_compiles_are_timed_without_autograd_as_they_were_judged(monkeypatch):
    """The other compile runs under no_grad whoever calls it, as the session's does: called with
    gradients recorded it was compiled again for training and timed so (the group norm rewrite
    timed as the default compile)."""
    from types import SimpleNamespace

    import torch

    from pytest_kernelopt.verify import compile_check

    modes = []
    monkeypatch.setattr(torch, "compile", lambda model, backend: lambda *xs: modes.append(torch.is_grad_enabled()))
    prepared = SimpleNamespace(inputs=lambda seed: [torch.ones(2)], seeds=[0], others={}, device="cpu",
                               compiled=SimpleNamespace(model=None, problem=None), variant=None)
    with torch.enable_grad():
        default, chosen = compile_check._sides(prepared, LOOPED)
        chosen(torch.ones(2))
    assert modes == [False, False]  # compiled (the first call), then a timed call


def test_the_other_compile_races_its_kernels_itself(monkeypatch):
    """The setting's compile reads no launch configuration Inductor remembered on this machine (a harvest child's
    pick, raced beside three others, carried into a compile trial), as the session's own compile reads none."""
    import torch
    import torch._dynamo
    import torch._inductor.compile_fx as compile_fx
    from types import SimpleNamespace
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from pytest_kernelopt.verify import compile_check

    remembered = lambda self, inductor_meta, configs: configs[0]  # noqa: E731
    monkeypatch.setattr(AutotuneCache, "read_best", remembered)
    read = []

    def fake_compile_fx(gm, example_inputs, config_patches=None):
        read.append(AutotuneCache.read_best(object.__new__(AutotuneCache), {}, ["a", "b"]))
        return gm.forward

    monkeypatch.setattr(compile_fx, "compile_fx", fake_compile_fx)
    torch._dynamo.reset()
    model = torch.nn.ReLU()
    prepared = SimpleNamespace(inputs=lambda seed: [torch.ones(2, 3)], seeds=[0], others={}, device="cpu",
                               compiled=SimpleNamespace(model=model, problem=None), variant=None)
    compile_check._other(prepared, "max-autotune")
    torch._dynamo.reset()
    assert read == [None] and AutotuneCache.read_best is remembered


# --- tune ------------------------------------------------------------------------------

def _fake_tune(tmp_path, compile_speed, **options):
    from test_agents import FakeSession, _inductor_info, _tuner

    session = FakeSession(_inductor_info(), {8: 1.0}, seconds=0.0, compile_speed=compile_speed)
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, **options)
    return session, tuner, run, store


def test_tune_stores_the_fastest_accepted_compile_and_tunes_kernels_on_it(tmp_path):
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.10, "persistent-rows": 1.15,
                                                       "max-autotune-nd-tiling": 1.01},
                                            compile_variants=["max-autotune", "persistent-rows",
                                                              "max-autotune-nd-tiling"])
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert outcome.error is None
    # The fastest accepted is checked again on a second compile, in a new session, before it is chosen.
    assert session.compile_calls == ["max-autotune", "persistent-rows", "max-autotune-nd-tiling", "persistent-rows"]
    # The second compile launches what the first trial of the setting ran (its second check), the choice records
    # those with its timing, and the kernel search's session compiles the choice at them.
    first = {session.info.fingerprint: {"XBLOCK": 4, "num_warps": 4, "num_stages": 1}}
    assert session.compile_given == [None, None, None, first]
    assert session.variants == [None, None, "persistent-rows"]
    assert store.compile_variant("m") == "persistent-rows"
    record = store.model_record("m").compile
    assert record.timing.speedup == pytest.approx(1.15) and record.seeds == [1, 2, 3]
    assert record.launch_configs == first and session.launch_configs == [None, None, first]
    assert outcome.compile.chosen == "persistent-rows" and outcome.compile.stored
    assert "1.150x on a second compile" in outcome.compile.note
    assert {t.variant: t.status for t in outcome.compile.tried}["max-autotune-nd-tiling"] == "correct"
    saved = json.loads((run.root / "run.json").read_text())
    assert saved["problems"][0]["compile"]["chosen"] == "persistent-rows"


def test_a_setting_whose_gain_no_race_explains_is_chosen_without_a_second_compile(tmp_path):
    """A second compile guards against a compile's own launch-configuration race, which moved one setting by
    15%; a setting whose interval starts at 1.25x or more is chosen from its first trial (a three-shape
    cross-entropy's rewrites at 1.88x spent 64 s of a 262 s tune on the second compile)."""
    from test_agents import _problem

    from pytest_kernelopt.agents.compile_choice import SURE_GAIN

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.10, "persistent-rows": SURE_GAIN + 0.02},
                                            compile_variants=["max-autotune", "persistent-rows"])
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune", "persistent-rows"]  # no second compile
    assert outcome.compile.chosen == "persistent-rows" and store.compile_variant("m") == "persistent-rows"
    assert "on a second compile" not in outcome.compile.note
    record = store.model_record("m").compile
    assert record.timing.speedup == pytest.approx(SURE_GAIN + 0.02)  # the first trial's figure and its configurations
    assert record.launch_configs == {session.info.fingerprint: {"XBLOCK": 4, "num_warps": 4, "num_stages": 1}}
    # Just under it, the second compile runs.
    session, tuner, run, store = _fake_tune(tmp_path / "b", {"persistent-rows": SURE_GAIN - 0.005},
                                            compile_variants=["persistent-rows"])
    tuner.tune_problem(_problem(tmp_path / "b"))
    assert session.compile_calls == ["persistent-rows", "persistent-rows"]


def test_a_setting_faster_beyond_noise_by_under_the_kernel_gain_is_chosen(tmp_path):
    """A catalogue setting needs the setting gain (0.5%), not the 2% a kernel version needs: max-autotune at 1.015x
    [1.005, 1.025] is chosen (at 2% the model ran behind max-autotune by that much); at 1.003x it is not."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.015}, compile_variants=["max-autotune"])
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert outcome.compile.chosen == "max-autotune" and store.compile_variant("m") == "max-autotune"
    session, tuner, run, store = _fake_tune(tmp_path / "b", {"max-autotune": 1.003}, compile_variants=["max-autotune"])
    outcome = tuner.tune_problem(_problem(tmp_path / "b"))
    assert outcome.compile.chosen is None and outcome.compile.tried[0].status == "correct"
    assert "no compile setting was faster than the default compile beyond noise" in outcome.compile.note


def test_a_setting_near_its_numerical_allowance_is_not_chosen(tmp_path):
    """The gate checks a stored setting again on draws of its own: one whose worst element used 54% of its
    allowance on tune's draws (an nd-tiling compile of a cross-entropy step; 109% on another tune's) is left
    for the next fastest, which used 25%."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.02, "max-autotune-nd-tiling": 1.05},
                                            compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    session.compile_ratio = {"max-autotune": 0.25, "max-autotune-nd-tiling": 0.54}
    outcome = tuner.tune_problem(_problem(tmp_path))
    trials = {t.variant: t for t in outcome.compile.tried}
    assert trials["max-autotune-nd-tiling"].status == "correct" and trials["max-autotune-nd-tiling"].worst_ratio == 0.54
    assert "used 54% of it" in trials["max-autotune-nd-tiling"].reason
    assert trials["max-autotune"].status == "accepted" and trials["max-autotune"].worst_ratio == 0.25
    assert outcome.compile.chosen == "max-autotune" and store.compile_variant("m") == "max-autotune"


def test_a_setting_faster_on_one_compile_only_is_not_chosen(tmp_path):
    """Each compile races its kernels' launch configurations once, so a setting's gain over the default compile is
    partly two races: on an H100 max-autotune-extern measured 0.984x on a training step in one tune and 1.027x
    [1.026, 1.027] in another. The fastest accepted setting is checked again in a new session; one that does not
    hold there is not chosen, and the next accepted one, which holds, is."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {}, compile_variants=["max-autotune", "max-autotune-extern"])
    session.opened.externs = [SimpleNamespace(target="extern_kernels.mm")]
    speeds = {"max-autotune-extern": [1.027, 1.001], "max-autotune": [1.02, 1.019]}
    scripted = session.verify_compile

    def verify_compile(variant, launch_configs=None, budget_s=None):
        session.compile_speed = {variant: speeds[variant].pop(0)}
        return scripted(variant, launch_configs, budget_s)

    session.verify_compile = verify_compile
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune", "max-autotune-extern", "max-autotune-extern", "max-autotune"]
    trials = {t.variant: t for t in outcome.compile.tried}
    extern = trials["max-autotune-extern"]
    assert extern.status == "correct" and extern.speedup == pytest.approx(1.027)
    assert extern.second_speedup == pytest.approx(1.001) and "not confirmed on a second compile: 1.001x" in extern.reason
    assert trials["max-autotune"].status == "accepted" and trials["max-autotune"].second_speedup == pytest.approx(1.019)
    assert outcome.compile.chosen == "max-autotune" and store.compile_variant("m") == "max-autotune"
    assert store.model_record("m").compile.timing.speedup == pytest.approx(1.019)  # the second compile's figure
    events = [json.loads(line) for line in (run.root / "trace.jsonl").read_text().splitlines()]
    assert [(e["data"]["variant"], e["data"]["confirmed"]) for e in events if e["event"] == "compile-second"] == [
        ("max-autotune-extern", False), ("max-autotune", True)]


def test_a_rewrite_setting_that_rewrote_nothing_drops_the_other_rewrite_settings_at_that_shape(tmp_path):
    """A convnet's pooling kernel (a sum-like name) let both rewrite settings through: each compiled the whole model
    to find nothing, and max-autotune, ordered after them, was cut by the budget (0.976x of max-autotune there, H100,
    2026-12-07). Once one rewrite setting's check found nothing to rewrite, the other rewrite settings at that shape
    are skipped (the rewrites act on the graph before lowering) and the settings after them run."""
    from types import SimpleNamespace

    from test_agents import _problem

    from pytest_kernelopt.capture.variants import NOTHING_REWRITTEN

    variants = ["max-autotune-extern", "max-autotune-extern-rewrites", "max-autotune-rewrites", "max-autotune"]
    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune-extern": 1.01, "max-autotune": 1.04},
                                            compile_variants=variants)
    session.opened.externs = [SimpleNamespace(target="extern_kernels.mm")]
    scripted = session.verify_compile

    def verify_compile(variant, launch_configs=None, budget_s=None):
        verdict = scripted(variant, launch_configs, budget_s)
        if "rewrites" in variant:  # as compile_check says it, through the model stage
            verdict.status, verdict.model_timing = "rejected", None
            verdict.reason = f"model: {variant!r}: {NOTHING_REWRITTEN} (it compiles as without them)"
        return verdict

    session.verify_compile = verify_compile
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune-extern", "max-autotune-extern-rewrites", "max-autotune",
                                     "max-autotune"]  # the winner's second compile last
    assert [t.variant for t in outcome.compile.tried] == ["max-autotune-extern", "max-autotune-extern-rewrites",
                                                          "max-autotune"]
    assert outcome.compile.chosen == "max-autotune"
    events = [json.loads(line) for line in (run.root / "trace.jsonl").read_text().splitlines()]
    skips = {e["data"]["variant"]: e["data"]["reason"] for e in events if e["event"] == "compile-skip"}
    assert skips == {"max-autotune-rewrites": "'max-autotune-extern-rewrites' found nothing to rewrite here"}
    # Another rejection (an output outside its allowance) drops nothing: each setting is judged on its own.
    session, tuner, run, store = _fake_tune(tmp_path / "b", {"max-autotune-extern-rewrites": 0, "max-autotune": 1.04},
                                            compile_variants=variants[1:])
    session.opened.externs = [SimpleNamespace(target="extern_kernels.mm")]
    tuner.tune_problem(_problem(tmp_path / "b"))
    assert session.compile_calls[:3] == variants[1:]


def test_a_batch_or_layer_norm_kernel_is_no_pattern_the_rewrites_change():
    from types import SimpleNamespace

    from pytest_kernelopt.capture.variants import needless

    pooled = SimpleNamespace(name="triton_red_fused__native_batch_norm_legit_no_training_max_pool2d_with_indices_mean_"
                                  "relu_7", source="tmp = tl.sum(x, 1)")
    layer = SimpleNamespace(name="triton_red_fused_add_native_layer_norm_1", source="")
    for name in ("max-autotune-rewrites", "max-autotune-extern-rewrites"):
        assert "no softmax or norm over rows" in needless(name, [pooled, layer], [SimpleNamespace(target="mm")])
    l2 = SimpleNamespace(name="triton_red_fused_div_linalg_vector_norm_0", source="")
    assert needless("max-autotune-rewrites", [l2], []) is None


def test_a_second_session_that_fails_to_open_chooses_nothing_and_blames_the_verifier(tmp_path):
    """The verifier's own failure on the second compile is said as its own; the setting is not chosen (nothing
    confirmed it) and the run goes on to the kernels on the default compile."""
    from test_agents import _problem

    from pytest_kernelopt.errors import VerifierError

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.1}, compile_variants=["max-autotune"])
    opened = []

    def factory(*args, **kwargs):
        opened.append(kwargs.get("variant"))
        if len(opened) == 2:
            raise VerifierError("the verification worker died while starting (signal 9)")
        return session(*args, **kwargs)

    tuner.session_factory = factory
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert outcome.error is None and outcome.compile.chosen is None and store.compile_variant("m") is None
    (trial,) = outcome.compile.tried
    assert trial.status == "correct" and "not confirmed on a second compile: the verifier failed" in trial.reason
    assert "signal 9" in trial.reason and opened == [None, None, None]


def test_the_compile_step_stops_trying_settings_once_the_run_s_budget_is_spent(tmp_path):
    """--run-budget-s bounds the compile step too (a max-autotune compile of a model with GEMMs took 89 s on an
    H100): the first setting is checked, the budget then runs out, the rest are said as not tried, and the first,
    not checked again on a second compile, is not chosen."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.05, "max-autotune-nd-tiling": 1.10},
                                            compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    calls = []
    tuner._run_left = lambda: 100.0 if not calls.append(1) and len(calls) <= 2 else 0.0  # the first trial's
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune"]
    (trial,) = outcome.compile.tried
    assert trial.variant == "max-autotune" and trial.status == "correct" and outcome.compile.chosen is None
    assert "not confirmed on a second compile: the run's budget" in trial.reason
    assert "budget (--run-budget-s) was spent before the compile settings were all checked" in outcome.compile.note
    events = [json.loads(line) for line in (run.root / "trace.jsonl").read_text().splitlines()]
    assert any(e["event"] == "compile-skip" and e["data"]["variant"] == "max-autotune-nd-tiling"
               and "run's budget" in e["data"]["reason"] for e in events)


def test_a_compile_trial_still_running_when_the_run_s_budget_ends_is_stopped_there(tmp_path):
    """A setting with GEMM templates compiled for 243 s of a GPT-2 block's training step on an H100 (2026-12-06),
    past a run budget of 245 s that had little left when it started: each trial is given what is left of the
    budget, and one still running then is stopped, said as stopped by the budget (an error, never a verdict on
    the setting), and the compile step ends with nothing chosen."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.05, "max-autotune-nd-tiling": 1.10},
                                            compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    session.compile_seconds = {"max-autotune-nd-tiling": 250.0}

    def left():  # the budget's seconds left, as the trials go on
        calls = session.compile_calls
        return -10.0 if "max-autotune-nd-tiling" in calls else 240.0 if calls else 300.0

    tuner._run_left = left
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune", "max-autotune-nd-tiling"]
    assert session.compile_budgets == [300.0, 240.0]  # each trial told what was left of the run's budget
    trials = {t.variant: t for t in outcome.compile.tried}
    cut = trials["max-autotune-nd-tiling"]
    assert cut.status == "error" and cut.speedup is None
    assert "the run's budget (--run-budget-s) ran out" in cut.reason and "stopped" in cut.reason
    assert "not confirmed on a second compile: the run's budget" in trials["max-autotune"].reason
    assert outcome.compile.chosen is None and store.compile_variant("m") is None


def test_the_trials_after_an_accepted_setting_leave_its_second_compile_the_time_its_check_took(tmp_path,
                                                                                               monkeypatch):
    """max-autotune is accepted (1.10x) in a 100 s check of a 300 s budget; nd-tiling's check would take 150 s.
    It is given 100 s, not 200 (it stops there, an error naming the budget), so max-autotune's second compile
    still has the 100 s it needs, and max-autotune is chosen (it was dropped unconfirmed before, a ViT block's
    1.17x on an H100)."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.10, "max-autotune-nd-tiling": 1.05},
                                            compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    session.compile_seconds = {"max-autotune": 100.0, "max-autotune-nd-tiling": 150.0}
    clock = [300.0]
    check = session.verify_compile

    def timed(variant, launch_configs=None, budget_s=None):  # each check spends its seconds, or its budget
        took = session.compile_seconds[variant]
        clock[0] -= min(took, budget_s) if budget_s is not None else took
        return check(variant, launch_configs, budget_s)

    session.verify_compile = timed
    tuner._run_left = lambda: clock[0]
    from types import SimpleNamespace

    from pytest_kernelopt.agents import compile_choice

    monkeypatch.setattr(compile_choice, "time", SimpleNamespace(monotonic=lambda: 1000.0 - clock[0]))
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune", "max-autotune-nd-tiling", "max-autotune"]
    assert session.compile_budgets == [300.0, 100.0, 100.0]
    trials = {t.variant: t for t in outcome.compile.tried}
    assert trials["max-autotune-nd-tiling"].status == "error" and "ran out" in trials["max-autotune-nd-tiling"].reason
    assert outcome.compile.chosen == "max-autotune" and trials["max-autotune"].second_speedup == pytest.approx(1.1)
    # Accepted at 100 s of a 200 s budget: nothing left for another trial, which is said as not tried.
    clock[0] = 200.0
    session2, tuner2, run2, store2 = _fake_tune(tmp_path / "b", {"max-autotune": 1.10},
                                                compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    session2.compile_seconds = session.compile_seconds
    check = session2.verify_compile
    session2.verify_compile = timed
    session = session2
    tuner2._run_left = lambda: clock[0]
    outcome = tuner2.tune_problem(_problem(tmp_path / "b"))
    assert session2.compile_calls == ["max-autotune", "max-autotune"] and outcome.compile.chosen == "max-autotune"
    events = [json.loads(line) for line in (run2.root / "trace.jsonl").read_text().splitlines()]
    assert any(e["event"] == "compile-skip" and "kept for the accepted setting's second compile" in e["data"]["reason"]
               for e in events)


def test_a_trial_given_no_run_budget_is_not_told_one(tmp_path):
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.05}, compile_variants=["max-autotune"])
    tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == ["max-autotune", "max-autotune"] and session.compile_budgets == [None, None]


def test_a_tune_stopped_during_the_compile_step_keeps_the_trials_it_measured(tmp_path):
    """Ctrl-C or SIGTERM in the middle of the trials (four training steps on an H100 were stopped after 71-90 s of
    them, and their run records showed none): the run record holds each trial decided so far; nothing is chosen."""
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.05, "max-autotune-nd-tiling": 1.10},
                                            compile_variants=["max-autotune", "max-autotune-nd-tiling"])
    check = session.verify_compile

    def stopped_at_the_second(variant, launch_configs=None, budget_s=None):
        if session.compile_calls:
            raise KeyboardInterrupt
        return check(variant, launch_configs, budget_s)

    session.verify_compile = stopped_at_the_second
    with pytest.raises(KeyboardInterrupt):
        tuner.tune_problem(_problem(tmp_path))
    (outcome,) = run.record.problems
    (trial,) = outcome.compile.tried
    assert trial.variant == "max-autotune" and trial.speedup == pytest.approx(1.05)
    assert outcome.compile.chosen is None and not outcome.compile.stored and store.compile_variant("m") is None
    assert outcome.compile.note.startswith("stopped during the compile step")


def test_a_stored_compile_that_no_longer_wins_goes_back_to_the_defaults(tmp_path):
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 0.97}, compile_variants=["max-autotune"])
    _write_choice(store.root, "m", "max-autotune")
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert store.compile_variant("m") is None and outcome.compile.stored
    assert "no longer chosen over the default compile" in outcome.compile.note
    assert session.variants == [None, None]


@pytest.mark.parametrize("externs", [0, 1])
def test_max_autotune_without_templates_is_tried_only_on_a_model_with_library_calls(tmp_path, externs):
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.03, "max-autotune-extern": 1.05},
                                            compile_variants=["max-autotune", "max-autotune-extern"])
    session.opened.externs = [SimpleNamespace(target="extern_kernels.mm")] * externs
    outcome = tuner.tune_problem(_problem(tmp_path))
    if externs:
        assert session.compile_calls == ["max-autotune", "max-autotune-extern", "max-autotune-extern"]
        assert outcome.compile.chosen == "max-autotune-extern"
    else:  # it would compile as max-autotune does: not compiled twice
        assert session.compile_calls == ["max-autotune"] * 2 and outcome.compile.chosen == "max-autotune"
        events = [json.loads(line) for line in (run.root / "trace.jsonl").read_text().splitlines()]
        assert any(e["event"] == "compile-skip" and e["data"]["variant"] == "max-autotune-extern" for e in events)


def test_without_trials_tune_keeps_model_json_s_compile(tmp_path):
    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {}, compile_variants=[])
    _write_choice(store.root, "m", LOOPED)
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert session.compile_calls == [] and session.variants == [LOOPED]
    assert outcome.compile.chosen == LOOPED and not outcome.compile.stored


def test_the_compile_variants_flag_takes_names_or_none():
    from pytest_kernelopt.cli import build_parser

    parser = build_parser()
    assert parser.parse_args(["tune", "p.py", "--compile-variants", "max-autotune, persistent-rows"]
                             ).compile_variants == ["max-autotune", "persistent-rows"]
    assert parser.parse_args(["tune", "p.py", "--compile-variants", "none"]).compile_variants == []
    assert parser.parse_args(["tune", "p.py"]).compile_variants is None
    with pytest.raises(SystemExit):
        parser.parse_args(["tune", "p.py", "--compile-variants", "cpp.cxx"])


# --- a problem with SHAPES: one setting, checked at every declared shape --------------------

SHAPED = '''import torch

rows = 2
SHAPES = {"b2": {"rows": 2}, "b4": {"rows": 4}}
SHAPE_WEIGHTS = {"b2": 3, "b4": 1}


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x, dim=-1)


def get_inputs():
    return [torch.randn(rows, 128)]


def get_init_inputs():
    return []
'''


def _per_shape_session(speeds: dict[str, dict[str, float]], fails: dict[tuple[str, str], Exception] | None = None):
    """test_agents' scripted session, opened at a declared shape: variant -> speedup at that shape (0: rejected),
    a verifier error where ``fails`` names (variant, shape); each check records its graph as ``int <n>`` (shape bn)."""
    from test_agents import FakeSession, _inductor_info

    class PerShape(FakeSession):
        def __call__(self, problem, device, options, progress=None, variant=None, shape=None, launch_configs=None):
            self.shape = shape
            self.opened_at.append((shape, variant))
            return super().__call__(problem, device, options, progress, variant, launch_configs=launch_configs)

        def verify_compile(self, variant, launch_configs=None, budget_s=None):
            if (variant, self.shape) in (fails or {}):
                self.compile_calls.append(f"{variant}@{self.shape}")
                raise (fails or {})[(variant, self.shape)]
            self.compile_speed = speeds.get(self.shape, {})
            verdict = super().verify_compile(variant, launch_configs, budget_s)
            self.compile_calls[-1] = f"{variant}@{self.shape}"
            verdict.launches = [[f"int {(self.shape or 'b0')[1:]}"]]  # a graph's inputs, one per shape
            return verdict

    session = PerShape(_inductor_info(), {8: 1.0}, seconds=0.0)
    session.opened_at = []
    return session


def test_each_declared_shape_chooses_its_own_compile_and_stores_it_for_that_shape(tmp_path):
    """b2: persistent-rows (1.20x) beats max-autotune and looped-reductions; nd-tiling is rejected there. b4: max-autotune
    (1.10x) is the only one faster (persistent-rows 0.90x; looped-reductions: the verifier failed, an error, not
    the setting's fault). Each shape's step runs when that shape is tuned, in sessions opened at it, and each
    shape's kernels are searched on its own choice; model.json holds one choice per shape with its graphs."""
    from test_agents import _tuner

    from pytest_kernelopt.errors import VerifierError

    path = tmp_path / "m.py"  # the scripted verdicts are of model "m"
    path.write_text(SHAPED)
    speeds = {"b2": {"max-autotune": 1.10, "persistent-rows": 1.20, "max-autotune-nd-tiling": 0, LOOPED: 1.15},
              "b4": {"max-autotune": 1.10, "persistent-rows": 0.90, LOOPED: 1.15}}
    session = _per_shape_session(speeds, {(LOOPED, "b4"): VerifierError("the worker died (signal 9)")})
    variants = ["max-autotune", "persistent-rows", "max-autotune-nd-tiling", LOOPED]
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, compile_variants=variants)
    tuner.coder.prepare = lambda problem, device, kernels, shape=None: None
    first = tuner.tune_problem(path, "b2", 0.75)
    assert first.error is None, first.error
    assert session.compile_calls == ["max-autotune@b2", "persistent-rows@b2", "max-autotune-nd-tiling@b2",
                                     f"{LOOPED}@b2", "persistent-rows@b2"]  # then the winner's second compile
    trials = {t.variant: t for t in first.compile.tried}
    assert list(trials) == variants and trials["max-autotune-nd-tiling"].status == "rejected"
    assert trials["persistent-rows"].second_speedup == pytest.approx(1.2)
    assert first.compile.chosen == "persistent-rows" and first.compile.stored
    assert "over the default compile at shape b2" in first.compile.note
    assert store.compile_variant("m", "b2") == "persistent-rows" and store.compile_variant("m", "b4") is None

    second = tuner.tune_problem(path, "b4", 0.25)  # b2's choice first: the likeliest winner, before the budget ends
    assert session.compile_calls[5:] == ["persistent-rows@b4", "max-autotune@b4", "max-autotune-nd-tiling@b4",
                                         f"{LOOPED}@b4", "max-autotune@b4"]
    trials = {t.variant: t for t in second.compile.tried}
    assert list(trials)[0] == "persistent-rows" and trials["persistent-rows"].status == "correct"
    assert trials[LOOPED].status == "error"
    assert "the worker died" in trials[LOOPED].reason
    assert second.compile.chosen == "max-autotune"
    from pytest_kernelopt.report.view import _compile_note  # the run report's line

    assert "max-autotune 1.100x [1.090, 1.110] accepted" in _compile_note(second)
    record = store.model_record("m")
    assert record.compile is None and set(record.compile_at) == {"b2", "b4"}
    assert record.compile_at["b2"].graphs == [["int 2"]] and record.compile_at["b4"].graphs == [["int 4"]]
    assert record.compile_at["b4"].timing.speedup == pytest.approx(1.1)
    assert store.launch_configs("m", "b4") == record.compile_at["b4"].launch_configs
    # Each shape's trials in sessions under the defaults, then its kernel search on its own choice.
    assert session.opened_at == [("b2", None), ("b2", None), ("b2", "persistent-rows"),
                                 ("b4", None), ("b4", None), ("b4", "max-autotune")]


def test_a_shape_s_compile_step_spends_its_weight_s_share_of_the_run_budget_left():
    """b2 weighs 3 of 4: its step may spend 75% of what is left; b4's, then, all that is left."""
    from pytest_kernelopt.agents.compile_choice import shape_deadline

    clock = [100.0]
    left = shape_deadline(lambda: clock[0], {"b2": 3, "b4": 1}, "b2")
    assert left() == pytest.approx(75.0)
    clock[0] = 40.0
    assert left() == pytest.approx(15.0)
    assert shape_deadline(lambda: clock[0], {"b2": 3, "b4": 1}, "b4")() == pytest.approx(40.0)
    assert shape_deadline(lambda: float("inf"), {"b2": 3, "b4": 1}, "b2")() == float("inf")


def _timed_shapes(tmp_path, monkeypatch, clock: list[float]):
    """SHAPED tuned with a run budget read from ``clock``: each compile check (trial or second compile) takes 40 s;
    (session, tuner, run, what the coder was asked to prepare)."""
    from types import SimpleNamespace

    from test_agents import _tuner

    from pytest_kernelopt.agents import compile_choice

    (tmp_path / "m.py").write_text(SHAPED)
    session = _per_shape_session({"b2": {"max-autotune": 1.1}, "b4": {"max-autotune": 1.1}})
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, compile_variants=["max-autotune"])
    prepared: list = []
    tuner.coder.prepare = lambda problem, device, kernels, shape=None, budget_s=None: prepared.append((shape, kernels))
    check = session.verify_compile

    def timed(variant, launch_configs=None, budget_s=None):
        clock[0] -= 40.0
        return check(variant, launch_configs, budget_s)

    session.verify_compile = timed
    tuner._run_left = lambda: clock[0]
    monkeypatch.setattr(compile_choice, "time", SimpleNamespace(monotonic=lambda: 1000.0 - clock[0]))
    return session, tuner, run, prepared


def test_a_shape_s_kernel_search_keeps_to_its_share_and_leaves_the_run_to_the_shapes_after_it(tmp_path, monkeypatch):
    """A 3-shape router's first shape spent 122 of the run's 152 s on an H100 (its kernel search harvested and searched
    kernels of 1-2% of its time) and the other shapes' trials were stopped by the budget: the kernel search at a
    declared shape is bounded by the shape's share as its compile step is. b2 (weight 3 of 4) spends its share in
    the compile step: no session is opened for its search (a note says why), no harvest runs, and the run goes on;
    b4 then checks its settings with what was kept for it."""
    clock = [100.0]
    session, tuner, run, prepared = _timed_shapes(tmp_path, monkeypatch, clock)
    first = tuner.tune_problem(tmp_path / "m.py", "b2", 0.75)
    assert first.compile.chosen == "max-autotune" and clock[0] == pytest.approx(20.0)  # 75 s share, 80 s spent
    assert tuner.stop_reason is None and prepared == [] and first.kernels == []  # no session opened to search
    assert "kernel search not started: this shape's share of the run budget" in first.notes[-1], first.notes
    assert session.opened_at == [("b2", None), ("b2", None)] and run.record.environment is not None
    clock[0] = 60.0  # as if b2 had spent less: b4, the last shape, gets all that is left
    second = tuner.tune_problem(tmp_path / "m.py", "b4", 0.25)
    assert session.compile_calls[-2:] == ["max-autotune@b4", "max-autotune@b4"] and second.compile.chosen


def test_a_shape_whose_share_ends_while_its_search_session_opens_searches_nothing_and_the_run_goes_on(
        tmp_path, monkeypatch):
    """b2's share (150 of 200 s) outlasts its compile step (80 s) but not the opening of its search session (100 s
    more): its kernels are said as not reached for the shape's share, nothing is harvested, the run is not ended."""
    clock = [200.0]
    session, tuner, run, prepared = _timed_shapes(tmp_path, monkeypatch, clock)
    opened = session.__class__.__call__

    def slow_open(self, problem, device, options, progress=None, variant=None, shape=None, launch_configs=None):
        if variant is not None:  # the search's session, on the chosen setting
            clock[0] -= 100.0
        return opened(self, problem, device, options, progress, variant, shape, launch_configs)

    monkeypatch.setattr(session.__class__, "__call__", slow_open)
    first = tuner.tune_problem(tmp_path / "m.py", "b2", 0.75)
    assert first.compile.chosen == "max-autotune" and clock[0] == pytest.approx(20.0)
    (row,) = first.kernels
    assert row.skipped.startswith("not reached: this shape's share of the run budget"), row.skipped
    assert tuner.stop_reason is None and prepared == [("b2", [])]  # asked to prepare nothing


def test_a_stored_setting_for_every_shape_leaves_the_shape_that_chooses_anew(tmp_path):
    """A store written before per-shape choices: one setting for both shapes, its graphs both shapes'. Tuned at b2,
    where the defaults now win, b2 gets its own entry (the defaults) and its graphs leave the shared setting's
    list, which still covers b4 (production matches settings to graphs by their inputs); once b4 chooses too, it
    covers no graph and is removed."""
    from test_agents import _tuner

    path = tmp_path / "m.py"
    path.write_text(SHAPED)
    session = _per_shape_session({"b2": {"max-autotune": 1.0}, "b4": {"max-autotune": 1.3}})
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, compile_variants=["max-autotune"])
    tuner.coder.prepare = lambda problem, device, kernels, shape=None: None
    _write_choice(store.root, "m", "max-autotune", graphs=[["int 2"], ["int 4"]])
    assert store.compile_variant("m", "b2") == store.compile_variant("m", "b4") == "max-autotune"
    outcome = tuner.tune_problem(path, "b2", 0.75)
    assert outcome.compile.chosen is None and outcome.compile.stored
    assert "no longer chosen over the default compile at shape b2" in outcome.compile.note
    record = store.model_record("m")
    assert record.compile_at == {"b2": None} and record.compile.graphs == [["int 4"]]
    assert store.compile_variant("m", "b2") is None and store.compile_variant("m", "b4") == "max-autotune"
    tuner.tune_problem(path, "b4", 0.25)  # b4 chooses too: the shared setting now applies nowhere and is removed
    record = store.model_record("m")
    assert record.compile is None and record.compile_at["b4"].variant == "max-autotune"


def test_tune_tries_compile_settings_on_a_training_step(tmp_path):
    """A training problem's compile step runs like any other (it was once refused): the settings are checked and
    the fastest accepted one is stored; the only note says which graph rewrites a training step tries (no compile here:
    the check of a training step itself is test_a_training_step_s_compile_setting_is_judged_...)."""
    import shutil

    from test_agents import _tuner

    from pytest_kernelopt.agents.loop import REWRITES_DECLINE

    path = tmp_path / "m.py"  # the scripted verdicts are of model "m"
    shutil.copy(Path(__file__).parent / "problems_train" / "softmax_xent_train.py", path)
    session = _per_shape_session({None: {"max-autotune": 1.1}})
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, compile_variants=["max-autotune"])
    outcome = tuner.tune_problem(path)
    assert outcome.training and session.compile_calls == ["max-autotune@None"] * 2
    assert [t.status for t in outcome.compile.tried] == ["accepted"]
    assert outcome.compile.chosen == "max-autotune" and store.compile_variant("m") == "max-autotune"
    assert outcome.notes == [REWRITES_DECLINE]


def test_a_shaped_problem_s_committed_versions_keep_their_shape_s_compile(tmp_path, monkeypatch):
    """A version committed at b4 (``k@b4``) was tuned on b4's compile: a setting that wins there is not switched
    to (it would leave the version stale), and the note says so; b2, with nothing committed, takes it."""
    from types import SimpleNamespace

    from test_agents import _tuner

    path = tmp_path / "m.py"
    path.write_text(SHAPED)
    session = _per_shape_session({"b2": {"max-autotune": 1.3}, "b4": {"max-autotune": 1.3}})
    tuner, run, store = _tuner(tmp_path, session, budget_s=0.01, compile_variants=["max-autotune"])
    tuner.coder.prepare = lambda problem, device, kernels, shape=None: None
    monkeypatch.setattr(store, "kernel_names", lambda model: ["triton_per_fused_sum_0@b4"])
    monkeypatch.setattr(store, "manifest", lambda model, kernel: SimpleNamespace(active=1))
    at_b4 = tuner.tune_problem(path, "b4", 0.25)
    assert [t.status for t in at_b4.compile.tried] == ["accepted"] and session.compile_calls == ["max-autotune@b4"]
    assert at_b4.compile.chosen is None and not at_b4.compile.stored and store.compile_variant("m", "b4") is None
    assert "kept 'the default compile' instead of 'max-autotune'" in at_b4.compile.note
    assert "(triton_per_fused_sum_0@b4)" in at_b4.compile.note
    at_b2 = tuner.tune_problem(path, "b2", 0.75)
    assert at_b2.compile.chosen == "max-autotune" and store.compile_variant("m", "b2") == "max-autotune"


@pytest.mark.slow
def test_tune_checks_a_compile_setting_at_the_declared_shape_it_tunes(interpreter, tmp_path):
    """The real verifier, a session opened at b2: the looped compile checked there (correct: the interpreter times
    nothing, so nothing is stored); the kernels at b2 are then the default compile's (no kernel selected: no
    search)."""
    from pytest_kernelopt.agents import TuneOptions, Tuner
    from pytest_kernelopt.agents.search import SearchCoder
    from pytest_kernelopt.runs.records import RunRecord
    from pytest_kernelopt.runs.trace import RunDir
    from pytest_kernelopt.store import KernelStore
    from pytest_kernelopt.verify import VerifyOptions

    path = tmp_path / "shaped_softmax.py"
    path.write_text(SHAPED)
    store = KernelStore(tmp_path / "kernels")
    run = RunDir.create(tmp_path / "runs", RunRecord(run_id="t", started="now", agent="search",
                                                     kernels_dir=str(store.root)))
    coder = SearchCoder(variants=[])
    coder.prepare = lambda problem, device, kernels, shape=None: None  # no harvest child here
    options = TuneOptions(device=interpreter, ncu=False, compile_variants=[LOOPED], kernels=["none"],
                          verify=VerifyOptions(seeds=1))
    outcome = Tuner(options, coder, store, run).tune_problem(path, "b2", 0.75)
    run.close()
    assert outcome.error is None, outcome.error
    (trial,) = outcome.compile.tried
    assert trial.status == "correct" and trial.speedup is None, trial.reason
    assert outcome.compile.chosen is None and not outcome.compile.stored and store.compile_variant("shaped_softmax") is None
    assert "interpreter mode" in outcome.compile.note
    assert [k.kernel.startswith("triton_per_") for k in outcome.kernels] == [True]  # tuned on the default compile


# --- production ---------------------------------------------------------------------------

@pytest.mark.slow
def test_production_compiles_with_model_json_s_settings_and_warns_on_an_unknown_one(interpreter, tmp_path):
    import torch

    import pytest_kernelopt
    from test_production import fresh, wrapper_globals

    from pytest_kernelopt.capture import launch_signature

    kernels = tmp_path / "kernels"
    problem, model = fresh(SOFTMAX)
    inputs = problem.make_inputs(0, "cpu")
    _write_choice(kernels, "softmax_rows", LOOPED, [launch_signature(inputs)])  # verified at these (no weights)
    out, found, _ = wrapper_globals(pytest_kernelopt.compile(model, kernels, quiet=True), *inputs)
    assert [n.startswith("triton_red_") for n in found] == [True]
    with torch.no_grad():
        assert torch.allclose(out, model(*inputs), atol=1e-5)

    _write_choice(kernels, "softmax_rows", "no-such-setting")
    problem, model = fresh(SOFTMAX)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
    out, found, messages = wrapper_globals(pytest_kernelopt.compile(model, kernels, quiet=True), *inputs)
    assert [n.startswith("triton_per_") for n in found] == [True]
    assert any("unknown compile variant 'no-such-setting'" in m and "default settings" in m for m in messages)


# --- the gate ------------------------------------------------------------------------------

@pytest.mark.slow
def test_the_gate_compiles_under_model_json_s_settings_checks_them_and_fails_an_unknown_one(pytester):
    """Two copies of softmax_rows in one gate run (each run costs a Python start, torch's import and the
    compiles): softmax_rows.py with the looped compile in its model.json, unknown.py with a setting this
    version does not know. Both at 2 rows instead of 8 (_small_softmax)."""
    (pytester.path / "problems").mkdir()
    for model in ("softmax_rows", "unknown", "listed", "listed_more", "listed_training"):
        _small_softmax(pytester.path / "problems", model)
    (pytester.path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    _write_choice(pytester.path / "kernels", "softmax_rows", LOOPED)
    _write_choice(pytester.path / "kernels", "unknown", "no-such-setting")
    # compile.graphs as tune writes it (the graph the check compiled), and with a batch size added by hand: the gate's
    # session compiles under the setting, and what it verified is that compile's own graph (it was read as none, so
    # every setting tune stored failed the gate).
    graph = ["float32 (2, 128) (128, 1)"]
    _write_choice(pytester.path / "kernels", "listed", LOOPED, [graph])
    _write_choice(pytester.path / "kernels", "listed_more", LOOPED, [graph, ["float32 (64, 128) (128, 1)"]])
    _write_choice(pytester.path / "kernels", "listed_training", LOOPED, [graph])  # said to be verified in training:
    record = pytester.path / "kernels" / "listed_training" / "model.json"  # production would apply it there
    record.write_text(json.dumps({**(data := json.loads(record.read_text())),
                                  "compile": {**data["compile"], "training": True}}))
    run = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p",
                                        "no:cacheprovider", "--kernelopt-json", "gate.json")
    run.assert_outcomes(passed=7, failed=3)
    items = json.loads((pytester.path / "gate.json").read_text())["items"]
    outcome = {(i["model"], i["item"]): i["outcome"] for i in items}
    assert outcome[("listed", "model")] == "passed" and outcome[("listed_more", "model")] == "failed", outcome
    (more,) = [i for i in items if i["item"] == "model" and i["model"] == "listed_more"]
    assert "compile.graphs lists 1 graph input set(s) the setting was not verified at" in more["message"]
    assert "float32 (64, 128) (128, 1)" in more["message"]
    (trained,) = [i for i in items if i["item"] == "model" and i["model"] == "listed_training"]
    assert trained["outcome"] == "failed"
    assert "compile.training says the setting was verified in a training step" in trained["message"]
    # The kernel item is the looped compile's kernel; the model item checked the setting and counts it committed.
    (kernel,) = [i for i in items if i["item"] == "kernel" and i["model"] == "softmax_rows"]
    assert kernel["kernel"].startswith("triton_red_") and kernel["outcome"] == "passed"
    (model,) = [i for i in items if i["item"] == "model" and i["model"] == "softmax_rows"]
    assert model["compile"] == LOOPED and model["status"] == "committed" and model["speed_measured"] is False
    assert model["outcome"] == "passed"
    run.stdout.fnmatch_lines(["*softmax_rows.py*not measured*passed*",
                              f"*softmax_rows.py: compiled as '{LOOPED}' (model.json)*"])
    # An unknown setting: the kernels are then the default compile's (nothing committed: they pass); the model
    # item fails, naming the file.
    (kernel,) = [i for i in items if i["item"] == "kernel" and i["model"] == "unknown"]
    assert kernel["kernel"].startswith("triton_per_") and kernel["outcome"] == "passed"
    (model,) = [i for i in items if i["item"] == "model" and i["model"] == "unknown"]
    assert model["outcome"] == "failed" and "model.json: unknown compile variant 'no-such-setting'" in model["message"]
    run.stdout.fnmatch_lines(["*model.json: unknown compile variant 'no-such-setting'*",
                              "FAILED problems/unknown.py::model*"])
    assert "compiled as" not in "".join(line for line in run.stdout.lines if "unknown.py" in line)


@pytest.mark.slow
def test_the_gate_compiles_each_declared_shape_under_its_own_setting(pytester):
    """model.json's compile_at: the looped compile at b2, the defaults at b4. Each shape's items are that shape's
    compile (b2's kernel is the looped compile's, b4's the default compile's), b2's model item checks the setting
    there; a second copy whose b4 entry lists a graph b4's check never compiled (batch 8) fails at b4's item; a
    third with an entry for a shape the file does not declare fails at its first shape's item."""
    (pytester.path / "problems").mkdir()
    for model in ("shaped", "shaped_more", "shaped_stray", "shaped_dead"):
        (pytester.path / "problems" / f"{model}.py").write_text(SHAPED)
    (pytester.path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    b2, b4, b8 = (f"float32 ({n}, 128) (128, 1)" for n in (2, 4, 8))
    for model, at_b4 in (("shaped", None), ("shaped_more", _choice(LOOPED, [[b4], [b8]])), ("shaped_stray", None),
                         ("shaped_dead", None)):
        folder = pytester.path / "kernels" / model
        folder.mkdir(parents=True)
        (folder / "model.json").write_text(json.dumps({"schema_version": 1, "model": model, "compile_at": {
            "b2": _choice(LOOPED, [[b2]]), "b4": at_b4}}))
    # A pull request adds a setting for a shape the file does not declare, listing b4's graph: production would
    # apply it at b4's inputs, where no item checks it.
    stray = pytester.path / "kernels" / "shaped_stray" / "model.json"
    data = json.loads(stray.read_text())
    data["compile_at"]["b16"] = _choice(LOOPED, [[b4]])
    stray.write_text(json.dumps(data))
    # ... or keeps a setting for every shape beside compile_at entries for each: it applies at no shape the gate
    # checks it at, but production would apply it at b4's inputs (b4's entry is the defaults).
    dead = pytester.path / "kernels" / "shaped_dead" / "model.json"
    dead.write_text(json.dumps({**json.loads(dead.read_text()), "compile": _choice(LOOPED, [[b4]])}))
    run = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p",
                                        "no:cacheprovider", "--kernelopt-json", "gate.json")
    items = json.loads((pytester.path / "gate.json").read_text())["items"]
    got = {(i["model"], i["item"], i["shape"]): i for i in items}
    assert got[("shaped", "kernel", "b2")]["kernel"].startswith("triton_red_")
    assert got[("shaped", "kernel", "b4")]["kernel"].startswith("triton_per_")
    model_b2, model_b4 = got[("shaped", "model", "b2")], got[("shaped", "model", "b4")]
    assert model_b2["compile"] == LOOPED and model_b2["outcome"] == "passed", model_b2.get("message")
    assert model_b4.get("compile") is None and model_b4["outcome"] == "passed", model_b4.get("message")
    more = got[("shaped_more", "model", "b4")]
    assert more["outcome"] == "failed" and "compile.graphs lists 1 graph input set(s)" in more["message"]
    assert b8 in more["message"] and got[("shaped_more", "model", "b2")]["outcome"] == "passed"
    strayed = got[("shaped_stray", "model", "b2")]  # the first declared shape's item reports it
    assert strayed["outcome"] == "failed" and "compile_at records a setting for shape(s) b16" in strayed["message"]
    assert got[("shaped_stray", "model", "b4")]["outcome"] == "passed"
    dead = got[("shaped_dead", "model", "b2")]
    assert dead["outcome"] == "failed" and "compile_at names every declared shape, so no item checks it" in \
        dead["message"]
    run.assert_outcomes(passed=13, failed=3)


def test_the_gate_checks_model_json_s_compile_at_each_declared_shape_and_names_the_failing_one(tmp_path):
    """No compile: each declared shape's model item checks the setting in its own session (opened at that shape,
    under the setting); rejected at b4, b4's item fails naming the shape, and b2's passes. On a GPU, slower at
    a shape fails that shape's item the same way."""
    from types import SimpleNamespace

    from test_agents import _timing

    from pytest_kernelopt.gate.checks import Checks
    from pytest_kernelopt.gate.failure import GateFailure
    from pytest_kernelopt.gate.problems import Problem
    from pytest_kernelopt.gate.thresholds import SpeedRules
    from pytest_kernelopt.records import Verdict
    from pytest_kernelopt.verify.options import SpeedPolicy

    speeds: dict[str, float] = {}  # per shape: the setting's speedup there (0: rejected), set per case below

    def verdict(shape):
        bad = speeds[shape]
        return Verdict(model="m", kernel=f"compile:{LOOPED}", candidate=LOOPED, candidate_sha256="",
                       status="rejected" if bad == 0 else "correct",
                       reason="model: seed 5, output 0: outside its allowance" if bad == 0 else None,
                       model_timing=_timing(bad) if bad else None, speed_measured=bool(bad))

    opened = []

    def get(problem, item):
        opened.append((problem.shape, problem.variant))
        return SimpleNamespace(verify_compile=lambda variant: verdict(problem.shape))

    settings = SimpleNamespace(source=None, thresholds={}, accepted_regressions={})
    checks = Checks(strict=True, rules=SpeedRules(SpeedPolicy(), settings, ["m"]),
                    store=lambda: SimpleNamespace(model_dir=lambda model: tmp_path / "kernels" / model,
                                                  model_record=lambda model: SimpleNamespace(compile=None,
                                                                                             compile_at=None),
                                                  compile_choice=lambda model, shape=None: None),
                    sessions=SimpleNamespace(get=get), base=None, before=lambda problem, item: None)
    props: dict = {}
    item = SimpleNamespace(prop=props.__setitem__)
    parts = [Problem(path=tmp_path / "m.py", id="m", loaded=True, variant=LOOPED, shape=shape, declared=["b2", "b4"])
             for shape in ("b2", "b4")]
    for case, failing in (({"b2": 1.0, "b4": 0}, "rejected at model: seed 5"),
                          ({"b2": 1.0, "b4": 0.9}, "the model is slower than under the default compile: 0.900x")):
        speeds.update(case)
        assert checks._check_compile(item, parts[0]) is None  # type: ignore[arg-type]
        with pytest.raises(GateFailure) as failed:
            checks._check_compile(item, parts[1])  # type: ignore[arg-type]
        assert f"model.json: compile '{LOOPED}' at shape b4: {failing}" in str(failed.value)
    assert opened == [("b2", LOOPED), ("b4", LOOPED)] * 2


def test_the_gate_fails_graphs_in_model_json_the_setting_was_not_verified_at(tmp_path):
    """Production applies model.json's setting only at its ``compile.graphs``: a pull request adding a graph (here
    batch 8 of a problem declaring b2 and b4) would have it applied where it was never checked. The gate fails
    it once every declared shape's check has run, naming the graph; the graphs it verified pass (no compile)."""
    from types import SimpleNamespace

    import torch

    from pytest_kernelopt.capture import launch_signature
    from pytest_kernelopt.gate.checks import Checks
    from pytest_kernelopt.gate.failure import GateFailure
    from pytest_kernelopt.gate.problems import Problem
    from pytest_kernelopt.gate.thresholds import SpeedRules
    from pytest_kernelopt.records import Verdict
    from pytest_kernelopt.verify.options import SpeedPolicy

    graph = {rows: launch_signature([torch.zeros(rows, 128)]) for rows in (2, 4, 8)}
    stored: list[list[str]] = []

    def get(problem, item):
        launches = [graph[int(problem.shape[1:])]] if problem.shape else [graph[2]]
        return SimpleNamespace(verify_compile=lambda variant: Verdict(
            model="m", kernel=f"compile:{LOOPED}", candidate=LOOPED, candidate_sha256="", status="correct",
            speed_measured=False, launches=launches))

    own: dict = {}  # compile_at: a declared shape's own setting

    def checks() -> Checks:
        settings = SimpleNamespace(source=None, thresholds={}, accepted_regressions={})
        record = SimpleNamespace(compile=SimpleNamespace(graphs=stored, training=False), compile_at=own)
        store = SimpleNamespace(model_dir=lambda model: tmp_path / "kernels" / model, model_record=lambda model: record,
                                compile_choice=lambda model, shape=None: own.get(shape, record.compile))
        return Checks(strict=True, rules=SpeedRules(SpeedPolicy(), settings, ["m"]), store=lambda: store,
                      sessions=SimpleNamespace(get=get), base=None, before=lambda problem, item: None)

    item = SimpleNamespace(prop=lambda *_: None)
    parts = [Problem(path=tmp_path / "m.py", id="m", loaded=True, variant=LOOPED, shape=shape, declared=["b2", "b4"])
             for shape in ("b2", "b4")]
    stored[:] = [graph[2], graph[4]]
    gate = checks()
    assert gate._check_compile(item, parts[0]) is None and gate._check_compile(item, parts[1]) is None
    stored.append(graph[8])
    gate = checks()
    assert gate._check_compile(item, parts[0]) is None  # b4 not checked yet: nothing to add up
    with pytest.raises(GateFailure) as failed:
        gate._check_compile(item, parts[1])
    assert "compile.graphs lists 1 graph input set(s) the setting was not verified at in this run" in str(failed.value)
    assert "8x128" in str(failed.value) or "(8, 128)" in str(failed.value), str(failed.value)
    # A problem without SHAPES: checked on its one model item.
    stored[:] = [graph[2], graph[8]]
    one = Problem(path=tmp_path / "m.py", id="m", loaded=True, variant=LOOPED)
    with pytest.raises(GateFailure, match="compile.graphs lists 1 graph"):
        checks()._check_compile(item, one)
    # b4's own setting (compile_at) is checked at b4's check alone: its graphs must be b4's; the shared one then
    # applies at b2 only, and is checked there.
    stored[:] = [graph[2]]
    own["b4"] = SimpleNamespace(graphs=[graph[4]], training=False)
    gate = checks()
    assert gate._check_compile(item, parts[1]) is None and gate._check_compile(item, parts[0]) is None
    own["b4"] = SimpleNamespace(graphs=[graph[4], graph[8]], training=False)
    with pytest.raises(GateFailure, match="compile.graphs lists 1 graph"):
        checks()._check_compile(item, parts[1])  # at once: b2's check has nothing to add to b4's own setting


def test_kernels_lists_the_compile_model_json_names(kernelopt, tmp_path):
    import shutil

    (tmp_path / "problems").mkdir()
    shutil.copy(SOFTMAX, tmp_path / "problems")
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    _write_choice(tmp_path / "kernels", "softmax_rows", LOOPED)
    result = kernelopt("kernels", "problems/softmax_rows.py", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (kernel,) = [k for k in json.loads(result.stdout) if k["kind"] == "triton"]
    assert kernel["name"].startswith("triton_red_")
    assert f"compiled as '{LOOPED}' (model.json's compile settings)" in result.stderr
    # With the launch configurations recorded for it: the kernel is listed as it launches then.
    point = {"XBLOCK": 1, "R0_BLOCK": 32, "num_warps": kernel["launch"]["num_warps"],
             "num_stages": kernel["launch"]["num_stages"]}
    record = json.loads((tmp_path / "kernels" / "softmax_rows" / "model.json").read_text())
    record["compile"]["launch_configs"] = {kernel["fingerprint"]: point}
    (tmp_path / "kernels" / "softmax_rows" / "model.json").write_text(json.dumps(record))
    result = kernelopt("kernels", "problems/softmax_rows.py", "--json", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    (kernel,) = [k for k in json.loads(result.stdout) if k["kind"] == "triton"]
    assert kernel["launch"]["kwargs"] == {"XBLOCK": 1, "R0_BLOCK": 32}
    assert "1 kernel(s) at its recorded launch configurations" in result.stderr


def test_committed_kernels_keep_the_compile_they_were_tuned_on(tmp_path, monkeypatch):
    """Another compile would leave them stale (and the trials time settings without them): kept, and said."""
    from types import SimpleNamespace

    from test_agents import _problem

    session, tuner, run, store = _fake_tune(tmp_path, {"max-autotune": 1.30}, compile_variants=["max-autotune"])
    monkeypatch.setattr(store, "kernel_names", lambda model: ["triton_per_fused_sum_0", "triton_poi_fused_1"])
    monkeypatch.setattr(store, "manifest", lambda model, kernel: SimpleNamespace(
        active=1 if kernel.startswith("triton_per") else None))
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert store.compile_variant("m") is None and not outcome.compile.stored
    assert outcome.compile.chosen is None and session.variants == [None, None]
    assert "kept 'the default compile' instead of 'max-autotune'" in outcome.compile.note
    assert "1 committed kernel version(s) (triton_per_fused_sum_0)" in outcome.compile.note


# --- a training step under a compile setting (issue 42) -----------------------------------

MLP_TRAIN = TESTS / "problems_train" / "mlp_layernorm_train.py"


@pytest.fixture(scope="module")
def mlp_train(interpreter):
    """MLP_TRAIN opened on seed 3, with the looped compile built by a compile check on one stress kind ("mid":
    the seed, one draw of the inputs, one of the incoming gradients) that the honest setting passes. The full
    set of draws is judged by the session in the test below; here only what the tests swap in differs."""
    from pytest_kernelopt.verify import compile_check, tensors
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.protocol import OpenRequest

    prepared, _ = open_problem(OpenRequest(problem=str(MLP_TRAIN), device=interpreter, seeds=[3]))
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(tensors, "STRESS_VARIANTS", ("mid",))
        rows = compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)
    assert sorted(d.split(" (")[0] for d in rows.draws) == ["mid", "mid of the incoming gradients"], rows.draws
    return prepared


@pytest.mark.slow
def test_a_training_step_s_compile_setting_is_judged_on_outputs_and_every_gradient(interpreter, mlp_train,
                                                                                     monkeypatch):
    """The honest variant passes with its gradients judged, on every draw of the inputs and of the incoming
    gradients; one whose backward is off in one parameter's gradient (the step's results after the outputs)
    is rejected naming that gradient."""
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, compile_check
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.tensors import STRESS_VARIANTS

    with VerifySession(MLP_TRAIN, interpreter, VerifyOptions(seeds=1, seed=7)) as session:
        verdict = session.verify_compile(LOOPED)
    assert verdict.status == "correct", verdict.reason
    model_stage = verdict.stages[1].detail
    assert "gradient of input 0" in model_stage and "gradient of parameter down.weight" in model_stage
    # Every kind drawn on the inputs and, in a draw of its own, on the incoming gradients, every draw judged (the
    # counts are of judged draws, and lead: a detail past 2000 characters is cut in its middle, child.clip).
    n = len(STRESS_VARIANTS)
    assert f"{n} input draw(s) and {n} draw(s) of the incoming gradients: " in model_stage, model_stage

    prepared = mlp_train
    looped = prepared.others[LOOPED]

    def wrong_backward(*xs):
        results = list(looped(*xs))
        results[-1] = results[-1] + 1e-3  # the last parameter's gradient (down.bias)
        return tuple(results)

    monkeypatch.setitem(prepared.others, LOOPED, wrong_backward)
    with pytest.raises(StageFailure, match="seed 3, gradient of parameter down.bias"):
        compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)


@pytest.mark.slow
def test_a_training_step_s_compile_setting_wrong_only_on_drawn_incoming_gradients_is_rejected(mlp_train,
                                                                                                 monkeypatch):
    """A setting whose backward is exact wherever the incoming gradients are of the loss's own magnitude
    (the default loss's weights: [1/4, 2)) and off by 2^-10 in one parameter's gradient elsewhere: the seeds
    and the draws of the inputs, whose backward starts from the loss's own weights, pass it; the draw 'mid'
    of the incoming gradients (|g| in [10, 1000]) rejects it, naming the draw."""
    from pytest_kernelopt.capture.training import incoming_drawn
    from pytest_kernelopt.verify import compile_check, tensors
    from pytest_kernelopt.verify.prepared import StageFailure

    prepared = mlp_train
    problem = prepared.compiled.problem
    looped = prepared.others[LOOPED]

    def wrong_far_from_the_loss(*xs):
        drawn = problem.incoming_draw
        if drawn is None:  # the loss's own incoming gradients: the honest step, as it runs
            return looped(*xs)
        largest: list[float] = []

        def watched(gradients):
            drawn(gradients)
            largest.extend(float(g.abs().max()) for g in gradients)

        with incoming_drawn(problem, watched):
            results = list(looped(*xs))
        if any(m > 4.0 for m in largest):
            results[-1] = results[-1] * (1 + 2 ** -10)  # the last parameter's gradient (down.bias)
        return tuple(results)

    monkeypatch.setattr(tensors, "STRESS_VARIANTS", ("mid",))
    monkeypatch.setitem(prepared.others, LOOPED, wrong_far_from_the_loss)
    with pytest.raises(StageFailure, match=r"draw 'mid' of the incoming gradients \(input seed \d+.*\), "
                                           r"gradient of parameter down.bias"):
        compile_check.compile_stage(prepared, LOOPED, error_factor=4.0, reduced_precision=False)
    assert problem.incoming_draw is None  # put back after the failed draw


def test_the_trials_run_the_other_shapes_choices_first_then_the_rewrites_before_the_gemm_templates():
    from pytest_kernelopt.agents.compile_choice import order
    from pytest_kernelopt.capture.variants import MODEL_VARIANTS

    assert list(MODEL_VARIANTS) == ["max-autotune-extern", "max-autotune-extern-rewrites", "max-autotune",
                                    "max-autotune-rewrites", "max-autotune-nd-tiling"]
    # The two library-GEMM settings compile in seconds: first; then the rewrites before max-autotune.
    assert order(list(MODEL_VARIANTS)) == ["max-autotune-extern", "max-autotune-extern-rewrites",
                                           "max-autotune-rewrites", "max-autotune", "max-autotune-nd-tiling"]
    assert order(list(MODEL_VARIANTS), {"max-autotune"}) == ["max-autotune", "max-autotune-extern",
                                                             "max-autotune-extern-rewrites", "max-autotune-rewrites",
                                                             "max-autotune-nd-tiling"]
    assert order(["max-autotune", "max-autotune-nd-tiling"]) == ["max-autotune", "max-autotune-nd-tiling"]
    assert order([LOOPED, "max-autotune-rewrites"]) == [LOOPED, "max-autotune-rewrites"]  # no template before it
    # A model with library convolutions: max-autotune's template convolutions first of all (a convnet's win; run
    # second, a shape's budget share cut it), another shape's choice still ahead of it.
    convnet = ["max-autotune-extern", "max-autotune", "max-autotune-nd-tiling"]
    assert order(convnet, convolutions=True) == ["max-autotune", "max-autotune-extern", "max-autotune-nd-tiling"]
    assert order(list(MODEL_VARIANTS), convolutions=True)[0] == "max-autotune"
    assert order(convnet, {"max-autotune-extern"}, convolutions=True)[:2] == ["max-autotune-extern", "max-autotune"]
    assert order(["max-autotune-extern", LOOPED], convolutions=True) == ["max-autotune-extern", LOOPED]
