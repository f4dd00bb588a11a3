"""The CI gate behind ``pytest --kernelopt``.

Every configured problem file is collected by pytest as a :class:`ProblemFile`
(node id: its path relative to the rootdir) holding one item per Triton kernel
(``problems/x.py::<kernel>``) and one per model (``problems/x.py::model``).

* kernel item: a committed active version goes through the whole cascade in an
  isolated worker (correct, and on a GPU not slower than the compiler's kernel);
  a stale one (the compiler now generates a different kernel, e.g. for another
  batch size) cannot be verified at the problem's shape and fails, unless the user
  opts out (``--kernelopt-allow-stale`` / ``allow_stale = true``: skipped with a note;
  ``--kernelopt-strict`` overrides the setting); no committed version: passes as
  compiler baseline.
* model item: the model with every active, non-stale version swapped in, against
  float64 (and on a GPU timed against the compiled baseline in the same run);
  with ``--kernelopt-base-ref`` also timed against the problem file at that git
  revision, compiled, side by side.

Settings, options and the base revision are checked when pytest configures, before
anything is compiled: a bad one is one line and pytest's usage exit (4). Figures
travel in ``user_properties`` (so junit XML and pytest-xdist carry them) and the
terminal summary prints a table per problem file.
"""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
import warnings
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator

import pytest

from .errors import KerneloptError, UsageError

PREFIX = "kernelopt_"

# What each verifier option must be, in the words of the gate's command line; the
# check itself is VerifyOptions' / SpeedPolicy's (one rule, parsed once).
_OPTION_RULES = {
    "seeds": ("--kernelopt-seeds", "must be a whole number from 1 to 1000"),
    "seed": ("--kernelopt-seed", "must be a whole number from 0 up to 2**63"),
    "timeout": ("--kernelopt-timeout", "must be a positive, finite number of seconds"),
    "max_slowdown": ("--kernelopt-max-slowdown", "must be a fraction from 0 up to, not including, 1"),
    "max_regression": ("--kernelopt-max-regression", "must be a fraction from 0 up to, not including, 1"),
}


def _reproduce(verdict: Any) -> str:
    """How to run a rejection again with the same inputs (the seeds are the OS's otherwise)."""
    seed = getattr(verdict, "seed", None)
    return "" if seed is None else f" (inputs from seed {seed}: reproduce with --kernelopt-seed {seed})"


class GateFailure(Exception):
    """A gate item failed: the message is the whole story (stage, figures)."""


@dataclass
class _Problem:
    path: Path
    id: str  # the kernel store's model id: the file's stem (kernels/<id>/)
    compiled: Any = None
    error: str | None = None
    kernels: list[str] = field(default_factory=list)
    loaded: bool = False


