"""Shared fixtures: interpreter mode, compiled example problems, the ``kernelopt`` command.

Nothing here imports torch or triton at import time: a plain ``pytest`` run must stay
light (the plugin's own tests check that), so heavy imports happen inside fixtures.

Compiling a problem takes seconds even in interpreter mode, so every worker process
compiles each example problem once (:class:`CompiledModels`) and the tests share it.
"""

from __future__ import annotations

import ast
import json
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

import forkserver

TESTS = Path(__file__).parent
REPO = TESTS.parent
KERNELOPT = forkserver.KERNELOPT  # the console script of this venv


def pytest_configure(config: pytest.Config) -> None:
    # Inductor warns when it generates Triton for the CPU with no CPU backend present:
    # interpreter mode runs those kernels anyway (torch 2.13, triton 3.7.1).
    config.addinivalue_line("filterwarnings", "ignore:Could not find an active CPU backend:UserWarning")
    # Emitted by ``import torch`` itself (torch 2.13); nothing a test here can act on.
    config.addinivalue_line("filterwarnings", "ignore:`torch.jit.script_method` is deprecated:DeprecationWarning")
    if config.getoption("dist", "no") == "load":  # what `-n N` picks when no --dist is given (`make test`)
        config.option.dist = "loadfile"
        config.option.loadscopereorder = False  # keep HEAVIEST_FIRST's order (xdist would sort by test count)


# Fixtures that compile a problem in interpreter mode (seconds to a minute each): a test that uses one
# is `slow` whether or not it says so, so `make test-fast` (-m "not slow") leaves it out.
COMPILING_FIXTURES = frozenset({"compiled_models", "kernels_listing"})


