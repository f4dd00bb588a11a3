"""``kernelopt tune --workers N``: one tuning process per GPU, problems spread over them.

Each worker is ``kernelopt tune`` itself, run on a share of the problems (round
robin in the order given) with ``CUDA_VISIBLE_DEVICES`` set to a GPU of its own
(:mod:`pytest_kernelopt.shard`: never two timings on one GPU; more workers than GPUs
is refused). In interpreter mode the same processes run without pinning. Each writes
its own run directory under ``<run>/workers/<k>/``; when all have finished (or
Ctrl-C stopped them) their records are merged into one ``run.json`` and one
``trace.jsonl`` in ``<run>/``, with candidate paths rewritten to stay valid. The
store takes a lock per kernel folder, so concurrent writes never lose a version.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from ..errors import UsageError
from ..shard import CUDA_VISIBLE_DEVICES, check_workers, visible_gpus
from ..runs.records import RunRecord
from ..runs.trace import RunDir, load_run, new_run_id, now_iso


def tune_workers(problems: list[Path], argv: list[str], workers: int, device: str, runs_dir: Path, *,
                 say=print) -> RunRecord:  # type: ignore[no-untyped-def]
    """Run ``kernelopt tune <share of problems> <argv>`` in ``workers`` processes; the merged record."""
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    gpus = visible_gpus() if device == "cuda" else []
    if device == "cuda":
        check_workers(workers, gpus, "tune workers")
    groups = [g for g in (problems[i::workers] for i in range(workers)) if g]
    record = RunRecord(run_id=new_run_id(), started=now_iso(), agent="", kernels_dir="")
    run = RunDir.create(runs_dir, record)
    procs = []
    for k, group in enumerate(groups):
        env = dict(os.environ)
        if device == "cuda":
            env[CUDA_VISIBLE_DEVICES] = gpus[k]
        sub = run.root / "workers" / str(k + 1)
        cmd = [sys.executable, "-m", "pytest_kernelopt.cli", "tune", *map(str, group), *argv, "--runs-dir", str(sub),
               "--json"]
        where = f" on GPU {gpus[k]}" if device == "cuda" else ""
        say(f"worker {k + 1}{where}: {', '.join(p.stem for p in group)}")
        log = (run.root / f"worker-{k + 1}.log").open("w")
        procs.append((k + 1, sub, subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=log), log))
    interrupted = False
    try:
        for _, _, proc, _ in procs:
            proc.wait()
    except KeyboardInterrupt:
        interrupted = True
        for _, _, proc, _ in procs:  # they got the same SIGINT; let them save their records
            proc.wait()
    for _, _, _, log in procs:
        log.close()
    _merge(run, procs, interrupted)
    run.close()
    if interrupted:
        raise KeyboardInterrupt
    return record


def _merge(run: RunDir, procs: list, interrupted: bool) -> None:  # type: ignore[type-arg]
    record = run.record
    record.interrupted = interrupted
    for k, sub, proc, _ in procs:
        runs = sorted(sub.iterdir()) if sub.is_dir() else []
        if not runs:
            run.event("run", "worker-failed", worker=k, exit=proc.returncode,
                      log=f"worker-{k}.log")
            continue
        child, events = load_run(runs[-1])
        rel = runs[-1].relative_to(run.root)
        for problem in child.problems:
            for kernel in problem.kernels:
                for attempt in kernel.history:
                    if attempt.file:
                        attempt.file = str(rel / attempt.file)
        record.problems += child.problems
        record.agent, record.agent_model = child.agent, child.agent_model
        record.budget_s, record.kernels_dir = child.budget_s, child.kernels_dir
        record.environment = record.environment or child.environment
        record.input_tokens += child.input_tokens
        record.output_tokens += child.output_tokens
        record.usd += child.usd
        record.interrupted = record.interrupted or child.interrupted
        record.stop_reason = record.stop_reason or child.stop_reason
        for event in events:
            event.data = {**event.data, "worker": k}
            run.append(event)  # keeping the time of the worker that wrote it
        if proc.returncode not in (0, 2, 130):
            record.stop_reason = record.stop_reason or f"worker {k} exited with {proc.returncode}"
    record.finished = now_iso()
