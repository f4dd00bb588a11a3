"""What the agents exchange and what a tuning run leaves on disk.

Every record here crosses a role boundary or is written to the run directory
(``trace.jsonl``, ``run.json``); reports and pull requests are rendered from them.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..records import Environment, KernelInfo, Record, SeedErrors, Timing, redact_seeds

RUN_SCHEMA_VERSION = 1

Bottleneck = Literal["memory", "compute", "occupancy", "launch", "unknown"]


CompileStatus = Literal["accepted", "correct", "rejected", "error"]


class CompileShapeTrial(Record):
    """A compile setting checked at one declared shape (a problem with SHAPES), in a session opened at it: run
    records written before 2026-12-07 (``CompileTrial.shapes``)."""

    shape: str
    weight: float  # its share of SHAPE_WEIGHTS (the weights sum to 1)
    status: CompileStatus
    speedup: float | None = None  # over the default compile at this shape, whole model
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str | None = None
    seconds: float = 0.0


class CompileTrial(Record):
    variant: str
    status: CompileStatus
    # Over the default compile, whole model, at the shape being tuned (before 2026-12-07, of a problem with SHAPES:
    # the SHAPE_WEIGHTS-weighted geometric mean of the shapes' speedups and of their interval ends).
    speedup: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    reason: str | None = None
    seconds: float = 0.0
    # Run records written before 2026-12-07 (one setting for every declared shape, chosen when the first was tuned):
    # the check at each declared shape, in order, up to the one that refused it (``refused_at``: rejected, an error,
    # or slower beyond noise there). Since then each shape's problem entry has its own compile step: empty.
    shapes: list[CompileShapeTrial] = Field(default_factory=list)
    refused_at: str | None = None
    # Its worst output element's error as a fraction of that element's allowance, over every check (None: not
    # judged); a setting is chosen only with SETTING_HEADROOM (verify/numerics.py) to spare.
    worst_ratio: float | None = None
    # The fastest accepted setting is checked again in a new session (a second default compile and a second compile
    # of the setting, each racing its launch configurations afresh) and chosen only if accepted there too: its
    # speedup and interval on that second compile (None: not checked again). Added 2026-12-05.
    second_speedup: float | None = None
    second_ci_low: float | None = None
    second_ci_high: float | None = None


class CompileOutcome(Record):
    """What the compile step tried and chose (``run.json``, per problem)."""

    tried: list[CompileTrial] = Field(default_factory=list)
    previous: str | None = None  # model.json's choice before the run
    chosen: str | None = None  # the compile the kernels were tuned on (None: the defaults)
    stored: bool = False  # model.json was written (a new choice, or the old one removed)
    note: str = ""


class KernelProfile(Record):
    """The Profiler's view of one kernel in the compiled model."""

    kernel: str
    # Where the figures come from: Nsight Compute counters, a roofline estimate from
    # measured time and bytes moved, or bytes alone (no timing: interpreter mode).
    source: Literal["ncu", "roofline", "bytes"]
    bottleneck: Bottleneck
    # Share of the model's GPU time in this kernel (0..1); with source "bytes", its
    # share of the bytes all Triton kernels move (an estimate, said so in reports).
    share: float
    gpu_us: float | None = None
    launches: int = 1
    bytes_moved: int = 0
    # Achieved bandwidth, and the percent of the memory limit it reaches: its reads at the measured read
    # ceiling, its writes at the rest of a copy's cost (measure/roofline.py memory_seconds).
    achieved_gbps: float | None = None
    roofline_pct: float | None = None
    # Nsight Compute counters when available (percent of peak unless named otherwise).
    dram_pct: float | None = None
    sm_pct: float | None = None
    occupancy_pct: float | None = None
    registers: int | None = None
    spills: int | None = None
    note: str = ""


class ModelProfile(Record):
    """Every Triton kernel of one problem, largest share first."""

    schema_version: int = RUN_SCHEMA_VERSION
    model: str
    device: str
    # Measured once per run on this device (GB/s); None in interpreter mode.
    copy_ceiling_gbps: float | None = None
    read_ceiling_gbps: float | None = None
    model_gpu_us: float | None = None
    triton_share: float | None = None  # of the model's GPU time, Triton kernels vs everything
    # The model's speedup with every Triton kernel at its memory limit (agents/profiler.py swap_bound);
    # None without timing. Added 2026-12-05: older profiles read None.
    swap_bound: float | None = None
    kernels: list[KernelProfile] = Field(default_factory=list)


class Proposal(BaseModel):
    """A candidate a Coder wrote: exactly these bytes go through review and the cascade."""

    model_config = ConfigDict(extra="forbid")

    source: str
    # Which strategy produced it, e.g. "harvest:max-autotune-no-cudagraphs",
    # "launch:XBLOCK=64,num_warps=4", "rewrite:eviction", "anthropic:claude-sonnet-4-6".
    origin: str
    rationale: str = ""


class Attempt(Record):
    """One candidate and what the reviewer and the cascade said about it."""

    kernel: str
    origin: str
    rationale: str = ""
    sha256: str
    # "reviewed": stopped by the Reviewer before anything ran (reason says why).
    status: Literal["accepted", "correct", "rejected", "reviewed", "duplicate"]
    stage: str | None = None  # the stage that rejected it
    reason: str | None = None
    model_timing: Timing | None = None
    kernel_timing: Timing | None = None
    seconds: float = 0.0
    file: str | None = None  # relative to the run directory
    # Per seed, the model stage's errors against float64 (candidate and compiled baseline);
    # empty when the cascade stopped before the model stage. ``seed`` is the seed's position
    # (1, 2, ...), never the seed: attempts are what agents read.
    errors: list[SeedErrors] = Field(default_factory=list)

    # Agents read attempts (the Coder's prompt, the run record): no seed reaches them, whoever
    # built the attempt (Verdict.reason_for_agents names the session's seeds by position).
    @field_validator("reason")
    @classmethod
    def _no_seeds(cls, text: str | None) -> str | None:
        return redact_seeds(text)

    @field_validator("errors")
    @classmethod
    def _seed_positions(cls, rows: list[SeedErrors]) -> list[SeedErrors]:
        return [r.model_copy(update={"seed": k}) for k, r in enumerate(rows, 1)]