@contextmanager
def _internal_warnings_ignored() -> Iterator[None]:
    """Warnings that torch and triton raise from their own modules while the gate compiles and verifies.

    Importing and compiling raised 14 DeprecationWarnings per gate run from inside torch
    (``torch.jit.script_method``, torch 2.13): nothing a user of the gate can act on. The
    user's own tests run outside this and keep every warning.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(torch|triton)(\.|$)")
        yield


class GateSession:
    """The gate's state for one pytest run; every hook of the plugin hands over to it."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rootpath = Path(config.rootpath)
        self.strict = True  # stale kernels fail; _configure reads the options and the setting
        self.base_ref: str | None = config.getoption("kernelopt_base_ref")
        self.base_commit: str | None = None
        self._git_top: Path | None = None
        self._sessions: dict[Path, Any] = {}
        self.shard: Any = None  # --kernelopt-shard K/N (shard.Shard)
        self.json_path: Path | None = None  # --kernelopt-json
        self.tune_runs: list[str] = []  # --kernelopt-tune: the run directories written
        self.refresh_lines: list[str] = []  # --kernelopt-refresh: one line per stale kernel, and the run directory
        self._tuned: set[Path] = set()
        # controller: problem node id -> the tune and refresh run directories (--kernelopt-open-pr publishes them)
        self._tune_runs_by_file: dict[str, list[str]] = {}
        self._failed_files: set[str] = set()
        self.publish_lines: list[str] = []  # --kernelopt-open-pr
        self.report_path: Path | None = None  # --kernelopt-report
        self.items: list[Any] = []  # results.ItemResult of the items that ran (kept by the controller)
        try:
            self._configure()
        except KerneloptError as exc:
            raise pytest.UsageError(f"kernelopt: {exc}") from None

    def _configure(self) -> None:
        """Settings, options, problem files, base revision and device, cheapest first; nothing compiled."""
        from .config import load_config, resolve_device
        from .gate_workers import GateWorkers

        self.settings = load_config(self.rootpath)
        self._stale_options()
        self.options = self._verify_options()
        self._scale_out_options()
        self._tune_options()
        self.problems = self._problem_files()
        if self.base_ref is not None:
            self._resolve_base_ref()
        self.workers = GateWorkers(self.config)  # an xdist worker is pinned to its GPU here, before CUDA starts
        with _internal_warnings_ignored():  # resolving imports torch
            self.device = resolve_device(self.config.getoption("kernelopt_device") or self.settings.device)
        self.workers.check(self.device)  # more workers than GPUs: UsageError
        if self.workers.unpinned:  # this worker could time on another's GPU: its items fail, saying why
            for problem in self.problems.values():
                problem.loaded, problem.error = True, self.workers.unpinned

    def _stale_options(self) -> None:
        """``self.strict``: whether a committed kernel that cannot be verified at the problem's shape fails.

        It does unless ``--kernelopt-allow-stale`` or ``allow_stale = true`` says otherwise;
        ``--kernelopt-strict`` (which predates the safe default) overrides the setting.
        """
        strict, allow = self.config.getoption("kernelopt_strict"), self.config.getoption("kernelopt_allow_stale")
        if strict and allow:
            raise UsageError("--kernelopt-strict and --kernelopt-allow-stale contradict each other: give one")
        self.strict = strict or not (allow or self.settings.allow_stale)

    def _stale_failure(self, message: str) -> None:
        """A committed kernel the gate cannot verify at the problem's shape: fail, or skip with a note when allowed."""
        if self.strict:
            raise GateFailure(f"{message}. It was not verified at this shape, so the gate fails it (re-tune, or remove "
                              f"it; to skip it instead, --kernelopt-allow-stale or allow_stale = true in "
                              f"[tool.kernelopt])")
        from .report.untrusted import plain

        # Reported at the problem file (``-rs``: "problems/x.py:1: ..."), not at this line of gate.py.
        raise pytest.skip.Exception(plain(f"{message} (allowed: not verified at this shape)"), _use_item_location=True)

    def _verify_options(self) -> Any:
        from pydantic import ValidationError

        from .verify import SpeedPolicy, VerifyOptions

        given = {name: self.config.getoption(f"kernelopt_{name}") for name in _OPTION_RULES}
        try:
            # Slower "beyond noise" must also be slower by more than max_slowdown: an unedited
            # dump measured 0.996x with a CI entirely below 1 on the H200 (20 of 20 runs).
            speed = SpeedPolicy(max_slowdown=given["max_slowdown"], max_regression=given["max_regression"])
            return VerifyOptions(seeds=given["seeds"], seed=given["seed"], timeout=given["timeout"], speed=speed)
        except ValidationError as exc:
            name = str(exc.errors()[0]["loc"][-1])
            option, rule = _OPTION_RULES[name]
            raise UsageError(f"{option} {given[name]}: {rule}") from None

    def _problem_files(self) -> dict[Path, _Problem]:
        globs = self.config.getoption("kernelopt_problems")
        files = self.settings.problem_files(globs)
        if not files:
            if not globs and self.settings.source is None:  # nothing configured: say what to do
                from .config import find_pyproject

                found = find_pyproject(self.rootpath)
                if found is None:
                    raise UsageError(f"no pyproject.toml found above {self.rootpath}; pass problem files "
                                     "(--kernelopt-problems 'models/*.py') or create one with [tool.kernelopt] "
                                     "problems = [...]")
                raise UsageError(f"{found} has no [tool.kernelopt] table; pass problem files "
                                 "(--kernelopt-problems 'models/*.py') or add [tool.kernelopt] problems = [...]")
            where = "--kernelopt-problems" if globs else f"[tool.kernelopt] problems of {self.settings.source}"
            raise UsageError(f"{where} matches no problem files")
        by_id: dict[str, Path] = {}
        for path in files:
            if path.stem in by_id:  # their kernels would share kernels/<stem>/
                raise UsageError(f"problem files {self._rel(by_id[path.stem])} and {self._rel(path)} have the same "
                                 f"name {path.stem!r}, so their kernels would share "
                                 f"{self._rel(self.settings.kernels_path / path.stem)}/: rename one")
            by_id[path.stem] = path
        return {path: _Problem(path=path, id=path.stem) for path in files}

    def _tune_options(self) -> None:
        import math

        self.tune = bool(self.config.getoption("kernelopt_tune"))
        self.refresh = bool(self.config.getoption("kernelopt_refresh"))
        self.open_pr = bool(self.config.getoption("kernelopt_open_pr"))
        if self.open_pr and not (self.tune or self.refresh):
            raise UsageError("--kernelopt-open-pr publishes what --kernelopt-tune or --kernelopt-refresh stored; "
                             "give one of them too")
        budget = self.config.getoption("kernelopt_budget_s")
        if not (isinstance(budget, float) and math.isfinite(budget) and budget > 0):
            raise UsageError(f"--kernelopt-budget-s {budget}: must be a positive, finite number of seconds")

    def _tune_problem(self, problem: _Problem, item: _GateItem) -> None:
        """``--kernelopt-tune``: tune the problem in a session of its own before the gate opens its session."""
        from .agents import TuneOptions, tune

        options = TuneOptions(device=self.device, budget_s=self.config.getoption("kernelopt_budget_s"),
                              seeds=self.options.seeds, timeout=self.options.timeout)
        started = time.monotonic()
        with _internal_warnings_ignored():
            record = tune([problem.path], options, agent=self.config.getoption("kernelopt_agent"), store=self.store,
                          runs_dir=self.settings.root / ".kernelopt" / "runs")
        run_dir = str(self.settings.root / ".kernelopt" / "runs" / record.run_id)
        self.tune_runs.append(run_dir)
        item.prop("tune_run", run_dir)
        item.prop("tune_seconds", round(time.monotonic() - started, 2))
        item.prop("tune_stored", sum(1 for p in record.problems for k in p.kernels if k.stored_version is not None))

    def _refresh_problem(self, problem: _Problem, item: _GateItem) -> None:
        """``--kernelopt-refresh``: when the problem's committed kernels are stale, refresh them in the gate's
        session of the problem (compiled once) before its items are checked."""
        from .agents.refresh import refresh, stale_kernels

        try:
            stale = stale_kernels(self.store, problem.id,
                                  {n: problem.compiled.kernel(n).info.fingerprint for n in problem.kernels})
        except KerneloptError:
            return  # a broken store: the items fail naming the file
        if not stale:
            return
        session = self.session(problem, item)
        runs = self.settings.root / ".kernelopt" / "runs"
        with _internal_warnings_ignored():
            record = refresh([problem.path], self.store, self.device, self.options, runs_dir=runs,
                             session_factory=lambda *a, **k: _Borrowed(session))
        for p in record.problems:
            if p.error:
                self.refresh_lines.append(f"kernelopt refresh: {p.model}: {p.error}")
            self.refresh_lines += [f"kernelopt refresh: {p.model}/{k.kernel} v{k.version}: {k.status}: {k.reason}"
                                   for k in p.kernels]
        self.refresh_lines.append(f"kernelopt refresh: run directory {record.run_dir}")
        item.prop("refresh_run", record.run_dir)
        item.prop("refreshed", sum(1 for p in record.problems for k in p.kernels if k.status == "refreshed"))

    def _scale_out_options(self) -> None:
        from .shard import parse_shard

        shard = self.config.getoption("kernelopt_shard")
        if shard is not None:
            try:
                self.shard = parse_shard(shard)
            except UsageError as exc:
                raise UsageError(f"--kernelopt-shard {exc}") from None
        if (json_path := self.config.getoption("kernelopt_json")) is not None:
            self.json_path = Path(self.config.invocation_params.dir, json_path).resolve()
            folder = self.json_path.parent
            if self.json_path.is_dir() or not (folder.is_dir() and os.access(folder, os.W_OK)):
                raise UsageError(f"--kernelopt-json {json_path}: cannot write a file there")
        if (report_path := self.config.getoption("kernelopt_report")) is not None:
            self.report_path = Path(self.config.invocation_params.dir, report_path).resolve()
            folder = self.report_path.parent
            if self.report_path.is_dir() or not (folder.is_dir() and os.access(folder, os.W_OK)):
                raise UsageError(f"--kernelopt-report {report_path}: cannot write a file there")

    def in_shard(self, problem: _Problem) -> bool:
        """Whether this run checks ``problem`` (always, unless ``--kernelopt-shard`` puts it in another shard)."""
        from .shard import shard_of

        return self.shard is None or shard_of(problem.id, self.shard.count) == self.shard.index

    def _rel(self, path: Path) -> str:
        return os.path.relpath(path, self.rootpath)

    def _resolve_base_ref(self) -> None:
        """``--kernelopt-base-ref`` to a commit of the git repository holding the rootdir, once."""
        def git(*args: str) -> str | None:
            try:
                done = subprocess.run(["git", *args], cwd=self.rootpath, capture_output=True, text=True)
            except OSError as exc:
                raise UsageError(f"--kernelopt-base-ref {self.base_ref}: cannot run git ({exc.strerror})") from None
            return done.stdout.strip() if done.returncode == 0 else None

        top = git("rev-parse", "--show-toplevel")
        if top is None:
            raise UsageError(f"--kernelopt-base-ref {self.base_ref}: {self.rootpath} is not in a git repository")
        commit = git("rev-parse", "--verify", "--quiet", f"{self.base_ref}^{{commit}}")
        if commit is None:
            raise UsageError(f"--kernelopt-base-ref {self.base_ref}: no such commit in the git repository {top}")
        self._git_top, self.base_commit = Path(top).resolve(), commit

    def initial_paths(self) -> list[str]:
        """Problem files to collect besides pytest's own paths.

        With paths on the command line, pytest collects exactly those (a problem file, a
        folder holding some, or an item's id). Without, it collects ``testpaths`` (or the
        current folder) and, here, every problem file outside them.
        """
        if self.config.args_source == pytest.Config.ArgsSource.ARGS:
            return []
        here = Path(self.config.invocation_params.dir)
        roots = [(here / arg).resolve() for arg in self.config.args]
        return [str(path) for path, problem in self.problems.items()
                if self.in_shard(problem) and not any(path.is_relative_to(root) for root in roots)]

    # --- collection ----------------------------------------------------------------

    def collect_file(self, file_path: Path, parent: pytest.Collector, collected: list[Any]) -> list[Any]:
        """A problem file is collected by the gate, never imported as a test module."""
        problem = self.problems.get(file_path.resolve()) if file_path.suffix == ".py" else None
        if problem is None:
            return collected
        others = [c for c in collected if not isinstance(c, pytest.Module)]
        if not self.in_shard(problem):  # another runner's: not compiled here
            return others
        return [*others, ProblemFile.from_parent(parent, path=file_path, gate=self, problem=problem)]

    def load(self, problem: _Problem) -> _Problem:
        """Compile the problem once, to know its kernels (each xdist worker does this)."""
        from .capture import compile_problem
        from .capture.problem import load_problem

        if not problem.loaded:
            problem.loaded = True
            try:
                with _internal_warnings_ignored():
                    problem.compiled = compile_problem(load_problem(problem.path), self.device)
                problem.kernels = list(problem.compiled.kernels)
            except KerneloptError as exc:
                problem.error = str(exc)
        return problem

    # --- checks --------------------------------------------------------------------

    @property
    def store(self) -> Any:
        from .store import KernelStore

        return KernelStore(self.settings.kernels_path)

    @property
    def policy(self) -> Any:
        return self.options.speed

    def session(self, problem: _Problem, item: _GateItem) -> Any:
        """One verification session per problem, shared by its items; the first item pays for opening it."""
        from .verify import VerifySession

        session = self._sessions.get(problem.path)
        if session is None:
            session = self._sessions[problem.path] = VerifySession(problem.path, self.device, self.options)
            started = time.monotonic()
            try:
                with _internal_warnings_ignored():
                    session.open()
            finally:
                item.prop("open_seconds", round(time.monotonic() - started, 2))
        return session

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def _before_checks(self, problem: _Problem, item: Any) -> None:
        """A problem that failed to compile fails its items; the first item of a problem runs
        refresh and tune on it (what they store is then gated like any committed kernel)."""
        if problem.error:
            raise GateFailure(problem.error)
        if (self.tune or self.refresh) and problem.path not in self._tuned:
            self._tuned.add(problem.path)
            if self.refresh:
                self._refresh_problem(problem, item)
            if self.tune:
                self._tune_problem(problem, item)

    def check_kernel(self, item: KernelItem) -> None:
        problem, kernel = item.problem, item.name
        self._before_checks(problem, item)
        info = problem.compiled.kernel(kernel).info
        item.prop("model", problem.id)
        try:
            # The whole folder (every version against its sha256, no file the manifest does not
            # record), then the active version: what the gate passes is what the store holds.
            self.store.check(problem.id, kernel)
            found = self.store.active_file(problem.id, kernel)
        except KerneloptError as exc:
            item.prop("status", "broken")
            raise GateFailure(str(exc)) from exc
        if found is None:
            item.prop("status", "baseline")
            return
        manifest, path = found.manifest, found.path
        item.prop("version", manifest.active)
        if manifest.fingerprint != info.fingerprint:
            item.prop("status", "stale")
            self._stale_failure(f"stale: {path} replaces compiler kernel {manifest.fingerprint}, but the compiler now "
                                f"generates {info.fingerprint}; the compiler's kernel is used")
        from .verify import source_of

        # The bytes the store just checked against its sha256 are the bytes verified.
        session = self.session(problem, item)
        with _internal_warnings_ignored():
            verdict = session.verify(kernel, source_of(found.source, str(path)))
        self._figures(item, verdict)
        if verdict.status == "rejected":
            item.prop("status", "rejected")
            raise GateFailure(f"{path}: rejected at {verdict.reason}{_reproduce(verdict)}")
        timing = verdict.model_timing
        if self.policy.slower(timing):
            item.prop("status", "slower")
            raise GateFailure(f"{path}: slower than the compiler kernel: model {timing.speedup:.3f}x "
                              f"(95% CI [{timing.ci_low:.3f}, {timing.ci_high:.3f}])")
        item.prop("status", "committed")

    def check_model(self, item: ModelItem) -> None:
        problem = item.problem
        self._before_checks(problem, item)
        item.prop("model", problem.id)
        replacements, stale, broken = {}, [], []
        for kernel in problem.kernels:
            try:
                found = self.store.active_file(problem.id, kernel)
            except KerneloptError as exc:
                broken.append(f"{kernel}: {exc}")
                continue
            if found is None:
                continue
            if found.manifest.fingerprint != problem.compiled.kernel(kernel).info.fingerprint:
                stale.append(kernel)
            else:
                from .verify import source_of

                replacements[kernel] = source_of(found.source, str(found.path))
        item.prop("baseline", len(problem.kernels) - len(replacements) - len(stale) - len(broken))
        orphaned: list[str] = []
        try:
            self.store.model_record(problem.id)  # a broken model.json fails here, measured or not
            # A folder with no active version (retired by refresh) runs nothing: not stale.
            orphaned = [k for k in self.store.kernel_names(problem.id) if k not in problem.kernels
                        and (m := self.store.manifest(problem.id, k)) is not None and m.active is not None]
        except KerneloptError as exc:
            broken.append(str(exc))
        item.prop("kernels", len(problem.kernels))
        item.prop("committed", len(replacements))
        item.prop("stale", len(stale) + len(orphaned))
        if broken:
            raise GateFailure("; ".join(broken))
        if orphaned:  # counted as stale; the summary's note names them
            item.prop("orphaned", orphaned)
            if self.strict:
                raise GateFailure(f"stale: {self.store.model_dir(problem.id)} holds committed versions of "
                                  f"{', '.join(orphaned)}, which the compiler no longer generates for {problem.id}; "
                                  "they are not used and were not verified (re-tune, or remove the folders; to pass "
                                  "anyway, --kernelopt-allow-stale or allow_stale = true in [tool.kernelopt])")
        base_text = self._base_text(problem) if self.base_commit else None
        if self.base_commit and base_text is None:
            item.prop("vs_base", f"new at {self.base_ref}: nothing to compare")
        if not replacements and base_text is None:
            item.prop("status", "baseline")
            return
        session = self.session(problem, item)
        with self._base_file(problem, base_text) as base_problem, _internal_warnings_ignored():
            verdict = session.verify_model(replacements, base_problem=base_problem)
        self._figures(item, verdict)
        if verdict.status == "rejected":
            raise GateFailure(f"{problem.id} with committed kernels: rejected at {verdict.reason}{_reproduce(verdict)}")
        timing = verdict.model_timing
        if replacements and self.policy.slower(timing):
            raise GateFailure(f"{problem.id}: committed kernels make the model slower: {timing.speedup:.3f}x "
                              f"(95% CI [{timing.ci_low:.3f}, {timing.ci_high:.3f}])")
        self._check_recorded(item, problem.id, verdict)
        base = verdict.base_timing
        if base is not None:
            item.prop("vs_base_speedup", round(base.speedup, 4))
            item.prop("vs_base_ci", [round(base.ci_low, 4), round(base.ci_high, 4)])
            if self.policy.slower(base):
                raise GateFailure(f"{problem.id}: slower than at {self.base_ref}: {base.speedup:.3f}x "
                                  f"(95% CI [{base.ci_low:.3f}, {base.ci_high:.3f}])")
        # Passed: with committed kernels swapped in ("committed"), or the compiler's alone (it was null).
        item.prop("status", "committed" if replacements else "baseline")

    def _check_recorded(self, item: ModelItem, model: str, verdict: Any) -> None:
        """Compare the measured speedup with the one recorded in kernels/<model>/model.json for this environment."""
        from .store import environment_key

        timing = verdict.model_timing
        if timing is None or verdict.environment is None or not self.policy.measurable(timing):
            return
        try:
            recorded = self.store.model_record(model).baselines.get(environment_key(verdict.environment))
        except KerneloptError as exc:
            raise GateFailure(str(exc)) from exc
        if recorded is None or recorded.timing is None:
            return
        item.prop("recorded_speedup", round(recorded.timing.speedup, 4))
        regressed, note = self.policy.against_recorded(timing, recorded.timing)
        if note is not None:
            item.prop("recorded_note", note)
            if regressed:
                raise GateFailure(f"{model}: slower than recorded on {recorded.measured:%Y-%m-%d} in this environment: {note}")
            return
        if regressed:
            raise GateFailure(
                f"{model}: speedup over the compiled model regressed: now {timing.speedup:.3f}x (95% CI "
                f"[{timing.ci_low:.3f}, {timing.ci_high:.3f}]), recorded {recorded.timing.speedup:.3f}x on "
                f"{recorded.measured:%Y-%m-%d} in this environment")

    def _base_text(self, problem: _Problem) -> bytes | None:
        """The problem file's bytes at the base commit; None when it did not exist there."""
        assert self._git_top is not None and self.base_commit is not None
        try:
            rel = problem.path.relative_to(self._git_top).as_posix()
        except ValueError:
            raise GateFailure(f"{problem.path}: outside the git repository {self._git_top}, "
                              f"so it cannot be compared with {self.base_ref}") from None
        spec = f"{self.base_commit}:{rel}"
        if subprocess.run(["git", "cat-file", "-e", spec], cwd=self._git_top, capture_output=True).returncode != 0:
            return None
        shown = subprocess.run(["git", "show", spec], cwd=self._git_top, capture_output=True)
        if shown.returncode != 0:
            why = shown.stderr.decode(errors="replace").strip()
            raise GateFailure(f"{rel} at {self.base_ref}: git show failed: {why}")
        return shown.stdout

    @staticmethod
    @contextmanager
    def _base_file(problem: _Problem, text: bytes | None) -> Iterator[str | None]:
        """The base revision's problem file in a temporary folder, removed when the check ends, however it ends."""
        if text is None:
            yield None
            return
        with tempfile.TemporaryDirectory(prefix="kernelopt-base-") as folder:
            target = Path(folder) / problem.path.name
            target.write_bytes(text)
            yield str(target)

    @staticmethod
    def _figures(item: Any, verdict: Any) -> None:
        worst = max((e.candidate_vs_fp64 or 0.0 for e in verdict.errors), default=None)
        if worst is not None:
            item.prop("error_vs_fp64", worst)
            item.prop("baseline_error_vs_fp64", max((e.baseline_vs_fp64 or 0.0 for e in verdict.errors), default=0.0))
        item.prop("speed_measured", verdict.speed_measured)
        if verdict.environment is not None and verdict.environment.gpu:
            item.prop("gpu", verdict.environment.gpu)
        if verdict.model_timing is not None:
            t = verdict.model_timing
            item.prop("speedup", round(t.speedup, 4))
            item.prop("speedup_ci", [round(t.ci_low, 4), round(t.ci_high, 4)])
        for stage in verdict.stages:
            item.prop(f"stage_{stage.name}_seconds", round(stage.seconds, 2))
        item.prop("verify_seconds", round(verdict.wall_seconds, 2))

    # --- reporting (runs in the controller under xdist) --------------------------------

    def header_lines(self) -> list[str]:
        lines = self.workers.header()
        if self.shard is not None:
            mine = sorted(p.id for p in self.problems.values() if self.in_shard(p))
            lines.append(f"kernelopt: shard {self.shard}: {len(mine)} of {len(self.problems)} problems "
                         f"({', '.join(mine) or 'none'}); {len(self.problems) - len(mine)} in other shards, "
                         f"not collected")
        return lines

    def record(self, report: pytest.TestReport) -> None:
        """Keep each gate item's result for ``--kernelopt-json`` and ``--kernelopt-report`` (in the process that
        writes them)."""
        from .results import item_result

        if (self.json_path or self.report_path) is not None and self.workers.worker_id is None:
            if (result := item_result(report)) is not None:
                self.items.append(result)
        if self.open_pr and self.workers.worker_id is None:
            file = report.nodeid.split("::")[0]
            if report.failed:
                self._failed_files.add(file)
            for key, value in report.user_properties:
                if key in (PREFIX + "tune_run", PREFIX + "refresh_run"):
                    self._tune_runs_by_file.setdefault(file, []).append(str(value))

    def finish(self, session: pytest.Session) -> None:
        """Controller, after every item: an empty shard is no failure; write ``--kernelopt-json``."""
        if self.shard is not None and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED \
                and not any(self.in_shard(p) for p in self.problems.values()):
            session.exitstatus = pytest.ExitCode.OK
        if self.open_pr and self.workers.worker_id is None:
            self._publish()
        if (self.json_path or self.report_path) is None or self.workers.worker_id is not None:
            return
        from . import results

        settings = results.GateSettings(seeds=self.options.seeds, timeout=self.options.timeout,
                                        max_slowdown=self.policy.max_slowdown,
                                        max_regression=self.policy.max_regression, strict=self.strict,
                                        base_ref=self.base_ref, base_commit=self.base_commit)
        result = results.gate_result(shard=self.shard, problems=[p.id for p in self.problems.values()
                                                                 if self.in_shard(p)],
                                     environment=results.environment(self.device, self.items),
                                     settings=settings, items=self.items,
                                     run_problems=[p.id for p in self.problems.values()])
        if self.json_path is not None:
            results.write(result, self.json_path)
        if self.report_path is not None:
            from .report.gate import write_gate_report
            from .templates import project_templates

            write_gate_report(result, self.report_path, project_templates(self.rootpath))

    def _publish(self) -> None:
        """``--kernelopt-open-pr``: branches and pull requests for the problems whose gate items all passed."""
        from .gitops import publish_run

        for file, run_dir in sorted((f, r) for f, runs in self._tune_runs_by_file.items() for r in runs):
            if file in self._failed_files:
                self.publish_lines.append(f"kernelopt publish: {file}: not published, one of its gate items failed")
                continue
            try:
                results = publish_run(run_dir, self.rootpath, open_pr=True)
            except KerneloptError as exc:
                self.publish_lines.append(f"kernelopt publish: {file}: {exc}")
                continue
            if not results:
                self.publish_lines.append(f"kernelopt publish: {file}: the tuning run stored nothing new")
            self.publish_lines += [f"kernelopt publish: {r.line()}" for r in results]

    def write_summary(self, terminalreporter: Any) -> None:
        """The table of :func:`~pytest_kernelopt.report.gate_lines`, from the call reports pytest kept."""
        from .report import gate_lines

        rows = []
        for reports in terminalreporter.stats.values():
            for report in reports:
                if isinstance(report, pytest.TestReport) and report.when == "call":
                    props = {k[len(PREFIX):]: v for k, v in report.user_properties if k.startswith(PREFIX)}
                    if "item" in props:
                        rows.append((report.nodeid, report.outcome, props))
        lines = gate_lines(rows)
        if self.shard is not None and not any(self.in_shard(p) for p in self.problems.values()):
            # pytest's own last line says "no tests ran": say what that means here.
            lines.append(f"kernelopt: shard {self.shard} holds none of the {len(self.problems)} problem(s) (each goes to "
                         "one shard by its name); nothing to check on this runner, which passes (exit 0)")
        lines += [f"kernelopt tune: run directory {run}" for run in self.tune_runs]
        lines += self.refresh_lines
        lines += self.publish_lines
        if lines:
            terminalreporter.section("kernelopt")
            for line in lines:
                terminalreporter.write_line(line)


