"""``kernelopt refresh``: carry tuned kernels across a compiler change.

A torch or triton upgrade (or a changed model) makes Inductor generate other source:
every fingerprint changes and every committed kernel is *stale* (the compiler's kernel
runs, the gate fails it). For each problem, refresh:

1. opens a verification session on the problem (the installed compiler compiles it);
2. for each kernel folder whose active version is stale, finds its successor: the
   compiler kernel of the same name, else the best structural match (same fused
   operations and arguments, else the most similar source), said in the output;
3. replays the active version's recipe (:mod:`.recipe`; derived from the files for a
   manifest written before recipes) on the successor's dump, only when the recipe is bound
   to the version: replayed on the compiler kernel recorded for it, it gives exactly the
   version's bytes (checked against their sha256); a recipe that does not is refused, the
   kernel reported "not refreshable" and retired, and nothing is replayed or stored;
4. sends the result through the cascade against the new compiler kernel, and stores it
   as a new version (provenance: refreshed from vN, compilers before and after) when it
   is correct and not slower; otherwise *retires* the kernel: no active version, so the
   compiler's kernel runs (the version files stay) and the manifest says why.

A hand or LLM edit is re-applied as a patch where it applies cleanly; where it does not,
the search backend cannot port it: the kernel is reported "not refreshable" and retired.
The run is written like a tuning run (``run.json`` with the stored versions, ``trace.jsonl``)
plus ``refresh.json``, so ``kernelopt publish RUN_DIR`` opens the pull requests.

A problem that declares ``SHAPES`` (capture/shapes.py) is refreshed shape by shape: the
``<kernel>@<shape>`` folders of each declared shape against a session opened at that shape
(its compiler kernels are those of that shape's inputs), each new version stored in the same
shape's folder. A folder of a shape the file does not declare (or a plain folder of a file with
``SHAPES``, or the reverse) is reported, not refreshed: no compile says what replaces it.
"""

from __future__ import annotations

import difflib
import time
from pathlib import Path
from typing import Any, Callable, Literal

from pydantic import Field

from ..errors import KerneloptError
from ..measure.text import timing_text
from ..records import Environment, KernelInfo, Record

REFRESH_SCHEMA_VERSION = 1
REFRESH_FILE = "refresh.json"
# A successor found by source similarity alone must be at least this similar (difflib ratio).
MIN_SIMILARITY = 0.8

Status = Literal["refreshed", "retired", "not refreshable"]


class KernelRefresh(Record):
    """What refresh did for one stale kernel."""

    kernel: str  # the kernel folder that was stale
    status: Status
    reason: str
    version: int  # the active version that was stale
    successor: str | None = None  # the compiler kernel it was replayed on
    match: str | None = None  # how the successor was found
    recipe: str | None = None  # the recipe replayed, in words
    recipe_derived: bool = False  # the manifest had none: derived from its files
    new_version: int | None = None
    stored_file: str | None = None  # relative to the kernel store
    sha256: str | None = None
    fingerprint_before: str
    fingerprint_after: str | None = None
    speed_measured: bool = False
    speed_before: float | None = None  # the stale version's model speedup when it was stored
    speed_before_measured: bool = False
    speed_after: float | None = None  # the refreshed version's, measured now


class ProblemRefresh(Record):
    model: str
    problem: str
    # The declared shape refreshed (a problem with SHAPES: one entry per shape with active folders; ``kernel``
    # and ``current`` then name ``<kernel>@<shape>`` folders).
    shape: str | None = None
    compiler_after: str | None = None
    current: list[str] = Field(default_factory=list)  # committed kernels that are not stale
    kernels: list[KernelRefresh] = Field(default_factory=list)
    # Folders with an active version at a shape the file does not declare: reported, not refreshed.
    undeclared: list[str] = Field(default_factory=list)
    error: str | None = None  # the problem could not be refreshed (compile failure, broken store, verifier)


class RefreshRecord(Record):
    """``refresh.json`` (and ``kernelopt refresh --json``)."""

    schema_version: int = REFRESH_SCHEMA_VERSION
    kind: Literal["kernelopt-refresh"] = "kernelopt-refresh"
    device: str
    kernels_dir: str
    run_dir: str | None = None
    problems: list[ProblemRefresh] = Field(default_factory=list)

    @property
    def stale(self) -> int:
        return sum(len(p.kernels) for p in self.problems)


