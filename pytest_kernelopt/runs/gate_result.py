"""The gate's machine-readable result (``pytest --kernelopt --kernelopt-json PATH``) and
``kernelopt merge``, which combines the results of several shards into one.

A :class:`GateResult` holds one :class:`ItemResult` per gate item that ran: the same
figures the junit properties carry (``kernelopt_*`` without the prefix), typed; the
terminal table and the Markdown report render the summary computed from them
(:mod:`.gate_summary`). Results of shards ``1/N .. N/N`` of one gate run merge into the result
the unsharded run would have written (items, problems, table); shards that overlap,
are missing, or ran with other settings or in another environment are refused, and so
is a result that does not hold what its shard of the run must hold: the shard plan is
recomputed from the run's problem list (``run_problems``) and K/N, and every planned
problem must have its items, each in the shard the plan assigns it, once.

No torch here: ``kernelopt merge`` runs on a machine without it.
"""

from __future__ import annotations

import platform
from datetime import datetime, timezone
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any, Final, Literal

from pydantic import Field, ValidationError

from ..errors import MergeError, UsageError
from ..records import SCHEMA_VERSION, Record, dump_json
from ..settings import AcceptedRegression
from ..shard import Shard, select, shard_of
from ..store.files import atomic_write

PREFIX = "kernelopt_"
KIND: Final = "kernelopt-gate-result"


class ItemResult(Record):
    """One gate item as it ran. ``status`` is the gate's word for a kernel item (committed,
    baseline, stale, rejected, slower, broken) and, for a model item that passed,
    ``committed`` (committed kernels swapped in) or ``baseline`` (nothing swapped in); either
    item passed only by an accepted regression: ``accepted-regression``; None when the item
    failed (its ``message`` says why) or failed before deciding (a problem that does not
    compile)."""

    nodeid: str
    problem: str  # the problem file's path from the rootdir (the node id before ``::``)
    model: str  # the model id: the problem file's stem, as in kernels/<model>/
    kernel: str | None = None  # None for the model item; ``<kernel>@<shape>`` for a problem with SHAPES
    shape: str | None = None  # the declared shape the item was checked at (None: the problem declares no SHAPES)
    item: Literal["kernel", "model"]
    outcome: Literal["passed", "failed", "skipped"]
    status: str | None = None
    message: str | None = None  # why it failed or was skipped, as the terminal shows it
    # What an accepted regression let pass ([tool.kernelopt.accepted_regressions]; status accepted-regression).
    accepted_regression: str | None = None
    duration: float = 0.0
    # The figures (junit: kernelopt_<name>); None when not measured or not reached.
    version: int | None = None
    kernels: int | None = None
    committed: int | None = None
    stale: int | None = None
    baseline: int | None = None
    orphaned: list[str] | None = None  # model item: committed kernel folders the compiler no longer generates
    speed_measured: bool | None = None
    speedup: float | None = None
    speedup_ci: list[float] | None = None
    error_vs_fp64: float | None = None
    baseline_error_vs_fp64: float | None = None
    recorded_speedup: float | None = None
    vs_base: str | None = None
    vs_base_speedup: float | None = None
    vs_base_ci: list[float] | None = None
    # Model item, timed (GPU): median milliseconds per call, with the committed kernels and the compiler's alone.
    model_ms: float | None = None
    compiled_ms: float | None = None
    # Model item with --kernelopt-base-ref: the base commit as production ran it (its committed kernels and
    # compile setting) timed side by side with the head: each one's time (ms), what ran at the base in words,
    # its model.json compile setting, and why it could not be compiled, run or timed (the base's failure).
    base_ms: float | None = None
    head_ms: float | None = None
    base_ran: str | None = None
    base_compile: str | None = None
    base_failure: str | None = None
    gpu: str | None = None
    # Model item: model.json's compile setting, checked against the default compile (its speedup over it).
    compile: str | None = None
    compile_speedup: float | None = None
    compile_speedup_ci: list[float] | None = None
    # Model item (GPU, Triton-bound models): percent of the memory limit, committed kernels in / the compiler's.
    limit_pct: float | None = None
    baseline_limit_pct: float | None = None
    wall_seconds: float | None = None
    open_seconds: float | None = None
    verify_seconds: float | None = None
    stage_seconds: dict[str, float] = Field(default_factory=dict)
    # Properties the gate records that this schema does not name yet.
    other: dict[str, Any] = Field(default_factory=dict)

    def properties(self) -> dict[str, Any]:
        """The ``kernelopt_*`` properties without the prefix, as the terminal table reads them."""
        props = self.model_dump(exclude_none=True, exclude={"nodeid", "problem", "kernel", "outcome", "message",
                                                            "duration", "stage_seconds", "other"})
        props.update({f"stage_{name}_seconds": s for name, s in self.stage_seconds.items()})
        props.update(self.other)
        return props


