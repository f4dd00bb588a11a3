"""What a tuning-run report shows, computed from the run's records (numbers only, no rendering).

:func:`build_view` reads a :class:`~pytest_kernelopt.runs.records.RunRecord`, its
trace and the kernel store the run wrote into, and returns a :class:`RunView`: per
model and per kernel the figures the templates print. Nothing here measures anything:
every number comes from the records as the tuning run wrote them.
"""

from __future__ import annotations

import difflib
import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

from ..capture.shapes import store_name
from ..runs.records import Attempt, KernelOutcome, ProblemOutcome, RunRecord, TraceEvent
from ..errors import StoreError
from ..measure.text import speedup_text
from ..records import Environment, SeedErrors, Timing, at_shape
from ..verify import stages as cascade


def stage_order() -> tuple[str, ...]:
    """The order in which a kernel's attempts are counted: turned away before the cascade, where
    the cascade stopped them (its stages, in order: verify/stages.py), then what passed."""
    return ("reviewed", "duplicate", *cascade.names(), "correct", "accepted")


@dataclass(frozen=True)
class Reason:
    """Attempts that ended the same way: the status or rejecting stage, the reason, how many."""

    where: str
    reason: str
    count: int


@dataclass(frozen=True)
class Errors:
    """The largest error against float64 over the seeds: the candidate's and the compiled baseline's."""

    candidate: float | None
    baseline: float | None
    seeds: int


@dataclass
class KernelView:
    model: str
    kernel: str
    fingerprint: str
    bottleneck: str | None
    profile_source: str | None
    roofline_pct: float | None
    # max-autotune's kernel and the stored version: percent of the same limit (planner.kernel_limits).
    roofline_pct_max_autotune: float | None
    roofline_pct_after: float | None
    share: float | None
    gpu_us: float | None
    attempts: int
    stages: list[tuple[str, int]]
    reasons: list[Reason]
    best_origin: str | None
    timing: Timing | None
    kernel_timing: Timing | None
    # Nothing kept: the fastest candidate the cascade measured (correct or accepted), for context.
    best_tried: Timing | None
    stored_version: int | None
    stored_file: str | None
    stored_recipe: str | None
    errors: Errors | None
    skipped: str | None
    message: str
    outcome: str
    diff: str | None = None
    diff_note: str | None = None

    @property
    def slug(self) -> str:
        return f"{self.model}/{self.kernel}"


@dataclass
class ModelView:
    model: str
    problem: str
    device: str
    speed_measured: bool
    timing: Timing | None
    triton_share: float | None
    model_gpu_us: float | None
    error: str | None
    seconds: float
    kernels: list[KernelView] = field(default_factory=list)
    note: str | None = None  # why nothing was tuned when that is no error
    swap_bound: float | None = None  # the model's speedup with every Triton kernel at its memory limit
    compile_note: str | None = None  # the model-level compile settings tried and chosen
    notes: list[str] = field(default_factory=list)  # what the run did otherwise (a training step), each once

    @property
    def stored(self) -> list[KernelView]:
        return [k for k in self.kernels if k.stored_version is not None]


@dataclass
class RunView:
    run_id: str
    started: str
    finished: str | None
    agent: str
    agent_model: str | None
    budget_s: float | None
    environment: Environment | None
    kernels_dir: str
    input_tokens: int
    output_tokens: int
    usd: float
    interrupted: bool
    stop_reason: str | None
    not_reached: list[str]
    gpu_neighbour: str | None
    models: list[ModelView]
    trace_events: int
    trace_roles: list[tuple[str, int]]
    last_event: TraceEvent | None
    # Set by the renderer: the chart's file name (relative to the report) or why there is none.
    chart: str | None = None
    chart_note: str | None = None

    @property
    def kernels(self) -> list[KernelView]:
        return [k for m in self.models for k in m.kernels]

    @property
    def stored(self) -> list[KernelView]:
        return [k for m in self.models for k in m.stored]

    @property
    def candidates(self) -> int:
        """Candidates checked, over every kernel (an interrupted kernel's count those checked before Ctrl-C)."""
        return sum(k.attempts for k in self.kernels)

    @property
    def speed_measured(self) -> bool:
        return any(m.speed_measured for m in self.models)


