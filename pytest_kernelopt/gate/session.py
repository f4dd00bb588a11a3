"""The gate's state for one pytest run: :class:`GateSession`, created when pytest configures.

It reads the options (:mod:`.options`), finds the problem files (:mod:`.problems`),
resolves the base revision (:mod:`.base`) and the device, and ties the parts together:
the pytest-xdist side (:mod:`.xdist`), the checks (:mod:`.checks`) with tune and refresh
before them (:mod:`.tuning`), publishing (:mod:`.publish`) and what the gate says
(:mod:`.output`). Every hook of ``plugin.py`` hands over to it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..errors import KerneloptError
from .base import BaseRef
from .checks import Checks, VerifySessions
from .items import GateItem, ProblemFile
from .options import read_options
from .output import GateOutput
from .problems import Problem, compile_once, find_problems
from .publish import Publisher
from .thresholds import SpeedRules
from .torch_warnings import internal_warnings_ignored
from .tuning import Tuning
from .xdist import GateWorkers


class GateSession:
    """The gate's state for one pytest run; every hook of the plugin hands over to it."""

    def __init__(self, config: pytest.Config):
        self.config = config
        self.rootpath = Path(config.rootpath)
        self.gpu_neighbour: str | None = None  # read with the header (measure/neighbours.py)
        try:
            self._configure()
        except KerneloptError as exc:
            raise pytest.UsageError(f"kernelopt: {exc}") from None

    def _configure(self) -> None:
        """Settings, options, problem files, base revision and device, cheapest first; nothing compiled."""
        from ..config import load_config, resolve_device

        self.settings = load_config(self.rootpath)
        self.options = read_options(self.config, self.settings)
        self.problems: dict[Path, Problem] = find_problems(self._problem_globs(), self.settings, self.rootpath)
        # The names in [tool.kernelopt] thresholds and accepted_regressions refer to the configured
        # problems, whichever of them --kernelopt-problems runs.
        models = [p.id for p in self.problems.values()] + [p.stem for p in self.settings.problem_files()]
        self.rules = SpeedRules(self.options.verify.speed, self.settings, models)
        self.base = BaseRef(self.options.base_ref, self.rootpath) if self.options.base_ref is not None else None
        self.workers = GateWorkers(self.config)  # an xdist worker is pinned to its GPU here, before CUDA starts
        with internal_warnings_ignored():  # resolving imports torch
            self.device = resolve_device(self.options.device or self.settings.device)
        self.workers.check(self.device)  # more workers than GPUs: UsageError
        if self.workers.unpinned:  # this worker could time on another's GPU: its items fail, saying why
            for problem in self.problems.values():
                problem.loaded, problem.error = True, self.workers.unpinned
        sessions = VerifySessions(self.device, self.options.verify)
        self.tuning = Tuning(self.options, self.settings, self.device, self._store, sessions)
        self.checks = Checks(strict=self.options.strict, rules=self.rules, store=self._store,
                             sessions=sessions, base=self.base, before=self.tuning.before_checks, owners=models)
        self.publisher = Publisher(self.rootpath) if self.options.open_pr else None
        self.output = GateOutput(self.options, self.rootpath, self.rules)

    def _problem_globs(self) -> list[str] | None:
        """``--kernelopt-problems``; else, where no ``[tool.kernelopt] problems`` are configured, the problem files
        named on the command line (``pytest --kernelopt models/my_model.py`` in a repository without a
        pyproject.toml: a ``.py`` file defining ``get_inputs``); else None (the configured ones)."""
        if self.options.problem_globs is not None or self.settings.problems \
                or self.config.args_source != pytest.Config.ArgsSource.ARGS:
            return self.options.problem_globs
        here = Path(self.config.invocation_params.dir)
        named = [(here / arg.split("::")[0]).resolve() for arg in self.config.args]
        files = [str(path) for path in named if path.suffix == ".py" and path.is_file()
                 and "def get_inputs" in path.read_text(errors="replace")]
        return files or None

    def start(self) -> None:
        """Register for the items' reports; collect the problem files outside pytest's own paths too."""
        self.config.pluginmanager.register(self, "kernelopt-gate")
        self.config.args.extend(self.initial_paths())

    def _store(self) -> Any:
        from ..store import KernelStore

        return KernelStore(self.settings.kernels_path)

    def in_shard(self, problem: Problem) -> bool:
        """Whether this run checks ``problem`` (always, unless ``--kernelopt-shard`` puts it in another shard)."""
        from ..shard import shard_of

        shard = self.options.shard
        return shard is None or shard_of(problem.id, shard.count) == shard.index

    def _mine(self) -> list[str]:
        return [p.id for p in self.problems.values() if self.in_shard(p)]

    # --- collection ----------------------------------------------------------------

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

    def collect_file(self, file_path: Path, parent: pytest.Collector, collected: list[Any]) -> list[Any]:
        """A problem file is collected by the gate, never imported as a test module."""
        problem = self.problems.get(file_path.resolve()) if file_path.suffix == ".py" else None
        if problem is None:
            return collected
        others = [c for c in collected if not isinstance(c, pytest.Module)]
        if not self.in_shard(problem):  # another runner's: not compiled here
            return others
        return [*others, ProblemFile.from_parent(parent, path=file_path, gate=self, problem=problem)]

    def load(self, problem: Problem) -> Problem:
        """Compile the problem once, to know its kernels (each xdist worker does this)."""
        return compile_once(problem, self.device, self._store())

    # --- the items that will run, and each as it ends: one problem's memory at a time ----

    def pytest_collection_finish(self, session: pytest.Session) -> None:
        """Count each problem's items that will run here, so that its session closes after the last."""
        selected = [item for item in session.items if isinstance(item, GateItem)]
        self.checks.sessions.expect(item.problem for item in selected)
        for item in selected:  # the store-wide check goes with whatever runs: a subset of items cannot leave it out
            item.store_check = item is selected[0]

    @pytest.hookimpl(trylast=True)
    def pytest_runtest_teardown(self, item: pytest.Item) -> None:
        """After a problem's last item (passed, failed or skipped), its verification worker is stopped,
        which gives its device memory back before the next problem's worker opens."""
        if isinstance(item, GateItem):
            self.checks.sessions.item_done(item.problem)

    # --- after each item, and at the end (the controller under xdist) ------------------

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        """Keep each gate item's result (summary, ``--kernelopt-json``, ``--kernelopt-report``) and what
        ``--kernelopt-open-pr`` publishes, in the process that writes them."""
        if self.workers.worker_id is not None:
            return
        self.output.record(report)
        if self.publisher is not None:
            self.publisher.record(report)

    def finish(self, session: pytest.Session) -> None:
        """Stop the verification workers; an empty shard is no failure; publish; write the files asked for."""
        self.checks.sessions.close()
        shard = self.options.shard
        if shard is not None and session.exitstatus == pytest.ExitCode.NO_TESTS_COLLECTED and not self._mine():
            session.exitstatus = pytest.ExitCode.OK
        if self.workers.worker_id is not None:
            return
        if self.publisher is not None:
            self.publisher.publish()
        self.output.write_files(device=self.device, problems=self._mine(),
                                run_problems=[p.id for p in self.problems.values()], base=self.base,
                                gpu_neighbour=self.gpu_neighbour)

    def seed_lines(self) -> list[str]:
        """What a pinned seed did: it added seeds, it replaced none (VerifyOptions.session_seeds)."""
        verify = self.options.verify
        if verify.seed is None:
            return []
        return [f"kernelopt: pinned seed {verify.seed} (--kernelopt-seed, from the command line or addopts): its "
                f"{verify.seeds} seed(s) were checked in addition to {verify.seeds} drawn from the OS for each "
                f"session; every check's own draws were fresh"]

    def environment_line(self) -> str:
        """Where the verdicts come from: the device, torch and triton, and the settings file read."""
        import torch
        import triton

        device = f"cuda ({gpu_names()})" if self.device == "cuda" else "cpu (Triton interpreter)"
        source = self.settings.source
        settings = "none (defaults)"
        if source is not None:
            settings = str(Path(source).relative_to(self.rootpath)) if Path(source).is_relative_to(self.rootpath) \
                else str(source)
            settings += " [tool.kernelopt]"
        return f"kernelopt: {device}, torch {torch.__version__}, triton {triton.__version__}; settings: {settings}"

    def header_lines(self) -> list[str]:
        from ..measure.neighbours import neighbour_warning

        # Read before any item runs: another process busy on the GPU moves the speed items' ratios.
        self.gpu_neighbour = neighbour_warning(self.device)
        lines = [self.environment_line(), *self.workers.header(), *self.seed_lines()]
        if self.gpu_neighbour:
            lines.append(f"kernelopt: warning: {self.gpu_neighbour}")
        if (shard := self.options.shard) is not None:
            mine = sorted(self._mine())
            lines.append(f"kernelopt: shard {shard}: {len(mine)} of {len(self.problems)} problems "
                         f"({', '.join(mine) or 'none'}); {len(self.problems) - len(mine)} in other shards, "
                         f"not collected")
        return lines

    def write_summary(self, terminalreporter: Any) -> None:
        """The summary's table, then what tune, refresh and publishing did."""
        lines = self.seed_lines() + self.output.terminal_lines(self._mine())
        if (shard := self.options.shard) is not None and not self._mine():
            # pytest's own last line says "no tests ran": say what that means here.
            lines.append(f"kernelopt: shard {shard} holds none of the {len(self.problems)} problem(s) (each goes to "
                         "one shard by its name); nothing to check on this runner, which passes (exit 0)")
        lines += self.tuning.tune_lines
        lines += self.tuning.refresh_lines
        lines += self.publisher.lines if self.publisher is not None else []
        lines += self.output.history_lines
        if lines:
            terminalreporter.section("kernelopt")
            for line in lines:
                terminalreporter.write_line(line)
        from ..report.annotations import on_github_actions

        if on_github_actions():  # GitHub reads these from the step's output: at the start of a line, once each
            for line in self.output.annotation_lines(self._annotated_file):
                terminalreporter.write_line(line)

    def _annotated_file(self, item: Any) -> str:
        """The file a failure points at: the kernel's manifest when it is committed, else the problem file."""
        from ..report.annotations import repository_path
        from ..store import MANIFEST

        path = self.rootpath / item.problem
        if item.kernel is not None:
            manifest = self.settings.kernels_path / item.model / item.kernel / MANIFEST
            if manifest.is_file():
                path = manifest
        return repository_path(path, self.rootpath)


def gpu_names() -> str:
    """The visible GPUs' model ("NVIDIA H200", "NVIDIA H200 x 4"), read by nvidia-smi: asking torch would
    start CUDA in the controller, which never touches a GPU (its workers do). "GPU name unknown" without it."""
    import os
    from collections import Counter

    from ..child import child_env, run_child

    query = ["nvidia-smi", "--query-gpu=name", "--format=csv,noheader"]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible:
        query += ["-i", visible]
    try:
        out = run_child(query, env=child_env(), timeout=10, separate_stdout=True)
    except OSError:
        return "GPU name unknown"
    text = out.stdout.text if out.stdout is not None and out.returncode == 0 else ""
    names = Counter(line.strip() for line in text.splitlines() if line.strip())
    if not names:
        return "GPU name unknown"
    return ", ".join(name if n == 1 else f"{name} x {n}" for name, n in sorted(names.items()))
