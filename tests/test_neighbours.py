"""A neighbour on the GPU (measure/neighbours.py): seen before tune and bench put work on it, said, recorded."""

from __future__ import annotations

import subprocess
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from pytest_kernelopt.measure import neighbours

IDLE = "0, GPU-aaaa-1111, 0, 3, 81559\n1, GPU-bbbb-2222, 97, 40000, 81559\n"


def _smi(*answers: str, code: int = 0):
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return SimpleNamespace(returncode=code, stdout=answers[min(len(calls), len(answers)) - 1])

    run.calls = calls  # type: ignore[attr-defined]
    return run


def test_the_visible_gpu_is_read_by_index_or_uuid_and_busy_by_its_median_sample(monkeypatch):
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    load = neighbours.sample(_smi(IDLE), sleep=lambda s: None)
    assert load.gpu == "0 (GPU-aaaa-1111)" and load.utilization == [0, 0, 0] and not load.busy
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "1,0")  # this process's cuda:0 is nvidia-smi's 1
    run = _smi(IDLE)
    load = neighbours.sample(run, sleep=lambda s: None)
    assert load.busy and load.memory_used_mib == 40000 and len(run.calls) == neighbours.SAMPLES
    assert "in use by another process" in load.warning() and "97%, 97%, 97%" in load.warning()
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "GPU-bbbb")  # a UUID prefix, as CUDA accepts
    assert neighbours.sample(_smi(IDLE), sleep=lambda s: None).gpu.startswith("1 ")
    # one busy reading among idle ones (a kernel of a process that is ending) is not a neighbour
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    spike = IDLE.replace("0, GPU-aaaa-1111, 0,", "0, GPU-aaaa-1111, 80,")
    assert not neighbours.sample(_smi(spike, IDLE, IDLE), sleep=lambda s: None).busy


@pytest.mark.parametrize("visible", ["", "-1", "7", "MIG-xyz"])
def test_nothing_is_said_without_a_readable_answer(monkeypatch, visible):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", visible)
    assert neighbours.sample(_smi(IDLE), sleep=lambda s: None) is None  # hidden, absent or not a whole GPU
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    assert neighbours.sample(_smi(IDLE, code=9), sleep=lambda s: None) is None
    assert neighbours.sample(_smi("0, GPU-a, [N/A], 3, 10\n"), sleep=lambda s: None) is None

    def missing(cmd, **kw):
        raise FileNotFoundError("nvidia-smi")

    assert neighbours.sample(missing, sleep=lambda s: None) is None

    def hangs(cmd, **kw):
        raise subprocess.TimeoutExpired(cmd, 10)

    assert neighbours.sample(hangs, sleep=lambda s: None) is None
    assert neighbours.neighbour_warning("cpu") is None  # interpreter mode: nothing to share


def test_tune_and_bench_say_and_record_what_they_saw(tmp_path, monkeypatch):
    from pytest_kernelopt.agents import tuning
    from pytest_kernelopt.benchmark import BenchSettings, run

    seen = "GPU 0 (GPU-aaaa) is in use by another process before kernelopt starts"
    monkeypatch.setattr(tuning, "neighbour_warning", lambda device: seen)
    said = []
    ui = SimpleNamespace(message=said.append)
    options = tuning.TuneOptions(device="cpu", budget_s=1.0)
    record = tuning.tune([], options, store=None, runs_dir=tmp_path / "runs", ui=ui)
    assert record.gpu_neighbour == seen and f"warning: {seen}" in said
    run_dir = next((tmp_path / "runs").glob("*/run.json")).parent
    assert seen in (run_dir / "run.json").read_text()
    from pytest_kernelopt.report import build_view, render_report
    from pytest_kernelopt.runs.trace import load_run

    view = build_view(*load_run(run_dir))
    assert f"**Shared GPU**: {seen}" in render_report(view, "md") and "Shared GPU" in render_report(view, "html")
    from pytest_kernelopt.benchmark import BenchJob, ProblemResult

    looked = []
    monkeypatch.setattr(run, "neighbour_warning", lambda device: looked.append(device) or seen)
    monkeypatch.setattr(run, "run_problem", lambda job, timeout, step: ProblemResult(
        problem=job.problem, model="m", status="error", error="not run here"))
    settings = BenchSettings(modes=["default"], device="cpu", seconds=1.0, timeout=None)
    job = BenchJob(problem=str(tmp_path / "m.py"), modes=["default"], device="cpu", kernels_dir="k", seconds=1.0)
    assert run.run_bench([], settings, quiet=True).gpu_neighbour is None and looked == []  # nothing to bench
    result = run.run_bench([job], settings, quiet=True)
    assert result.gpu_neighbour == seen and looked == ["cpu"]
    assert seen in result.model_dump_json()


def test_the_gate_says_it_in_its_header_json_and_report(tmp_path, monkeypatch):
    from pytest_kernelopt.gate import session as gate_session
    from pytest_kernelopt.measure import neighbours as module
    from pytest_kernelopt.report.gate import write_gate_report
    from pytest_kernelopt.runs.gate_result import GateResult, GateSettings, environment

    seen = "GPU 0 (GPU-aaaa) is in use by another process before kernelopt starts"
    monkeypatch.setattr(module, "neighbour_warning", lambda device: seen if device == "cuda" else None)
    gate = SimpleNamespace(device="cuda", environment_line=lambda: "kernelopt: cuda", seed_lines=lambda: [],
                           workers=SimpleNamespace(header=lambda: []), options=SimpleNamespace(shard=None))
    lines = gate_session.GateSession.header_lines(gate)  # type: ignore[arg-type]
    assert lines == ["kernelopt: cuda", f"kernelopt: warning: {seen}"] and gate.gpu_neighbour == seen
    env = environment("cuda", [], gate.gpu_neighbour)
    assert env.gpu_neighbour == seen
    result = GateResult(created=datetime.now(timezone.utc), problems=[], environment=env, items=[],
                        settings=GateSettings(seeds=3, timeout=600, max_slowdown=0.01, strict=False))
    assert f"**Shared GPU**: {seen}." in write_gate_report(result, tmp_path / "gate.md").read_text()
    gate.device = "cpu"
    assert gate_session.GateSession.header_lines(gate) == ["kernelopt: cuda"] and gate.gpu_neighbour is None
