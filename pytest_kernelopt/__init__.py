"""pytest-kernelopt: tuned Triton kernels for torch.compile'd models, kept only when the whole model wins.

``import pytest_kernelopt`` stays light (pytest loads the plugin on every run): the
production API below imports torch only when called.

* ``pytest_kernelopt.compile(model, kernels_dir=None, *, model_id=None, **torch_compile_kwargs)``
* ``pytest_kernelopt.backend(model, kernels_dir=None)``: a backend for ``torch.compile``
* ``torch.compile(model, backend="kernelopt", options={"model": ..., "kernels_dir": ...})``
* ``pytest_kernelopt.status(compiled)``: which kernels come from ``kernels/`` and which are the compiler's, and why
* ``pytest_kernelopt.interpret.enable()``: interpreter mode (Triton on a CPU), before anything imports triton
"""

from __future__ import annotations

from typing import Any

__all__ = ["KerneloptBackend", "KerneloptWarning", "backend", "compile", "interpret", "status"]


def compile(model: Any, kernels_dir: Any = None, *, model_id: str | None = None, quiet: bool = False,
            **torch_compile_kwargs: Any) -> Any:
    """``torch.compile`` with Inductor, running the committed kernels of ``model_id`` (see :mod:`.production`)."""
    from .store.production import compile as compile_

    return compile_(model, kernels_dir, model_id=model_id, quiet=quiet, **torch_compile_kwargs)


def backend(model: str, kernels_dir: Any = None, *, quiet: bool = False) -> Any:
    """A ``torch.compile`` backend running the committed kernels of ``model`` (see :mod:`.production`)."""
    from .store.production import backend as backend_

    return backend_(model, kernels_dir, quiet=quiet)


def status(model: Any) -> Any:
    """Which kernels of a compiled model come from the store, and why the others do not (see :mod:`.production`)."""
    from .store.production import status as status_

    return status_(model)


def __getattr__(name: str) -> Any:
    if name in ("KerneloptBackend", "KerneloptWarning"):
        from .store import production

        return getattr(production, name)
    if name == "interpret":  # light (no torch until enable()): `pytest_kernelopt.interpret.enable()` just works
        import importlib

        return importlib.import_module(f"{__name__}.interpret")
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