class ResultShard(Record):
    index: int
    count: int

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


class ResultEnvironment(Record):
    """Where the gate ran. ``gpus``: the GPUs its verdicts were measured on (none on the CPU)."""

    device: str
    torch: str
    triton: str
    cuda: str | None = None
    python: str
    gpus: list[str] = Field(default_factory=list)
    # Another process was busy on the (first visible) GPU when the gate started (measure/neighbours.py).
    gpu_neighbour: str | None = None


class ModelThresholds(Record):
    """A model's own tolerances (JSON ``settings.thresholds[<model>]``) and the key that set them."""

    max_slowdown: float
    max_regression: float
    key: str  # of [tool.kernelopt.thresholds]


class GateSettings(Record):
    """The options that decide verdicts; shards merge only when theirs are equal."""

    seeds: int
    timeout: float
    max_slowdown: float
    max_regression: float = 0.05
    strict: bool
    base_ref: str | None = None
    base_commit: str | None = None
    # --kernelopt-seed, when given: its seeds were checked besides fresh ones, never instead of them.
    pinned_seed: int | None = None
    # Models gated by their own tolerances ([tool.kernelopt.thresholds]), every model of the run's; and the
    # accepted regressions as written ([tool.kernelopt.accepted_regressions]), active or expired.
    thresholds: dict[str, ModelThresholds] = Field(default_factory=dict)
    accepted_regressions: dict[str, AcceptedRegression] = Field(default_factory=dict)


class GateResult(Record):
    """A gate run (or the merge of several shards of one)."""

    schema_version: int = SCHEMA_VERSION
    kind: Literal["kernelopt-gate-result"] = KIND
    created: datetime
    # The shards this result covers: [] for an unsharded run, [1/N] for one shard,
    # every shard merged so far for a merge.
    shards: list[ResultShard] = Field(default_factory=list)
    # The models (problem ids) this result is responsible for, whether or not their items ran.
    problems: list[str]
    # Every model of the gate run, all shards' (the shard plan is computed from it); and the
    # pytest-kernelopt that wrote the result. None: written before these were recorded.
    run_problems: list[str] | None = None
    tool_version: str | None = None
    environment: ResultEnvironment
    settings: GateSettings
    items: list[ItemResult]

    @property
    def failed(self) -> list[ItemResult]:
        return [i for i in self.items if i.outcome == "failed"]

    def rows(self) -> list[tuple[str, str, dict[str, Any]]]:
        """(node id, outcome, properties) per item: the input of the terminal table."""
        return [(i.nodeid, i.outcome, i.properties()) for i in self.items]

    def counts(self) -> str:
        return outcome_counts(self.items)


def outcome_counts(items: list[ItemResult]) -> str:
    """``2 passed, 1 failed``: how many items had each outcome."""
    found = {o: sum(i.outcome == o for i in items) for o in ("passed", "failed", "skipped")}
    return ", ".join(f"{n} {o}" for o, n in found.items() if n) or "no items"


# --- from pytest's reports -----------------------------------------------------------------

_TYPED = set(ItemResult.model_fields) - {"nodeid", "problem", "model", "kernel", "item", "outcome", "message",
                                          "duration", "stage_seconds", "other"}


def item_result(report: Any) -> ItemResult | None:
    """The result of a gate item's call report (None for anything else, e.g. the user's own tests)."""
    if getattr(report, "when", None) != "call":
        return None
    props = {k[len(PREFIX):]: v for k, v in report.user_properties if k.startswith(PREFIX)}
    return item_from_properties(report.nodeid, report.outcome, props, message=_message(report),
                                duration=round(report.duration, 3))


