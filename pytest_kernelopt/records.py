"""Typed records that cross a stage boundary or touch disk, serialized in one place.

Every record carries ``schema_version``; readers refuse a version they do not know
instead of guessing. JSON is written with :func:`dump_json` and read with
:func:`load_json` so that every file the tool writes looks the same.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal, TypeVar

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

SCHEMA_VERSION = 1


class Record(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- capture ---------------------------------------------------------------------------

def at_shape(name: str, shape: str | None) -> str:
    """``<name>@<shape>``, or ``name`` for a problem without SHAPES: a kernel's store folder
    (``capture.shapes.store_name``) and a problem's label in progress, reports, bench and the gate."""
    return f"{name}@{shape}" if shape else name


class ArgInfo(Record):
    """One argument of a Triton kernel as the compiled model passes it."""

    name: str
    kind: Literal["tensor", "int", "float", "bool", "none", "other"] = "other"
    read: bool = False
    written: bool = False
    # Written in place: the elements the kernel does not store keep the values they had (Inductor's
    # ``mutated_arg_names``: a scatter into a buffer an earlier kernel zeroed writes some of its elements).
    # Its contents before the launch are then part of the result, as a read argument's are.
    kept: bool = False
    shape: list[int] | None = None
    stride: list[int] | None = None
    dtype: str | None = None
    # For integer tensors: the observed value range (index kernels).
    min: int | None = None
    max: int | None = None
    value: int | float | bool | None = None

    @property
    def starts_from_contents(self) -> bool:
        """Its contents before a launch are part of the result: read, or written in place (``kept``)."""
        return self.read or self.kept


class LaunchConfig(Record):
    """The launch configuration Inductor chose for a kernel (after autotuning)."""

    kwargs: dict[str, int] = Field(default_factory=dict)
    num_warps: int | None = None
    num_stages: int | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    grid: list[str] = Field(default_factory=lambda: ["1", "1", "1"])
    grid_prefix: list[str] = Field(default_factory=list)
    # How many configurations Inductor compiled for the kernel: more than one means it
    # benchmarked them on the first run and kept the one above.
    compiled_configs: int | None = None
    # The other configurations Inductor compiled (block sizes, num_warps, num_stages), each a
    # drop-in the search tries: Inductor's own race between them ran once, briefly.
    alternatives: list[dict[str, int]] = Field(default_factory=list)


class KernelInfo(Record):
    """A Triton kernel of a compiled graph."""

    name: str
    kind: Literal["triton"] = "triton"
    # The @triton.jit function's name in Inductor's source (``name`` may carry a
    # ``__g<graph>`` suffix when two graphs use the same kernel name).
    function: str
    graph: int
    fingerprint: str
    args: list[ArgInfo]
    launch: LaunchConfig
    source: str = Field(repr=False)
    # A kernel of a training step's backward graph (its name ends in ``__bwd``, capture/training.py).
    backward: bool = False
    # Compiled in a training step (a forward graph saved for its backward, or that backward), not for inference:
    # a training forward's kernel is named like the inference one but may differ (it saves what the backward
    # reads). None: not recorded (a record written before 2026-12-05).
    training: bool | None = None

    @property
    def written_args(self) -> list[str]:
        return [a.name for a in self.args if a.written]


class ExternCallInfo(Record):
    """A call into a vendor library or an aten fallback (left alone by this tool)."""

    name: str
    kind: Literal["extern"] = "extern"
    graph: int
    target: str
    args: list[str] = Field(default_factory=list)


class CaptureSummary(Record):
    """The kernels and extern calls of a compiled model (``kernels --json`` prints the two lists, concatenated)."""

    schema_version: int = SCHEMA_VERSION
    model: str
    device: str
    graphs: int
    kernels: list[KernelInfo]
    externs: list[ExternCallInfo]


# --- serialization ---------------------------------------------------------------------

R = TypeVar("R", bound=BaseModel)


