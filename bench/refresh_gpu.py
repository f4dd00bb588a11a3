"""Tuned kernels across a simulated compiler change: tune, change, refresh, bench before and after.

    python bench/refresh_gpu.py PROBLEM.py [PROBLEM.py ...] [--device cuda|cpu] [--change shape|persistent]
                                [--budget-s 40] [--seconds 3] [--out DIR]

Per run, in a temporary project (``--out`` to keep it): each problem is copied to
``problems/``, ``kernelopt tune --agent search --budget-s 40 --no-ncu`` stores what it finds in
``kernels/``, and ``kernelopt bench --modes default,kernelopt`` measures the speedup over default
compile ("before"). Then the compiler's kernels change:

* ``--change shape`` (default): each problem copy gets another batch size (its first
  ``batch_size = N`` / ``BATCH... = N`` constant, or the first number of the small shape tuple
  ``... if LARGE else (N, ...)`` of the bundled examples, plus one), which changes every
  kernel's source (static shapes) and so its fingerprint;
* ``--change persistent``: ``TORCHINDUCTOR_PERSISTENT_REDUCTIONS=0`` for everything after
  (Inductor's looped instead of persistent reductions: other kernels and names for reductions).

then ``kernelopt refresh`` replays each stored version's recipe on the new kernels, and
``kernelopt bench`` measures again ("after"). The table: problem, kernels stored by tune,
refreshed (of stale), speedup before, speedup after. On a CPU (``--device cpu``, interpreter
mode) every step runs and nothing is timed: the speedup columns say "n/m".
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

KERNELOPT = [sys.executable, "-m", "pytest_kernelopt.cli"]  # the console script may not be beside this Python


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def _run(args: list[str], cwd: Path, env: dict[str, str], allowed: tuple[int, ...] = (0,)) -> str:
    _say("$ " + " ".join(args))
    t0 = time.monotonic()
    done = subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True)
    _say(f"  exit {done.returncode} after {time.monotonic() - t0:.0f} s")
    if done.returncode not in allowed:
        _say(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"{args[1]} failed (exit {done.returncode})")
    return done.stdout


_BATCH = [re.compile(r"^((?:batch_size|BATCH\w*)\s*=\s*)(\d+)", re.M | re.I),
          # The bundled examples' ``(large) if LARGE else (small)``: the tuple the run uses.
          re.compile(r"(= \()(\d+)(?=[^\n]*\) if LARGE else)") if os.environ.get("KERNELOPT_SIZE") == "large"
          else re.compile(r"(if LARGE else \()(\d+)")]


def change_shape(path: Path) -> str:
    """The problem file with its batch size one larger; which constant changed, in words."""
    text = path.read_text()
    for pattern in _BATCH:
        m = pattern.search(text)
        if m:
            new = int(m.group(2)) + 1
            path.write_text(text[:m.start(2)] + str(new) + text[m.end(2):])
            return f"{m.group(1).strip()}{m.group(2)} -> {new}"
    raise SystemExit(f"{path}: no batch-size constant found (batch_size = N, BATCH = N, or '... if LARGE else (N'); "
                     f"use --change persistent")


def accept_correct(project: Path, run: dict, env: dict[str, str]) -> None:
    """Interpreter mode stores nothing as faster: to exercise refresh end to end on a CPU, accept the
    first correct candidate the run tried per kernel (``--allow-no-gain``; its recipe is derived at accept)."""
    run_dir = project / ".kernelopt" / "runs" / run["run_id"]
    for problem in run["problems"]:
        for kernel in problem["kernels"]:
            if kernel.get("stored_version") is not None:
                continue
            tried = [a for a in kernel.get("history", []) if a["status"] == "correct" and a.get("file")
                     and not a["origin"].startswith("active:")]
            # A harvested kernel accepted by hand records an edit recipe (accept has no harvest to name
            # it by; tune does): prefer launch and rewrite candidates, whose recipes replay.
            tried.sort(key=lambda a: a["origin"].startswith("harvest:"))
            if tried:
                _run([*KERNELOPT, "accept", problem["problem"], "--kernel", kernel["kernel"], "--candidate",
                      str(run_dir / tried[0]["file"]), "--allow-no-gain", "--seeds", "1",
                      "--proposed-by", f"bench/refresh_gpu.py ({tried[0]['origin']})"], project, env, allowed=(0, 1))


def bench(project: Path, problems: list[Path], device: str, seconds: float, env: dict[str, str],
          out: Path) -> dict[str, float | None]:
    _run([*KERNELOPT, "bench", *map(str, problems), "--modes", "default,kernelopt", "--device", device,
          "--seconds", str(seconds), "--json", str(out)], project, env)
    data = json.loads(out.read_text())
    speedups: dict[str, float | None] = {}
    for p in data["problems"]:
        mode = next((m for m in p["modes"] if m["mode"] == "kernelopt"), None)
        speedups[p["model"]] = mode.get("speedup") if mode else None
    return speedups


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("problems", type=Path, nargs="+", metavar="PROBLEM")
    parser.add_argument("--device", choices=["cuda", "cpu"], default=os.environ.get("KERNELOPT_BENCH_DEVICE", "cuda"))
    parser.add_argument("--change", choices=["shape", "persistent"], default="shape")
    parser.add_argument("--budget-s", type=float, default=40.0)
    parser.add_argument("--seconds", type=float, default=3.0, help="kernelopt bench --seconds")
    parser.add_argument("--out", type=Path, help="keep the project here (default: a temporary folder)")
    args = parser.parse_args(argv)
    started = time.monotonic()
    tmp = None
    if args.out is None:
        tmp = tempfile.TemporaryDirectory(prefix="kernelopt-refresh-bench-")
        project = Path(tmp.name)
    else:
        project = args.out.resolve()
        project.mkdir(parents=True, exist_ok=False)
    (project / "problems").mkdir()
    (project / "pyproject.toml").write_text(
        f'[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "{args.device}"\n')
    problems = []
    for path in args.problems:
        shutil.copy(path, project / "problems" / path.name)
        problems.append(project / "problems" / path.name)
    env = dict(os.environ)
    run = json.loads(_run([*KERNELOPT, "tune", *map(str, problems), "--agent", "search", "--budget-s",
                           str(args.budget_s), "--no-ncu", "--device", args.device, "--json"], project, env,
                          allowed=(0, 2)))
    if args.device == "cpu":
        accept_correct(project, run, env)
    before = bench(project, problems, args.device, args.seconds, env, project / "bench-before.json")
    stored = {p.stem: sorted(d.name for d in (project / "kernels" / p.stem).iterdir()
                             if (d / "manifest.json").is_file()) if (project / "kernels" / p.stem).is_dir()
              else [] for p in problems}
    if args.change == "shape":
        for p in problems:
            _say(f"{p.name}: {change_shape(p)}")
    else:
        env["TORCHINDUCTOR_PERSISTENT_REDUCTIONS"] = "0"
        _say("TORCHINDUCTOR_PERSISTENT_REDUCTIONS=0 from here on")
    record = json.loads(_run([*KERNELOPT, "refresh", "--device", args.device, "--json"], project, env,
                             allowed=(0, 2)))
    after = bench(project, problems, args.device, args.seconds, env, project / "bench-after.json")
    refreshed: dict[str, dict] = {}  # per model: a problem with SHAPES has an entry per shape refreshed
    for entry in record["problems"]:
        r = refreshed.setdefault(entry["model"], {"kernels": [], "error": None})
        r["kernels"] += entry["kernels"]
        r["error"] = r["error"] or entry["error"]

    def ratio(value: float | None) -> str:
        return f"{value:.3f}x" if value is not None else "n/m"

    rows = [("problem", "kernels", "refreshed", "speedup before", "speedup after")]
    for p in problems:
        r = refreshed.get(p.stem, {"kernels": [], "error": None})
        done = sum(1 for k in r["kernels"] if k["status"] == "refreshed")
        cell = f"{done}/{len(r['kernels'])}" + (" (error)" if r.get("error") else "")
        rows.append((p.stem, str(len(stored[p.stem])), cell, ratio(before.get(p.stem)), ratio(after.get(p.stem))))
    widths = [max(len(row[i]) for row in rows) for i in range(5)]
    for row in rows:
        print("  ".join(cell.ljust(w) for cell, w in zip(row, widths)))
    for p in record["problems"]:
        for k in p["kernels"]:
            print(f"  {p['model']}/{k['kernel']} v{k['version']}: {k['status']}: {k['recipe']}: {k['reason']}")
    print(f"change: {args.change}; device {args.device}; {time.monotonic() - started:.0f} s in all"
          + (f"; project kept in {project}" if args.out else ""))
    if tmp is not None:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.exit(main())