def compiler_of(env: Environment | None) -> str | None:
    return f"torch {env.torch}, triton {env.triton}" if env is not None else None


def stale_kernels(store: Any, model: str, fingerprints: dict[str, str], shape: str | None = None) -> list[str]:
    """Kernel folders of ``model`` at ``shape`` (``<kernel>@<shape>``; None: plain folders) whose active version
    replaces another compiler kernel than the one generated now at that shape (``fingerprints``: compiler kernel
    name -> fingerprint), or one not generated at all."""
    from ..capture.shapes import split_name

    out = []
    for name in store.kernel_names(model):
        kernel, at = split_name(name)
        if at != shape:
            continue
        manifest = store.manifest(model, name)
        if manifest is not None and manifest.active is not None and (
                fingerprints.get(kernel) != manifest.fingerprint or manifest.old_fingerprints() is not None):
            out.append(name)
    return out


def active_folders(store: Any, model: str) -> list[str]:
    """The kernel folders of ``model`` with an active version (what production would run)."""
    return [n for n in store.kernel_names(model)
            if (m := store.manifest(model, n)) is not None and m.active is not None]


def find_successor(kernel: str, old_source: str | None, kernels: dict[str, KernelInfo], taken: set[str],
                   render: Callable[[KernelInfo], str]) -> tuple[str, str] | None:
    """(name, how it was found) of the compiler kernel that took ``kernel``'s place, or None."""
    from .harvest import stem

    if kernel in kernels:
        return kernel, "same name"
    free = [k for n, k in kernels.items() if n not in taken]
    old_args = _args_of(old_source) if old_source else None
    same = [k for k in free if stem(k.name) == stem(kernel) and (old_args is None or [a.name for a in k.args] == old_args)]
    if len(same) == 1:
        return same[0].name, f"structural match: same fused operations ({stem(kernel)}) and arguments"
    pool = same or free
    if old_source is None or not pool:
        return None
    ratio, best = max((difflib.SequenceMatcher(None, old_source, render(k), autojunk=False).ratio(), k.name)
                      for k in pool)
    if ratio < MIN_SIMILARITY:
        return None
    return best, f"structural match: most similar source ({ratio:.0%})"


def _args_of(source: str) -> list[str] | None:
    import ast

    try:
        tree = ast.parse(source)
    except SyntaxError:
        return None
    run = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)
    return [a.arg for a in run.args.args] if run is not None else None