def kernels_path(record: RunRecord, kernels_dir: Path | None = None) -> Path:
    """The kernel store the run wrote into: ``kernels_dir`` if given, else the record's
    (a relative path in the record is taken from the current folder)."""
    return Path(kernels_dir) if kernels_dir is not None else Path(record.kernels_dir)


def build_view(record: RunRecord, events: list[TraceEvent], kernels_dir: Path | None = None, *,
               only: tuple[str, str] | None = None, roots: Sequence[Path] = ()) -> RunView:
    """The report's figures. ``only=(model, kernel)`` keeps that model and, of its kernels,
    that one (the focused report of a pull request). ``roots``: the repository's top folder(s)
    (here, and where the run was tuned): paths are shown relative to them (see :func:`relative_paths`)."""
    store_root = kernels_path(record, kernels_dir)
    models = []
    for problem in record.problems:
        if only is not None and problem.model != only[0]:
            continue
        view = _model_view(problem)
        for outcome in problem.kernels:
            # ``only`` names the store folder: ``<kernel>@<shape>`` for a declared shape of a problem with SHAPES.
            if only is not None and store_name(outcome.kernel, problem.shape) != only[1]:
                continue
            view.kernels.append(_kernel_view(problem, outcome, store_root))
        if only is not None and problem.shape is not None and not view.kernels:
            continue  # another shape's outcome of the model: not this kernel's report
        models.append(view)
    if record.environment is None or record.environment.device != "cuda":
        for model in models:  # nothing is timed off a GPU: a figure in such a record was not measured
            model.timing = None
            for kernel in model.kernels:
                kernel.timing = kernel.kernel_timing = kernel.best_tried = None
    roles = Counter(e.role for e in events)
    run_view = RunView(
        run_id=record.run_id, started=record.started, finished=record.finished, agent=record.agent,
        agent_model=record.agent_model, budget_s=record.budget_s, environment=record.environment,
        kernels_dir=record.kernels_dir, input_tokens=record.input_tokens, output_tokens=record.output_tokens,
        usd=record.usd, interrupted=record.interrupted, stop_reason=record.stop_reason,
        not_reached=list(record.not_reached), gpu_neighbour=record.gpu_neighbour, models=models,
        trace_events=len(events), trace_roles=sorted(roles.items(), key=lambda kv: (-kv[1], kv[0])),
        last_event=events[-1] if events else None,
    )
    return relative_paths(run_view, roots) if roots else run_view


def repository_root(path: Path) -> Path | None:
    """The top of the git working tree that holds ``path`` (the first folder up with a ``.git``), or None."""
    path = Path(path).resolve()
    for folder in [path, *path.parents]:
        if (folder / ".git").exists():
            return folder
    return None


def relative_paths(view: RunView, roots: Sequence[Path]) -> RunView:
    """``view`` with every path shown relative to the innermost of ``roots`` that holds it.

    A report goes into a pull request and an artifact: the absolute paths of the machine that
    tuned (``/home/runner/_work/...``: the kernel store, the problem files) say nothing to a
    reader and leak the runner's layout. The kernel store and problem fields become
    repository-relative (a path outside every root: its file name); in free text (errors,
    notes, diff notes) the roots' prefixes are removed.
    """
    prefixes = sorted({str(Path(r)).rstrip("/") for r in roots if str(r) not in ("", ".", "/")}, key=len,
                      reverse=True)

    def path(text: str) -> str:
        if not text or not Path(text).is_absolute():
            return text
        for prefix in prefixes:
            if text == prefix:
                return "."
            if text.startswith(prefix + "/"):
                return text[len(prefix) + 1:]
        return Path(text).name

    def free(text: str | None) -> str | None:
        for prefix in prefixes:  # "<root>/x" -> "x", "<root>" -> "."; "<root>-other/x" stays
            text = re.sub(re.escape(prefix) + r"(/|(?![\w.-]))", lambda m: "" if m[1] == "/" else ".", text) \
                if text else text
        return text

    view.kernels_dir, view.stop_reason = path(view.kernels_dir), free(view.stop_reason)
    view.gpu_neighbour = free(view.gpu_neighbour)
    for model in view.models:
        model.problem, model.error, model.note = path(model.problem), free(model.error), free(model.note)
        model.compile_note = free(model.compile_note)
        model.notes = [free(n) or "" for n in model.notes]
        for kernel in model.kernels:
            kernel.message, kernel.skipped = free(kernel.message) or "", free(kernel.skipped)
            kernel.diff_note = free(kernel.diff_note)
            kernel.reasons = [replace(r, reason=free(r.reason) or "") for r in kernel.reasons]
    return view


