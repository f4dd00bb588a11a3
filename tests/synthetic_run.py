"""A tuning run's directory built from the records alone (no compile, no GPU), for report and gitops tests.

:func:`store_version` puts a version into a kernel store through :class:`KernelStore`
(as ``accept`` would); :func:`write_run` writes ``run.json`` and ``trace.jsonl``
through :class:`RunDir`, exactly as ``kernelopt tune`` does.
"""

from __future__ import annotations

from datetime import datetime, timezone
from pathlib import Path

from pytest_kernelopt.runs.records import (
    Attempt,
    KernelOutcome,
    KernelProfile,
    ModelProfile,
    ProblemOutcome,
    RunRecord,
)
from pytest_kernelopt.runs.trace import RunDir
from pytest_kernelopt.records import ArgInfo, Environment, SeedErrors, Timing
from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

ENV = Environment(device="cuda", gpu="NVIDIA H200", torch="2.11.0", triton="3.6.0", cuda="13.0", driver="580.65",
                  python="3.12.3")
SOFTMAX = "softmax_rows"
SOFTMAX_KERNEL = "triton_red_fused__softmax_0"
RMS = "rms_norm"
RMS_KERNEL = "triton_per_fused_mean_mul_0"
FINGERPRINT = "0123456789abcdef"

ORIGINAL = '''import triton
import triton.language as tl


@triton.jit
def kernel(in_ptr0, out_ptr0, xnumel, XBLOCK: tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)
    xmask = xindex < xnumel
    tmp0 = tl.load(in_ptr0 + xindex, xmask)
    tl.store(out_ptr0 + xindex, tmp0, xmask)


def run(in_ptr0, out_ptr0, xnumel, *, stream=None):
    XBLOCK = 128
    kernel[(triton.cdiv(xnumel, XBLOCK), 1, 1)](in_ptr0, out_ptr0, xnumel, XBLOCK=XBLOCK, num_warps=4)
'''


def variant(block: int, warps: int = 4) -> str:
    """The original with another launch configuration: a different, valid candidate text."""
    return ORIGINAL.replace("XBLOCK = 128", f"XBLOCK = {block}").replace("num_warps=4", f"num_warps={warps}")


def timing(speedup: float, baseline_ms: float = 1.0) -> Timing:
    return Timing(baseline_ms=baseline_ms, candidate_ms=round(baseline_ms / speedup, 6), speedup=speedup,
                  ci_low=round(speedup - 0.02, 6), ci_high=round(speedup + 0.02, 6), pairs=40, method="cuda-graph")


def errors(candidate: float, baseline: float, seeds: int = 3) -> list[SeedErrors]:
    return [SeedErrors(seed=s, candidate_vs_fp64=candidate * (1 + s / 10), baseline_vs_fp64=baseline, scale=4.0)
            for s in range(seeds)]


def store_version(kernels: Path, model: str, kernel: str, source: str, speedup: float | None):
    """Store ``source`` as the next active version (as ``kernelopt accept`` does); returns the VersionRecord."""
    evidence = Evidence(status="accepted" if speedup else "correct", speed_measured=speedup is not None,
                        model_timing=timing(speedup) if speedup else None, errors=errors(2e-6, 1.5e-6),
                        seeds=[0, 1, 2], environment=ENV)
    outcome = KernelStore(kernels).add_version(
        model=model, kernel=kernel, fingerprint=FINGERPRINT, args=[ArgInfo(name="in_ptr0", kind="tensor", read=True)],
        original_source=ORIGINAL, source=source, evidence=evidence, provenance=Provenance(proposed_by="agent:search"),
        environment=ENV)
    assert outcome.stored, outcome.message
    return outcome.record


