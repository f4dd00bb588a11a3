"""``kernelopt bench``'s modes and records: what is asked (:class:`BenchJob`, :class:`BenchSettings`,
``--modes``), what the child reports (:class:`ChildMessage`) and what is written (:class:`BenchResult`
and its rows, the ``--json`` contract), plus the geometric means across problems.
"""

from __future__ import annotations

from datetime import datetime
from typing import Final, Literal

from pydantic import Field

from ..records import SCHEMA_VERSION, Environment, Record

MODES = ("eager", "default", "max-autotune-no-cudagraphs", "kernelopt")
# ``--optimizer``: a torch.optim step timed inside a training problem's step, in every mode (torch.optim.SGD, Adam).
OPTIMIZERS = ("sgd", "adam")
BASELINE = "default"
KIND: Final = "kernelopt-bench"
SEED = 1  # the verifier's first seed
PROFILED_RUNS = 5
EXIT_GRACE_SECONDS = 60.0  # after its result, how long a child may take to exit
ERROR_FACTOR_NOTE = ("per element, error vs float64 at most 4x the default compile's own envelope (verify/numerics.py: "
                     "its absolute excess over 4 ulp, plus 4 ulp of the element)")

Mode = Literal["eager", "default", "max-autotune-no-cudagraphs", "kernelopt"]
Optimizer = Literal["sgd", "adam"]


def parse_modes(text: str) -> list[str]:
    """``--modes``: known names, comma-separated, no repeats, ``default`` among them (ValueError otherwise)."""
    names = [n.strip() for n in text.split(",")]
    if not text.strip() or any(not n for n in names):
        raise ValueError(f"expected a comma-separated list of modes ({','.join(MODES)}), not {text!r}")
    unknown = [n for n in names if n not in MODES]
    if unknown:
        raise ValueError(f"unknown mode {unknown[0]!r} (known: {', '.join(MODES)})")
    if len(set(names)) != len(names):
        raise ValueError(f"a mode is named twice in {text!r}")
    if BASELINE not in names:
        raise ValueError(f"{text!r} must include {BASELINE}: every speedup is relative to it")
    return names


# --- records ---------------------------------------------------------------------------

class ModeResult(Record):
    """One mode of one problem. Figures not measured (or not reached) are None."""

    mode: Mode
    error: str | None = None  # the mode could not be built or run
    # Wall time of the first call: compile (Dynamo, Inductor, autotuning) plus one run. None for eager.
    compile_seconds: float | None = None
    # Against the reference (float64 eager), over all outputs: max |out - ref|, max |ref|, their ratio.
    max_abs_error: float | None = None
    scale: float | None = None
    relative_error: float | None = None
    # max over outputs of (error + the reference's rounding residue) / allowed error: <= 1 passes.
    error_vs_allowed: float | None = None
    correct: bool | None = None  # None: not judged (no float64 reference, or the mode failed)
    correctness_detail: str | None = None
    # Speed (CUDA): median time and its 95% CI (microseconds), speedup over default (paired, 95% CI).
    median_us: float | None = None
    ci_low_us: float | None = None
    ci_high_us: float | None = None
    speedup: float | None = None
    speedup_ci_low: float | None = None
    speedup_ci_high: float | None = None
    samples: int | None = None
    # The verifier's speed policy on that speedup: faster, slower, within noise, or too short to judge.
    vs_default: Literal["faster", "slower", "within noise", "too short to judge"] | None = None
    # Percent of the model's limit this mode reaches (measure/roofline.py): the larger of two floors,
    # the bytes any implementation must move (ProblemResult.min_bytes; reads at the measured read
    # ceiling, writes at the rest of a copy's cost: measure/roofline.py memory_seconds)
    # and the FLOPs of its matrix products and convolutions (ProblemResult.min_flops) at the measured
    # matrix-product rate of their dtype, over the mode's median time. For models whose default
    # compile spends 90% or more of its GPU time in Triton kernels, or whose FLOPs were counted.
    limit_pct: float | None = None
    # kernelopt: how many Triton kernels ran a committed version, and what the loader said.
    committed_kernels: int | None = None
    kernels_note: str | None = None
    # kernelopt: the compile setting from model.json that compiled its graphs (None: Inductor's defaults).
    compile_setting: str | None = None
    # Why this mode was not run although asked for (max-autotune on a CPU); not an error.
    skipped: str | None = None


class KernelTime(Record):
    """GPU time of one kernel name in the default mode, per model run."""

    name: str
    us: float
    launches: int
    triton: bool