def _model_view(problem: ProblemOutcome) -> ModelView:
    profile = problem.profile
    return ModelView(
        model=at_shape(problem.model, problem.shape), problem=problem.problem, device=problem.device,
        speed_measured=problem.speed_measured,
        timing=problem.model_timing, triton_share=profile.triton_share if profile else None,
        swap_bound=profile.swap_bound if profile else None,
        model_gpu_us=profile.model_gpu_us if profile else None, error=problem.error, note=problem.note,
        seconds=problem.seconds, compile_note=_compile_note(problem), notes=list(problem.notes),
    )


def _compile_note(problem: ProblemOutcome) -> str | None:
    """"compile settings: max-autotune 1.301x [1.29, 1.31] accepted, ...; tuned on max-autotune (stored)"."""
    chosen = problem.compile
    if chosen is None:
        return None
    tried = [f"{t.variant} " + (f"{speedup_text(t.speedup, t.ci_low, t.ci_high)} " if t.speedup is not None
                                and t.ci_low is not None and t.ci_high is not None else "") + t.status
             + (f" (refused at shape {t.refused_at})" if t.refused_at else "")
             + (" (weighted over the declared shapes)" if t.shapes and t.speedup is not None else "")
             for t in chosen.tried]
    on = f"kernels tuned on {chosen.chosen!r}" if chosen.chosen else "kernels tuned on the default compile"
    stored = " (model.json updated)" if chosen.stored else ""
    text = "compile settings: " + (", ".join(tried) + "; " if tried else "") + on + stored
    return text + (f". {chosen.note}" if chosen.note else "")


def _kernel_view(problem: ProblemOutcome, outcome: KernelOutcome, store_root: Path) -> KernelView:
    from ..agents.planner import kernel_limits

    profile = outcome.profile
    if profile is None and problem.profile is not None:
        profile = next((p for p in problem.profile.kernels if p.kernel == outcome.kernel), None)
    best = _best_attempt(outcome)
    limits = kernel_limits(outcome, profile, problem.compile.chosen if problem.compile else None)
    view = KernelView(
        model=at_shape(problem.model, problem.shape), kernel=outcome.kernel, fingerprint=outcome.fingerprint,
        bottleneck=profile.bottleneck if profile else None, profile_source=profile.source if profile else None,
        roofline_pct=profile.roofline_pct if profile else None,
        roofline_pct_max_autotune=limits.max_autotune, roofline_pct_after=limits.stored,
        share=profile.share if profile else None,
        gpu_us=profile.gpu_us if profile else None, attempts=outcome.attempts or len(outcome.history),
        stages=_stages(outcome), reasons=_reasons(outcome.history), best_origin=outcome.best_origin,
        timing=outcome.best_timing, kernel_timing=outcome.best_kernel_timing,
        best_tried=None if outcome.best_timing else _fastest(outcome.history), stored_version=outcome.stored_version, stored_file=outcome.stored_file,
        stored_recipe=outcome.stored_recipe,
        errors=_errors(best.errors) if best is not None and best.errors else None,
        skipped=outcome.skipped, message=outcome.message, outcome=_outcome(outcome),
    )
    if outcome.stored_version is not None:
        folder = store_name(outcome.kernel, problem.shape)  # <kernel>@<shape> of a declared shape
        view.diff, view.diff_note = kernel_diff(store_root, problem.model, folder, outcome.stored_version,
                                                outcome.best_sha256)
        # A stored version's figures are the ones its manifest's evidence records (what the gate re-verifies), not
        # run.json's: a run record is data, and an edited one must not show a timing the store does not hold.
        view.timing, view.kernel_timing = stored_figures(store_root, problem.model, folder, outcome.stored_version,
                                                         outcome.best_sha256)
    return view


def stored_figures(store_root: Path, model: str, folder: str, version: int,
                   sha256: str | None) -> tuple[Timing | None, Timing | None]:
    """(model timing, kernel timing) that the store's manifest records for ``version`` when it was timed and is
    the version of these bytes (``sha256``, the run's); (None, None) otherwise."""
    from ..store import KernelStore

    try:
        manifest = KernelStore(store_root).manifest(model, folder)
        record = manifest.version(version) if manifest is not None else None
    except StoreError:
        return None, None
    if record is None or (sha256 is not None and record.sha256 != sha256) or not record.evidence.speed_measured:
        return None, None
    return record.evidence.model_timing, record.evidence.kernel_timing


