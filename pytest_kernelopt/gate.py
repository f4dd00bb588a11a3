"""The CI gate behind ``pytest --kernelopt``.

For every configured problem: one item per Triton kernel (``<model>::<kernel>``)
and one per model (``<model>::model``).

* kernel item: a committed active version goes through the whole cascade in an
  isolated worker (correct, and on a GPU not slower than the compiler's kernel);
  a stale one (the compiler now generates a different kernel) is reported as
  skipped, or fails under ``--kernelopt-strict``; no committed version: passes as
  compiler baseline.
* model item: the model with every active, non-stale version swapped in, against
  float64 (and on a GPU timed against the compiled baseline in the same run);
  with ``--kernelopt-base-ref`` also timed against the problem file at that git
  revision, compiled, side by side.

Figures travel in ``user_properties`` (so junit XML and pytest-xdist carry them)
and the terminal summary prints a table per model.
"""

from __future__ import annotations

import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .errors import KerneloptError

PREFIX = "kernelopt_"


class GateFailure(Exception):
    """A gate item failed: the message is the whole story (stage, figures)."""


@dataclass
class _Problem:
    path: Path
    id: str
    compiled: Any = None
    error: str | None = None
    kernels: list[str] = field(default_factory=list)


class GateSession:
    def __init__(self, config: pytest.Config):
        from .config import load_config

        self.config = config
        self.settings = load_config(Path(config.rootpath))
        self.device_choice = config.getoption("kernelopt_device") or self.settings.device
        self.globs = config.getoption("kernelopt_problems")
        self.strict = config.getoption("kernelopt_strict")
        self.base_ref = config.getoption("kernelopt_base_ref")
        self.seeds = config.getoption("kernelopt_seeds")
        self.timeout = config.getoption("kernelopt_timeout")
        # Slower "beyond noise" must also be slower by more than this: an unedited dump
        # measured 0.996x with a CI entirely below 1 on the H200 (20 of 20 runs).
        self.max_slowdown = config.getoption("kernelopt_max_slowdown")
        self.device: str | None = None
        self.problems: dict[str, _Problem] = {}
        self._sessions: dict[str, Any] = {}
        self._policy: Any = None

    @property
    def store(self) -> Any:
        from .store import KernelStore

        return KernelStore(self.settings.kernels_path)

    # --- collection ----------------------------------------------------------------

    def collect(self, session: pytest.Session) -> list[pytest.Item]:
        from .config import resolve_device

        files = self.settings.problem_files(self.globs)
        if not files:
            where = "--kernelopt-problems" if self.globs else "[tool.kernelopt] problems"
            raise pytest.UsageError(f"kernelopt: {where} matches no problem files")
        try:
            self.device = resolve_device(self.device_choice)
        except KerneloptError as exc:
            raise pytest.UsageError(f"kernelopt: {exc}") from exc
        items: list[pytest.Item] = []
        for path in files:
            problem = self._load(path)
            parent = ModelNode.from_parent(session, name=problem.id, nodeid=problem.id)
            parent.gate = self
            for kernel in problem.kernels:
                items.append(KernelItem.from_parent(parent, name=kernel, gate=self, problem=problem))
            items.append(ModelItem.from_parent(parent, name="model", gate=self, problem=problem))
        return items

    def _load(self, path: Path) -> _Problem:
        from .capture import compile_problem
        from .problem import load_problem

        problem = _Problem(path=path, id=path.stem)
        try:
            problem.compiled = compile_problem(load_problem(path), self.device or "cpu")
            problem.kernels = list(problem.compiled.kernels)
        except KerneloptError as exc:
            problem.error = str(exc)
        self.problems[problem.id] = problem
        return problem

    # --- checks --------------------------------------------------------------------

    def _options(self) -> Any:
        from .verify import SpeedPolicy, VerifyOptions

        return VerifyOptions(seeds=self.seeds, timeout=self.timeout, speed=SpeedPolicy(max_slowdown=self.max_slowdown))

    @property
    def policy(self) -> Any:
        return self._options().speed

    def session(self, problem: _Problem) -> Any:
        """One verification session per problem: compiled once, shared by its kernel and model items."""
        from .verify import VerifySession

        if problem.id not in self._sessions:
            self._sessions[problem.id] = VerifySession(problem.path, self.device or "cpu", self._options())
        return self._sessions[problem.id]

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()

    def check_kernel(self, item: KernelItem) -> None:
        problem, kernel = item.problem, item.name
        if problem.error:
            raise GateFailure(problem.error)
        info = problem.compiled.kernel(kernel).info
        item.prop("model", problem.id)
        try:
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
            message = (f"stale: {path} replaces compiler kernel {manifest.fingerprint}, but the compiler now generates "
                       f"{info.fingerprint}; the compiler's kernel is used")
            if self.strict:
                raise GateFailure(message)
            pytest.skip(message)
        from .verify import source_of

        # The bytes the store just checked against its sha256 are the bytes verified.
        verdict = self.session(problem).verify(kernel, source_of(found.source, str(path)))
        self._figures(item, verdict)
        if verdict.status == "rejected":
            item.prop("status", "rejected")
            raise GateFailure(f"{path}: rejected at {verdict.reason}")
        timing = verdict.model_timing
        if self.policy.slower(timing):
            item.prop("status", "slower")
            raise GateFailure(f"{path}: slower than the compiler kernel: model {timing.speedup:.3f}x "
                              f"(95% CI [{timing.ci_low:.3f}, {timing.ci_high:.3f}])")
        item.prop("status", "committed")

    def check_model(self, item: ModelItem) -> None:
        problem = item.problem
        if problem.error:
            raise GateFailure(problem.error)
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
        item.prop("kernels", len(problem.kernels))
        item.prop("committed", len(replacements))
        item.prop("stale", len(stale))
        if broken:
            raise GateFailure("; ".join(broken))
        if not replacements and not self.base_ref:
            item.prop("status", "baseline")
            return
        base_problem = self._base_problem(problem.path) if self.base_ref else None
        verdict = self.session(problem).verify_model(replacements, base_problem=base_problem)
        self._figures(item, verdict)
        if verdict.status == "rejected":
            raise GateFailure(f"{problem.id} with committed kernels: rejected at {verdict.reason}")
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
        if self.policy.regressed(timing, recorded.timing.speedup):
            raise GateFailure(
                f"{model}: speedup over the compiled model regressed: now {timing.speedup:.3f}x (95% CI "
                f"[{timing.ci_low:.3f}, {timing.ci_high:.3f}]), recorded {recorded.timing.speedup:.3f}x on "
                f"{recorded.measured:%Y-%m-%d} in this environment")

    def _base_problem(self, path: Path) -> str | None:
        """The problem file as it is at ``--kernelopt-base-ref``, in a temp folder (None if it did not exist)."""
        root = Path(self.config.rootpath)
        try:
            top = subprocess.run(["git", "rev-parse", "--show-toplevel"], cwd=root, capture_output=True, text=True,
                                 check=True).stdout.strip()
            rel = path.resolve().relative_to(Path(top).resolve())
            text = subprocess.run(["git", "show", f"{self.base_ref}:{rel.as_posix()}"], cwd=top, capture_output=True,
                                  text=True, check=True).stdout
        except (subprocess.CalledProcessError, ValueError, OSError):
            return None
        folder = Path(tempfile.mkdtemp(prefix="kernelopt-base-"))
        target = folder / path.name
        target.write_text(text)
        return str(target)

    @staticmethod
    def _figures(item: Any, verdict: Any) -> None:
        worst = max((e.candidate_vs_fp64 or 0.0 for e in verdict.errors), default=None)
        if worst is not None:
            item.prop("error_vs_fp64", worst)
            item.prop("baseline_error_vs_fp64", max((e.baseline_vs_fp64 or 0.0 for e in verdict.errors), default=0.0))
        item.prop("speed_measured", verdict.speed_measured)
        if verdict.model_timing is not None:
            t = verdict.model_timing
            item.prop("speedup", round(t.speedup, 4))
            item.prop("speedup_ci", [round(t.ci_low, 4), round(t.ci_high, 4)])
        for stage in verdict.stages:
            item.prop(f"stage_{stage.name}_seconds", round(stage.seconds, 2))
        item.prop("wall_seconds", round(verdict.wall_seconds, 2))