def item_from_properties(nodeid: str, outcome: str, props: dict[str, Any], *, message: str | None = None,
                         duration: float = 0.0) -> ItemResult | None:
    """An item's result from its ``kernelopt_*`` properties without the prefix (None: not a gate item)."""
    props = dict(props)
    kind = props.pop("item", None)
    if kind not in ("kernel", "model"):
        return None
    problem, _, name = nodeid.partition("::")
    fields: dict[str, Any] = {}
    stages: dict[str, float] = {}
    other: dict[str, Any] = {}
    for key, value in props.items():
        if key in _TYPED:
            fields[key] = list(value) if isinstance(value, tuple) else value
        elif key.startswith("stage_") and key.endswith("_seconds"):
            stages[key[len("stage_"):-len("_seconds")]] = value
        elif key != "model":
            other[key] = value
    return ItemResult(nodeid=nodeid, problem=problem, model=Path(problem).stem,
                      kernel=name if kind == "kernel" else None, item=kind, outcome=outcome,
                      message=message, duration=duration, stage_seconds=stages, other=other, **fields)


def _message(report: Any) -> str | None:
    if report.outcome == "passed":
        return None
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:  # a skip: (path, line, "Skipped: why")
        return str(longrepr[2]).removeprefix("Skipped: ")
    return report.longreprtext or None


def environment(device: str, items: list[ItemResult], gpu_neighbour: str | None = None) -> ResultEnvironment:
    """This process's software stack; the GPUs come from the verdicts (the controller never touches a GPU);
    ``gpu_neighbour``: what the gate saw of another process on the GPU when it started."""
    import torch
    import triton

    return ResultEnvironment(device=device, torch=torch.__version__, triton=triton.__version__,
                             cuda=torch.version.cuda if device == "cuda" else None,
                             python=platform.python_version(), gpus=sorted({i.gpu for i in items if i.gpu}),
                             gpu_neighbour=gpu_neighbour)


def tool_version() -> str | None:
    try:
        return version("pytest-kernelopt")
    except PackageNotFoundError:  # a checkout on sys.path, not installed
        return None


def gate_result(*, shard: Shard | None, problems: list[str], environment: ResultEnvironment,
                settings: GateSettings, items: list[ItemResult], run_problems: list[str] | None = None) -> GateResult:
    return GateResult(created=datetime.now(timezone.utc),
                      shards=[ResultShard(index=shard.index, count=shard.count)] if shard else [],
                      problems=sorted(problems), environment=environment, settings=settings,
                      items=sorted(items, key=lambda i: i.nodeid),
                      run_problems=sorted(run_problems if run_problems is not None else problems),
                      tool_version=tool_version())


def write(result: GateResult, path: Path) -> None:
    """Atomically, so a reader never sees half a file."""
    atomic_write(Path(path), dump_json(result))


