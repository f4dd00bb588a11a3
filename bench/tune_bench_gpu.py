"""`kernelopt tune` then `kernelopt bench` per problem, and one table: what a user gets, head to head.

    KERNELOPT_SIZE=large python bench/tune_bench_gpu.py OUT PROBLEM.py ... [--budget-s 10] [--timeout 400]
        [--tune-args "--compile-variants max-autotune"] [--jobs 4]

Per problem, in a fresh kernel store under OUT: ``kernelopt tune --agent search --no-ncu`` (its
compile step and kernel search, ``--run-budget-s`` 80% of ``--timeout`` unless ``--tune-args`` names one, so the tune
ends by itself before the limit stops it; the defaults otherwise; ``--ncu`` lets tune run Nsight Compute), then ``kernelopt bench --modes
default,max-autotune-no-cudagraphs,kernelopt``, in which every mode is timed against the
default compile in one run (paired, interleaved, L2 flushed). The table's kernelopt /
max-autotune is the ratio of the two modes' medians from that one bench run. Logs and
JSON go under OUT, all of them also in OUT/logs.tgz; the table is printed last, then the memory-bound kernels' mean
percent of their memory limit where a search session profiled them (the compiler's, and with the stored versions).

With ``--jobs N`` the tunes run N at a time (their compiles use the host's cores), then the benches
run one at a time, alone on the GPU: the table's figures come from the benches. But what a tune
stores is decided from its own timings, and beside other tunes those are biased, not just noisy: on
an H100 (2026-12-05) a compile trial read 1.083x beside three tunes and 1.011x alone. For figures
that say what a user gets, ``--jobs 1`` (the default): then each problem is benched right after its
tune, and with ``--deadline-s`` (one device call's time) each tune's limit is cut so that its bench
still fits (BENCH_RESERVE_S), and a problem with less than MIN_TUNE_S of tune left is not started. A
problem with SHAPES gets a row per declared shape.
"""

from __future__ import annotations

import argparse
import json
import math
import shlex
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from pytest_kernelopt.agents.profiler import limit_reading
from pytest_kernelopt.records import at_shape


GRACE_S = 30.0  # after SIGTERM at the time limit: a tune stops as on Ctrl-C, prints its record, exits 130
BENCH_RESERVE_S = 60.0  # with --jobs 1 and --deadline-s: kept for each problem's bench when its tune is limited
MIN_TUNE_S = 60.0  # a tune limited to less than this is not started (its compile step alone takes longer)


