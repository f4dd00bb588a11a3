"""pytest-kernelopt: tuned Triton kernels for torch.compile'd models, kept only when the whole model wins.

``import pytest_kernelopt`` stays light (pytest loads the plugin on every run): the
production API below imports torch only when called.

* ``pytest_kernelopt.compile(model, kernels_dir=None, *, model_id=None, **torch_compile_kwargs)``
* ``pytest_kernelopt.backend(model, kernels_dir=None)``: a backend for ``torch.compile``
* ``torch.compile(model, backend="kernelopt", options={"model": ..., "kernels_dir": ...})``
"""

from __future__ import annotations

from typing import Any

__all__ = ["KerneloptBackend", "KerneloptWarning", "backend", "compile"]


def compile(model: Any, kernels_dir: Any = None, *, model_id: str | None = None, **torch_compile_kwargs: Any) -> Any:
    """``torch.compile`` with Inductor, running the committed kernels of ``model_id`` (see :mod:`.production`)."""
    from .production import compile as compile_

    return compile_(model, kernels_dir, model_id=model_id, **torch_compile_kwargs)


def backend(model: str, kernels_dir: Any = None) -> Any:
    """A ``torch.compile`` backend running the committed kernels of ``model`` (see :mod:`.production`)."""
    from .production import backend as backend_

    return backend_(model, kernels_dir)


def __getattr__(name: str) -> Any:
    if name in ("KerneloptBackend", "KerneloptWarning"):
        from . import production

        return getattr(production, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
