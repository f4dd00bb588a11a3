"""``kernelopt bench``: eager, torch.compile modes and the committed kernels, measured side by side.

Usage::

    kernelopt bench PROBLEM.py [PROBLEM.py ...] [--modes eager,default,max-autotune-no-cudagraphs,kernelopt]
                    [--json OUT] [--device auto|cuda|cpu] [--kernels-dir DIR] [--config PYPROJECT]
                    [--seconds S] [--timeout S] [--optimizer sgd|adam]

Modes (``--modes``, comma-separated, ``default`` required: speedups are relative to it):

* ``eager``: the ``nn.Module`` as written;
* ``default``: ``torch.compile(model)`` (Inductor, default mode);
* ``max-autotune-no-cudagraphs``: ``torch.compile(model, mode="max-autotune-no-cudagraphs")``;
* ``kernelopt``: the production path, ``torch.compile(model, backend=pytest_kernelopt.backend(model_id,
  kernels_dir))`` (what ``pytest_kernelopt.compile`` does): Inductor's default compile with the store's
  active, non-stale committed kernels swapped in. With nothing committed it runs exactly the compiler's
  kernels; the ``kernelopt`` column says so.

Each problem runs in a child process of its own (``python -m pytest_kernelopt.benchmark JOB``), so a
problem that fails to import, compile or run, runs out of memory or crashes the process is one error
row and the others go on; its GPU memory is freed when the process ends. In the child, for one model
instance (weights drawn under seed 0; every mode shares them):

1. **Reference.** Inputs drawn under seed 1 on the device (:meth:`Problem.make_inputs`); the eager
   model and a float64 copy of it run, exactly as the verifier builds its reference
   (:func:`pytest_kernelopt.verify.model.build_references`: float64 on the GPU, else on the CPU, else
   no float64 reference and correctness is not judged).
2. **Build and check each mode.** The first call compiles; ``compile_seconds`` is its wall time
   (Dynamo, Inductor, autotuning and one run; Inductor's on-disk caches are used as they are, so a
   second bench of the same problem, or a mode whose graph an earlier mode compiled, is faster). Its
   outputs are judged against the reference by the verifier's one numerics rule
   (:mod:`pytest_kernelopt.verify.numerics`, through :func:`~pytest_kernelopt.verify.model.judge_output`),
   the ``default`` compile standing where the verifier puts the compiled baseline (it is built first,
   and the reference's envelope rebased on its outputs; the eager model's when it fails): per element,
   error against float64 at most 4x the default compile's own envelope; NaN/Inf only where it has them;
   integer outputs equal to its. A mode that fails to build or run is an error in its row; the
   problem fails when ``default`` does.
3. **Timing (CUDA only).** All modes that built are timed in one loop
   (:func:`pytest_kernelopt.measure.timing.interleaved_timings`): warm-up rounds untimed, then rounds in
   which every mode runs once, the order rotated by one each round (A B C, B C A, C A B, ...), an L2
   flush (a write of twice the L2's size) before every run, each run between two CUDA events, one
   synchronize at the end; the number of rounds sized to about ``--seconds`` (30 to 400). The runs are
   CUDA-graph replays of each mode when every mode can be captured (:func:`~pytest_kernelopt.measure.timing.graphed`:
   GPU time, host launch cost excluded), else plain calls for all modes; ``method`` says which.
   Per mode: the median time with its 95% order-statistic interval, and the speedup over ``default``
   as the median of the per-round ratios ``default / mode`` with its 95% interval
   (:func:`pytest_kernelopt.measure.stats.mode_estimates`), called faster, slower, within noise or
   too short to judge by the one speed rule (:class:`~pytest_kernelopt.measure.rule.SpeedPolicy`).
4. **Triton share (CUDA only).** The default mode runs 5 times (plain calls) under ``torch.profiler``
   (CUDA activity): GPU time in kernels named ``triton_*`` against everything else (cuBLAS/cuDNN,
   aten kernels, copies).

The table (stdout) has one row per problem and mode, and at the bottom the geometric mean of each
mode's speedup over ``default`` across the problems that were timed without error. ``--json OUT``
writes :class:`BenchResult` (``schema_version``, ``kind: "kernelopt-bench"``) with every figure.
A rich progress bar runs on stderr.

A training problem (``TRAINING = True``) runs and is timed as its whole step in every mode (forward, loss,
backward); ``--optimizer sgd|adam`` adds a ``torch.optim`` step after the backward inside that call
(:func:`.one_problem._with_optimizer`; docs/bench.md).

In interpreter mode (no CUDA device, or ``--device cpu``) the references, compile times and
correctness checks run; speed is not measured: no timings, no speedups, no geometric means.

Exit codes: 0 the bench ran (some problems may be error rows, some modes incorrect: a bench reports,
it does not gate); 2 bad input (a missing file, bad ``--modes`` or option, bad settings: one line
``kernelopt: error: ...``) or every problem failed; 130 interrupted.

Running it on the H200 (the figures in docs/results-h200.md)::

    make install                      # or: python -m venv .venv && .venv/bin/pip install -e .
    export KERNELOPT_SIZE=large       # GPU-sized shapes of the bundled examples
    .venv/bin/kernelopt bench tests/problems/*.py \\
        --modes eager,default,max-autotune-no-cudagraphs,kernelopt --json out/bench/examples.json
    # public KernelBench problem files, unchanged, at their full shapes:
    .venv/bin/kernelopt bench /path/to/KernelBench/level1/*.py --json out/bench/level1.json --timeout 1800
    # cold compile times: an empty Inductor cache
    TORCHINDUCTOR_CACHE_DIR=$(mktemp -d) .venv/bin/kernelopt bench ...

Nothing else should run on the GPU meanwhile; record the date, GPU, torch and triton versions
(``environment`` in the JSON) with the table.
"""

from __future__ import annotations

# By concern: records.py (modes, settings, the records of a result: the --json contract),
# one_problem.py (the child: every mode of one problem), run.py (the parent: one child per
# problem, the progress bar), output.py (the table and the JSON file); __main__.py starts
# the child.

from .one_problem import bench_problem, record_timings
from .output import bench_table, print_bench, write_json
from .records import (
    BASELINE, ERROR_FACTOR_NOTE, EXIT_GRACE_SECONDS, KIND, MODES, PROFILED_RUNS, SEED, BenchJob, BenchResult,
    BenchSettings, ChildMessage, Geomean, KernelTime, Mode, ModeResult, ProblemResult, geomeans, parse_modes,
)
from .run import run_bench, run_problem

__all__ = [
    "BASELINE", "ERROR_FACTOR_NOTE", "EXIT_GRACE_SECONDS", "KIND", "MODES", "PROFILED_RUNS", "SEED", "BenchJob",
    "BenchResult", "BenchSettings", "ChildMessage", "Geomean", "KernelTime", "Mode", "ModeResult", "ProblemResult",
    "bench_problem", "bench_table", "geomeans", "parse_modes", "print_bench", "record_timings", "run_bench",
    "run_problem", "write_json",
]