class CoderContext(BaseModel):
    """Everything a Coder may use to write candidates for one kernel."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True)

    model: str
    device: str
    kernel: KernelInfo
    # The compiler's kernel in candidate format, and the best correct candidate so far.
    original: str
    best: str
    best_origin: str = "compiler"
    profile: KernelProfile | None = None
    # Earlier attempts on this kernel in this run (what the cascade said), oldest first.
    attempts: list[Attempt] = Field(default_factory=list)
    round: int = 0
    # Planner's hints for this round, e.g. ["launch", "harvest"].
    strategies: list[str] = Field(default_factory=list)
    # The model's compile settings (capture/variants.py name) the kernel comes from; None: the defaults.
    compile: str | None = None


class KernelOutcome(Record):
    """Per kernel of a tuning run: what was tried and what came of it."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)  # ``message`` grows: redacted each time

    kernel: str
    fingerprint: str
    # A training step's backward-graph kernel (its name ends in ``__bwd``, capture/training.py); else forward.
    backward: bool = False
    profile: KernelProfile | None = None
    skipped: str | None = None  # why the Planner left it alone
    attempts: int = 0
    by_stage: dict[str, int] = Field(default_factory=dict)  # rejected at static/kernel/model, correct, accepted
    best_origin: str | None = None
    best_timing: Timing | None = None  # the stored candidate's model timing vs the compiler
    best_kernel_timing: Timing | None = None
    stored_version: int | None = None
    stored_file: str | None = None  # path of the stored version, relative to the kernels dir
    # How the stored version was made, in a few words (its recipe, store/recipe.py): e.g. "rewrite
    # reverse-pass then streaming-stores, launch R0_BLOCK=4096,...". None for older runs.
    stored_recipe: str | None = None
    # Stored although not faster beyond the model gain: the compiler's pick varies between
    # compiles and this is the fastest configuration the run measured (keeper.Keeper._pin).
    pinned: bool = False
    # The stored candidate's sha256 (links ``history`` and the manifest's version record).
    best_sha256: str | None = None
    # Every attempt on this kernel in this run, oldest first (reports list their stages and reasons).
    history: list[Attempt] = Field(default_factory=list)
    message: str = ""
    gpu_seconds: float = 0.0

    @field_validator("message")
    @classmethod
    def _no_seeds(cls, text: str) -> str:
        return redact_seeds(text) or ""


class ProblemOutcome(Record):
    model: str
    problem: str
    device: str
    speed_measured: bool
    # The declared shape tuned (a problem with SHAPES: one outcome per shape, versions in <kernel>@<shape>/).
    shape: str | None = None
    kernels: list[KernelOutcome] = Field(default_factory=list)
    profile: ModelProfile | None = None
    # The whole model with every stored kernel of this run swapped in vs the compiler.
    model_timing: Timing | None = None
    error: str | None = None  # the problem could not be tuned (compile failure, verifier error)
    note: str | None = None  # why nothing was tuned when that is no error (no Triton kernels)
    seconds: float = 0.0
    # The model's compile settings: what was tried, what the kernels were tuned on (compile_choice.py).
    compile: CompileOutcome | None = None
    # A training problem (capture/training.py): its kernels are the step's forward and backward graphs'
    # (KernelOutcome.backward), each judged on the whole step, gradients included.
    training: bool = False
    # What this run did otherwise for this problem than for an inference problem, and why (each said once).
    notes: list[str] = Field(default_factory=list)


class RunRecord(Record):
    """``run.json``: the summary of one tuning run (reports are rendered from it and the trace)."""

    schema_version: int = RUN_SCHEMA_VERSION
    run_id: str
    started: str
    finished: str | None = None
    agent: str
    agent_model: str | None = None
    budget_s: float | None = None
    environment: Environment | None = None
    kernels_dir: str
    problems: list[ProblemOutcome] = Field(default_factory=list)
    # The anthropic backend's spend; zero for search.
    input_tokens: int = 0
    output_tokens: int = 0
    usd: float = 0.0
    interrupted: bool = False
    stop_reason: str | None = None
    # What the stop left untuned: ``problem`` or ``problem@shape`` (the file's stem), in the order tune would have
    # taken them (the problem the run stopped in lists its kernels as ``not reached`` instead).
    not_reached: list[str] = Field(default_factory=list)
    # Another process was using the GPU when the run started (measure/neighbours.py): what was seen.
    gpu_neighbour: str | None = None


class TraceEvent(BaseModel):
    """One line of ``trace.jsonl``: which role did what, for which kernel, and why."""

    model_config = ConfigDict(extra="forbid")

    t: float  # seconds since the run started
    role: Literal["run", "profiler", "planner", "coder", "reviewer", "benchmarker", "store"]
    event: str
    model: str | None = None
    kernel: str | None = None
    data: dict[str, Any] = Field(default_factory=dict)

    @field_validator("data")
    @classmethod
    def _no_seeds(cls, data: dict[str, Any]) -> dict[str, Any]:
        """The trace lies in the run directory beside the candidates: verdict reasons in it carry no seed."""
        return _redacted(data)


def _redacted(value: Any) -> Any:
    if isinstance(value, str):
        return redact_seeds(value)
    if isinstance(value, dict):
        return {k: _redacted(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_redacted(v) for v in value]
    return value
