"""Typed messages between the verifier (parent) and its isolated worker process.

One JSON object per line over a pair of pipes that only the two processes hold
(never a file in the worker's folder). The parent sends :class:`OpenRequest` once,
then one :class:`CheckRequest` per candidate; the worker answers with
:class:`Opened`, then for each check a series of :class:`StageStarted` /
:class:`StageDone` and a final :class:`CheckDone`, or a :class:`Failure` when the
verifier itself cannot go on (out of memory, a problem that fails to compile). The
verdict is assembled by the parent from these figures; the worker never sends one.

The static stage runs in a process of its own, started fresh for each check: it gets
one :class:`StaticRequest` per candidate file and answers :class:`StaticDone`. Every
reply line has a size cap (:mod:`.worker`); past it the sender is killed.
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, field_validator

from ..records import BaseRun, Environment, ExternCallInfo, KernelInfo, SeedErrors, StageResult, Timing


class Message(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- parent -> worker ------------------------------------------------------------------

class CandidateSource(Message):
    """A candidate's bytes as the parent read and hashed them: what runs is exactly this."""

    label: str
    source: str
    sha256: str


class OpenRequest(Message):
    type: Literal["open"] = "open"
    problem: str
    device: str
    seeds: list[int]
    # The model's compile settings (a name from capture/variants.py; None: Inductor's defaults).
    variant: str | None = None
    # That setting's launch configurations (model.json's compile.launch_configs: kernel fingerprint -> launch
    # point): each kernel listed launches its point, raced no more (capture/launch_configs.py).
    launch_configs: dict[str, dict[str, int]] | None = None
    # The declared shape (the problem's SHAPES) every draw of the session is made at; None: its first, if any.
    shape: str | None = None


class CheckRequest(Message):
    type: Literal["check"] = "check"
    # The kernel whose kernel-level stage runs; None: model-level check of all replacements.
    kernel: str | None
    replacements: dict[str, CandidateSource]
    allow_reduced_precision: bool = False
    error_factor: float = 4.0
    measure_speed: bool = True
    model_seconds: float = 1.0
    kernel_seconds: float = 0.5
    # The gate's --kernelopt-base-ref: the problem file at that revision, compiled as production at that
    # revision would run it (verify/base.py) and timed against this one.
    base_problem: str | None = None
    # The kernel store folder (a kernels_dir) holding that revision's ``<model>/`` folder: its committed
    # versions and compile setting. None: nothing was committed for the model there.
    base_kernels: str | None = None
    # A check of the model compiled under this variant against the default compile (no
    # replacements): judged against float64 with the default compile's error as the allowance,
    # and timed default vs variant. The session was opened under the defaults or under it.
    compile_variant: str | None = None
    # Of such a check in a session under the defaults: the launch configurations the variant's compile launches
    # (kernel fingerprint -> point, capture/launch_configs.py; tune's second compile of a setting runs what its
    # first timed). None: each kernel races as Inductor does.
    compile_launch_configs: dict[str, dict[str, int]] | None = None
    # The root of this check's own random choices (fills, canaries, paddings, run counts, draws):
    # from the OS per check unless a human asked for reproduction (VerifyOptions.check_entropy).
    entropy: int = Field(0, ge=0, lt=1 << 63)


class ProfileRequest(Message):
    """Measure where the compiled model's GPU time goes (no candidate runs)."""

    type: Literal["profile"] = "profile"
    runs: int = 20


class CloseRequest(Message):
    type: Literal["close"] = "close"


class StaticRequest(Message):
    """Stage 1 for one candidate file (to the static checker's process, never to the worker)."""

    type: Literal["static"] = "static"
    source: str
    entry_args: list[str] | None = None


Request = Annotated[OpenRequest | CheckRequest | ProfileRequest | CloseRequest, Field(discriminator="type")]


# --- worker -> parent ------------------------------------------------------------------

