"""What a gate item checks.

* kernel item: the store checks the kernel's whole folder, then the active version's bytes
  go through the whole cascade in the problem's verification session (correct, and on a
  GPU not slower than the compiler's kernel); a stale one (the compiler now generates a
  different kernel) fails, or is skipped with a note when allowed; none committed: passes
  as compiler baseline.
* model item: the model with every active, non-stale version swapped in, against float64
  (and on a GPU timed against the compiled baseline in the same run, and against the
  speedup recorded in ``model.json``); with ``--kernelopt-base-ref`` also timed against
  the problem file at that revision.

Each item records its figures as properties (:meth:`GateItem.prop`) and fails with a
:class:`GateFailure` whose message is the whole story.
"""

from __future__ import annotations

import contextlib
import time
from collections import Counter
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import pytest

from ..capture.shapes import split_name
from ..errors import KerneloptError
from ..measure.text import speedup_text, timing_text
from ..records import worst_error
from .base import BaseRef, base_files
from .failure import REFRESH_HINT, GateFailure, reproduce, stale
from .items import KernelItem, ModelItem
from .problems import Problem
from .thresholds import ACCEPTED, SpeedRules
from .torch_warnings import internal_warnings_ignored


class VerifySessions:
    """One verification session per problem, shared by its items; the first item pays for opening it.

    A session's worker holds its problem's device memory (the compiled model, the float64
    references, a base revision), which the next problem may need whole: the session is
    closed as soon as its problem's last item has run, counted per problem when collection
    ends (:meth:`expect`), so items of problems run interleaved (``-p`` plugins that reorder,
    a ``conftest.py``) close each session after its own last item, not at the next problem.
    An item that runs again after that (a rerun plugin) reopens it; :meth:`close` at the
    end of the run stops whatever is still open.

    While a problem's items run, the next problem's worker is already starting (importing torch and Inductor,
    seconds of CPU) on another core: a gate over several problems opens each session after the first on a
    worker started ahead.
    """

    def __init__(self, device: str, options: Any):
        self.device = device
        self.options = options  # verify.VerifyOptions
        self._open: dict[Any, Any] = {}
        self._left: Counter[Any] = Counter()  # per problem (path, shape): its items still to run
        self._ahead: Any = None  # verify.worker.WorkerProcess for the next session to open, or None

    def expect(self, problems: Iterable[Problem]) -> None:
        """The problems of the items that will run, one entry per item (after ``-k``, ``--lf``, deselection)."""
        self._left = Counter(problem.key for problem in problems)

    def get(self, problem: Problem, item: Any) -> Any:
        from ..verify import VerifySession

        session = self._open.get(problem.key)
        if session is None:
            ahead, self._ahead = self._ahead, None
            session = self._open[problem.key] = VerifySession(problem.path, self.device, self.options,
                                                              variant=problem.variant, shape=problem.shape,
                                                              worker=ahead, launch_configs=problem.launch_configs)
            started = time.monotonic()
            try:
                with internal_warnings_ignored():
                    session.open()
            finally:
                item.prop("open_seconds", round(time.monotonic() - started, 2))
                self._start_ahead()
        return session

    def _start_ahead(self) -> None:
        """A worker for the next session, if a problem whose session is not open still has items to run."""
        from ..verify.worker import WorkerProcess

        if self._ahead is None and set(self._left) - set(self._open):
            self._ahead = WorkerProcess()

    def item_done(self, problem: Problem) -> None:
        """An item of ``problem`` has run (whatever its outcome): after its last, its session is closed."""
        self._left[problem.key] -= 1
        if self._left[problem.key] <= 0:
            del self._left[problem.key]
            self.close(problem.key)

    def close(self, key: tuple[Path, str | None] | None = None) -> None:
        """Stop the session of the problem (and shape) ``key`` (None: every open session)."""
        for open_key in [key] if key is not None else list(self._open):
            session = self._open.pop(open_key, None)
            if session is not None:
                session.close()
        if self._ahead is not None and (key is None or not set(self._left) - set(self._open)):
            self._ahead.close()  # the run ends, or no session is left to open
            self._ahead = None


