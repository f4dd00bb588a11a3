"""GPU benchmarks of the verifier (sessions at full size, speed-stage A/A statistics, the gate).

    KERNELOPT_SIZE=large python bench/verify_gpu.py sessions OUT PROBLEM.py ...   # per problem: first/further
                                                                                  # candidate wall time, peak memory
    KERNELOPT_SIZE=large python bench/verify_gpu.py aa OUT PROBLEM.py N           # the unedited dump N times through
                                                                                  # one session, and a 5%-slower copy
    KERNELOPT_SIZE=large python bench/verify_gpu.py gate OUT                      # accept, gate passes; edit, gate fails

Everything goes through :class:`pytest_kernelopt.verify.VerifySession`, as the CLI
and the gate do. Dumps are rendered from the kernel records the session's worker
captured, so this process never compiles a model or holds GPU memory itself.
"""

from __future__ import annotations

import json
import re
import statistics
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEVICE = __import__("os").environ.get("KERNELOPT_BENCH_DEVICE", "cuda")  # "cpu": a smoke run in interpreter mode
PROBLEMS = ROOT / "tests" / "problems"


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def sessions(out: Path, problems: list[Path], further: int = 3) -> None:
    """Per problem: one session; every kernel's unedited dump once, then the largest kernel's ``further`` times."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    rows = []
    for problem in problems:
        t0 = time.monotonic()
        record = {"problem": problem.stem}
        try:
            with VerifySession(problem, DEVICE, VerifyOptions(seeds=3), progress=_say) as session:
                opened = session.open()
                kernels = opened.kernels
                # The kernel whose arguments are largest stands for "the" kernel of the problem.
                def size(k):
                    return sum((a.shape and __import__("math").prod(a.shape) or 0) for a in k.args)
                kernels = sorted(kernels, key=size, reverse=True)
                first_wall, statuses, walls = None, [], []
                for i, info in enumerate(kernels):
                    v = session.verify(info.name, source_of(render_dump(info, problem.stem), f"{info.name}.py"))
                    if first_wall is None:
                        first_wall = time.monotonic() - t0
                        first = v
                    statuses.append(v.status)
                    _say(f"{problem.stem}/{info.name}: {v.status} {v.reason or ''} "
                         + " ".join(f"{s.name}={s.seconds:.1f}s/{s.peak_gib}GiB" for s in v.stages))
                for _ in range(further):
                    t1 = time.monotonic()
                    v = session.verify(kernels[0].name,
                                       source_of(render_dump(kernels[0], problem.stem), f"{kernels[0].name}.py"))
                    walls.append(time.monotonic() - t1)
                    statuses.append(v.status)
                record.update(
                    kernels=len(kernels), statuses=statuses, first_s=round(first_wall, 1), open_s=round(opened.seconds, 1),
                    further_s=[round(w, 2) for w in walls], eager_peak_gib=v.eager_peak_gib, peak_gib=v.peak_gib,
                    ratio=round(v.peak_gib / v.eager_peak_gib, 2) if v.eager_peak_gib else None,
                    reference=v.reference, note=v.reference_note,
                    stages={s.name: [round(s.seconds, 2), s.peak_gib] for s in v.stages},
                    speedup=(v.model_timing.speedup, v.model_timing.ci_low, v.model_timing.ci_high) if v.model_timing else None,
                    first_stages={s.name: [round(s.seconds, 2), s.peak_gib] for s in first.stages},
                    restarts=session.restarts,
                )
        except Exception as exc:  # a bench: report and go on with the next problem
            record["error"] = f"{type(exc).__name__}: {exc}"[:400]
        rows.append(record)
        _say(json.dumps(record))
    (out / "sessions.json").write_text(json.dumps(rows, indent=1))
    print(f"{'problem':<24} {'k':>2} {'all correct':<11} {'open':>6} {'first':>6} {'further (s)':<18} "
          f"{'eager GiB':>9} {'peak GiB':>8} {'ratio':>5}  ref")
    for r in rows:
        if "error" in r:
            print(f"{r['problem']:<24} ERROR {r['error']}")
            continue
        ok = all(s in ("correct", "accepted") for s in r["statuses"])
        print(f"{r['problem']:<24} {r['kernels']:>2} {str(ok):<11} {r['open_s']:>6} {r['first_s']:>6} "
              f"{','.join(map(str, r['further_s'])):<18} {r['eager_peak_gib'] or 0:>9.2f} {r['peak_gib'] or 0:>8.2f} "
              f"{r['ratio'] or 0:>5}  {r['reference']}")
    firsts = [r["first_s"] for r in rows if "first_s" in r]
    furthers = [w for r in rows if "further_s" in r for w in r["further_s"]]
    if firsts:
        print(f"first candidate: median {statistics.median(firsts):.1f} s, max {max(firsts):.1f} s; "
              f"further candidates: median {statistics.median(furthers):.2f} s, max {max(furthers):.2f} s")


def aa(out: Path, problem: Path, n: int) -> None:
    """The speed stage's decisions through one session: the unedited dump and a copy that redoes ~5% of its blocks."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    with VerifySession(problem, DEVICE, VerifyOptions(seeds=1), progress=_say) as session:
        info = max(session.opened.kernels, key=lambda k: len(k.args))
        src = render_dump(info, problem.stem)
        slow = re.sub(r"(\n    (\w+)\[grid\]\((.*)\)\n)$",
                      lambda m: m.group(1) + f"    {m.group(2)}[(max(1, grid[0] // 20), grid[1], grid[2])]({m.group(3)})\n",
                      src)
        assert slow != src
        cands = {"unedited dump": source_of(src, "dump.py"), "5% slower copy": source_of(slow, "slow5.py")}
        rows: dict[str, list] = {label: [] for label in cands}
        for _ in range(n):
            for label, cand in cands.items():
                v = session.verify(info.name, cand)
                t = v.model_timing
                rows[label].append((v.status, t.speedup, t.ci_low, t.ci_high, v.kernel_timing.speedup, t.method,
                                    round(v.wall_seconds, 2)))
    (out / "aa.json").write_text(json.dumps(rows, indent=1))
    for label, rs in rows.items():
        sp = sorted(r[1] for r in rs)
        print(f"{label:<15} runs={len(rs)} accepted={sum(r[0] == 'accepted' for r in rs)} "
              f"slower-beyond-noise={sum(1 for r in rs if r[3] < 1.0)} model speedup median={sp[len(sp) // 2]:.3f} "
              f"[min {sp[0]:.3f}, max {sp[-1]:.3f}] method={rs[0][5]} wall median "
              f"{statistics.median(r[6] for r in rs):.2f} s")


