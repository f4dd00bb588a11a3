"""The isolated worker: candidates execute here, never in the calling process.

The parent (:func:`run_worker`) starts ``python -m pytest_kernelopt.worker REQUEST
EVENTS`` in a new session with a scrubbed environment (no API keys, tokens or
passwords), and kills the whole process group when the time limit runs out. The
worker compiles the problem, runs the cascade stages and appends one JSON line to
EVENTS as each stage starts and ends, so a crash, an illegal memory access or a
hang still tells the parent which stage it happened in. The parent's CUDA context
is never touched by candidate code.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from .records import KernelInfo, StageResult, Verdict

_SECRET = re.compile(r"KEY|TOKEN|SECRET|PASSW|CREDENTIAL|AUTH|COOKIE|SESSION|PRIVATE", re.I)
_SECRET_PREFIXES = ("ANTHROPIC_", "OPENAI_", "GITHUB_", "GH_", "AWS_", "GOOGLE_", "AZURE_", "HF_", "HUGGING", "GIT_ASKPASS", "SSH_")


class WorkerRequest(BaseModel):
    problem: str
    device: str
    # Kernel whose kernel-level stage runs (None: model-level check of all replacements).
    kernel: str | None
    replacements: dict[str, str]  # kernel name -> candidate file
    seeds: list[int]
    allow_reduced_precision: bool = False
    error_factor: float = 4.0
    min_gain: float = 0.02
    min_model_us: float = 20.0
    measure_speed: bool = True
    # The gate's --kernelopt-base-ref: the problem file at that revision, timed against this one.
    base_problem: str | None = None


def worker_env(environ: dict[str, str] | None = None) -> dict[str, str]:
    """The environment without anything that looks like a credential."""
    environ = dict(os.environ if environ is None else environ)
    return {k: v for k, v in environ.items() if not _SECRET.search(k) and not k.startswith(_SECRET_PREFIXES)}


def _tail(path: Path, lines: int = 3) -> str:
    try:
        text = [ln for ln in path.read_text(errors="replace").splitlines() if ln.strip()]
    except OSError:
        return ""
    return " | ".join(text[-lines:])[-600:]


def run_worker(request: WorkerRequest, timeout: float, verdict: Verdict) -> Verdict:
    """Run the stages of ``request`` in a worker; fill in and return ``verdict``."""
    from .errors import KerneloptError, ProblemError, UsageError

    with tempfile.TemporaryDirectory(prefix="kernelopt-worker-") as tmp:
        folder = Path(tmp)
        req_path, events_path = folder / "request.json", folder / "events.jsonl"
        req_path.write_text(request.model_dump_json())
        events_path.touch()
        stderr_path = folder / "stderr.txt"
        env = worker_env()
        # The package must be importable from the worker even when run from a checkout.
        root = str(Path(__file__).resolve().parent.parent)
        env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH", "")) if p)
        env["PYTHONUNBUFFERED"] = "1"
        with open(stderr_path, "w") as err, open(folder / "stdout.txt", "w") as out:
            proc = subprocess.Popen(
                [sys.executable, "-m", "pytest_kernelopt.worker", str(req_path), str(events_path)],
                stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env, start_new_session=True, cwd=tmp,
            )
            timed_out = False
            try:
                proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                timed_out = True
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
            finally:
                if proc.poll() is None:  # interrupted: leave nothing running
                    os.killpg(proc.pid, signal.SIGKILL)
                    proc.wait()
        events = [json.loads(line) for line in events_path.read_text().splitlines() if line.strip()]
        infos = {e["info"]["name"]: KernelInfo.model_validate(e["info"]) for e in events if e["event"] == "kernel"}
        info = infos.get(request.kernel or "")
        if info is not None:
            verdict.fingerprint = info.fingerprint
            verdict._kernel_info = info
        for event in events:
            if event["event"] == "verdict":
                final = Verdict.model_validate(event["verdict"]).model_copy(
                    update={"candidate": verdict.candidate, "candidate_sha256": verdict.candidate_sha256})
                final._kernel_info = info
                return final
            if event["event"] == "error":
                cls = {"usage": UsageError}.get(event["kind"])
                if cls is not None:
                    raise cls(event["message"])
                if event["kind"] == "problem":
                    raise ProblemError(request.problem, event["message"])
                raise KerneloptError(event["message"])
        stages = [StageResult.model_validate(e["result"]) for e in events if e["event"] == "stage"]
        started = [e["stage"] for e in events if e["event"] == "start"]
        if timed_out:
            cause = f"timed out after {timeout:g} s"
        elif proc.returncode < 0:
            cause = f"worker killed by signal {signal.Signals(-proc.returncode).name}"
        else:
            cause = f"worker exited with code {proc.returncode}"
        detail = f"{cause}: {_tail(stderr_path)}" if _tail(stderr_path) and not timed_out else cause
        if not started:
            raise KerneloptError(f"{request.problem}: the worker failed before the first stage ({detail})")
        stage = started[-1]
        stages.append(StageResult(name=stage, passed=False, detail=detail))
        verdict.stages = stages
        verdict.status = "rejected"
        verdict.reason = f"{stage}: {detail}"
        return verdict


# --- the worker side -------------------------------------------------------------------

class _Events:
    def __init__(self, path: str):
        self.path = path

    def emit(self, event: str, **payload: Any) -> None:
        with open(self.path, "a") as f:
            f.write(json.dumps({"event": event, **payload}, default=str) + "\n")
            f.flush()
            os.fsync(f.fileno())


def run_stages(request: WorkerRequest, events: _Events) -> Verdict:
    from . import cascade
    from .candidate import load_candidate
    from .capture import compile_problem
    from .config import resolve_device
    from .problem import load_problem
    from .static import check_candidate
    from .swap import CandidateKernel

    device = resolve_device(request.device)
    problem = load_problem(request.problem)
    compiled = compile_problem(problem, device)
    for name in request.replacements:
        # Unknown names are bad input, not a bad candidate (raises UsageError).
        events.emit("kernel", info=compiled.kernel(name).info.model_dump(mode="json"))
    label = request.kernel or "+".join(request.replacements)
    fingerprint = compiled.kernel(request.kernel).info.fingerprint if request.kernel else None
    verdict = Verdict(model=problem.id, kernel=label, fingerprint=fingerprint, candidate="", candidate_sha256="",
                      status="rejected", seeds=request.seeds, environment=cascade.environment(device))

    def stage(name: str, fn: Any) -> Any:
        """Run one stage: ``fn`` returns (value, detail) or, for speed, (passed, detail)."""
        events.emit("start", stage=name)
        t0 = time.monotonic()
        try:
            value, detail = fn()
        except cascade.StageFailure as failure:
            result = StageResult(name=name, passed=False, detail=failure.detail, seconds=time.monotonic() - t0)
            verdict.errors += failure.errors
            verdict.stages.append(result)
            verdict.reason = f"{name}: {failure.detail}"
            events.emit("stage", result=result.model_dump())
            raise
        passed = value if name == "speed" else True
        result = StageResult(name=name, passed=passed, detail=detail, seconds=time.monotonic() - t0)
        verdict.stages.append(result)
        events.emit("stage", result=result.model_dump())
        return value

    candidates: dict[str, Any] = {}

    def static() -> tuple[None, str]:
        problems = []
        for name, path in request.replacements.items():
            entry = [a.name for a in compiled.kernel(name).info.args]
            report = check_candidate(Path(path).read_text(), entry_args=entry)
            problems += [f"{Path(path).name}: {p}" for p in report.problems]
        if problems:
            raise cascade.StageFailure("; ".join(problems))
        for name, path in request.replacements.items():
            try:
                candidates[name] = CandidateKernel(load_candidate(path), label=path)
            except Exception as exc:
                raise cascade.StageFailure(f"{Path(path).name}: {exc}") from exc
        return None, "parses; entry point matches; only allowed imports and constructs"

    rtol = cascade.REDUCED_PRECISION_RTOL if request.allow_reduced_precision else None

    def kernel() -> tuple[list[Any], str]:
        assert request.kernel is not None
        rows = cascade.kernel_stage(compiled, request.kernel, candidates[request.kernel], request.seeds, rtol)
        worst = max((r.kernel_max_rel or 0.0) for r in rows)
        return rows, f"{len(rows)} seed(s): every argument matches the compiler kernel (max rel error {worst:.2g})"

    def model() -> tuple[list[Any], str]:
        model64 = cascade.float64_model(compiled.model)
        rows = cascade.model_stage(compiled, candidates, request.seeds, request.error_factor,
                                   request.allow_reduced_precision, model64)
        worst = max(rows, key=lambda r: r.candidate_vs_fp64 or 0.0)
        return rows, (f"{len(rows)} seed(s): error vs float64 {worst.candidate_vs_fp64:.3g} "
                      f"(compiled baseline {worst.baseline_vs_fp64:.3g}, scale {worst.scale:.3g})")

    try:
        stage("static", static)
        kernel_rows = stage("kernel", kernel) if request.kernel else []
        model_rows = stage("model", model)
    except cascade.StageFailure:
        verdict.status = "rejected"
        return verdict
    by_seed = {r.seed: r for r in kernel_rows}
    for row in model_rows:
        k = by_seed.get(row.seed)
        if k is not None:
            row.kernel_max_abs, row.kernel_max_rel = k.kernel_max_abs, k.kernel_max_rel
    verdict.errors = model_rows
    if device != "cuda" or not request.measure_speed:
        why = "interpreter mode" if device != "cuda" else "speed measurement switched off"
        verdict.stages.append(StageResult(name="speed", passed=None, detail=f"not measured: {why}"))
        verdict.status = "correct"
        return verdict

    def speed() -> tuple[bool | None, str]:
        model_t, kernel_t = cascade.speed_stage(compiled, candidates, request.kernel, request.seeds[0])
        verdict.model_timing, verdict.kernel_timing, verdict.speed_measured = model_t, kernel_t, True
        text = f"model {_fmt(model_t)}"
        if kernel_t:
            text += f"; kernel {_fmt(kernel_t)}"
        if request.base_problem:
            base = compile_problem(load_problem(request.base_problem), device, reset=False)
            verdict.base_timing = cascade.base_speed(base, compiled, candidates, request.seeds[0])
            text += f"; vs base revision {_fmt(verdict.base_timing)}"
        faster, why = cascade.judge_speed(model_t, request.min_gain, request.min_model_us)
        return faster, f"{text}; {why}" if why else text

    faster = stage("speed", speed)
    verdict.status = "accepted" if faster is True else "correct"
    return verdict


def _fmt(t: Any) -> str:
    return (f"{t.speedup:.3f}x, 95% CI [{t.ci_low:.3f}, {t.ci_high:.3f}], "
            f"{t.baseline_ms * 1e3:.1f} -> {t.candidate_ms * 1e3:.1f} us over {t.pairs} pairs ({t.method})")


def main(argv: list[str]) -> int:
    import warnings

    from .errors import KerneloptError, ProblemError, UsageError

    warnings.filterwarnings("ignore")
    request = WorkerRequest.model_validate_json(Path(argv[0]).read_text())
    events = _Events(argv[1])
    try:
        verdict = run_stages(request, events)
    except UsageError as exc:
        events.emit("error", kind="usage", message=str(exc))
        return 2
    except ProblemError as exc:
        events.emit("error", kind="problem", message=exc.cause)
        return 2
    except KerneloptError as exc:
        events.emit("error", kind="other", message=str(exc))
        return 2
    events.emit("verdict", verdict=verdict.model_dump(mode="json"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
