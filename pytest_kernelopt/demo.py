"""``make demo``: the whole path on the bundled example problems.

For each problem in ``tests/problems/``: compile and capture (Triton kernels and
extern calls), dump every Triton kernel as a candidate file under
``out/demo/<problem>/``, verify the first dump through the cascade in one verification
session (an isolated worker) (it must come out correct), and verify a deliberately broken copy (its
stored value scaled by 1.001: a 0.1% error), which must be rejected. Prints a
table last. Without a GPU everything runs in interpreter mode and speed is
reported as not measured.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from .measure.text import print_whole


def break_candidate(source: str) -> str:
    """Scale the value of the last ``tl.store`` by 1.001."""
    lines = source.splitlines()
    for i in range(len(lines) - 1, -1, -1):
        m = re.match(r"(\s*tl\.store\(.*?,\s*)(\w+)(\s*,.*\)|\))\s*$", lines[i])
        if m:
            lines[i] = f"{m.group(1)}{m.group(2)} * 1.001{m.group(3)}"
            return "\n".join(lines) + "\n"
    raise ValueError("no tl.store to break")


def next_steps(problem: Path, kernel: str, dump: Path) -> list[str]:
    """What to run after the demo, on its first problem and dump (paths as the user would type them)."""
    def shown(path: Path) -> str:
        try:
            return str(path.resolve().relative_to(Path.cwd()))
        except ValueError:
            return str(path)

    return ["next: edit the dump and check your version, then let the search try (README, \"Quick start\"):",
            f"  kernelopt verify {shown(problem)} --kernel {kernel} --candidate {shown(dump)}",
            f"  kernelopt tune {shown(problem)} --budget-s 60   # stores faster kernels on a GPU"]


def repository_root() -> Path:
    """The clone this package runs from (in a wheel install: site-packages, where no problems lie)."""
    return Path(__file__).resolve().parent.parent


def main(argv: list[str] | None = None) -> int:
    from .candidate import write_dumps
    from .capture import compile_problem
    from .config import resolve_device
    from .verify import VerifyOptions, VerifySession
    from .verify.worker import WorkerProcess
    from .capture.problem import load_problem

    root = repository_root()
    paths = [Path(p) for p in (argv or [])] or sorted((root / "tests" / "problems").glob("*.py"))
    if not paths:
        print(f"kernelopt demo: no problem files: {root / 'tests' / 'problems'} is not here (the demo's problems "
              "ship with the repository, not the wheel). Run `make demo` in a clone, or name problem files: "
              "python -m pytest_kernelopt.demo path/to/problem.py", file=sys.stderr)
        return 2
    # Installed from a wheel, the package's parent is site-packages: dumps go under the current folder.
    out = (root if (root / "tests" / "problems").is_dir() else Path.cwd()) / "out" / "demo"
    # Lines are never hard-wrapped (a log keeps paths whole); the table gets the width it needs.
    console = Console(soft_wrap=True)
    device = resolve_device("auto")
    console.print(f"kernelopt demo on {device} ({'GPU' if device == 'cuda' else 'interpreter mode'}), {len(paths)} problems")
    table = Table(title="kernelopt demo")
    for col in ("problem", "graphs", "triton", "extern", "dump verified", "0.1% error", "seconds"):
        table.add_column(col, no_wrap=True)  # short cells, read whole
    options = VerifyOptions(seeds=2, timeout=600)
    failures = 0
    steps: list[str] = []
    for path in paths:
        # The session's worker, importing torch while this process compiles the problem; closed whatever happens.
        with contextlib.closing(WorkerProcess()) as worker:
            t0 = time.monotonic()
            problem = load_problem(path)
            with console.status(f"{problem.id}: compiling and capturing"):
                compiled = compile_problem(problem, device)
            infos = [h.info for h in compiled.kernels.values()]
            files = write_dumps(infos, problem.id, out / problem.id)
            first = files[0]
            steps = steps or next_steps(path, infos[0].name, first)
            broken = first.with_name(first.stem + "_broken.py")
            broken.write_text(break_candidate(first.read_text()))
            with VerifySession(path, device, options, worker=worker) as session:
                with console.status(f"{problem.id}: opening a verification session"):
                    session.open()
                with console.status(f"{problem.id}: verifying {first.name}"):
                    good = session.verify(infos[0].name, first)
                with console.status(f"{problem.id}: verifying a 0.1% wrong copy"):
                    bad = session.verify(infos[0].name, broken)
            ok = good.status != "rejected" and bad.status == "rejected"
            failures += not ok
            failed_stage = next((s.name for s in bad.stages if s.passed is False), "-")
            table.add_row(problem.id, str(len(compiled.graphs)), str(len(infos)), str(len(compiled.externs)),
                          good.status, f"{bad.status} at {failed_stage}", f"{time.monotonic() - t0:.0f}")
            console.print(f"{problem.id}: {len(infos)} kernel(s) dumped to {out / problem.id}; dump {good.status}, "
                          f"broken copy {bad.status}")
    print_whole(table, console)
    if not failures:
        print("\n".join(steps))
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
