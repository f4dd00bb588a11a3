"""GPU check of capture / dump / swap on every example problem (large sizes on a GPU).

For each problem: kernels and extern calls found, whether every unedited dump swapped in
reproduces the compiled model's output bit for bit, and the model-level speed of the
all-dumps model against the compiled baseline (paired, L2 flushed). Prints a table last.

    KERNELOPT_SIZE=large python bench/roundtrip.py tests/problems/*.py
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def main(paths: list[str]) -> None:
    import torch

    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.swap import candidate_kernel, swapped

    device = resolve_device("auto")
    rows = []
    folder = Path(tempfile.mkdtemp())
    for path in paths:
        t0 = time.monotonic()
        problem = load_problem(path)
        compiled = compile_problem(problem, device)
        compile_s = time.monotonic() - t0
        inputs = problem.make_inputs(1, device)
        ref = compiled(*inputs).clone()
        dumps = {}
        exact = []
        for name, handle in compiled.kernels.items():
            file = folder / f"{problem.id}__{name}.py"
            file.write_text(render_dump(handle.info, problem.id))
            dumps[name] = candidate_kernel(file)
            with swapped(compiled, {name: dumps[name]}):
                exact.append(torch.equal(compiled(*inputs), ref))
        with swapped(compiled, dumps):
            all_exact = torch.equal(compiled(*inputs), ref)
        speed = ""
        if device == "cuda":
            from pytest_kernelopt.capture.swap import restore, swap
            from pytest_kernelopt.measure.timing import paired_timings

            def swap_in() -> None:
                for n, d in dumps.items():
                    swap(compiled, n, d)

            est = paired_timings((lambda: None, lambda: compiled(*inputs), lambda: None),
                                 (swap_in, lambda: compiled(*inputs), lambda: restore(compiled)))
            speed = f"{est.speedup:.3f} [{est.ci_low:.3f},{est.ci_high:.3f}] base {est.baseline_ms * 1e3:.0f}us"
        rows.append((problem.id, len(compiled.graphs), len(compiled.kernels), len(compiled.externs),
                     f"{sum(exact)}/{len(exact)}", all_exact, f"{compile_s:.1f}", speed))
        torch._dynamo.reset()
    print(f"device={device} torch={torch.__version__}")
    print(f"{'problem':<24} graphs triton extern exact-each exact-all compile_s dumps-vs-compiler speedup")
    for r in rows:
        print(f"{r[0]:<24} {r[1]:>6} {r[2]:>6} {r[3]:>6} {r[4]:>10} {str(r[5]):>9} {r[6]:>9} {r[7]}")


if __name__ == "__main__":
    main(sys.argv[1:])