class Refresher:
    """Refreshes the stale kernels of problems into one kernel store; one record and run directory."""

    def __init__(self, store: Any, device: str, *, run: Any = None, say: Callable[[str], None] | None = None,
                 harvest_timeout: float = 900.0):
        self.store = store
        self.device = device
        self.run = run  # runs.trace.RunDir or None
        self.say = say or (lambda _: None)
        self.harvest_timeout = harvest_timeout

    # --- one problem ---------------------------------------------------------------

    def refresh_problem(self, problem: Path, session: Any, shape: str | None = None) -> ProblemRefresh:
        """Refresh ``problem``'s stale kernels against the kernels ``session`` (a VerifySession on it) compiled;
        ``shape``: the declared shape the session was opened at (only its ``<kernel>@<shape>`` folders)."""
        from ..capture.shapes import split_name

        model = Path(problem).stem
        out = ProblemRefresh(model=model, problem=str(problem), shape=shape)
        try:
            committed = [n for n in active_folders(self.store, model) if split_name(n)[1] == shape]
            if not committed:
                return out
            kernels: dict[str, KernelInfo] = session.kernels
            out.compiler_after = compiler_of(session.opened.environment)
            stale = stale_kernels(self.store, model, {n: k.fingerprint for n, k in kernels.items()}, shape)
            out.current = [n for n in committed if n not in stale]
            # Compiler kernels with folders of their own at this shape: not a successor for another.
            taken = {k for n in self.store.kernel_names(model) if n not in stale
                     for k, at in [split_name(n)] if at == shape}
            alternatives = _Alternatives(problem, self.device, self.harvest_timeout, self.say, shape)
            for name in stale:
                result = self._kernel(model, name, kernels, taken, session, alternatives, shape)
                out.kernels.append(result)
                if result.successor:
                    taken.add(result.successor)
                self.say(f"{model}/{name}: {result.status}: {result.reason}")
        except KerneloptError as exc:
            out.error = str(exc)
        return out

    def _kernel(self, model: str, name: str, kernels: dict[str, KernelInfo], taken: set[str], session: Any,
                alternatives: _Alternatives, shape: str | None = None) -> KernelRefresh:
        """Refresh the stale folder ``name`` (``<kernel>@<shape>`` at a declared ``shape``)."""
        from ..candidate import render_dump
        from ..capture.shapes import split_name, store_name
        from ..store.recipe import derive_recipe, replay_bound, unbound_message
        from ..store import MANIFEST, Provenance, accept_verdict
        from ..verify import source_of

        active = self.store.active_file(model, name)
        assert active is not None
        record, manifest, folder = active.record, active.manifest, self.store.kernel_dir(model, name)
        timing = record.evidence.model_timing
        result = KernelRefresh(kernel=name, status="retired", reason="", version=record.version,
                               fingerprint_before=manifest.fingerprint,
                               speed_before=timing.speedup if timing and record.evidence.speed_measured else None,
                               speed_before_measured=record.evidence.speed_measured)
        original_name = record.original or manifest.original
        try:
            old_original: str | None = (folder / original_name).read_text(encoding="utf-8")
        except OSError:
            old_original = None
        recipe = record.recipe
        if recipe is None and old_original is not None:  # a manifest written before recipes
            recipe = derive_recipe(old_original, active.source, fingerprint=record.fingerprint)
            result.recipe_derived = True
        found = find_successor(split_name(name)[0], old_original, kernels, taken, lambda k: render_dump(k, model))

        def retire(status: Status, reason: str) -> KernelRefresh:
            result.status, result.reason = status, reason
            self.store.retire(model, name, f"kernelopt refresh: {reason}",
                              fingerprint=kernels[result.successor].fingerprint if result.successor else None)
            self._event("store", "retired", model, name, status=status, reason=reason)
            return result

        if recipe is None:
            return retire("not refreshable", f"v{record.version} has no recipe and its original file "
                                             f"{folder / original_name} cannot be read to derive one")
        if old_original is None:  # a recorded recipe is trusted only once checked against its original
            return retire("not refreshable", f"{folder / original_name}: the compiler kernel v{record.version}'s "
                                             f"recipe was recorded against cannot be read; nothing replayed")
        result.recipe = recipe.describe()
        if found is None:
            return retire("retired", f"the compiler no longer generates {name} or a kernel like it; the compiler's "
                                     f"kernels are used")
        successor, how = found
        result.successor, result.match = successor, how
        info = kernels[successor]
        result.fingerprint_after = info.fingerprint
        new_original = render_dump(info, model)
        # ``active.source``: the version's bytes as the store checked them against their sha256.
        replayed = replay_bound(recipe, (old_original, active.source), new_original, info,
                                lambda v: alternatives.get(v, info))
        if replayed.refused:
            return retire("not refreshable", unbound_message(folder / MANIFEST, model, name, record.version,
                                                             active.path, replayed.how))
        if replayed.source is None:
            why = replayed.how
            if recipe.kind == "edit":
                why += ("; not refreshable by the search backend (port the edit by hand and `kernelopt accept` it, "
                        "or re-tune with --agent anthropic)")
            return retire("not refreshable", why)
        label = f"{name} v{record.version} refreshed ({replayed.how})"
        verdict = session.verify(successor, source_of(replayed.source, label))
        result.speed_measured = verdict.speed_measured
        if verdict.model_timing is not None and verdict.speed_measured:
            result.speed_after = verdict.model_timing.speedup
        self._event("benchmarker", "verdict", model, successor, origin=f"refresh:v{record.version}",
                    status=verdict.status, reason=verdict.reason)
        if verdict.status == "rejected":
            return retire("retired", f"the replayed recipe ({replayed.how}) was rejected at {verdict.reason}")
        if session.options.speed.slower(verdict.model_timing):
            t = verdict.model_timing
            return retire("retired", f"the replayed recipe ({replayed.how}) is slower than the compiler kernel: model "
                                     f"{timing_text(t, label=True)}")
        env_before = record.evidence.environment or manifest.environment
        provenance = Provenance(
            proposed_by=f"kernelopt refresh (v{record.version} of {name}: {recipe.describe()})",
            agent=f"refresh:v{record.version}", backend="search", refreshed_from=record.version,
            refreshed_from_kernel=split_name(name)[0] if successor != split_name(name)[0] else None,
            compiler_before=compiler_of(env_before), compiler_after=compiler_of(verdict.environment))
        extra = [(recipe.inductor.variant, alt)] if recipe.inductor and (
            alt := alternatives.get(recipe.inductor.variant, info)) else []
        outcome = accept_verdict(self.store, model, successor, replayed.source, verdict, allow_no_gain=True,
                                 provenance=provenance, alternatives=extra, shape=shape)
        if outcome.record is None or not outcome.active:
            return retire("retired", f"the replayed recipe passed but was not stored: {outcome.message}")
        folder_after = store_name(successor, shape)  # the same shape's folder
        if folder_after != name:
            self.store.retire(model, name, f"kernelopt refresh: refreshed as {folder_after} v{outcome.record.version}",
                              fingerprint=info.fingerprint)
        result.status, result.new_version = "refreshed", outcome.record.version
        result.sha256 = outcome.record.sha256
        result.stored_file = str((self.store.kernel_dir(model, folder_after) / outcome.record.file)
                                 .relative_to(self.store.root))
        speed = ("speed not measured (interpreter mode): stored because correct" if not verdict.speed_measured
                 else f"model {verdict.model_timing.speedup:.3f}x")
        result.reason = (f"replayed ({replayed.how}), verified against the new compiler kernel, "
                         f"{'already ' if not outcome.stored else ''}stored as v{outcome.record.version}; {speed}")
        self._event("store", "refreshed", model, folder_after, version=outcome.record.version, file=result.stored_file,
                    manifest=str(Path(result.stored_file).parent / MANIFEST))
        return result

    def _event(self, role: str, event: str, model: str, kernel: str, **data: Any) -> None:
        if self.run is not None:
            self.run.event(role, event, model=model, kernel=kernel, **data)


