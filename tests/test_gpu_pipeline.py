"""GPU-only checks of tune, bench and the production path (marked `gpu`; skipped without CUDA).

They repeat, at the problems' GPU-sized shapes, what bench/tune_gpu.py, `kernelopt bench`
and bench/production_gpu.py measured on the H200: what tune stores beats the compiler's
kernel beyond noise; bench times and checks every mode; the production model computes
exactly what the gate's swapped model computes, at its speed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

PROBLEMS = Path(__file__).parent / "problems"


@pytest.fixture(scope="module", autouse=True)
def cuda() -> None:
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device")


@pytest.fixture
def large(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("KERNELOPT_SIZE", "large")


def test_tune_profiles_the_model_and_stores_only_what_beats_or_pins_the_compiler(large: None, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest_kernelopt.cli", "tune", str(PROBLEMS / "cross_entropy.py"), "--device", "cuda",
         "--budget-s", "10", "--no-ncu", "--kernels-dir", str(tmp_path / "kernels"), "--runs-dir", str(tmp_path / "runs"),
         "--json"], capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (problem,) = json.loads(proc.stdout)["problems"]
    assert problem["error"] is None and problem["speed_measured"]
    profile = problem["profile"]
    assert profile["model_gpu_us"] > 0 and profile["triton_share"] > 0.9  # two Triton kernels, no extern call
    assert {k["kernel"] for k in profile["kernels"]} == {k["kernel"] for k in problem["kernels"]}
    for k in problem["kernels"]:
        assert k["profile"]["bottleneck"] in {"launch", "compute", "memory", "occupancy"}
        if k["stored_version"] is None:
            continue
        timing = k["best_timing"]
        assert timing["method"] == "cuda-graph"
        if "as one of a set" in k["message"]:  # the combine pass: faster together, beyond the rule
            assert problem["model_timing"]["ci_low"] > 1.0 and problem["model_timing"]["speedup"] >= 1.02
        elif k["pinned"]:  # the pin pass: the compiler's pick varies; the fastest measured, never slower
            assert "pinned v" in k["message"] and timing["ci_high"] >= 1.0
        else:
            assert timing["ci_low"] > 1.0 and timing["speedup"] >= 1.02
        assert (tmp_path / "kernels" / k["stored_file"]).is_file()


def test_bench_times_and_checks_every_mode(large: None) -> None:
    from pytest_kernelopt.benchmark import BenchJob, BenchSettings, run_bench

    modes = ["eager", "default", "kernelopt"]
    job = BenchJob(problem=str(PROBLEMS / "softmax_rows.py"), modes=modes, device="cuda",  # type: ignore[arg-type]
                   kernels_dir=str(Path(__file__).parent.parent / "kernels"), seconds=1.0)
    result = run_bench([job], BenchSettings(modes=modes, device="cuda", seconds=1.0, timeout=600),  # type: ignore[arg-type]
                       quiet=True)
    (problem,) = result.problems
    assert problem.status == "ok", problem.error
    assert problem.speed_measured and problem.method == "cuda-graph" and problem.rounds >= 30
    assert problem.triton_share is not None and problem.triton_share > 0.9
    for mode in problem.modes:
        assert mode.error is None and mode.correct is True, (mode.mode, mode.correctness_detail)
        assert mode.median_us is not None and mode.ci_low_us <= mode.median_us <= mode.ci_high_us
    assert problem.mode("default").speedup == 1.0
    assert problem.mode("eager").vs_default is not None


def test_the_limit_of_gemm_and_convolution_models_is_a_lower_bound(large: None) -> None:
    """A model's percent of its limit never exceeds 100% beyond timing noise: the FLOP floor counts
    a float32 convolution (TF32 on cuDNN by torch's default) at the TF32 rate (it read 290% when it
    counted the float32 rate, H200 2026-12-03)."""
    from pytest_kernelopt.benchmark import BenchJob, BenchSettings, run_bench

    modes = ["default"]
    jobs = [BenchJob(problem=str(PROBLEMS / f"{name}.py"), modes=modes, device="cuda",  # type: ignore[arg-type]
                     kernels_dir=str(Path(__file__).parent.parent / "kernels"), seconds=0.5)
            for name in ("conv_relu_bias", "linear_gelu")]
    result = run_bench(jobs, BenchSettings(modes=modes, device="cuda", seconds=0.5, timeout=600),  # type: ignore[arg-type]
                       quiet=True)
    for problem in result.problems:
        assert problem.status == "ok", problem.error
        assert problem.min_flops and problem.flop_ceilings_tflops, problem.model
        assert set(problem.min_flops) == set(problem.flop_ceilings_tflops), problem.model
        pct = problem.mode("default").limit_pct
        assert pct is not None and 0.0 < pct <= 105.0, (problem.model, pct, problem.min_flops)
    conv = next(p for p in result.problems if p.model == "conv_relu_bias")
    assert "tf32" in conv.min_flops  # torch's default lets cuDNN use TF32 for float32 convolutions


def test_a_training_steps_limit_counts_its_incoming_gradient_and_stays_a_lower_bound(tmp_path: Path) -> None:
    """A training step's floor: input and weight read, output and both gradients written, and the incoming
    gradient its backward reads (the default loss's, in the output's dtype); the step at most at its limit.
    Without the incoming gradient the bf16 RMSNorm step read 53% with both kernels at the copy rate (H100,
    2026-12-06); with it, 70%."""
    from pytest_kernelopt.benchmark import BenchJob, BenchSettings, run_bench

    path = Path(__file__).parent.parent / "bench" / "train" / "rms_norm_bf16_train.py"
    modes = ["default"]
    job = BenchJob(problem=str(path), modes=modes, device="cuda", kernels_dir=str(tmp_path / "kernels"),  # type: ignore[arg-type]
                   seconds=0.5)
    (problem,) = run_bench([job], BenchSettings(modes=modes, device="cuda", seconds=0.5, timeout=600),  # type: ignore[arg-type]
                           quiet=True).problems
    assert problem.status == "ok", problem.error
    rows, features = 16384, 4096
    x, w = 2 * rows * features, 2 * features  # bfloat16
    assert problem.min_written_bytes == x + x + w  # the output, the input's and the weight's gradients
    assert problem.min_bytes == x + w + (x + x + w) + x  # + the incoming gradient, read
    pct = problem.mode("default").limit_pct
    assert pct is not None and 0.0 < pct <= 105.0, pct


def test_production_model_computes_what_the_gate_measures_at_its_speed(large: None, tmp_path: Path) -> None:
    import copy

    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate.launch_space import read_point, with_point
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.measure.timing import graphed, paired_timings
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.store import KernelStore, accept_verdict
    from pytest_kernelopt.capture.swap import candidate_kernel, swapped
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    path = PROBLEMS / "softmax_rows.py"
    store = KernelStore(tmp_path / "kernels")
    with VerifySession(path, "cuda", VerifyOptions(seeds=1)) as session:
        info = session.opened.kernels[0]
        dump = render_dump(info, "softmax_rows")
        warps = read_point(dump)["num_warps"]
        source = with_point(dump, {"num_warps": warps * 2 if warps < 16 else warps // 2})  # another launch, same math
        verdict = session.verify(info.name, source_of(source, "other-warps.py"))
    assert verdict.status != "rejected", verdict.reason
    assert accept_verdict(store, "softmax_rows", info.name, source, verdict, allow_no_gain=True).stored

    compiled = compile_problem(load_problem(path), resolve_device("cuda"))
    inputs = compiled.problem.make_inputs(1, "cuda")
    active = store.active_file("softmax_rows", info.name)
    with torch.no_grad():
        with swapped(compiled, {info.name: candidate_kernel(active.path, source=active.source)}):
            gate_out = compiled(*inputs)
            gate = graphed(lambda: None, lambda: compiled(*inputs), lambda: None)
        production = pytest_kernelopt.compile(copy.deepcopy(compiled.model), kernels_dir=store.root,
                                              model_id="softmax_rows")
        prod_out = production(*inputs)
        prod = graphed(lambda: None, lambda: production(*inputs), lambda: None)
        # Served under Inductor's CUDA graph trees (mode="reduce-overhead"): a warm-up run, the recording, then
        # replays, in which no host code of ours runs; the committed version is what they replay.
        trees = pytest_kernelopt.compile(copy.deepcopy(compiled.model), kernels_dir=store.root,
                                         model_id="softmax_rows", mode="reduce-overhead")
        replays = [trees(*inputs).clone() for _ in range(4)]
    assert torch.equal(gate_out, prod_out)
    assert all(torch.equal(r, prod_out) for r in replays)
    assert [k.name for k in pytest_kernelopt.status(trees).committed] == [info.name]
    assert gate is not None and prod is not None
    est = paired_timings(gate, prod, target_seconds=1.0)
    assert 0.97 < est.speedup < 1.03, est  # H200: 0.998x-1.008x on five problems