def read(path: Path) -> GateResult:
    """A result file; anything else is a UsageError naming it."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{path}: cannot read ({why})") from None
    try:
        result = GateResult.model_validate_json(text)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "<root>"
        raise UsageError(f"{path}: not a gate result written by --kernelopt-json ({where}: {first['msg']})") from None
    if result.schema_version != SCHEMA_VERSION:
        raise UsageError(f"{path}: schema_version {result.schema_version} is not supported "
                         f"(this tool reads {SCHEMA_VERSION})")
    return result


# --- merge ---------------------------------------------------------------------------------

def _where(name: str, result: GateResult) -> str:
    shards = ", ".join(str(s) for s in result.shards)
    return f"{name} (shard {shards})" if shards else f"{name} (unsharded)"


def merge(results: list[tuple[str, GateResult]]) -> GateResult:
    """One result from the results of the shards of one gate run, given as (file name, result).

    Refused (MergeError, naming the files): other settings or another environment,
    shard counts that differ, a shard given twice, a model or item in two results,
    a shard missing; and (see :func:`_check_plan`) a result whose problems or items are
    not those the shard plan gives its shard.
    """
    if not results:
        raise MergeError("no results to merge")
    first_name, first = results[0]
    for name, result in results[1:]:
        if result.settings != first.settings:
            diff = _difference(first.settings, result.settings)
            raise MergeError(f"{first_name} and {name} ran with different settings ({diff}): not one gate run")
        _same_environment(first_name, first.environment, name, result.environment)
    counts = {s.count for _, r in results for s in r.shards}
    unsharded = [name for name, r in results if not r.shards]
    if len(counts) > 1:
        raise MergeError("results of different shard counts (" + ", ".join(_where(n, r) for n, r in results)
                         + "): merge the shards of one run")
    if counts and unsharded:
        raise MergeError(f"{unsharded[0]} is an unsharded run; it cannot be merged with shards")
    owner: dict[str, str] = {}
    for name, result in results:
        for shard in result.shards:
            if str(shard) in owner:
                raise MergeError(f"shard {shard} is given twice: {owner[str(shard)]} and {name}")
            owner[str(shard)] = name
    if counts:
        (count,) = counts
        missing = [f"{k}/{count}" for k in range(1, count + 1) if f"{k}/{count}" not in owner]
        if missing:
            raise MergeError(f"shard{'s' if len(missing) > 1 else ''} {', '.join(missing)} missing: give the "
                             f"result of every shard")
    models: dict[str, str] = {}
    nodeids: dict[str, str] = {}
    for name, result in results:
        for model in result.problems:
            if model in models:
                raise MergeError(f"model {model} is in both {_where(models[model], dict(results)[models[model]])} "
                                 f"and {_where(name, result)}")
            models[model] = name
        for item in result.items:
            if nodeids.get(item.nodeid) == name:
                raise MergeError(f"{_where(name, result)}: item {item.nodeid} appears twice")
            if item.nodeid in nodeids:
                raise MergeError(f"item {item.nodeid} is in both {nodeids[item.nodeid]} and {name}")
            nodeids[item.nodeid] = name
    _check_plan(results)
    env = first.environment.model_copy(
        update={"gpus": sorted({g for _, r in results for g in r.environment.gpus})})
    return GateResult(created=datetime.now(timezone.utc),
                      shards=sorted((s for _, r in results for s in r.shards), key=lambda s: s.index),
                      problems=sorted(models), environment=env, settings=first.settings,
                      items=sorted((i for _, r in results for i in r.items), key=lambda i: i.nodeid),
                      run_problems=first.run_problems, tool_version=first.tool_version)


def _check_plan(results: list[tuple[str, GateResult]]) -> None:
    """Each result holds exactly what the shard plan gives its shard, and all of it.

    The plan is recomputed here from the run's problem list and K/N (:func:`shard.select`),
    never taken from a result: every result must record the same problem list and the same
    tool version; a result's ``problems`` must be its shard's; each item must be well formed
    (its node id, problem file and model agree), belong to one of those problems, and appear
    once; each problem must have its model item and as many kernel items as that item counted.
    """
    first_name, first = results[0]
    for name, result in results:
        where = _where(name, result)
        if result.run_problems is None:
            raise MergeError(f"{where}: records no problem list of the run (written by an older pytest-kernelopt), "
                             f"so its shard cannot be checked: run the gate again")
        if result.tool_version != first.tool_version:
            raise MergeError(f"{_where(first_name, first)} and {where} were written by different versions of "
                             f"pytest-kernelopt ({first.tool_version} vs {result.tool_version}): not one gate run")
        if result.run_problems != first.run_problems:
            assert first.run_problems is not None  # checked on the loop's first pass (first is results[0])
            diff = sorted(set(result.run_problems) ^ set(first.run_problems))
            raise MergeError(f"{_where(first_name, first)} and {where} ran over different problem lists "
                             f"(differing: {', '.join(diff) or 'order'}): not one gate run")
    for name, result in results:
        where = _where(name, result)
        assert result.run_problems is not None
        planned = (select(result.run_problems, result.shards[0].index, result.shards[0].count)
                   if result.shards else list(result.run_problems))
        if sorted(result.problems) != sorted(planned):
            missing = sorted(set(planned) - set(result.problems))
            extra = sorted(set(result.problems) - set(planned))
            raise MergeError(f"{where}: its problems are not the ones the shard plan gives it"
                             + (f"; missing {', '.join(missing)}" if missing else "")
                             + (f"; not of this shard: {', '.join(extra)}" if extra else ""))
        _check_items(where, result, planned)


def _check_items(where: str, result: GateResult, planned: list[str]) -> None:
    seen: set[str] = set()
    kernel_items: dict[tuple[str, str | None], int] = {}
    model_items: dict[tuple[str, str | None], ItemResult] = {}
    for item in result.items:
        expected = f"{item.problem}::{item.kernel if item.item == 'kernel' else 'model'}"
        if item.nodeid != expected or Path(item.problem).stem != item.model or \
                (item.item == "kernel") != (item.kernel is not None):
            raise MergeError(f"{where}: item {item.nodeid!r} is malformed (problem {item.problem!r}, model "
                             f"{item.model!r}, kernel {item.kernel!r}, {item.item} item)")
        if item.nodeid in seen:
            raise MergeError(f"{where}: item {item.nodeid} appears twice")
        seen.add(item.nodeid)
        if item.model not in planned:
            count = result.shards[0].count if result.shards else 1
            owner = f"shard {shard_of(item.model, count)}/{count}" if item.model in (result.run_problems or []) \
                else "no shard: it is not a problem of the run"
            raise MergeError(f"{where}: item {item.nodeid} is in the wrong shard (model {item.model} belongs to "
                             f"{owner})")
        _consistent(where, item, result.environment)
        if item.item == "model":
            model_items[(item.model, item.shape)] = item
        else:
            kernel_items[(item.model, item.shape)] = kernel_items.get((item.model, item.shape), 0) + 1
    for model in planned:
        if not any(m == model for m, _ in model_items):
            raise MergeError(f"{where}: model {model} is planned in this shard but its items are missing "
                             f"(no {model} model item; a deselected or partial run cannot be merged)")
    for (model, shape), model_item in model_items.items():  # per declared shape for a problem with SHAPES
        counted, found = model_item.kernels, kernel_items.get((model, shape), 0)
        if counted is not None and counted != found:
            at = f" at shape {shape}" if shape else ""
            raise MergeError(f"{where}: model {model}{at} has {found} kernel item(s), but its model item counted "
                             f"{counted} kernels: items are missing or added")


# A gate item's status when its check did not pass: never the status of an item that passed.
FAILING_STATUSES = frozenset({"broken", "rejected", "slower", "stale", "unverified"})


def _consistent(where: str, item: ItemResult, environment: ResultEnvironment) -> None:
    """What one item says must be possible as the gate writes it (a shard result is a file from a CI job, and
    merge must not print a hand edit as a verdict): an outcome its status agrees with, a model item that counted
    its kernels unless it failed, and speed figures only where the run measured speed (on a GPU)."""
    if item.outcome == "passed" and item.status in FAILING_STATUSES:
        raise MergeError(f"{where}: item {item.nodeid} passed with status {item.status!r}, which only a failing or "
                         f"skipped item has: the result was edited")
    if item.item == "model" and item.kernels is None and item.outcome != "failed":
        raise MergeError(f"{where}: model item {item.nodeid} {item.outcome} without counting its kernels, which only "
                         f"a model item that failed before its checks does: the result was edited")
    timed = item.speed_measured or item.speedup is not None or item.model_ms is not None
    if timed and environment.device != "cuda":
        raise MergeError(f"{where}: item {item.nodeid} carries speed figures, but the run was on "
                         f"{environment.device}, where nothing is timed: the result was edited")


def _difference(a: Record, b: Record) -> str:
    left, right = a.model_dump(), b.model_dump()
    return "; ".join(f"{k} {left[k]!r} vs {right[k]!r}" for k in left if left[k] != right[k])


def _same_environment(name_a: str, a: ResultEnvironment, name_b: str, b: ResultEnvironment) -> None:
    keys = ("device", "torch", "triton", "cuda")
    diff = [f"{k} {getattr(a, k)!r} vs {getattr(b, k)!r}" for k in keys if getattr(a, k) != getattr(b, k)]
    if a.gpus and b.gpus and a.gpus != b.gpus:
        diff.append(f"gpus {', '.join(a.gpus)} vs {', '.join(b.gpus)}")
    if diff:
        raise MergeError(f"{name_a} and {name_b} ran in different environments ({'; '.join(diff)}): their timings "
                         f"cannot be compared")