class _Alternatives:
    """Inductor's other compiles of the problem (agents/harvest.py), run once per variant when a recipe needs one."""

    def __init__(self, problem: Path, device: str, timeout: float, say: Callable[[str], None],
                 shape: str | None = None):
        self.problem, self.device, self.timeout, self.say = problem, device, timeout, say
        self.shape = shape  # a declared shape: the other compiles are made at its inputs
        self._done: dict[str, Any] = {}

    def get(self, variant: str, info: KernelInfo) -> str | None:
        from .harvest import VARIANTS, fitting, harvest

        if variant not in VARIANTS:
            return None
        if variant not in self._done:
            at = f" at shape {self.shape}" if self.shape else ""
            self.say(f"compiling {Path(self.problem).name}{at} under Inductor's {variant} settings")
            self._done[variant] = harvest(Path(self.problem), self.device, [variant], self.timeout, shape=self.shape)
        found = fitting(info, self._done[variant].kernels)
        return found[0].source if found else None


# --- the run ---------------------------------------------------------------------------

def run_outcome(problem: ProblemRefresh, device: str) -> Any:
    """The refresh of one problem as a tuning run's ProblemOutcome: ``kernelopt publish`` and
    ``kernelopt report`` read the versions it stored from there."""
    from ..runs.records import KernelOutcome, ProblemOutcome
    from ..capture.shapes import split_name

    kernels = []
    for k in problem.kernels:
        if k.status != "refreshed":
            continue
        kernels.append(KernelOutcome(  # the compiler kernel; the shape is the problem entry's, as tune writes it
            kernel=k.successor or split_name(k.kernel)[0], fingerprint=k.fingerprint_after or "",
            stored_version=k.new_version,
            stored_file=k.stored_file, best_sha256=k.sha256, best_origin=f"refresh:v{k.version} ({k.recipe})",
            message=k.reason))
    return ProblemOutcome(model=problem.model, problem=problem.problem, device=device, shape=problem.shape,
                          speed_measured=any(k.speed_measured for k in problem.kernels), kernels=kernels,
                          error=problem.error)