def softmax_outcome(source: str, version: int, speedup: float = 1.184) -> KernelOutcome:
    """Five attempts on the softmax kernel: reviewed, rejected at static and kernel, correct, accepted (stored)."""
    digest = sha256_text(source)
    history = [
        Attempt(kernel=SOFTMAX_KERNEL, origin="rewrite:eviction", sha256="a" * 64, status="reviewed",
                reason="reads past the row: no mask on the second load"),
        Attempt(kernel=SOFTMAX_KERNEL, origin="anthropic:claude", sha256="b" * 64, status="rejected", stage="static",
                reason="imports os (not in the candidate language)"),
        Attempt(kernel=SOFTMAX_KERNEL, origin="launch:XBLOCK=64", sha256="c" * 64, status="rejected", stage="kernel",
                reason="out_ptr0: 12 of 4096 written values differ (max abs 0.5)"),
        Attempt(kernel=SOFTMAX_KERNEL, origin="launch:XBLOCK=256", sha256="d" * 64, status="correct",
                reason="not faster beyond noise (1.004x [0.998, 1.010])", model_timing=timing(1.004),
                errors=errors(1.2e-6, 1.5e-6)),
        Attempt(kernel=SOFTMAX_KERNEL, origin="launch:XBLOCK=1024,num_warps=8", sha256=digest, status="accepted",
                model_timing=timing(speedup), kernel_timing=timing(1.41, 0.4), errors=errors(2e-6, 1.5e-6),
                file=f"candidates/{SOFTMAX}/{SOFTMAX_KERNEL}/005-{digest[:12]}.py"),
    ]
    profile = KernelProfile(kernel=SOFTMAX_KERNEL, source="ncu", bottleneck="memory", share=0.71, gpu_us=412.0,
                            bytes_moved=1 << 28, achieved_gbps=3100.0, roofline_pct=62.5)
    return KernelOutcome(kernel=SOFTMAX_KERNEL, fingerprint=FINGERPRINT, profile=profile, attempts=5,
                         by_stage={"reviewed": 1, "static": 1, "kernel": 1, "correct": 1, "accepted": 1},
                         best_origin=history[-1].origin, best_timing=timing(speedup),
                         best_kernel_timing=timing(1.41, 0.4), stored_version=version,
                         stored_file=f"{SOFTMAX}/{SOFTMAX_KERNEL}/v{version}.py",
                         stored_recipe="rewrite reverse-pass then streaming-stores, launch R0_BLOCK=2048,num_warps=8",
                         best_sha256=digest, history=history,
                         gpu_seconds=42.0)


def rms_outcome() -> KernelOutcome:
    """Three attempts on the RMSNorm kernel, all rejected at the model stage: nothing stored."""
    history = [Attempt(kernel=RMS_KERNEL, origin=f"launch:RBLOCK={b}", sha256=f"{b:064x}", status="rejected",
                       stage="model", reason="error vs float64 9.1e-03 exceeds 4x the compiled baseline's 1.2e-06",
                       errors=errors(9.1e-3, 1.2e-6)) for b in (64, 128, 256)]
    profile = KernelProfile(kernel=RMS_KERNEL, source="roofline", bottleneck="launch",
                            share=0.35, gpu_us=18.0, roofline_pct=11.0)
    return KernelOutcome(kernel=RMS_KERNEL, fingerprint="fedcba9876543210", profile=profile, attempts=3,
                         by_stage={"model": 3}, history=history, message="no candidate passed the cascade")


def write_run(runs: Path, kernels: Path, problems: list[ProblemOutcome], run_id: str = "20261201-120000",
              events: int = 3) -> Path:
    """A run directory holding ``problems``, written through RunDir as ``kernelopt tune`` writes it."""
    record = RunRecord(run_id=run_id, started="2026-12-01T12:00:00+00:00", agent="search", budget_s=3600.0,
                       environment=ENV, kernels_dir=str(kernels))
    run = RunDir(runs / run_id, record)
    run.event("run", "start", problems=len(problems))
    for problem in problems:
        for k in problem.kernels:
            for _ in range(max(events - 2, 0)):
                run.event("benchmarker", "verdict", model=problem.model, kernel=k.kernel, status="rejected")
    record.problems = problems
    record.finished = datetime(2026, 12, 1, 12, 30, tzinfo=timezone.utc).isoformat()
    run.event("run", "finish")
    run.close()
    return run.root


def softmax_problem(outcome: KernelOutcome, speedup: float = 1.151) -> ProblemOutcome:
    profile = ModelProfile(model=SOFTMAX, device="cuda", copy_ceiling_gbps=4300.0, model_gpu_us=580.0,
                           triton_share=0.83, kernels=[outcome.profile] if outcome.profile else [])
    return ProblemOutcome(model=SOFTMAX, problem=f"models/{SOFTMAX}.py", device="cuda", speed_measured=True,
                          kernels=[outcome], profile=profile, model_timing=timing(speedup, 0.61), seconds=300.0)


def rms_problem() -> ProblemOutcome:
    return ProblemOutcome(model=RMS, problem=f"models/{RMS}.py", device="cuda", speed_measured=True,
                          kernels=[rms_outcome()], model_timing=None, seconds=120.0,
                          profile=ModelProfile(model=RMS, device="cuda", triton_share=0.35, swap_bound=1.0123))


def standard_run(tmp: Path) -> tuple[Path, Path]:
    """The usual synthetic run: softmax_rows gets v1 (1.151x model, kernel 1.184x); rms_norm nothing.
    Returns (run directory, kernels dir)."""
    kernels = tmp / "kernels"
    source = variant(1024, 8)
    record = store_version(kernels, SOFTMAX, SOFTMAX_KERNEL, source, 1.184)
    run_dir = write_run(tmp / "runs", kernels, [softmax_problem(softmax_outcome(source, record.version)), rms_problem()])
    return run_dir, kernels
