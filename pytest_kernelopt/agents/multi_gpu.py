"""``kernelopt tune --workers N``: one tuning process per GPU, problems spread over them.

Each worker is ``kernelopt tune``'s own loop run on a share of the problems (round
robin in the order given), with the parent's options whole (a :class:`WorkerJob` as JSON,
never flags written out again and parsed back) with ``CUDA_VISIBLE_DEVICES`` set to a GPU of its own
(:mod:`pytest_kernelopt.shard`: never two timings on one GPU; more workers than GPUs
is refused). In interpreter mode the same processes run without pinning. Each writes
its own run directory under ``<run>/workers/<k>/``; when all have finished (or
Ctrl-C stopped them) their records are merged into one ``run.json`` and one
``trace.jsonl`` in ``<run>/``, with candidate paths rewritten to stay valid. The
store takes a lock per kernel folder, so concurrent writes never lose a version.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

from ..child import child_env, interrupt_group, kill_group, module_command, start_child
from ..errors import KerneloptError, UsageError
from ..shard import CUDA_VISIBLE_DEVICES, check_workers, visible_gpus
from .loop import TuneOptions
from ..runs.records import RunRecord
from ..runs.trace import RunDir, load_run, new_run_id, now_iso


class WorkerJob(BaseModel):
    """What one worker tunes, and how: written by the parent, read whole by the child (``worker-<k>.json``)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    problems: list[Path]
    options: TuneOptions  # the parent's, whole: device, budgets, verify options (seeds, --seed, timeout) ...
    agent: str
    agent_options: dict[str, Any] = {}
    kernels_dir: Path  # the kernel store, resolved by the parent
    runs_dir: Path  # this worker's own: <run>/workers/<k>/


def tune_workers(problems: list[Path], options: TuneOptions, workers: int, runs_dir: Path, *, agent: str,
                 agent_options: dict[str, Any], kernels_dir: Path,
                 say=print) -> RunRecord:
    """Tune ``problems`` with ``options`` in ``workers`` processes, a share of the problems each; the merged record."""
    device = options.device
    if workers < 1:
        raise UsageError(f"--workers must be at least 1, not {workers}")
    gpus = visible_gpus() if device == "cuda" else []
    if device == "cuda":
        check_workers(workers, gpus, "tune workers")
    groups = [g for g in (problems[i::workers] for i in range(workers)) if g]
    record = RunRecord(run_id=new_run_id(), started=now_iso(), agent="", kernels_dir="")
    run = RunDir.create(runs_dir, record)
    procs = []
    try:
        for k, group in enumerate(groups):
            env = child_env()
            if device == "cuda":
                env[CUDA_VISIBLE_DEVICES] = gpus[k]
            sub = run.root / "workers" / str(k + 1)
            job = run.root / f"worker-{k + 1}.json"
            job.write_text(WorkerJob(problems=group, options=options, agent=agent, agent_options=agent_options,
                                     kernels_dir=kernels_dir, runs_dir=sub).model_dump_json(indent=2))
            cmd = module_command("pytest_kernelopt.agents.multi_gpu", str(job))
            where = f" on GPU {gpus[k]}" if device == "cuda" else ""
            say(f"worker {k + 1}{where}: {', '.join(p.stem for p in group)}")
            # stderr to the worker's log on disk (never read into memory here); its --json record is in its run dir.
            procs.append((k + 1, sub, start_child(cmd, env=env, output=run.root / f"worker-{k + 1}.log",
                                                   stdout_file=os.devnull)))
        stopped: KeyboardInterrupt | None = None  # Ctrl-C, or SIGTERM (errors.Terminated)
        try:
            for _, _, proc in procs:
                proc.wait()
        except KeyboardInterrupt as exc:
            # In sessions of their own the workers did not get the terminal's Ctrl-C: pass it on and
            # let them save their records.
            stopped = exc
            for _, _, proc in procs:
                interrupt_group(proc)
            for _, _, proc in procs:
                proc.wait()
    finally:
        for _, _, proc in procs:  # nothing a worker started outlives the run (a second Ctrl-C, an error)
            kill_group(proc)
    _merge(run, procs, stopped is not None)
    run.close()
    if stopped is not None:
        raise stopped
    return record


def _merge(run: RunDir, procs: list, interrupted: bool) -> None:
    record = run.record
    record.interrupted = interrupted
    for k, sub, proc in procs:
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
        record.not_reached += child.not_reached
        for event in events:
            event.data = {**event.data, "worker": k}
            run.append(event)  # keeping the time of the worker that wrote it
        if proc.returncode not in (0, 2, 130):
            record.stop_reason = record.stop_reason or f"worker {k} exited with {proc.returncode}"
    record.finished = now_iso()


def run_job(path: Path) -> int:
    """One worker: tune the job's problems as ``kernelopt tune`` would. Exit 0: finished; 2: bad input, or a
    problem that could not be tuned; 130: interrupted (its record is saved)."""
    from ..config import resolve_device
    from ..store import KernelStore
    from . import tune
    from .progress import RichUI

    try:
        job = WorkerJob.model_validate_json(Path(path).read_text(encoding="utf-8"))
        resolve_device(job.options.device)  # cpu: interpreter mode in this process, before anything compiles
        with RichUI(quiet=True) as ui:
            record = tune(job.problems, job.options, agent=job.agent, agent_options=job.agent_options,
                          store=KernelStore(job.kernels_dir), runs_dir=job.runs_dir, ui=ui)
    except KerneloptError as exc:
        print(f"kernelopt: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("kernelopt: interrupted", file=sys.stderr)
        return 130
    return 2 if any(p.error for p in record.problems) else 0


if __name__ == "__main__":
    sys.exit(run_job(Path(sys.argv[1])))