class ProblemResult(Record):
    problem: str  # the file as given on the command line, resolved
    model: str
    status: Literal["ok", "error"] = "ok"
    error: str | None = None  # what failed, and in which step
    device: str | None = None
    kernels_dir: str | None = None
    seed: int = SEED
    reference: Literal["float64", "eager"] | None = None
    reference_note: str | None = None
    # The default compile's own error on some output is a large part of that output's scale
    # (``BASELINE_SUSPECT``): every mode is judged within that envelope, so it admits large errors there.
    baseline_note: str | None = None
    # A problem with SHAPES: the declared shape benched (a row group per shape). ``declared_shapes``: every shape
    # the file declares, set where the parent could not read SHAPES from the file's text (not one literal dict)
    # and the child benched the first (the parent then benches the others).
    shape: str | None = None
    declared_shapes: list[str] = Field(default_factory=list)
    modes: list[ModeResult] = Field(default_factory=list)
    speed_measured: bool = False
    method: Literal["cuda-graph", "eager"] | None = None
    method_note: str | None = None  # why plain calls (a mode that cannot be captured)
    rounds: int | None = None
    # Default mode under torch.profiler: GPU time per run in triton_* kernels and in the rest.
    triton_us: float | None = None
    other_us: float | None = None
    triton_share: float | None = None
    kernels: list[KernelTime] = Field(default_factory=list)
    # The model's memory floor per call: its inputs and parameters read once, its outputs written once.
    min_bytes: int | None = None
    # FLOPs per call of its matrix products and convolutions, by dtype ({} none; None: not countable,
    # the model does not run on meta tensors).
    min_flops: dict[str, int] | None = None
    min_written_bytes: int | None = None  # the part of min_bytes that is the outputs, written once
    copy_ceiling_gbps: float | None = None  # measured in this run (CUDA)
    # A kernel that only reads (GB/s), measured in this run (CUDA); None: not measured, every byte at the copy's rate.
    read_ceiling_gbps: float | None = None
    flop_ceilings_tflops: dict[str, float] | None = None  # matrix-product rate per dtype, measured once per machine
    peak_gib: float | None = None
    wall_seconds: float = 0.0
    environment: Environment | None = None
    # A training problem (capture/training.py): every mode ran, was judged and was timed as the whole step
    # (forward, loss, backward; outputs and every gradient against float64); its floor the step's (capture/floor.py).
    training: bool = False
    # A training problem benched with --optimizer: the torch.optim step (torch's defaults) that ran after the
    # backward inside every mode's call, timed with it; None: no optimizer step (or not a training problem).
    optimizer: Optimizer | None = None

    def mode(self, name: str) -> ModeResult | None:
        return next((m for m in self.modes if m.mode == name), None)


class Geomean(Record):
    mode: Mode
    speedup: float  # geometric mean over ``problems`` of the mode's speedup over default
    problems: int


class BenchSettings(Record):
    modes: list[Mode]
    device: str  # as requested (auto, cuda, cpu)
    seconds: float
    timeout: float | None
    seed: int = SEED
    optimizer: Optimizer | None = None  # --optimizer: stepped inside each training problem's step, every mode


class BenchResult(Record):
    schema_version: int = SCHEMA_VERSION
    kind: Literal["kernelopt-bench"] = KIND
    created: datetime
    settings: BenchSettings
    environment: Environment | None = None  # of the first problem that got as far as the device
    speed_measured: bool = False
    correctness_rule: str = ERROR_FACTOR_NOTE
    problems: list[ProblemResult]
    geomeans: list[Geomean] = Field(default_factory=list)
    # Another process was using the GPU when the bench started (measure/neighbours.py): what was seen.
    gpu_neighbour: str | None = None

    @property
    def failed(self) -> list[ProblemResult]:
        return [p for p in self.problems if p.status == "error"]


class BenchJob(Record):
    """What the parent asks one child process to do."""

    problem: str
    modes: list[Mode]
    device: str
    kernels_dir: str
    seconds: float
    # A declared shape of a problem with SHAPES (docs/problems.md): the child benches the problem there.
    shape: str | None = None
    optimizer: Optimizer | None = None  # --optimizer (training problems)


class ChildMessage(Record):
    """A line from the child: a step it started, or its result (the last line)."""

    event: Literal["step", "result"]
    text: str | None = None
    result: ProblemResult | None = None


def geomeans(problems: list[ProblemResult], modes: list[Mode]) -> list[Geomean]:
    """Per mode (default excepted): the geometric mean of its speedups over the problems timed without error."""
    from ..measure.stats import geomean

    out = []
    for mode in modes:
        if mode == BASELINE:
            continue
        values = [m.speedup for p in problems if p.status == "ok" and p.speed_measured
                  for m in [p.mode(mode)] if m is not None and m.speedup is not None]
        if values:
            out.append(Geomean(mode=mode, speedup=geomean(values), problems=len(values)))
    return out