def dump_json(record: BaseModel, **kwargs: Any) -> str:
    return record.model_dump_json(indent=2, **kwargs) + "\n"


def record_kind(cls: type[BaseModel]) -> str:
    """How a message names a record type: ``ModelRecord`` -> ``model record`` (no class names for users)."""
    return re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", cls.__name__).lower()


def load_json(cls: type[R], path: Path) -> R:
    """Read a record from ``path``; a broken file raises StoreError naming it."""
    from .errors import StoreError

    try:
        text = Path(path).read_text()
    except OSError as exc:
        raise StoreError(f"{path}: cannot read ({exc.strerror})") from exc
    return parse_json(cls, text, path)


def parse_json(cls: type[R], text: str, path: Path) -> R:
    """:func:`load_json` of text already read from ``path``."""
    from .errors import StoreError

    try:
        record = cls.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise StoreError(f"{path}: invalid {record_kind(cls)} ({where}: {first['msg']})") from exc
    version = getattr(record, "schema_version", SCHEMA_VERSION)
    # A record whose schema grew (the manifest) names every version it still reads.
    readable = getattr(cls, "readable_schema_versions", (SCHEMA_VERSION,))
    if version not in readable:
        raise StoreError(f"{path}: schema_version {version} is not supported "
                         f"(this tool reads {', '.join(map(str, readable))})")
    return record


# --- cascade ---------------------------------------------------------------------------

# A number that names a draw: "seed 123", "input seed 123", "transform seed 9", "seeds: 1, 2".
_SEED_NUMBER = re.compile(r"\b((?:input|transform|check|weight|pinned)?\s?seeds?)(\s*[:=(]?\s*)(\d+)", re.IGNORECASE)
_SEED_LIST = re.compile(r"\b(seeds?\s*[:=]?\s*\[)([\d,\s]*)(\])", re.IGNORECASE)
HIDDEN = "<hidden>"


def redact_seeds(text: str | None, seeds: list[int] | tuple[int, ...] = (), hidden: tuple[int, ...] = ()) -> str | None:
    """``text`` with every number that identifies a draw replaced, for whoever writes candidates.

    A session seed (``seeds``) becomes its position ("seed #2"), so a reason still says which of
    the session's inputs failed; any other number after a seed word (a draw's input or transform
    seed) becomes "<hidden>", and so does any number of ``seeds`` or ``hidden`` (of five digits or more)
    wherever it appears.
    Seeds are fresh per session and per check, so a disclosed one predicts nothing; this keeps
    them from agents anyway (humans read them in the verdict file, and ``--seed`` reproduces).
    """
    if not text:
        return text
    order = {s: k for k, s in enumerate(seeds, 1)}

    def one(m: re.Match[str]) -> str:
        value = int(m.group(3))
        shown = f"#{order[value]}" if value in order and m.group(2).strip() in ("", ":", "=") else HIDDEN
        return f"{m.group(1)}{m.group(2)}{shown}"

    text = _SEED_LIST.sub(lambda m: f"{m.group(1)}{HIDDEN}{m.group(3)}", text)
    text = _SEED_NUMBER.sub(one, text)
    # Free-standing: only numbers long enough not to be an index or a count as well.
    known = sorted({str(n) for n in (*seeds, *hidden) if n is not None and n >= 10_000}, key=len, reverse=True)
    if known:
        text = re.sub(r"(?<!\d)(?:" + "|".join(known) + r")(?!\d)", HIDDEN, text)
    return text

class StageResult(Record):
    """One row of a verdict: a stage of the cascade and how it ended."""

    # A name from the one ordered list of stages (verify/stages.py), which the parent
    # checks the worker's messages against.
    name: str
    # None: not measured (speed in interpreter mode) or not reached.
    passed: bool | None
    detail: str = ""
    seconds: float = 0.0
    # Peak GPU memory allocated during the stage (GiB); None on the CPU.
    peak_gib: float | None = None

    @field_validator("detail")
    @classmethod
    def _printable(cls, text: str) -> str:
        # Details quote the candidate (its error messages, the worker's stderr): escape
        # control and format characters, so that no candidate can erase a terminal line
        # and print a verdict of its own, or reorder the text with bidi controls.
        if text.isprintable():
            return text
        return "".join(ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text)