class Checks:
    """The kernel and model checks, with what they need: the store, the speed policy, the sessions."""

    def __init__(self, *, strict: bool, rules: SpeedRules, store: Callable[[], Any], sessions: VerifySessions,
                 base: BaseRef | None, before: Callable[[Problem, Any], None], owners: Iterable[str] = ()):
        self.strict = strict
        self.owners = frozenset(owners)  # the model ids of the configured problem files (and of this run's)
        self.rules = rules  # each model's speed policy, and the accepted regressions
        self._store = store
        self.sessions = sessions
        self.base = base
        self._before = before  # tune/refresh on a problem's first item (tuning.Tuning.before_checks)
        # Per model: the graphs its compile setting was verified at in this run, per declared shape (None: none).
        self._compile_graphs: dict[str, dict[str | None, set[tuple[Any, ...]]]] = {}

    @property
    def store(self) -> Any:
        return self._store()

    def _start(self, problem: Problem, item: Any) -> None:
        """A problem that failed to compile fails its items; the first item of a problem runs
        refresh and tune on it (what they store is then gated like any committed kernel)."""
        if problem.error:
            raise GateFailure(problem.error)
        self._before(problem, item)

    def kernel(self, item: KernelItem) -> None:
        """The kernel item's checks; with the store-wide check when it is the run's first item (:meth:`unowned`)."""
        with self._store_checked(item):
            self._kernel(item)

    def _kernel(self, item: KernelItem) -> None:
        problem, kernel = item.problem, item.kernel
        self._start(problem, item)
        info = problem.info(kernel)
        item.prop("model", problem.id)
        try:
            # The whole folder (every version against its sha256, no file the manifest does not
            # record), then the active version: what the gate passes is what the store holds.
            self.store.check(problem.id, problem.store_name(kernel))
            found = self.store.active_file(problem.id, problem.store_name(kernel))
        except KerneloptError as exc:
            item.prop("status", "broken")
            raise GateFailure(str(exc)) from exc
        if found is None:
            item.prop("status", "baseline")
            return
        manifest, path = found.manifest, found.path
        item.prop("version", manifest.active)
        older = manifest.old_fingerprints()
        if older is not None:
            item.prop("status", "stale")
            stale(f"stale: {path}: {older}", self.strict)
        if manifest.fingerprint != info.fingerprint:
            item.prop("status", "stale")
            _not_a_compiler_change(path, found.record.evidence.environment, self.sessions.device, info.fingerprint)
            stale(f"stale: {path} replaces compiler kernel {manifest.fingerprint}, but the compiler now "
                  f"generates {info.fingerprint}; the compiler's kernel is used", self.strict)
        from ..verify import source_of

        # The bytes the store just checked against its sha256 are the bytes verified.
        session = self.sessions.get(problem, item)
        with internal_warnings_ignored():
            verdict = session.verify(kernel, source_of(found.source, str(path)))
        figures(item, verdict)
        if verdict.status == "rejected":
            item.prop("status", "rejected")
            raise GateFailure(f"{path}: rejected at {verdict.reason}{reproduce(verdict)}")
        _check_launches(item, path, found.record.evidence.launches, verdict.launches)
        if not found.record.evidence.launches:  # production runs it at no launch: it needs re-verification
            item.prop("status", "unverified")
            stale(f"needs re-verification: {path}: its manifest entry records no launches it was verified at, so "
                  f"production does not run it; `kernelopt accept {path}` verifies it again and records them",
                  self.strict)
        timing = verdict.model_timing
        try:
            accepted = self.rules.judge(problem.id, lambda policy: policy.slower(timing), lambda: (
                f"{path}: slower than the compiler kernel: model {timing_text(timing, label=True)}"))
        except GateFailure:
            item.prop("status", "slower")
            raise
        _passed(item, "committed", [accepted])

    def model(self, item: ModelItem) -> None:
        """The model's checks; then an accepted regression of the model that has expired fails it."""
        accepted: list[str | None] = []
        with self._store_checked(item):
            status = self._model(item, accepted)
        if (expired := self.rules.expired(item.problem.id)) is not None:
            raise GateFailure(expired)
        _passed(item, status, accepted)

    @contextlib.contextmanager
    def _store_checked(self, item: Any) -> Iterator[None]:
        """The item's own checks, then, for the run's first item (``store_check``), the store-wide one
        (:meth:`unowned`): its failure is the item's, added to the item's own; a skip (a stale kernel) never
        hides it."""
        unowned = self.unowned() if item.store_check else None
        try:
            yield
        except GateFailure as exc:
            raise GateFailure(f"{exc}; {unowned}" if unowned else str(exc)) from None
        except pytest.skip.Exception:
            if unowned:
                raise GateFailure(unowned) from None
            raise
        if unowned:
            raise GateFailure(unowned)

    def unowned(self) -> str | None:
        """The store's model folders no configured problem owns that production would run something of (an active
        version, or a compile setting in model.json); None: none. Production swaps ``kernels/<id>/`` into any model
        whose id is ``<id>``, and the gate verifies a folder only through its problem: one no problem owns (a pull
        request's, or a removed problem's) would run unverified. Never a stale kernel: a failure whatever
        ``allow_stale`` says."""
        store = self.store
        root = store.root
        if not root.is_dir():
            return None
        found: list[str] = []
        for folder in sorted(p for p in root.iterdir() if p.is_dir() and p.name not in self.owners):
            try:
                store.model_dir(folder.name)
            except KerneloptError:  # not a name a model id can have: production never reads it
                continue
            try:
                runs = [k for k in store.kernel_names(folder.name)
                        if (m := store.manifest(folder.name, k)) is None or m.active is not None]
                record = store.model_record(folder.name) if (folder / "model.json").is_file() else None
            except KerneloptError:
                runs, record = ["(unreadable)"], None
            if runs or (record is not None and (record.compile is not None or any((record.compile_at or {}).values()))):
                what = f"{len(runs)} kernel folder(s) with an active version" if runs else "a compile setting"
                found.append(f"{folder.name}/ ({what})")
        if not found:
            return None
        return (f"the store-wide check (run with the first gate item, whichever problem it is): {root} holds model "
                f"folder(s) no configured problem owns: {', '.join(found[:10])}{', ...' if len(found) > 10 else ''}; "
                "production runs kernels/<id>/ for any model whose id is <id>, and the gate verifies a folder only "
                "through its problem file, so these would run unverified: add their problem files to "
                "[tool.kernelopt] problems (or name them in this run), or remove the folders")

    def _model(self, item: ModelItem, accepted: list[str | None]) -> str:
        """The model item's checks; returns its status when they pass (``accepted``: what an accepted
        regression let pass)."""
        problem = item.problem
        self._start(problem, item)
        item.prop("model", problem.id)
        replacements, stale_kernels, broken = {}, [], []
        for kernel in problem.kernels:
            try:
                found = self.store.active_file(problem.id, problem.store_name(kernel))
            except KerneloptError as exc:
                broken.append(f"{problem.store_name(kernel)}: {exc}")
                continue
            if found is None:
                continue
            if (found.manifest.fingerprint != problem.info(kernel).fingerprint
                    or found.manifest.old_fingerprints() is not None):
                stale_kernels.append(kernel)
            else:
                from ..verify import source_of

                replacements[kernel] = source_of(found.source, str(found.path))
        item.prop("baseline", len(problem.kernels) - len(replacements) - len(stale_kernels) - len(broken))
        orphaned: list[str] = []
        try:
            record = self.store.model_record(problem.id)  # a broken model.json fails here, measured or not
            self.store.compile_variant(problem.id, problem.shape)  # and a compile setting this version does not know
            # A setting for a shape the file does not declare: production applies it wherever a graph's inputs are
            # among its graphs (another shape's, say), and no item checks it (reported by the first part's item).
            own = record.compile_at or {}
            stray = [s for s, c in own.items() if c is not None and s not in (problem.declared or [])]
            where = self.store.model_dir(problem.id) / "model.json"
            if problem.shape == (problem.declared[0] if problem.declared else None):
                if stray:
                    broken.append(f"{where}: compile_at records a setting for shape(s) {', '.join(stray)}, which "
                                  f"{problem.path.name} does not declare: production would apply it at the graph "
                                  f"inputs it lists, and the gate checks a setting only at a declared shape; remove "
                                  f"the entries, or declare the shapes and tune them")
                # The setting for every shape, where compile_at names each declared shape: checked at none of them.
                if own and record.compile is not None and record.compile.graphs and problem.declared \
                        and all(s in own for s in problem.declared):
                    broken.append(f"{where}: compile {record.compile.variant!r} lists graph inputs, and compile_at "
                                  f"names every declared shape, so no item checks it: production would apply it at "
                                  f"those inputs; remove it (`kernelopt tune` does, once each shape has its own)")
            # A folder with no active version (retired by refresh) runs nothing: not stale.
            # Of this shape (``<kernel>@<shape>`` folders; plain ones for a problem without SHAPES), and folders of
            # shapes the file does not declare (reported by its first shape's item).
            orphaned = [k for k in self.store.kernel_names(problem.id) if problem.owns(k)
                        and not (split_name(k)[1] == problem.shape and split_name(k)[0] in problem.kernels)
                        and (m := self.store.manifest(problem.id, k)) is not None and m.active is not None]
        except KerneloptError as exc:
            broken.append(str(exc))
        item.prop("kernels", len(problem.kernels))
        item.prop("committed", len(replacements))
        item.prop("stale", len(stale_kernels) + len(orphaned))
        if broken:
            raise GateFailure("; ".join(broken))
        if orphaned:  # counted as stale; the summary's note names them
            item.prop("orphaned", orphaned)
            undeclared = [k for k in orphaned if split_name(k)[1] != problem.shape]
            here = [k for k in orphaned if k not in undeclared and self._verified_here(problem.id, k)]
            if here:  # not a compiler change (the kernel renamed): a folder the gate never compiles, but production may
                raise GateFailure(f"{self.store.model_dir(problem.id)} holds committed versions of {', '.join(here)}, "
                                  f"verified on {self.sessions.device} with this torch and triton, as this run is, for "
                                  f"kernels the problem does not generate here (a pass or graph it does not run, another "
                                  f"input shape, or a model change): the gate verifies none of them, and production runs "
                                  f"one wherever the compiler generates the kernel its manifest names; re-tune, or remove "
                                  f"the folders (--kernelopt-allow-stale does not skip these)")
            if undeclared:  # production would look in them at a matching kernel: never skipped
                raise GateFailure(f"{self.store.model_dir(problem.id)} holds committed versions of "
                                  f"{', '.join(undeclared)}, of a shape {problem.path.name} does not declare "
                                  f"({'its SHAPES: ' + ', '.join(problem.declared) if problem.declared else 'no SHAPES'})"
                                  ": the gate verifies none of them, and production runs one wherever the compiler "
                                  "generates the kernel its manifest names; declare the shape, or remove the folders "
                                  "(--kernelopt-allow-stale does not skip these)")
            if self.strict:
                why = (f" ({', '.join(undeclared)}: of a shape its SHAPES do not declare); the gate verified none of "
                       "them (production runs one only where the compiler generates the very kernel it replaces)"
                       if undeclared else "; they are not used and were not verified")
                raise GateFailure(f"stale: {self.store.model_dir(problem.id)} holds committed versions of "
                                  f"{', '.join(orphaned)}, which the compiler no longer generates for {problem.id}"
                                  f"{why} (re-tune, or remove the folders; to pass anyway, --kernelopt-allow-stale "
                                  "or allow_stale = true in [tool.kernelopt])")
        base_text, base_store = self._base(item, problem)
        if problem.variant is not None:
            accepted.append(self._check_compile(item, problem))
        if not replacements and base_text is None:
            return "committed" if problem.variant is not None else "baseline"
        session = self.sessions.get(problem, item)
        with base_files(problem.path.name, problem.id, base_text, base_store) as (base_problem, base_kernels), \
                internal_warnings_ignored():
            verdict = session.verify_model(replacements, base_problem=base_problem, base_kernels=base_kernels)
        figures(item, verdict)
        self._base_figures(item, verdict)
        if verdict.status == "rejected":
            raise GateFailure(f"{problem.id} with committed kernels: rejected at {verdict.reason}{reproduce(verdict)}")
        timing = verdict.model_timing
        if replacements:
            accepted.append(self.rules.judge(problem.id, lambda policy: policy.slower(timing), lambda: (
                f"{problem.id}: committed kernels make the model slower: {timing_text(timing, label=True)}")))
        accepted.append(self._check_recorded(item, problem.id, verdict, problem.shape))
        _limit(item, session, verdict)
        base = verdict.base_timing
        if base is not None:
            assert self.base is not None
            ref = self.base.ref
            accepted.append(self.rules.judge(problem.id, lambda policy: policy.slower(base), lambda: (
                f"{problem.id}: slower than at {ref}: {timing_text(base, label=True)}")))
        # Passed: with committed kernels swapped in or a committed compile setting ("committed"), or the
        # compiler's alone (it was null).
        return "committed" if replacements or problem.variant is not None else "baseline"

    def _verified_here(self, model: str, folder: str) -> bool:
        """Whether the active version of ``folder`` records this run's environment (store.verified_elsewhere)."""
        from ..store import verified_elsewhere

        manifest = self.store.manifest(model, folder)
        if manifest is None or manifest.active is None:
            return False
        return verified_elsewhere(manifest.version(manifest.active).evidence.environment, self.sessions.device) is None

    def _base(self, item: ModelItem, problem: Problem) -> tuple[bytes | None, dict[tuple[str, ...], bytes] | None]:
        """The problem file and the model's kernel store folder at the base commit (None, None: nothing
        to compare, the item's ``vs_base`` says why)."""
        if self.base is None:
            return None, None
        text = self.base.text(problem.path)
        if text is None:
            item.prop("vs_base", f"new at {self.base.ref}: nothing to compare")
            return None, None
        store = self.base.store_relative(self.store.root)
        if store is None:  # the base's committed kernels cannot be read: a base without them would be another base
            item.prop("vs_base", f"not compared: the kernel store {self.store.root} is outside the git repository "
                                 f"{self.base.git_top}, so what {self.base.ref} committed cannot be read")
            return None, None
        try:
            return text, self.base.store_files(store, problem.id)
        except GateFailure as exc:  # the base's own problem (a path git would not check out): not the head's
            item.prop("vs_base", f"not compared: {exc}")
            return None, None

    def _base_figures(self, item: ModelItem, verdict: Any) -> None:
        """The base revision's side as the item's properties: what ran there, its time and the head's, the change.

        A base that failed to compile, run or be timed is its own failure: said in ``vs_base``, never the
        item's (the head's verdict stands)."""
        run = verdict.base_run
        if run is None:
            return
        assert self.base is not None
        item.prop("base_ran", run.describe())
        if run.compile is not None:
            item.prop("base_compile", run.compile)
        if run.failure is not None:
            item.prop("base_failure", run.failure)
            item.prop("vs_base", f"base failed at {self.base.ref}")  # why: base_failure, in the notes
            return
        timing = verdict.base_timing
        if timing is None:
            item.prop("vs_base", "not measured" if not verdict.speed_measured else "not reached")
            return
        item.prop("base_ms", round(timing.baseline_ms, 6))
        item.prop("head_ms", round(timing.candidate_ms, 6))
        item.prop("vs_base_speedup", round(timing.speedup, 4))
        item.prop("vs_base_ci", [round(timing.ci_low, 4), round(timing.ci_high, 4)])

    def _check_compile(self, item: ModelItem, problem: Problem) -> str | None:
        """model.json's compile setting (``verify/compile_check.py``): the model compiled under it against float64
        on the seeds and every input draw (the default compile's error allowed) and, on a GPU, not slower than
        the default compile. Of a problem with SHAPES, at this part's declared shape (each has a model item, so the
        setting is checked at every declared shape), which a failure names."""
        variant = problem.variant
        assert variant is not None
        at = f" at shape {problem.shape}" if problem.shape is not None else ""
        where = f"{self.store.model_dir(problem.id) / 'model.json'}: compile {variant!r}{at}"
        item.prop("compile", variant)
        session = self.sessions.get(problem, item)
        with internal_warnings_ignored():
            verdict = session.verify_compile(variant)
        item.prop("speed_measured", verdict.speed_measured)
        if problem.launch_configs:  # what the check compiled: the recorded launch configurations, used or not
            opened = session.opened
            item.prop("launch_configs_fixed", opened.launches_fixed)
            if opened.launches_refused:
                item.prop("launch_configs_refused", opened.launches_refused[:20])
        if verdict.status == "rejected":
            raise GateFailure(f"{where}: rejected at {verdict.reason}{reproduce(verdict)}")
        self._check_compile_graphs(problem, where, verdict.launches)
        timing = verdict.model_timing
        if timing is not None:
            item.prop("compile_speedup", round(timing.speedup, 4))
            item.prop("compile_speedup_ci", [round(timing.ci_low, 4), round(timing.ci_high, 4)])
        return self.rules.judge(problem.id, lambda policy: policy.slower(timing), lambda: (
            f"{where}: the model is slower than under the default compile: {timing_text(timing, label=True)}"))

    def _check_compile_graphs(self, problem: Problem, where: str, launches: list[list[str]] | None) -> None:
        """Production applies model.json's setting only at the graph inputs it lists (``compile.graphs``): each must
        be one this run verified the setting at, or a pull request could add graphs (another batch size, dtype)
        where it never was. A declared shape's own setting (``compile_at``), at that shape's check; the one
        ``compile`` names for every shape, once every declared shape it applies at has been checked."""
        from ..capture import signature_key

        verified = self._compile_graphs.setdefault(problem.id, {})
        verified[problem.shape] = {signature_key(g) for g in launches or []}
        record = self.store.model_record(problem.id)
        own = record.compile_at or {}
        choice = self.store.compile_choice(problem.id, problem.shape)
        training = problem.training
        if choice is not None and bool(choice.training) != training:
            said = {True: "a training step", False: "inference", None: "nothing (read as inference)"}[choice.training]
            raise GateFailure(f"{where}: compile.training says the setting was verified in {said}, and "
                              f"{problem.path.name} is {'a training step' if training else 'inference'}: production "
                              f"applies it to the graphs of the pass recorded there, where this run did not verify it; "
                              f"`kernelopt tune` records the pass it verified")
        declared: set[str | None] = set(problem.declared) if problem.declared else {None}
        under = {problem.shape} if problem.shape in own else {s for s in declared if s not in own}
        if not under <= set(verified):
            return  # a declared shape's check is still to come (or not selected in this run: nothing to add up)
        seen = set().union(*(verified[s] for s in under))
        try:
            unverified = [g for g in (choice.graphs if choice is not None else None) or [] if signature_key(g) not in seen]
        except ValueError as exc:  # an entry capture never writes: data from a repository
            raise GateFailure(f"{where}: compile.graphs holds an entry that is no graph's inputs: {exc}") from None
        if unverified:
            shown = "; ".join(", ".join(g[:4]) + (", ..." if len(g) > 4 else "") for g in unverified[:3])
            raise GateFailure(f"{where}: compile.graphs lists {len(unverified)} graph input set(s) the setting was not "
                              f"verified at in this run ({shown}{'; ...' if len(unverified) > 3 else ''}): production "
                              f"would apply it there unverified; `kernelopt tune` records the graphs it verified")

    def _check_recorded(self, item: ModelItem, model: str, verdict: Any, shape: str | None = None) -> str | None:
        """Compare the measured speedup with the one recorded in kernels/<model>/model.json for this environment
        (and shape)."""
        from ..store import baseline_key

        timing, policy = verdict.model_timing, self.rules.policy(model)
        if timing is None or verdict.environment is None or not policy.measurable(timing):
            return None
        try:
            recorded = self.store.model_record(model).baselines.get(baseline_key(verdict.environment, shape))
        except KerneloptError as exc:
            raise GateFailure(str(exc)) from exc
        if recorded is None or recorded.timing is None:
            return None
        item.prop("recorded_speedup", round(recorded.timing.speedup, 4))
        _, note = policy.against_recorded(timing, recorded.timing)
        if note is not None:
            item.prop("recorded_note", note)

        def message() -> str:
            if note is not None:
                return f"{model}: slower than recorded on {recorded.measured:%Y-%m-%d} in this environment: {note}"
            return (f"{model}: speedup over the compiled model regressed: now {timing_text(timing, label=True)}, "
                    f"recorded {speedup_text(recorded.timing.speedup)} on "
                    f"{recorded.measured:%Y-%m-%d} in this environment")

        return self.rules.judge(model, lambda p: p.against_recorded(timing, recorded.timing)[0], message)