# Under pytest-xdist (`make test`: -n 2) whole files go to a worker, as the gate does for problem files
# (pytest_configure: --dist load becomes loadfile): a file's module- and session-scoped fixtures that only
# it uses (a template repository, one `kernelopt verify` run of many candidates) are built on one worker,
# not on each worker that got some of its tests. The files slowest in a 2-core run (--durations, 2026-12-05)
# start first, so the two workers end together on short files, not one alone on a long one (re-ranked after the
# merges of 2026-12-05: -n 0 costs per file; again after issue 43's suite work of the same day, when
# test_compile_choice, 115-130 s alone, and test_training, about 90 s, ranked 11th and 9th). The order changes no result.
HEAVIEST_FIRST = (
    "test_compile_choice.py", "test_plugin.py", "test_shapes.py", "test_training.py", "test_cascade.py",
    "test_half.py", "test_agents.py", "test_gate_scale.py", "test_trust_inputs.py", "test_refresh.py",
    "test_verify_session.py", "test_gate_tune.py", "test_tune_training.py", "test_attacks.py", "test_trust_gate.py",
    "test_problem.py", "test_trust_data.py", "test_graph_rewrites.py", "test_production.py", "test_bench.py",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if COMPILING_FIXTURES & set(getattr(item, "fixturenames", ())):
            item.add_marker(pytest.mark.slow)
    # Then the other files, those with the most slow tests first. A stable sort: each file keeps its order.
    rank = {name: i for i, name in enumerate(HEAVIEST_FIRST)}
    slow: dict[str, int] = {}
    for item in items:
        slow[item.path.name] = slow.get(item.path.name, 0) + (item.get_closest_marker("slow") is not None)
    items.sort(key=lambda item: (rank.get(item.path.name, len(rank)), -slow[item.path.name]))


@pytest.fixture(scope="session")
def interpreter() -> str:
    """Interpreter mode for this worker process (the device string, "cpu")."""
    import os

    from pytest_kernelopt.config import resolve_device

    device = resolve_device("cpu")
    # The first compile in this process sets TRITON_CACHE_DIR (Inductor's CachingAutotuner, torch 2.13: the cache
    # folder of "device" None in interpreter mode), after which the worker's zygote, started with the environment
    # of the first command, was replaced (tests/forkserver.py: a Python start and torch's import). Set here to the
    # value the compile would set, before any command runs.
    from torch._inductor.runtime.cache_dir_utils import cache_dir

    os.environ.setdefault("TRITON_CACHE_DIR", os.path.join(cache_dir(), "triton", "None"))
    return device


@pytest.fixture(autouse=True)
def _grad_mode_kept() -> Any:
    """Each test starts with gradients recorded, as a fresh process does: code run in-process (bench's problem
    runner turns them off for inference) must not change what a later test in the same xdist worker sees (an
    interpreter test's backward once failed "does not require grad" in the full suite only)."""
    import sys

    torch = sys.modules.get("torch")  # never imported here: some tests check what an import loads
    if torch is not None:
        torch.set_grad_enabled(True)
    yield
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_grad_enabled(True)


@pytest.fixture(autouse=True)
def _interpreter_before_triton(request: pytest.FixtureRequest) -> None:
    """Switch interpreter mode on before any test can import triton.

    Triton decides at import whether its own ``@jit`` helpers are interpreted, so
    once anything imports it first (running ``small_mlp_graph_break`` eagerly does,
    through ``torch._dynamo``), interpreted kernels fail with "Cannot call
    @triton.jit'd outside of the scope of a kernel" (triton 3.7.1). GPU tests are
    left alone.
    """
    if request.node.get_closest_marker("gpu") is None:
        request.getfixturevalue("interpreter")


class CompiledModels:
    """``compile_problem(load_problem(path), "cpu")``, once per problem and worker process."""

    def __init__(self) -> None:
        self._models: dict[Path, Any] = {}

    def get(self, path: Path) -> Any:
        """The compiled problem; its captured records are valid, but see :meth:`live`."""
        path = Path(path).resolve()
        if path not in self._models:
            self._models[path] = self._compile(path)
        return self._models[path]

    def live(self, path: Path) -> Any:
        """The compiled problem, recompiled if it no longer runs the kernels it captured.

        ``compile_problem`` resets Dynamo by default, after which an earlier compiled
        model silently recompiles on its next call and swapping its kernels has no
        effect (torch 2.13). Tests that swap kernels need a model that is still live.
        """
        from pytest_kernelopt.capture.compiled import _record_wrapper_modules

        compiled = self.get(path)
        with _record_wrapper_modules() as loaded:
            compiled(*compiled.problem.make_inputs(0))
        if loaded:  # the call compiled afresh: the captured wrapper modules are no longer used
            compiled = self._models[Path(path).resolve()] = self._compile(Path(path).resolve())
        return compiled

    @staticmethod
    def _compile(path: Path) -> Any:
        from pytest_kernelopt.capture import compile_problem
        from pytest_kernelopt.capture.problem import load_problem

        # reset=False keeps the other problems compiled in this process live.
        return compile_problem(load_problem(path), "cpu", reset=False)


@pytest.fixture(scope="session")
def compiled_models(interpreter: str) -> CompiledModels:
    return CompiledModels()


# --- the command line -------------------------------------------------------------------

def run_kernelopt(*args: object, cwd: Path = REPO) -> subprocess.CompletedProcess[str]:
    """Run the installed ``kernelopt`` command (forked from this worker's zygote: tests/forkserver.py);
    never raises on a non-zero exit."""
    return forkserver.run([KERNELOPT, *map(str, args)], cwd=cwd, timeout=300)


@pytest.fixture
def pytester(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.Pytester:
    """pytester, its subprocess gate runs forked from this worker's zygote (tests/forkserver.py)."""
    forkserver.patch_pytester(pytester, monkeypatch)
    return pytester


@pytest.fixture(scope="session")
def kernelopt() -> Any:
    """``kernelopt(*args, cwd=...)`` -> CompletedProcess of the installed command."""
    return run_kernelopt


@dataclass
class KernelsListing:
    """One ``kernelopt kernels PROBLEM --json --dump DIR`` run."""

    result: subprocess.CompletedProcess[str]
    dump_dir: Path

    @property
    def rows(self) -> list[dict[str, Any]]:
        return json.loads(self.result.stdout)


@pytest.fixture(scope="session")
def kernels_listing(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """``kernels_listing(path)``: the ``--json --dump`` run of a problem, once per worker."""
    runs: dict[Path, KernelsListing] = {}

    def listing(path: Path) -> KernelsListing:
        if path not in runs:
            dump_dir = tmp_path_factory.mktemp(f"dump_{path.stem}")
            runs[path] = KernelsListing(run_kernelopt("kernels", path, "--json", "--dump", dump_dir), dump_dir)
        return runs[path]

    return listing


# --- editing candidates -----------------------------------------------------------------

def gate_project(root: Path, problem: Path, device: str = "cpu") -> Path:
    """``root`` as a project for the gate: ``problems/<problem>`` and a ``[tool.kernelopt]`` table."""
    (root / "problems").mkdir()
    shutil.copy(problem, root / "problems")
    (root / "pyproject.toml").write_text(f'[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "{device}"\n')
    return root


def add_to_last_store(source: str, amount: float = 1.0) -> str:
    """``source`` with ``amount`` added to the value its last ``tl.store`` writes.

    Gives a candidate that loads, launches and writes everything it should, but
    writes wrong numbers: what a subtly broken agent proposal looks like.
    """
    lines = source.splitlines()
    index = max(i for i, line in enumerate(lines) if "tl.store(" in line)
    line = lines[index]
    call = ast.parse(line.strip(), mode="eval").body
    assert isinstance(call, ast.Call), line
    call.args[1] = ast.BinOp(call.args[1], ast.Add(), ast.Constant(amount))
    lines[index] = line[: len(line) - len(line.lstrip())] + ast.unparse(call)
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="session")
def wrong_candidate() -> Any:
    """``wrong_candidate(source)``: see :func:`add_to_last_store`."""
    return add_to_last_store