def _gate(repo: Path, junit: Path) -> tuple[int, str, dict[str, float]]:
    t0 = time.monotonic()
    proc = subprocess.run([sys.executable, "-m", "pytest", "--kernelopt", "-p", "pytest_kernelopt.plugin", "-q",
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
    proc = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "kernels", "problems/softmax_rows.py",
                           "--dump", str(out / "gate_dumps")], cwd=repo, capture_output=True, text=True)
    cand = sorted((out / "gate_dumps").glob("*.py"))[-1]
    acc = subprocess.run([sys.executable, "-m", "pytest_kernelopt.cli", "accept", "problems/softmax_rows.py",
                          "--kernel", cand.stem, "--candidate", str(cand), "--allow-no-gain", "--proposed-by", "bench"],
                         cwd=repo, capture_output=True, text=True)
    print("accept:", acc.returncode, acc.stdout.strip().splitlines()[-2:], acc.stderr.strip()[-300:], proc.returncode)
    rc1, text1, per1 = _gate(repo, out / "gate_pass.xml")
    print("=== gate, committed kernel as accepted ===\n" + text1)
    print("per-item seconds:", json.dumps({k: round(v, 1) for k, v in per1.items()}))
    print(f"gate exit code: {rc1} (want 0)")


if __name__ == "__main__":
    part, folder = sys.argv[1], Path(sys.argv[2])
    folder.mkdir(parents=True, exist_ok=True)
    if part == "sessions":
        sessions(folder, [Path(p) for p in sys.argv[3:]], further=int(__import__("os").environ.get("FURTHER", "3")))
    elif part == "aa":
        aa(folder, Path(sys.argv[3]), int(sys.argv[4]) if len(sys.argv) > 4 else 20)
    else:
        gate(folder)