class SeedErrors(Record):
    """Errors of one seed. Kernel stage: against the compiler kernel. Model stage: max abs
    error against eager (``vs_eager``) and against the float64 reference, for the
    candidate and for the compiled baseline; ``scale`` is max |reference|."""

    seed: int
    vs_eager: float | None = None
    candidate_vs_fp64: float | None = None
    baseline_vs_fp64: float | None = None
    kernel_max_abs: float | None = None
    kernel_max_rel: float | None = None
    scale: float | None = None
    # The worst element's error as a fraction of its allowance under the one numerics rule
    # (verify/numerics.py): at most 1 when the stage passed. Kernel stage, model stage.
    kernel_ratio: float | None = None
    model_ratio: float | None = None


def worst_error(errors: list[SeedErrors], field: str = "candidate_vs_fp64") -> float | None:
    """The largest ``field`` over the seeds' rows; None when there is no row or one was not measured
    (a failure on NaN/Inf or a shape): an unknown error is never shown as 0."""
    values = [getattr(e, field) for e in errors]
    return None if not values or None in values else max(values)


class Timing(Record):
    """Paired timings, baseline vs candidate (milliseconds, medians) and the speedup with its 95% CI."""

    baseline_ms: float
    candidate_ms: float
    speedup: float
    ci_low: float
    ci_high: float
    pairs: int
    # "cuda-graph": replays of the captured model (GPU time, host launch cost excluded);
    # "eager": plain calls (when the model cannot be captured).
    method: Literal["cuda-graph", "eager"] = "eager"


class BaseKernel(Record):
    """One Triton kernel of the base revision's model and what ran for it there (gate ``--kernelopt-base-ref``)."""

    name: str
    runs: Literal["committed", "compiler"]
    version: int | None = None
    # Why the compiler's kernel ran although a version is committed at the base ("stale", "not verified",
    # "not verified at these launches", ...); None: nothing committed for it there.
    why: str | None = None


class BaseRun(Record):
    """The base revision as production ran it in the verifier: its problem file compiled through the
    production backend (``store/production.py``) over its own committed kernels and compile setting."""

    kernels: list[BaseKernel] = Field(default_factory=list)
    # model.json's compile setting at the base (None: Inductor's defaults), and of the graphs compiled
    # how many were compiled under it (production applies it only where it was verified).
    compile: str | None = None
    graphs: int = 0
    graphs_under_compile: int = 0
    # Why the base could not be compiled, run or timed: the base's own failure, never the candidate's.
    failure: str | None = None

    def describe(self) -> str:
        """``2 of 3 kernels committed (triton_a v3, triton_b v1), compile max-autotune`` or ``compiler kernels
        only``: what ran at the base, in words."""
        if self.failure is not None:
            return f"failed: {self.failure}"
        ours = [k for k in self.kernels if k.runs == "committed"]
        if ours:
            text = f"{len(ours)} of {len(self.kernels)} kernel{'s' if len(self.kernels) != 1 else ''} committed (" \
                   + ", ".join(f"{k.name} v{k.version}" for k in ours) + ")"
        else:
            text = "compiler kernels only"
        unused = [k for k in self.kernels if k.runs != "committed" and k.why not in (None, "nothing committed")]
        if unused:
            text += "; the compiler's for " + ", ".join(f"{k.name} ({k.why})" for k in unused)
        if self.compile is not None:
            text += f", compile {self.compile}"
            if self.graphs_under_compile != self.graphs:
                text += (f" ({self.graphs_under_compile} of {self.graphs} graph{'s' if self.graphs != 1 else ''}; "
                         "the others were compiled with the defaults)")
        return text