class _Borrowed:
    """The gate's verification session lent to ``refresh`` (which would close a session it opened)."""

    def __init__(self, session: Any):
        self.session = session

    def __enter__(self) -> Any:
        return self.session

    def __exit__(self, *exc: object) -> None:
        pass


# --- nodes -----------------------------------------------------------------------------

class ProblemFile(pytest.File):
    """A configured problem file: compiled at collection, one item per Triton kernel and one for the model."""

    def __init__(self, *, gate: GateSession, problem: _Problem, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate = gate
        self.problem = problem

    def collect(self) -> Iterator[pytest.Item]:
        problem = self.gate.load(self.problem)
        for kernel in problem.kernels:
            yield KernelItem.from_parent(self, name=kernel, gate=self.gate, problem=problem)
        yield ModelItem.from_parent(self, name="model", gate=self.gate, problem=problem)


class _GateItem(pytest.Item):
    kind = ""

    def __init__(self, *, gate: GateSession, problem: _Problem, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate = gate
        self.problem = problem
        self.add_marker("kernelopt")

    def prop(self, key: str, value: Any) -> None:
        self.user_properties.append((PREFIX + key, value))

    def runtest(self) -> None:
        self.prop("item", self.kind)
        started = time.monotonic()
        try:
            self.check()
        finally:
            # The whole item, opening the problem's verification session included when this
            # item was the first of its problem to need it (``open_seconds`` says how long).
            self.prop("wall_seconds", round(time.monotonic() - started, 2))

    def check(self) -> None:
        raise NotImplementedError

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (GateFailure, KerneloptError)):
            from .report.untrusted import plain

            # It quotes the candidate (verdict reasons, exception text): what reaches the
            # terminal and junit XML is escaped and capped.
            return plain(str(excinfo.value))
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"kernelopt {self.nodeid}"  # line 0: skips are reported at the problem file


class KernelItem(_GateItem):
    kind = "kernel"

    def check(self) -> None:
        self.gate.check_kernel(self)


class ModelItem(_GateItem):
    kind = "model"

    def check(self) -> None:
        self.gate.check_model(self)