def _run(cmd: list[str], log: Path, timeout: float) -> tuple[int, float, str]:
    """Run ``cmd``; at ``timeout`` send SIGTERM (kernelopt stops cleanly and prints what it has), kill after
    GRACE_S more. Exit 124 when the time limit stopped it."""
    started = time.monotonic()
    with log.open("w") as f:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=f, text=True)
        try:
            out, _ = proc.communicate(timeout=timeout)
            code = proc.returncode
        except subprocess.TimeoutExpired:
            proc.terminate()
            try:
                out, _ = proc.communicate(timeout=GRACE_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                out, _ = proc.communicate()
            code = 124
    return code, time.monotonic() - started, out or ""


def _records(out: str, runs: Path) -> list[dict]:
    """The tune's problem records: from its --json output, else (a tune cut by --timeout prints nothing) from
    the run.json it keeps up to date in its run directory, so what it stored before the cut is still reported."""
    try:
        return json.loads(out)["problems"]
    except ValueError:
        saved = sorted(runs.glob("*/run.json"), key=lambda f: f.stat().st_mtime)
        if not saved:
            raise
        return json.loads(saved[-1].read_text())["problems"]


def _pack(out: Path) -> None:
    """Every log, table and record under ``out`` (the tunes' run.json and trace.jsonl included, not their candidates)
    in one ``out/logs.tgz``: a device call brings back a limited number of files, and the tune logs are what says
    why a setting was not chosen."""
    import tarfile

    with tarfile.open(out / "logs.tgz", "w:gz") as tar:
        for f in sorted(out.rglob("*")):
            if f.is_file() and f.name != "logs.tgz" and "candidates" not in f.parts \
                    and f.suffix in (".log", ".json", ".jsonl", ".txt"):
                tar.add(f, arcname=str(f.relative_to(out)))


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("problems", type=Path, nargs="+")
    parser.add_argument("--budget-s", default="10")
    parser.add_argument("--timeout", type=float, default=400.0)
    parser.add_argument("--tune-args", default="")
    parser.add_argument("--jobs", type=int, default=1, help="tunes at a time (benches always run alone)")
    parser.add_argument("--ncu", action="store_true",
                        help="let tune run Nsight Compute (off by default: its child's time is not the search's)")
    parser.add_argument("--deadline-s", type=float, default=None,
                        help="seconds from the start (a device call's time): with --jobs 1 each tune is cut to leave "
                             "its bench time; no tune or bench starts past it, and a running one is cut short")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    cli = [sys.executable, "-m", "pytest_kernelopt.cli"]
    started = time.monotonic()

    def left() -> float:
        return math.inf if args.deadline_s is None else args.deadline_s - (time.monotonic() - started)

    def tune_one(problem: Path) -> dict:
        name = problem.stem
        kernels, runs = args.out / name / "kernels", args.out / name / "runs"
        # One at a time, each tune ends in time for its own bench before the deadline.
        limit = args.timeout if args.jobs > 1 else min(args.timeout, left() - BENCH_RESERVE_S)
        if limit < MIN_TUNE_S:
            print(f"{name}: not tuned, the deadline is near", file=sys.stderr, flush=True)
            return {"problem": name, "tune_exit": None, "tune_s": 0.0, "tune_error": "not tuned: deadline"}
        # A tune the time limit stops keeps none of its compile step's trials chosen (a setting needs its second
        # compile): four of nine training steps ended so on an H100 at --timeout 115. Unless told otherwise, the
        # tune's own budget ends it first, at 80% of the limit (its last kernel's check may run past it).
        budget = [] if "--run-budget-s" in args.tune_args else ["--run-budget-s", f"{max(30.0, 0.8 * limit):.0f}"]
        tune = [*cli, "tune", str(problem), "--agent", "search", *([] if args.ncu else ["--no-ncu"]),
                "--budget-s", args.budget_s, *budget,
                "--kernels-dir", str(kernels), "--runs-dir", str(runs), "--json", *shlex.split(args.tune_args)]
        print(f"{name}: tune", file=sys.stderr, flush=True)
        code, tune_s, out = _run(tune, args.out / f"{name}.tune.log", limit)
        (args.out / f"{name}.tune.json").write_text(out)
        row = {"problem": name, "tune_exit": code, "tune_s": round(tune_s, 1)}
        try:
            records = _records(out, runs)
            # Each declared shape chooses its own compile setting (one record per shape; None: no SHAPES).
            # ... and why each trial ended as it did (its status, its second compile's figure, the reason): what
            # says why a setting faster on its trial was not chosen.
            row["compiles"] = {r.get("shape"): {"chosen": (r.get("compile") or {}).get("chosen"), "tried": {
                t["variant"]: t.get("speedup") for t in (r.get("compile") or {}).get("tried", [])}, "trials": {
                t["variant"]: {"status": t.get("status"), "second": t.get("second_speedup"),
                               "reason": (t.get("reason") or "")[:200]}
                for t in (r.get("compile") or {}).get("tried", [])}} for r in records}
            kernels_seen = [k for record in records for k in record.get("kernels", [])]
            row["stored"] = sum(1 for k in kernels_seen if k.get("stored_version"))
            row["origins"] = [k.get("best_origin") for k in kernels_seen if k.get("stored_version")]
            # What the search tried, in order (origin, status, model speedup, device seconds), and why each
            # kernel's search ended: enough to see where a budget went without the run directory.
            row["searched"] = {k["kernel"]: {
                "skipped": k.get("skipped"), "message": (k.get("message") or "")[:200],
                # Where the profile read it: its class, share of model time and % of its memory limit (roofline),
                # and the stored version's % (the compiler's times the version's kernel speedup).
                "class": (k.get("profile") or {}).get("bottleneck"), "share": (k.get("profile") or {}).get("share"),
                "limit_pct": (k.get("profile") or {}).get("roofline_pct"),
                "stored_limit_pct": (k["profile"]["roofline_pct"] * k["best_kernel_timing"]["speedup"]
                                     if k.get("stored_version") and (k.get("profile") or {}).get("roofline_pct")
                                     and k.get("best_kernel_timing") else None),
                "tried": [(a["origin"], a["status"], round(a["model_timing"]["speedup"], 3) if a.get("model_timing")
                           else None, round(a.get("seconds") or 0.0, 1)) for a in k.get("history", [])]}
                for k in kernels_seen}
            row["tune_error"] = "; ".join(r["error"] for r in records if r.get("error")) or None
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            row["tune_error"] = f"no run record ({exc})"
        # Where a screened candidate's seconds go, per cascade stage (median over the run's verdicts),
        # and what the problem cost before its first kernel's search (harvest, compile trials, open).
        stages: dict[str, list[float]] = {}
        before: dict[str, float] = {}
        for trace in runs.glob("*/trace.jsonl"):
            for line in trace.read_text().splitlines():
                event = json.loads(line)
                data = event.get("data", {})
                if event.get("event") == "verdict":
                    for stage, seconds in (data.get("stages") or {}).items():
                        stages.setdefault(stage, []).append(seconds)
                elif event.get("event") == "harvest":
                    # wall time (its variants compile side by side); older traces: the sum of the variants'
                    before["harvest"] = round(data.get("wall_seconds") or sum((data.get("seconds") or {}).values()), 1)
                elif event.get("event") == "ncu":
                    before["ncu"] = round(before.get("ncu", 0.0) + (data.get("seconds") or 0.0), 1)
                elif event.get("event") == "compile-trial":
                    before["compile"] = round(before.get("compile", 0.0) + (data.get("seconds") or 0.0), 1)
                elif event.get("event") == "opened":  # twice where the session closed for the harvest: the sum
                    before["open"] = round(before.get("open", 0.0) + (data.get("seconds") or 0.0), 1)
        row["stage_s"] = {k: round(sorted(v)[len(v) // 2], 2) for k, v in stages.items()}
        row["before_search_s"] = before
        print(json.dumps(row), file=sys.stderr, flush=True)
        return row

    rows: list[dict] = []

    def keep(row: dict) -> None:
        rows.append(row)
        (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
        print(json.dumps(row), flush=True)  # what is done survives a timeout

    def bench_one(problem: Path, tuned_row: dict) -> None:
        name = problem.stem
        bench_json = args.out / f"{name}.bench.json"
        bench = [*cli, "bench", str(problem), "--modes", "default,max-autotune-no-cudagraphs,kernelopt",
                 "--kernels-dir", str(args.out / name / "kernels"), "--json", str(bench_json)]
        limit = min(args.timeout, left())
        if limit < 20 or tuned_row.get("tune_error") == "not tuned: deadline":
            print(f"{name}: bench skipped, the deadline is near", file=sys.stderr, flush=True)
            keep(dict(tuned_row, bench_error="not benched: deadline"))
            return
        print(f"{name}: bench", file=sys.stderr, flush=True)
        code, bench_s, out = _run(bench, args.out / f"{name}.bench.log", limit)
        (args.out / f"{name}.bench.txt").write_text(out)
        try:
            results = json.loads(bench_json.read_text())["problems"]
        except (OSError, ValueError, KeyError) as exc:
            results = []
            tuned_row["bench_error"] = f"no bench record ({exc})"
        for result in results or [{}]:
            row = dict(tuned_row, bench_exit=code, bench_s=round(bench_s, 1))
            row["problem"] = at_shape(name, result.get("shape"))
            here = (tuned_row.get("compiles") or {}).get(result.get("shape")) or {}
            row["compile"], row["tried"] = here.get("chosen"), here.get("tried") or {}
            try:
                modes = {m["mode"]: m for m in result["modes"]}
                for mode, key in (("max-autotune-no-cudagraphs", "ma"), ("kernelopt", "ko")):
                    m = modes.get(mode, {})
                    row[f"{key}_vs_default"] = m.get("speedup")
                    row[f"{key}_correct"] = m.get("correct")
                    row[f"{key}_limit_pct"] = m.get("limit_pct")
                ma, ko = modes["max-autotune-no-cudagraphs"].get("median_us"), modes["kernelopt"].get("median_us")
                row["ko_vs_ma"] = round(ma / ko, 4) if ma and ko else None
                row["triton_share"] = result.get("triton_share")
                row["ko_source"] = modes["kernelopt"].get("compile_setting")
                if result.get("error"):
                    row["bench_error"] = result["error"][:300]
            except (ValueError, KeyError, IndexError, TypeError) as exc:
                row.setdefault("bench_error", f"no bench record ({exc})")
            keep(row)

    if args.jobs > 1:  # the tunes side by side, then each bench alone
        with ThreadPoolExecutor(args.jobs) as pool:
            tuned = list(pool.map(tune_one, args.problems))
        for problem, tuned_row in zip(args.problems, tuned):
            bench_one(problem, tuned_row)
    else:  # each problem's bench right after its tune: a deadline then costs at most the problems not reached
        for problem in args.problems:
            bench_one(problem, tune_one(problem))
    _pack(args.out)
    print("\nproblem | compile chosen (speedup over default) | kernels stored | max-autotune/default | "
          "kernelopt/default | kernelopt/max-autotune | limit % max-autotune -> kernelopt | stored from | correct | "
          "tune s | bench s")
    ratios = []
    for r in rows:
        tried = r.get("tried") or {}
        chosen = r.get("compile")
        text = f"{chosen} ({tried.get(chosen):.3f}x)" if chosen and tried.get(chosen) else str(chosen)
        fmt = lambda v: f"{v:.3f}" if isinstance(v, (int, float)) else "-"  # noqa: E731
        print(f"{r['problem']} | {text} | {r.get('stored', '-')} | {fmt(r.get('ma_vs_default'))} | "
              f"{fmt(r.get('ko_vs_default'))} | {fmt(r.get('ko_vs_ma'))} | "
              f"{fmt(r.get('ma_limit_pct'))} -> {fmt(r.get('ko_limit_pct'))} | {', '.join(map(str, r.get('origins') or [])) or '-'} | "
              f"{r.get('ko_correct')} | {r['tune_s']} | "
              f"{r.get('bench_s')}" + (f" | {r.get('tune_error') or r.get('bench_error')}"
                                        if r.get('tune_error') or r.get('bench_error') else ""))
        if isinstance(r.get("ko_vs_ma"), float):
            ratios.append(r["ko_vs_ma"])
    # Memory-bound Triton kernels against their limit, where a search session profiled them: the compiler's, then
    # with each stored version in its place (issue 41's target: 85% on average).
    # Read as the planner reads them (agents/profiler.limit_reading: capped at 100%, an overcount dropped).
    read = [(limit_reading(k["limit_pct"]), limit_reading(k.get("stored_limit_pct") or k["limit_pct"]))
            for r in {r["problem"].split("@")[0]: r for r in rows}.values()
            for k in (r.get("searched") or {}).values() if k.get("class") == "memory" and k.get("limit_pct")]
    memory = [(a, b) for a, b in read if a is not None and b is not None]
    if memory:
        print(f"memory-bound kernels profiled: {len(memory)}, mean % of the memory limit "
              f"{sum(a for a, _ in memory) / len(memory):.1f} (compiler's) -> "
              f"{sum(b for _, b in memory) / len(memory):.1f} (with the stored versions)")
    if ratios:
        print(f"geomean kernelopt/max-autotune over {len(ratios)}: "
              f"{math.exp(sum(map(math.log, ratios)) / len(ratios)):.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