class Environment(Record):
    device: str
    gpu: str | None = None
    torch: str
    triton: str
    cuda: str | None = None
    driver: str | None = None
    python: str


class Verdict(Record):
    """What the cascade decided for one candidate."""

    schema_version: int = SCHEMA_VERSION
    model: str
    kernel: str
    # Fingerprint of the compiler kernel the candidate replaces.
    fingerprint: str | None = None
    candidate: str
    candidate_sha256: str
    status: Literal["accepted", "correct", "rejected"]
    reason: str | None = None
    stages: list[StageResult] = Field(default_factory=list)
    seeds: list[int] = Field(default_factory=list)
    # The root the session's fresh seeds derive from: ``kernelopt verify --seed`` with this
    # number reproduces their inputs and weights. None in older verdicts.
    seed: int | None = None
    # A seed a human pinned (the gate's --kernelopt-seed, accept/tune --seed): its seeds come
    # first in ``seeds``, added to the fresh ones. None: nothing pinned.
    pinned_seed: int | None = None
    # The root of this check's own draws (fills, canaries, paddings, run counts, the fresh and
    # stress draws), from the OS per check: ``VerifyOptions(check_seed=...)`` replays them.
    check_seed: int | None = None
    errors: list[SeedErrors] = Field(default_factory=list)
    model_timing: Timing | None = None
    kernel_timing: Timing | None = None
    # Gate with --kernelopt-base-ref: the problem at that revision as production ran it (baseline) vs now
    # (candidate), and what ran at the base (its committed kernels, its compile setting, or its failure).
    base_timing: Timing | None = None
    base_run: BaseRun | None = None
    speed_measured: bool = False
    environment: Environment | None = None
    wall_seconds: float = 0.0
    # The judge of the model stage: "float64" (a float64 copy of the eager model) or
    # "eager" when that could not be built or run; ``reference_note`` says why.
    reference: Literal["float64", "eager"] | None = None
    reference_note: str | None = None
    # GPU memory: the eager model's own peak, and the verifier's peak so far (GiB).
    eager_peak_gib: float | None = None
    peak_gib: float | None = None
    # What contained the worker that ran the candidate, e.g. "namespaces: user,pid,net,mount,ipc;
    # no capabilities; host memory not capped" or "process group only (namespaces unavailable: ...)".
    isolation: str | None = None
    # The compiler kernel as the worker captured it, and the exact candidate text that
    # was verified: `accept` stores these bytes, never a re-read file. Set by the session
    # for a one-kernel check; never serialized (the verdict's JSON stays as documented)
    # and never read back from JSON.
    kernel_info: KernelInfo | None = Field(default=None, exclude=True, repr=False)
    # What was verified at (capture.launch_signature of each distinct one): the launches of the kernel the
    # kernel stage compared the candidate at, or for a compile check the inputs of each graph compiled under
    # the setting. accept and tune record them; production runs the version or setting only at these.
    launches: list[list[str]] | None = None
    # A compile check: the launch point each kernel of the setting's compile ran (kernel fingerprint -> point,
    # capture/launch_configs.py), what its timing measured; tune stores it with the setting. Not serialized.
    launch_configs: dict[str, dict[str, int]] | None = Field(default=None, exclude=True, repr=False)
    verified_source: str | None = Field(default=None, exclude=True, repr=False)

    def reason_for_agents(self) -> str | None:
        """The reason as agents may read it: no seed, no number that identifies a draw (:func:`redact_seeds`).

        Every path from a verdict to whoever writes candidates (a tuning agent's prompt, the run
        record and trace it could read) takes this; the verdict file keeps the seeds for humans.
        """
        hidden = tuple(n for n in (self.seed, self.pinned_seed, self.check_seed) if n is not None)
        return redact_seeds(self.reason, self.seeds, hidden)