# --- nodes -----------------------------------------------------------------------------

class ModelNode(pytest.Collector):
    """One problem file; its items are created by GateSession.collect."""

    gate: GateSession

    def collect(self) -> list[pytest.Item]:  # pragma: no cover - items are attached directly
        return []


class _GateItem(pytest.Item):
    def __init__(self, *, gate: GateSession, problem: _Problem, **kwargs: Any):
        super().__init__(**kwargs)
        self.gate = gate
        self.problem = problem
        self.add_marker("kernelopt")

    def prop(self, key: str, value: Any) -> None:
        self.user_properties.append((PREFIX + key, value))

    def repr_failure(self, excinfo: Any, style: Any = None) -> str:
        if isinstance(excinfo.value, (GateFailure, KerneloptError)):
            return str(excinfo.value)
        return super().repr_failure(excinfo)

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.problem.path, None, f"kernelopt {self.nodeid}"


class KernelItem(_GateItem):
    def runtest(self) -> None:
        self.prop("item", "kernel")
        self.gate.check_kernel(self)


class ModelItem(_GateItem):
    def runtest(self) -> None:
        self.prop("item", "model")
        self.gate.check_model(self)


# --- reporting (runs in the controller under xdist) ------------------------------------

_rows: list[tuple[str, str, dict[str, Any]]] = []


def record_report(report: pytest.TestReport) -> None:
    if report.when != "call" and not (report.when == "setup" and report.skipped):
        return
    props = {k[len(PREFIX):]: v for k, v in report.user_properties if k.startswith(PREFIX)}
    if "item" in props or (report.skipped and "status" in props):
        _rows.append((report.nodeid, report.outcome, props))


def write_summary(terminalreporter: Any) -> None:
    from .report import gate_lines

    lines = gate_lines(_rows)
    if lines:
        terminalreporter.section("kernelopt")
        for line in lines:
            terminalreporter.write_line(line)
