"""``kernelopt tune`` on a training problem: forward and backward (``__bwd``) kernels searched, each candidate
judged on the whole step, the pass named in the run record and the log, rewrites and compile settings said once.

The loop's decisions run against test_agents' scripted verifier (no compile); one slow test runs the real
session in interpreter mode on ``tests/problems_train/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from conftest import TESTS, add_to_last_store
from test_agents import FakeSession, _inductor_info, _tuner

MLP = TESTS / "problems_train" / "mlp_layernorm_train.py"
BWD = "triton_red_fused_sum_0__bwd"


def _training_problem(tmp_path: Path) -> Path:
    path = tmp_path / "m.py"  # the scripted verdicts are of model "m"
    path.write_text("import torch\nTRAINING = True\nclass Model(torch.nn.Module):\n"
                    "    def __init__(self):\n        super().__init__()\n"
                    "        self.w = torch.nn.Parameter(torch.ones(1000))\n"
                    "    def forward(self, x):\n        return (x * self.w).sum(1)\n"
                    "def get_inputs():\n    return [torch.randn(64, 1000)]\ndef get_init_inputs():\n    return []\n")
    return path


class Lines:
    """A UI that keeps every line the loop says."""

    def __init__(self) -> None:
        self.lines: list[str] = []

    def message(self, text: str) -> None:
        self.lines.append(text)

    def problem(self, *a: Any) -> None: ...
    def kernel(self, *a: Any) -> None: ...
    def attempt(self, *a: Any) -> None: ...

    def kernel_done(self, outcome: Any) -> None:
        self.lines.append(f"{outcome.kernel}{' (backward pass)' if outcome.backward else ''}: {outcome.message}")


def test_a_backward_kernel_is_tuned_and_stored_as_for_inference_and_the_run_names_its_pass(tmp_path):
    """On a (scripted) GPU the backward kernel's best accepted candidate is stored under its ``__bwd`` name; the
    compile settings are tried on the step (the compile check judges its outputs and gradients)."""
    from pytest_kernelopt.agents.loop import REWRITES_DECLINE
    from pytest_kernelopt.agents.progress import problem_lines
    from pytest_kernelopt.runs.records import RunRecord
    from pytest_kernelopt.report.render import write_report

    info = _inductor_info().model_copy(update={"name": BWD, "backward": True, "training": True})
    session = FakeSession(info, {8: 1.2, 16: 1.4}, seconds=0.0, compile_speed={"max-autotune": 1.5})
    tuner, run, store = _tuner(tmp_path, session)
    tuner.ui = ui = Lines()
    outcome = tuner.tune_problem(_training_problem(tmp_path))
    run.close()
    (k,) = outcome.kernels
    assert outcome.error is None and outcome.training and k.backward and k.stored_version == 1
    stored = store.active_file("m", BWD)
    assert stored is not None and stored.record.evidence.training is True  # the pass production tells apart by
    assert session.compile_calls != []  # the compile check runs on the whole step
    assert outcome.notes == [REWRITES_DECLINE] and sum(REWRITES_DECLINE in line for line in ui.lines) == 1
    assert any(line.startswith(f"{BWD} (backward pass): ") for line in ui.lines)
    record = RunRecord.model_validate_json((run.root / "run.json").read_text())
    assert record.problems[0].training and record.problems[0].kernels[0].backward
    lines = problem_lines(record)
    assert lines[0].startswith("m: 1 kernel(s) tuned (1 backward), ") and f"m: {REWRITES_DECLINE}" in lines
    for fmt in ("md", "html"):  # `kernelopt report RUN_DIR` says each note once
        report = write_report(run.root, tmp_path / fmt, fmt=fmt).report.read_text()
        assert report.count("graph rewrites only the cross-entropy") == 1 and "compile settings not chosen" not in report


def test_harvested_backward_kernels_match_by_what_they_fuse():
    from pytest_kernelopt.agents.harvest import stem

    assert stem("triton_per_fused_native_layer_norm_backward_3__bwd") == "fused_native_layer_norm_backward"
    assert stem("triton_poi_fused_sin_0__bwd__g3") == stem("triton_poi_fused_sin_2") == "fused_sin"


class Scripted:
    """A Coder that proposes, for the first backward kernel it is asked about, a correct and a wrong candidate."""

    name, model, stopped = "scripted", None, None

    def __init__(self) -> None:
        from pytest_kernelopt.agents.coder import Spend

        self.spend = Spend()
        self.kernel: str | None = None

    def prepare(self, *a: Any, **k: Any) -> None: ...

    def propose(self, ctx: Any) -> list[Any]:
        from pytest_kernelopt.runs.records import Proposal

        if not ctx.kernel.backward or self.kernel not in (None, ctx.kernel.name) or ctx.round:
            return []
        self.kernel = ctx.kernel.name
        return [Proposal(source=ctx.original + "# the same kernel, proposed again\n", origin="scripted:same"),
                Proposal(source=add_to_last_store(ctx.original, 1.0), origin="scripted:wrong")]


@pytest.mark.slow
def test_tune_judges_backward_candidates_on_the_step_in_interpreter_mode(interpreter, tmp_path):
    """The real session on a training problem: a correct backward candidate passes the cascade, a wrong one is
    rejected; on a CPU nothing is stored (speed is not measured), as for inference."""
    from pytest_kernelopt.agents import TuneOptions, Tuner
    from pytest_kernelopt.runs.records import RunRecord
    from pytest_kernelopt.runs.trace import RunDir
    from pytest_kernelopt.store import KernelStore

    store = KernelStore(tmp_path / "kernels")
    run = RunDir.create(tmp_path / "runs", RunRecord(run_id="t", started="now", agent="scripted",
                                                     kernels_dir=str(store.root)))
    coder = Scripted()
    from pytest_kernelopt.verify.options import VerifyOptions

    options = TuneOptions(device=interpreter, verify=VerifyOptions(seeds=1), min_share=0.0, max_rounds=1, ncu=False)
    outcome = Tuner(options, coder, store, run, Lines()).tune_problem(MLP)
    run.close()
    assert outcome.error is None and outcome.training and not outcome.speed_measured, outcome.error
    assert {k.backward for k in outcome.kernels} == {False, True}
    (k,) = [k for k in outcome.kernels if k.kernel == coder.kernel]
    assert k.backward and k.kernel.endswith("__bwd")
    same, wrong = k.history
    assert same.status == "correct", same.reason  # outputs and every gradient within the allowance
    assert wrong.status == "rejected" and wrong.stage == "kernel" and "outside the allowance" in wrong.reason
    assert k.stored_version is None and not (tmp_path / "kernels").exists()
