"""Host-side launch cost of a compiler kernel vs its dump (microseconds per call).

    python bench/launch_overhead.py tests/problems/elementwise_chain.py
"""

from __future__ import annotations

import sys
import tempfile
import time
import warnings
from pathlib import Path

warnings.filterwarnings("ignore")


def per_call_us(fn, n: int = 2000) -> float:
    import torch

    for _ in range(50):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    for _ in range(n):
        fn()
    t1 = time.perf_counter()
    torch.cuda.synchronize()
    return (t1 - t0) / n * 1e6


def main(path: str) -> None:
    import torch

    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.verify.speed import first_launch
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.swap import candidate_kernel

    device = resolve_device("auto")
    problem = load_problem(path)
    compiled = compile_problem(problem, device)
    inputs = problem.make_inputs(1, device)
    stream = torch.cuda.current_stream().cuda_stream
    for name, handle in compiled.kernels.items():
        file = Path(tempfile.mkdtemp()) / f"{name}.py"
        file.write_text(render_dump(handle.info, problem.id))
        cand = candidate_kernel(file)
        args = first_launch(compiled, name, inputs)
        a = per_call_us(lambda: handle.original.run(*args, stream=stream))
        b = per_call_us(lambda: cand.run(*args, stream=stream))
        proxies = [(v._broken, len(v._kernels)) for v in cand._run.__globals__.values() if type(v).__name__ == "FastJIT"]
        cand._fast = False
        plain = cand.module.run
        cand._run = plain
        c = per_call_us(lambda: cand.run(*args, stream=stream))
        print(f"{name}: inductor {a:.1f} us/launch, dump (fast launch) {b:.1f} us/launch, dump (triton's path) {c:.1f} us/launch; fast-path state {proxies}")
    print(f"model call: {per_call_us(lambda: compiled(*inputs), 500):.1f} us")


if __name__ == "__main__":
    main(sys.argv[1])
