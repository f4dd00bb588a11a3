"""The base revision as production ran it (the gate's ``--kernelopt-base-ref``), in the worker.

The base revision's problem file is compiled through the production backend
(:class:`~pytest_kernelopt.store.production.KerneloptBackend`) over that revision's own
``kernels/<model>/`` folder: its committed versions run at the launches they were verified
at, its ``model.json`` compile setting applies to the graphs it was verified at, and whatever
production would not use (stale, unverified, edited) leaves the compiler's kernel in place,
exactly as production at that revision would run the model. What ran is read back from the
backend as a :class:`~pytest_kernelopt.records.BaseRun`. Whatever goes wrong here is the
base's own failure and is said as such, never the candidate's.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..records import BaseKernel, BaseRun
from .prepared import Prepared

# Where the backend looks when nothing was committed at the base (a folder that never exists:
# every kernel is then the compiler's, and the compile setting Inductor's defaults).
NOTHING_COMMITTED = ".kernelopt-nothing-committed"


@dataclass
class CompiledBase:
    """The base revision's model compiled through the production backend."""

    problem: Any  # capture.problem.Problem, loaded from the base revision's file
    compiled: Any  # torch.compile(model, backend=backend)
    backend: Any  # store.production.KerneloptBackend
    device: str

    def inputs(self, seed: int) -> list[Any]:
        return self.problem.make_inputs(seed, self.device)

    def __call__(self, *inputs: Any) -> Any:
        import torch

        with torch.no_grad():  # as the head runs (capture.CompiledModel)
            return self.compiled(*inputs)


class _BaseFailed(Exception):
    """The base revision's model cannot be built, compiled or run: said in the report, blamed on no one."""


def open_base(prepared: Prepared, problem: str, kernels_dir: str | None) -> tuple[CompiledBase | None, BaseRun]:
    """The base compiled and run once on the session's first seed, and what ran; (None, why) when it fails.

    Kept on ``prepared`` for the session (one base at a time: it holds device memory). Out of memory
    is the verifier's failure (raised); any other exception is the base's (returned).
    """
    import torch

    key = (problem, kernels_dir)
    if key in prepared.base:
        return prepared.base[key]
    prepared.base.clear()
    try:
        base = _compile(prepared, problem, kernels_dir)
        opened: tuple[CompiledBase | None, BaseRun] = (base, what_ran(base.backend))
    except torch.OutOfMemoryError:
        raise
    except _BaseFailed as exc:
        opened = (None, BaseRun(failure=str(exc)))
    except Exception as exc:  # ProblemError, StoreError (a model id the store refuses), our own bug
        opened = (None, BaseRun(failure=f"{type(exc).__name__}: {_first_line(exc)}"))
    prepared.base[key] = opened
    return opened


def _compile(prepared: Prepared, path: str, kernels_dir: str | None) -> CompiledBase:
    import warnings

    import torch

    from ..capture.problem import load_problem
    from ..store.production import KerneloptBackend, KerneloptWarning

    problem = load_problem(path, shape=prepared.compiled.problem.shape)  # the head's shape, or the base's failure
    store = Path(kernels_dir) if kernels_dir else Path(path).parent / NOTHING_COMMITTED
    # The model id is the problem file's stem, as for the head (gate/base.py keeps the file's name).
    backend = KerneloptBackend(Path(path).stem, store, quiet=True)
    model = problem.build_model(prepared.device)
    inputs = problem.make_inputs(prepared.seeds[0], prepared.device)
    # Eager first, as capture.compile_problem does: a model broken by itself gets its own message.
    try:
        with torch.no_grad():
            model(*inputs)
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        raise _BaseFailed(f"the model fails in eager mode: {type(exc).__name__}: {_first_line(exc)}") from exc
    compiled = torch.compile(model, backend=backend)
    base = CompiledBase(problem=problem, compiled=compiled, backend=backend, device=prepared.device)
    try:
        # The backend's warnings (stale, not verified, ...) come back as BaseRun's words instead.
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", KerneloptWarning)
            base(*inputs)
        if prepared.device == "cuda":
            torch.cuda.synchronize()
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:
        raise _BaseFailed(f"compiling or running the model failed: {type(exc).__name__}: {_first_line(exc)}") from exc
    return base


def what_ran(backend: Any) -> BaseRun:
    """What the backend ran for each kernel of its graphs (the latest compile of each), and its compile setting.

    A committed version that was installed but never launched at its verified launches (the base's
    inputs are others) is reported as the compiler's: that is what ran.
    """
    from ..store.production import VerifiedLaunches

    latest = {(k.graph, k.name): k for k in backend.kernels}
    kernels = []
    for k in latest.values():
        runs, why = k.runs, k.why
        installed = getattr(k.module, k.attr, None) if k.module is not None else None
        if runs == "committed" and isinstance(installed, VerifiedLaunches) and not installed.runs["committed"]:
            runs, why = "compiler", "not verified at these launches"
        kernels.append(BaseKernel(name=k.name, runs=runs, version=k.version, why=why))
    under = backend.settings_applied
    # The settings the base's graphs compiled under; none applied: the one model.json records (at no graph here).
    applied = list(dict.fromkeys(v for v in under if v is not None))
    try:
        setting = ", ".join(applied) or next((c.variant for c in backend.store.compile_choices(backend.model)), None)
    except Exception:  # noqa: BLE001 - a broken model.json: the backend compiled with the defaults
        setting = None
    return BaseRun(kernels=kernels, compile=setting, graphs=len(under),
                   graphs_under_compile=sum(v is not None for v in under))


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else ""