def refresh(problems: list[Path], store: Any, device: str, options: Any, *, runs_dir: Path | None,
            say: Callable[[str], None] | None = None, session_factory: Any = None,
            failed: list[ProblemRefresh] | None = None, shapes: list[str | None] | None = None) -> RefreshRecord:
    """Refresh every problem in turn (one verification session per problem, or per declared shape of a problem
    with SHAPES, opened only when the store holds active versions there); the run is written under ``runs_dir``
    when given. ``failed``: problems that could not be loaded, recorded as they are (error rows) before the
    others. ``shapes``: only these declared shapes (the gate: the one its session was opened at; None: all)."""
    from ..runs.records import RunRecord
    from ..runs.trace import RunDir, new_run_id, now_iso
    from ..capture.shapes import split_name
    from ..records import dump_json

    say = say or (lambda _: None)
    record = RefreshRecord(device=device, kernels_dir=str(store.root), problems=list(failed or []))
    run = None
    if runs_dir is not None:
        run_record = RunRecord(run_id=new_run_id(), started=now_iso(), agent="refresh", kernels_dir=str(store.root))
        run = RunDir.create(runs_dir, run_record)
        record.run_dir = str(run.root)
    refresher = Refresher(store, device, run=run, say=say)
    factory = session_factory
    if factory is None:
        from ..verify import VerifySession

        factory = VerifySession
    try:
        for problem in problems:
            model = Path(problem).stem
            try:
                active = active_folders(store, model)
            except KerneloptError as exc:
                record.problems.append(ProblemRefresh(model=model, problem=str(problem), error=str(exc)))
                continue
            if not active:
                say(f"{model}: no active kernel versions in the store; nothing to refresh")
                record.problems.append(ProblemRefresh(model=model, problem=str(problem)))
                continue
            try:
                declared = declared_shapes(Path(problem))
                # Each shape's kernels are the compile's under model.json's settings at that shape.
                compiles = {s: (store.compile_variant(model, s), store.launch_configs(model, s)) for s in declared}
            except KerneloptError as exc:
                record.problems.append(ProblemRefresh(model=model, problem=str(problem), error=str(exc)))
                continue
            rows: list[ProblemRefresh] = []
            for shape in (declared if shapes is None else [s for s in declared if s in shapes]):
                if not any(split_name(f)[1] == shape for f in active):
                    continue  # nothing committed at this shape: no compile
                started = time.monotonic()
                at: dict[str, Any] = {"shape": shape} if shape is not None else {}
                variant, configs = compiles[shape]
                fixed: dict[str, Any] = {"launch_configs": configs} if configs else {}
                with factory(problem, device, options, progress=say, variant=variant, **at, **fixed) as session:
                    try:
                        session.open()
                    except KerneloptError as exc:
                        rows.append(ProblemRefresh(model=model, problem=str(problem), shape=shape, error=str(exc)))
                        continue
                    result = refresher.refresh_problem(Path(problem), session, shape)
                rows.append(result)
                if run is not None:
                    outcome = run_outcome(result, device)
                    outcome.seconds = round(time.monotonic() - started, 2)
                    run.record.environment = run.record.environment or session.opened.environment
                    run.record.problems.append(outcome)
                    run.save()
            # Folders of shapes the file does not declare: said once (by the first declared shape's refresh).
            undeclared = [f for f in active if split_name(f)[1] not in declared]
            if undeclared and (shapes is None or declared[0] in shapes):
                if not rows:
                    rows.append(ProblemRefresh(model=model, problem=str(problem)))
                rows[0].undeclared = undeclared
                said = f"SHAPES declare {', '.join(map(str, declared))}" if declared != [None] else "no SHAPES"
                say(f"{model}: {', '.join(undeclared)}: active version(s) at a shape {Path(problem).name} does not "
                    f"declare ({said}); not refreshed")
            record.problems += rows
    finally:
        if run is not None:
            run.record.finished = now_iso()
            run.close()
            from ..store import atomic_write

            atomic_write(Path(run.root) / REFRESH_FILE, dump_json(record))
    return record


def declared_shapes(problem: Path) -> list[str | None]:
    """The shapes a problem file declares (its SHAPES, loaded); [None] for one without: its plain folders."""
    from ..capture.problem import load_problem

    return list(load_problem(problem).shapes) or [None]
