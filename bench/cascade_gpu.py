"""GPU checks of the cascade and the gate (issues: cascade benchmarks, gate on the H200).

    KERNELOPT_SIZE=large python bench/cascade_gpu.py stages OUTDIR   # per-stage wall time, 3 problems
    KERNELOPT_SIZE=large python bench/cascade_gpu.py gate OUTDIR     # accept a kernel, gate passes; edit it, gate fails
    KERNELOPT_SIZE=large python bench/cascade_gpu.py stats OUTDIR N  # unedited dump and a 5%-slower copy, N verifies each

Each part prints a short table last; verdicts are written as JSON under OUTDIR.
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PROBLEMS = ROOT / "tests" / "problems"


def dump(problem: Path, out: Path) -> list[Path]:
    from pytest_kernelopt.candidate import write_dumps
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.problem import load_problem

    compiled = compile_problem(load_problem(problem), resolve_device("auto"))
    return write_dumps([h.info for h in compiled.kernels.values()], problem.stem, out / problem.stem)


def stages(out: Path) -> None:
    from pytest_kernelopt.cascade import CascadeOptions, verify

    rows = []
    for name in ("softmax_rows", "rms_norm", "conv_relu_bias"):
        problem = PROBLEMS / f"{name}.py"
        files = dump(problem, out)
        cand = files[-1]
        verdict = verify(problem, cand.stem, cand, "cuda", CascadeOptions(seeds=3))
        (out / f"stages_{name}.json").write_text(verdict.model_dump_json(indent=2))
        times = {s.name: s.seconds for s in verdict.stages}
        t = verdict.model_timing
        rows.append((name, cand.stem[:40], verdict.status, *(times.get(k, 0.0) for k in ("static", "kernel", "model", "speed")),
                     verdict.wall_seconds, f"{t.speedup:.3f} [{t.ci_low:.3f},{t.ci_high:.3f}]" if t else "-"))
    print(f"{'problem':<16} {'kernel':<40} {'status':<9} static kernel  model  speed  total(s) speedup[95%CI]")
    for r in rows:
        print(f"{r[0]:<16} {r[1]:<40} {r[2]:<9} {r[3]:6.2f} {r[4]:6.1f} {r[5]:6.1f} {r[6]:6.1f} {r[7]:8.1f} {r[8]}")


def _gate(repo: Path, junit: Path) -> tuple[int, str, dict[str, float]]:
    from importlib.metadata import entry_points

    # Installed: the pytest11 entry point loads the plugin; a bare checkout needs -p.
    load = [] if any(e.name == "kernelopt" for e in entry_points(group="pytest11")) else ["-p", "pytest_kernelopt.plugin"]
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--kernelopt", *load, "-q",
                           "-p", "no:cacheprovider", f"--junitxml={junit}", "-W", "ignore"],
                          cwd=repo, capture_output=True, text=True)
    wall = time.monotonic() - t0
    per = {}
    if junit.exists():
        for case in ET.parse(junit).getroot().iter("testcase"):
            per[f"{case.get('classname')}::{case.get('name')}"] = float(case.get("time", 0))
    tail = "\n".join(proc.stdout.strip().splitlines()[-14:])
    return proc.returncode, f"{tail}\n(gate wall {wall:.0f} s)", per


def gate(out: Path) -> None:
    import shutil

    repo = out / "repo"
    shutil.rmtree(repo, ignore_errors=True)
    (repo / "problems").mkdir(parents=True)
    for name in ("softmax_rows", "rms_norm", "elementwise_chain"):
        shutil.copy(PROBLEMS / f"{name}.py", repo / "problems")
    (repo / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\n')
    cand = dump(repo / "problems" / "softmax_rows.py", out / "gate_dumps")[-1]
    acc = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "accept", "problems/softmax_rows.py",
                          "--kernel", cand.stem, "--candidate", str(cand), "--allow-no-gain", "--proposed-by", "bench"],
                         cwd=repo, capture_output=True, text=True)
    print("accept:", acc.returncode, acc.stdout.strip().splitlines()[-2:], acc.stderr.strip()[-300:])
    rc1, text1, per1 = _gate(repo, out / "gate_pass.xml")
    version = next((repo / "kernels" / "softmax_rows").glob("*/v1.py"))
    src = version.read_text()
    edited = re.sub(r"(tl\.store\([^\n]*?,\s*)(tmp\d+)(\s*,)", r"\1\2 * 1.001\3", src, count=1)
    assert edited != src
    version.write_text(edited)
    rc2, text2, per2 = _gate(repo, out / "gate_fail.xml")
    print("=== gate, committed kernel as accepted ===\n" + text1)
    print("=== gate, committed kernel edited (0.1% change) ===\n" + text2)
    print("per-item seconds (pass run):", json.dumps({k: round(v, 1) for k, v in per1.items()}))
    print(f"gate exit codes: as accepted {rc1} (want 0), edited {rc2} (want 1)")


def stats(out: Path, n: int) -> None:
    """The speed stage (the only stochastic stage) run N times per candidate on one compiled model,
    alternating the unedited dump and a copy that redoes ~5% of its blocks."""
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.cascade import speed_stage
    from pytest_kernelopt.problem import load_problem
    from pytest_kernelopt.swap import candidate_kernel

    problem = PROBLEMS / "elementwise_chain.py"
    cand = dump(problem, out)[-1]
    src = cand.read_text()
    # 5% slower: after the real launch, recompute the first ~5% of the blocks again (same values).
    slow = re.sub(r"(\n    (\w+)\[grid\]\((.*)\)\n)$",
                  lambda m: m.group(1) + f"    {m.group(2)}[(max(1, grid[0] // 20), grid[1], grid[2])]({m.group(3)})\n",
                  src)
    assert slow != src
    slow_file = cand.with_name("slow5.py")
    slow_file.write_text(slow)
    compiled = compile_problem(load_problem(problem), "cuda")
    kernels = {"unedited dump": candidate_kernel(cand), "5% slower copy": candidate_kernel(slow_file)}
    rows: dict[str, list] = {label: [] for label in kernels}
    for i in range(n):
        for label, kernel in kernels.items():
            model_t, kernel_t = speed_stage(compiled, {cand.stem: kernel}, cand.stem, seed=1 + i)
            faster = model_t.ci_low > 1.0 and model_t.speedup >= 1.02
            rows[label].append((faster, model_t.speedup, model_t.ci_low, model_t.ci_high, kernel_t.speedup, model_t.method))
    (out / "stats.json").write_text(json.dumps(rows, indent=1))
    for label, rs in rows.items():
        sp = sorted(r[1] for r in rs)
        ks = sorted(r[4] for r in rs)
        print(f"{label:<15} runs={len(rs)} judged-faster={sum(r[0] for r in rs)} "
              f"slower-beyond-noise={sum(1 for r in rs if r[3] < 1.0)} model speedup median={sp[len(sp) // 2]:.3f} "
              f"[min {sp[0]:.3f}, max {sp[-1]:.3f}] kernel speedup median={ks[len(ks) // 2]:.3f} method={rs[0][5]}")


if __name__ == "__main__":
    part, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    {"stages": lambda: stages(folder), "gate": lambda: gate(folder),
     "stats": lambda: stats(folder, int(sys.argv[3]) if len(sys.argv) > 3 else 20)}[part]()