def _passed(item: Any, status: str, accepted: list[str | None]) -> None:
    """An item that passed: its status, and what accepted regressions let pass (then its status says so)."""
    stories = [story for story in accepted if story]
    if stories:
        item.prop("accepted_regression", "; ".join(stories))
    item.prop("status", ACCEPTED if stories else status)


def _limit(item: Any, session: Any, verdict: Any) -> None:
    """The model's percent of its limit (memory and FLOPs), committed kernels in and the compiler's
    alone, where the two floors bound it (measure/roofline.py); measured on a GPU only, never a
    reason to fail."""
    from ..measure.roofline import LIMIT_MIN_TRITON_SHARE, limit_pct

    timing, floor = verdict.model_timing, session.opened.min_bytes
    if timing is None or not floor:
        return
    try:
        profiled = session.profile()
    except KerneloptError as exc:  # the figure is extra: say why it is missing
        item.prop("limit_note", f"the memory limit was not measured: {exc}")
        return
    triton = sum(k.gpu_us for k in profiled.kernels.values())
    if not profiled.measured or not profiled.copy_gbps or not profiled.model_gpu_us:
        return
    flops = session.opened.min_flops
    if triton / profiled.model_gpu_us < LIMIT_MIN_TRITON_SHARE and not flops:
        return  # the rest of its time is work neither floor counts
    memory = {"written": session.opened.min_written_bytes, "read_gbps": profiled.read_gbps}
    item.prop("limit_pct", limit_pct(floor, timing.candidate_ms / 1e3, profiled.copy_gbps, flops, profiled.flop_tflops,
                                     **memory))
    item.prop("baseline_limit_pct", limit_pct(floor, timing.baseline_ms / 1e3, profiled.copy_gbps, flops,
                                              profiled.flop_tflops, **memory))