class Opened(Message):
    type: Literal["opened"] = "opened"
    device: str
    graphs: int
    kernels: list[KernelInfo]
    externs: list[ExternCallInfo]
    environment: Environment
    seconds: float
    # "float64": a float64 copy of the eager model is the judge; "eager": it could not
    # be built or run (``reference_note`` says why) and the fp32 eager model is.
    reference: Literal["float64", "eager"]
    reference_note: str | None = None
    eager_peak_bytes: int | None = None
    peak_bytes: int | None = None
    # The bytes one model call must move at the least (measure/roofline.py): the memory limit's floor.
    min_bytes: int | None = None
    min_written_bytes: int | None = None  # the part of min_bytes that is the outputs, written
    # FLOPs of its matrix products and convolutions per call, by dtype: the compute limit's floor.
    min_flops: dict[str, int] | None = None
    # Why Dynamo broke the model's graph, one line each (capture's CompiledModel.graph_breaks).
    graph_breaks: list[str] = Field(default_factory=list)
    # The stored setting's launch configurations: kernels launched at their listed point, and the listed ones
    # that could not be (why; they raced as Inductor does).
    launches_fixed: int = 0
    launches_refused: list[str] = Field(default_factory=list)


def _known_stage(name: str) -> str:
    # What the worker says is checked here, in the parent: a stage of the one list (verify/stages.py),
    # imported when a stage's message first arrives (it imports the stages' modules; reading a
    # candidate, which builds a CandidateSource, need not).
    from . import stages

    if name not in stages.names():
        raise ValueError(f"not a stage of the cascade: {name[:100]!r} (stages: {', '.join(stages.names())})")
    return name


class StageStarted(Message):
    type: Literal["start"] = "start"
    stage: str

    @field_validator("stage")
    @classmethod
    def _stage_known(cls, name: str) -> str:
        return _known_stage(name)


class StageDone(Message):
    type: Literal["stage"] = "stage"
    result: StageResult

    @field_validator("result")
    @classmethod
    def _stage_known(cls, result: StageResult) -> StageResult:
        _known_stage(result.name)
        return result

    errors: list[SeedErrors] = Field(default_factory=list)
    model_timing: Timing | None = None
    kernel_timing: Timing | None = None
    base_timing: Timing | None = None
    peak_bytes: int | None = None
    # Kernel stage: the distinct launches the candidate was compared at; a compile check's model stage: the
    # inputs of each graph compiled under the setting (capture.launch_signature).
    launches: list[list[str]] | None = None
    # A compile check's model stage: the launch point each kernel of the setting's compile ran after its
    # first-call race (kernel fingerprint -> point; capture/launch_configs.py), what its timing measured.
    launch_configs: dict[str, dict[str, int]] | None = None


class CheckDone(Message):
    type: Literal["done"] = "done"
    peak_bytes: int | None = None
    # With a base problem: what ran for the base revision, or why it could not run.
    base: BaseRun | None = None


class KernelTime(Message):
    """One kernel's device time per model run, and its launched configuration's resources."""

    gpu_us: float = 0.0
    launches: int = 0
    registers: int | None = None
    spills: int | None = None


class Profiled(Message):
    type: Literal["profiled"] = "profiled"
    # False in interpreter mode: only registers/spills (if any) are known.
    measured: bool
    model_gpu_us: float | None = None  # every device activity of one model run
    kernels: dict[str, KernelTime] = Field(default_factory=dict)
    copy_gbps: float | None = None
    read_gbps: float | None = None  # a read-only kernel's bandwidth (measure/roofline.py read_ceiling_gbps)
    # Matrix-product rate per dtype with counted FLOPs (TFLOP/s; measured once per machine, cached).
    flop_tflops: dict[str, float] | None = None


class Failure(Message):
    """The verifier (not the candidate) cannot go on."""

    type: Literal["error"] = "error"
    kind: Literal["usage", "problem", "memory", "internal"]
    message: str


class StaticDone(Message):
    """The static checker's answer: the first problems found (each cut short) and how many more."""

    type: Literal["static_done"] = "static_done"
    problems: list[str]
    more: int = Field(default=0, ge=0)


Reply = Annotated[Opened | StageStarted | StageDone | CheckDone | Profiled | Failure, Field(discriminator="type")]

REQUEST = TypeAdapter(Request)
REPLY = TypeAdapter(Reply)
STATIC_REPLY = TypeAdapter(StaticDone)


def encode(message: Message) -> bytes:
    return message.model_dump_json().encode() + b"\n"