def _best_attempt(outcome: KernelOutcome) -> Attempt | None:
    """The attempt that was stored (by sha256), else the last accepted one, else the last correct one."""
    if outcome.best_sha256:
        for attempt in outcome.history:
            if attempt.sha256 == outcome.best_sha256:
                return attempt
    for status in ("accepted", "correct"):
        matches = [a for a in outcome.history if a.status == status]
        if matches:
            return matches[-1]
    return None


def _fastest(history: list[Attempt]) -> Timing | None:
    measured = [a.model_timing for a in history if a.status in ("accepted", "correct") and a.model_timing]
    return max(measured, key=lambda t: t.speedup) if measured else None


def _stages(outcome: KernelOutcome) -> list[tuple[str, int]]:
    counts = dict(outcome.by_stage)
    if not counts and outcome.history:
        counts = dict(Counter(a.stage if a.status == "rejected" and a.stage else a.status for a in outcome.history))
    order = stage_order()
    known = [(s, counts[s]) for s in order if counts.get(s)]
    return known + sorted((s, n) for s, n in counts.items() if s not in order and n)


def _reasons(history: list[Attempt]) -> list[Reason]:
    """Why attempts did not pass, grouped, in the order they first happened."""
    groups: dict[tuple[str, str], int] = {}
    for attempt in history:
        if attempt.status in ("accepted",) or not attempt.reason:
            continue
        where = attempt.stage if attempt.status == "rejected" and attempt.stage else attempt.status
        key = (where, attempt.reason.strip())
        groups[key] = groups.get(key, 0) + 1
    return [Reason(where, reason, n) for (where, reason), n in groups.items()]


def _errors(errors: list[SeedErrors]) -> Errors:
    def worst(values: list[float | None]) -> float | None:
        present = [v for v in values if v is not None]
        return max(present) if present else None

    return Errors(candidate=worst([e.candidate_vs_fp64 for e in errors]),
                  baseline=worst([e.baseline_vs_fp64 for e in errors]), seeds=len(errors))


def _outcome(outcome: KernelOutcome) -> str:
    if outcome.stored_version is not None:
        return f"stored v{outcome.stored_version}{' (pinned)' if outcome.pinned else ''}"
    if outcome.skipped:
        return "skipped"
    if not outcome.attempts and not outcome.history:
        return "not tried"
    if any(a.status in ("accepted", "correct") for a in outcome.history) or outcome.by_stage.get("correct"):
        return "correct, not faster"
    return "no candidate passed"


def kernel_diff(store_root: Path, model: str, kernel: str, version: int,
                sha256: str | None = None) -> tuple[str | None, str | None]:
    """The unified diff of stored ``version`` against the compiler's original it replaces,
    read from the kernel store; or (None, why not)."""
    from ..store import KernelStore

    store = KernelStore(store_root)
    try:
        manifest = store.manifest(model, kernel)
    except StoreError as exc:
        return None, f"no diff: {exc}"
    if manifest is None:
        return None, f"no diff: nothing stored for {model}/{kernel} in {store.root}"
    try:
        record = manifest.version(version)
    except StoreError as exc:
        return None, f"no diff: {exc}"
    folder = store.kernel_dir(model, kernel)
    original_name = record.original or manifest.original
    try:
        new = (folder / record.file).read_bytes()
        old = (folder / original_name).read_bytes()
    except OSError as exc:
        return None, f"no diff: cannot read {exc.filename} ({exc.strerror})"
    digest = hashlib.sha256(new).hexdigest()
    if digest != record.sha256 or (sha256 is not None and digest != sha256):
        return None, (f"no diff: {folder / record.file} is not the file the run stored "
                      f"(sha256 {digest[:12]}, recorded {(sha256 or record.sha256)[:12]})")
    lines = difflib.unified_diff(
        old.decode("utf-8", "replace").splitlines(keepends=True), new.decode("utf-8", "replace").splitlines(keepends=True),
        fromfile=f"{model}/{kernel}/{original_name}", tofile=f"{model}/{kernel}/{record.file}",
    )
    text = "".join(line if line.endswith("\n") else line + "\n" for line in lines)
    return (text, None) if text else (None, "identical to the compiler's original")