def figures(item: Any, verdict: Any) -> None:
    """A verdict's figures as the item's properties: errors against float64, speedup, stage times."""
    # Not measured (no rows, or a failure on NaN/Inf): no property, so the table says n/a and the JSON null.
    for name, field in (("error_vs_fp64", "candidate_vs_fp64"), ("baseline_error_vs_fp64", "baseline_vs_fp64")):
        if (worst := worst_error(verdict.errors, field)) is not None:
            item.prop(name, worst)
    item.prop("speed_measured", verdict.speed_measured)
    if verdict.environment is not None and verdict.environment.gpu:
        item.prop("gpu", verdict.environment.gpu)
    if verdict.model_timing is not None:
        t = verdict.model_timing
        item.prop("speedup", round(t.speedup, 4))
        item.prop("speedup_ci", [round(t.ci_low, 4), round(t.ci_high, 4)])
        item.prop("model_ms", round(t.candidate_ms, 6))
        item.prop("compiled_ms", round(t.baseline_ms, 6))
    for stage in verdict.stages:
        item.prop(f"stage_{stage.name}_seconds", round(stage.seconds, 2))
    item.prop("verify_seconds", round(verdict.wall_seconds, 2))


def _check_launches(item: Any, path: Path, recorded: list[list[str]] | None, verified: list[list[str]] | None) -> None:
    """Production runs a version at every launch its manifest entry records (``evidence.launches``): each must be
    one this run's kernel stage compared it at, or a pull request could add launches (another batch size, stride,
    dtype) where the version was never checked. Not a stale kernel: a failure whatever ``allow_stale`` says."""
    from ..capture import signature_key

    try:
        now = {signature_key(s) for s in verified or []}
        unchecked = [s for s in recorded or [] if signature_key(s) not in now]
    except ValueError as exc:  # an entry accept never writes: data from a repository
        item.prop("status", "unverified")
        raise GateFailure(f"{path}: its manifest entry's evidence.launches holds an entry that is no launch: {exc}") \
            from None
    if unchecked:
        item.prop("status", "unverified")
        shown = "; ".join(", ".join(s[:4]) + (", ..." if len(s) > 4 else "") for s in unchecked[:3])
        raise GateFailure(f"{path}: its manifest entry records {len(unchecked)} launch(es) this run did not verify "
                          f"it at ({shown}{'; ...' if len(unchecked) > 3 else ''}), and production runs it at every "
                          f"launch recorded there: `kernelopt accept {path}` records the launches it verifies")


def _not_a_compiler_change(path: Path, verified_in: Any, device: str, generated: str) -> None:
    """A version whose compiler kernel this run does not generate is stale (skipped under ``allow_stale``) when the
    compiler or the device changed since it was verified: its manifest then names a kernel this environment no
    longer makes. Verified in this very environment (device, torch, triton), it replaces a kernel the problem does
    not generate here at all, which production would still run wherever the compiler makes it (another input
    shape): a failure, never skipped."""
    from ..store import verified_elsewhere

    if verified_elsewhere(verified_in, device) is not None:
        return
    raise GateFailure(f"stale: {path}: verified on {device} with torch {verified_in.torch} and triton "
                      f"{verified_in.triton}, as this run is, but the problem generates another kernel here ({generated}):"
                      f" a model change, or a version committed for another input shape. No compiler change explains "
                      f"it, and production would run it wherever the compiler generates the kernel its manifest names, "
                      f"so --kernelopt-allow-stale does not skip it ({REFRESH_HINT}; or re-tune, or remove it)")

