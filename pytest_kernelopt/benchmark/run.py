"""The parent side of ``kernelopt bench``: one child process per problem (:mod:`.one_problem`),
started and killed through :mod:`pytest_kernelopt.child`, its JSON lines read under the time
limit; a child that dies, hangs or breaks the protocol is an error row, the others go on.
"""

from __future__ import annotations

import os
import select
import subprocess
import tempfile
import time
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

from ..child import child_env, kill_group, module_command, start_child, tail_lines
from ..measure.neighbours import neighbour_warning
from .records import EXIT_GRACE_SECONDS, BenchJob, BenchResult, BenchSettings, ChildMessage, ProblemResult, geomeans

# The longest protocol line read (a result is a few KiB to a few hundred); a longer one is a stray
# write to the protocol's descriptor, dropped as it comes without being held whole.
MESSAGE_BYTES = 16 << 20


def run_problem(job: BenchJob, timeout: float | None, on_step: Callable[[str], None]) -> ProblemResult:
    """Run one problem in a child process; a child that dies, hangs or breaks the protocol is an error row."""
    path = Path(job.problem)
    last_step = "starting"
    with tempfile.TemporaryDirectory(prefix="kernelopt-bench-") as folder:
        stderr_path = Path(folder) / "stderr.txt"
        proc = start_child(module_command("pytest_kernelopt.benchmark", job.model_dump_json()), env=child_env(),
                           output=stderr_path, stdout_pipe=True)
        assert proc.stdout is not None
        deadline = None if timeout is None else time.monotonic() + timeout
        buffer, result, skipping = b"", None, False
        try:
            while True:
                left = None if deadline is None else deadline - time.monotonic()
                if left is not None and left <= 0:
                    kill_group(proc)
                    return ProblemResult(problem=str(path), model=path.stem, status="error",
                                         error=f"timed out after {timeout:g} s while {last_step}")
                ready, _, _ = select.select([proc.stdout], [], [], 1.0 if left is None else min(left, 1.0))
                if not ready:
                    continue
                chunk = os.read(proc.stdout.fileno(), 1 << 16)
                if not chunk:
                    break
                if skipping:  # the rest of an overlong line
                    cut = chunk.find(b"\n")
                    if cut < 0:
                        continue
                    chunk, skipping = chunk[cut + 1:], False
                buffer += chunk
                if b"\n" not in buffer and len(buffer) > MESSAGE_BYTES:
                    buffer, skipping = b"", True  # not ours (a stray write): never held whole
                while b"\n" in buffer:
                    line, buffer = buffer.split(b"\n", 1)
                    try:
                        message = ChildMessage.model_validate_json(line)
                    except ValueError:
                        continue  # not ours: a stray write to the protocol descriptor
                    if message.event == "step" and message.text:
                        last_step = message.text
                        on_step(message.text)
                    elif message.event == "result":
                        result = message.result
                if result is not None:
                    break
            try:
                code = proc.wait(timeout=EXIT_GRACE_SECONDS)
            except subprocess.TimeoutExpired:
                code = None  # the result came; a process that does not exit is not the problem's fault
        finally:
            kill_group(proc)  # the child, if still there, and anything it left behind
            proc.stdout.close()
        if result is not None:
            return result
        assert code is not None
        how = f"killed by signal {-code}" if code < 0 else f"exit code {code}"
        tail = tail_lines(stderr_path)
        return ProblemResult(problem=str(path), model=path.stem, status="error",
                             error=f"the benchmark process died ({how}) while {last_step}" + (f": {tail}" if tail else ""))


def run_bench(jobs: list[BenchJob], settings: BenchSettings, *, quiet: bool = False) -> BenchResult:
    """Each job in its own child process, one after another, with a progress bar on stderr."""
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    console = Console(stderr=True)
    neighbour = neighbour_warning(jobs[0].device) if jobs else None  # before any of this bench's work is on it
    if neighbour:
        console.print(f"warning: {neighbour}", markup=False, highlight=False)
    problems: list[ProblemResult] = []
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=console, transient=True, disable=quiet) as bar:
        task = bar.add_task("bench", total=len(jobs))
        queue = list(jobs)
        while queue:
            job = queue.pop(0)
            name = Path(job.problem).stem + (f"@{job.shape}" if job.shape else "")
            bar.update(task, description=f"{name}: starting")

            def progress(text: str, name: str = name) -> None:
                bar.update(task, description=f"{name}: {text}")

            result = run_problem(job, settings.timeout, progress)
            problems.append(result)
            if job.shape is None and result.shape is not None and result.declared_shapes:
                # SHAPES the file's text did not show: the child benched the first; the others follow it.
                more = [job.model_copy(update={"shape": s}) for s in result.declared_shapes if s != result.shape]
                queue[:0] = more
                bar.update(task, total=len(problems) + len(queue))
            bar.advance(task)
            if not quiet:
                outcome = f"error: {result.error}" if result.status == "error" else "done"
                console.print(f"{name}: {outcome} ({result.wall_seconds:.1f} s)", markup=False, highlight=False)
    measured = any(p.speed_measured for p in problems)
    env = next((p.environment for p in problems if p.environment is not None), None)
    return BenchResult(created=datetime.now(timezone.utc), settings=settings, environment=env,
                       speed_measured=measured, problems=problems, geomeans=geomeans(problems, settings.modes),
                       gpu_neighbour=neighbour)
