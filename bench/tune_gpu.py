"""GPU runs of `kernelopt tune` and a head-to-head of what it stored (H200).

    python bench/tune_gpu.py diag OUT PROBLEM.py                 # candidate launch path: fast or not, and why
    KERNELOPT_SIZE=large python bench/tune_gpu.py tune OUT BUDGET PROBLEM.py ...
                                                                 # kernelopt tune --agent search per problem
    KERNELOPT_SIZE=large python bench/tune_gpu.py compare OUT KERNELS PROBLEM.py ...
                                                                 # default vs max-autotune-no-cudagraphs vs kernelopt

``compare`` builds the three compiled models in one process per problem and times
each against default compile as paired, interleaved CUDA-graph replays with L2
flushed (pytest_kernelopt.measure.timing), so every ratio is measured in one run.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def diag(out: Path, problem: Path) -> None:
    import torch

    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.launch import FastJIT
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.swap import candidate_kernel
    from pytest_kernelopt.verify.speed import first_launch

    compiled = compile_problem(load_problem(problem), resolve_device("cuda"))
    inputs = compiled.problem.make_inputs(1, "cuda")
    for name, handle in compiled.kernels.items():
        cand = candidate_kernel(f"/tmp/{name}.py", source=render_dump(handle.info, compiled.problem.id))
        args = first_launch(compiled, name, inputs)
        stream = torch.cuda.current_stream().cuda_stream
        for _ in range(3):
            cand.run(*args, stream=stream)
        torch.cuda.synchronize()
        proxies = [v for v in cand._run.__globals__.values() if isinstance(v, FastJIT)]
        state = [(p._fn.fn.__name__, p._broken, len(p._kernels), p.why_slow) for p in proxies]
        timings = {}
        for label, k in (("compiler", handle.original), ("dump", cand)):
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(200):
                k.run(*args, stream=stream)
            torch.cuda.synchronize()
            timings[label] = (time.perf_counter() - t0) / 200 * 1e6
        print(json.dumps({"kernel": name, "fast": cand._fast, "proxies": state, "us_per_launch": timings}), flush=True)


def tune(out: Path, budget: float, problems: list[Path]) -> None:
    rows = []
    for i, problem in enumerate(problems):
        cmd = [sys.executable, "-m", "pytest_kernelopt.cli", "tune", str(problem), "--device", "cuda", "--budget-s",
               str(budget), "--kernels-dir", str(out / "kernels"), "--runs-dir", str(out / "runs"), "--json"]
        if i > 0 or os.environ.get("NO_NCU") == "1":
            cmd.append("--no-ncu")  # Nsight Compute once, to check that path; it costs a compile
        t0 = time.monotonic()
        try:
            proc = subprocess.run(cmd, capture_output=True, text=True, timeout=int(os.environ.get("TUNE_TIMEOUT", 240)))
        except subprocess.TimeoutExpired:
            rows.append({"problem": problem.stem, "error": "timed out (TUNE_TIMEOUT)"})
            _say(f"{problem.stem}: timed out")
            continue
        wall = time.monotonic() - t0
        (out / f"tune_{problem.stem}.log").write_text(proc.stderr)
        if proc.returncode not in (0, 2) or not proc.stdout.strip():
            rows.append({"problem": problem.stem, "error": proc.stderr.strip().splitlines()[-1:] or proc.returncode})
            _say(f"{problem.stem}: failed: {rows[-1]['error']}")
            continue
        record = json.loads(proc.stdout)
        (out / f"tune_{problem.stem}.json").write_text(proc.stdout)
        for p in record["problems"]:
            prof = p.get("profile") or {}
            for k in p["kernels"]:
                bt = k.get("best_timing") or {}
                kp = k.get("profile") or {}
                rows.append({"problem": p["model"], "kernel": k["kernel"][:40], "class": kp.get("bottleneck"),
                             "share": kp.get("share"), "roofline": kp.get("roofline_pct"), "src": kp.get("source"),
                             "tried": k["attempts"], "by_stage": k["by_stage"], "origin": k.get("best_origin"),
                             "speedup": bt.get("speedup"), "ci": [bt.get("ci_low"), bt.get("ci_high")],
                             "stored": k.get("stored_version"), "gpu_s": k["gpu_seconds"], "skipped": k.get("skipped"),
                             "msg": k.get("message", "")[:120]})
                _say(json.dumps(rows[-1]))
            mt = p.get("model_timing") or {}
            _say(f"{p['model']}: whole model with stored kernels {mt.get('speedup')} [{mt.get('ci_low')}, "
                 f"{mt.get('ci_high')}]; triton share {prof.get('triton_share')}; wall {wall:.0f} s; error {p.get('error')}")
        (out / "tune_rows.json").write_text(json.dumps(rows, indent=1))


def compare(out: Path, kernels: Path, problems: list[Path]) -> None:
    import copy

    import torch

    import pytest_kernelopt
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.measure.timing import graphed, paired_timings
    from pytest_kernelopt.capture.problem import load_problem

    resolve_device("cuda")
    rows = []
    for path in problems:
        problem = load_problem(path)
        torch.manual_seed(0)
        model = problem.build_model("cuda")
        inputs = problem.make_inputs(1, "cuda")
        builds = {}
        seconds = {}
        with torch.no_grad():
            ref = model(*inputs)
            for mode in ("default", "max-autotune-no-cudagraphs", "kernelopt"):
                m = copy.deepcopy(model)
                t0 = time.monotonic()
                if mode == "kernelopt":
                    c = pytest_kernelopt.compile(m, kernels_dir=kernels, model_id=problem.id)
                else:
                    c = torch.compile(m, mode=None if mode == "default" else mode)
                y = c(*inputs)
                torch.cuda.synchronize()
                seconds[mode] = time.monotonic() - t0
                err = float((y.float() - ref.float()).abs().max()) if isinstance(y, torch.Tensor) else None
                builds[mode] = (c, err)
            base = graphed(lambda: None, lambda: builds["default"][0](*inputs), lambda: None)
            row = {"problem": path.stem, "compile_s": {k: round(v, 1) for k, v in seconds.items()},
                   "err_vs_eager": {k: v[1] for k, v in builds.items()}}
            for mode in ("max-autotune-no-cudagraphs", "kernelopt"):
                other = graphed(lambda mode=mode: None, lambda mode=mode: builds[mode][0](*inputs), lambda: None)
                if base is None or other is None:
                    row[mode] = None
                    continue
                est = paired_timings(base, other, target_seconds=1.5)
                row[mode] = [round(est.speedup, 4), round(est.ci_low, 4), round(est.ci_high, 4)]
                row["default_us"] = round(est.baseline_ms * 1e3, 2)
        rows.append(row)
        _say(json.dumps(row))
        del builds, model, inputs
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    (out / "compare.json").write_text(json.dumps(rows, indent=1))
    print("\nproblem | default us | max-autotune-no-cudagraphs vs default | kernelopt vs default | compile s")
    for r in rows:
        print(f"{r['problem']} | {r.get('default_us')} | {r.get('max-autotune-no-cudagraphs')} | {r.get('kernelopt')} | "
              f"{r['compile_s']}")
    for mode in ("max-autotune-no-cudagraphs", "kernelopt"):
        vals = [r[mode][0] for r in rows if r.get(mode)]
        if vals:
            print(f"geomean {mode}: {math.exp(sum(map(math.log, vals)) / len(vals)):.4f} over {len(vals)} problems")


if __name__ == "__main__":
    command, out, *rest = sys.argv[1:]
    Path(out).mkdir(parents=True, exist_ok=True)
    if command == "diag":
        diag(Path(out), Path(rest[0]))
    elif command == "tune":
        tune(Path(out), float(rest[0]), [Path(p) for p in rest[1:]])
    elif command == "compare":
        compare(Path(out), Path(rest[0]), [Path(p) for p in rest[1:]])
    else:
        raise SystemExit(f"unknown command {command}")
