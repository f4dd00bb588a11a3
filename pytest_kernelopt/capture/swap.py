"""Swap: put a candidate in place of a compiler kernel of the live compiled model, and back.

The compiled graph's ``call()`` looks its kernels up as globals of the wrapper
module at every call, so replacing the global is enough; restoring puts the very
object Inductor created back (bit-identical behaviour).
"""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any, Iterator

from ..candidate import CandidateKernel, load_candidate
from .compiled import CompiledModel, is_current


def swap(compiled: CompiledModel, name: str, replacement: Any) -> None:
    """Make kernel ``name`` of ``compiled`` launch ``replacement.run`` instead."""
    from ..errors import CaptureError

    if not is_current(compiled):
        raise CaptureError(f"{compiled.problem.id}: this compiled model was invalidated by a later compile_problem() "
                           "(Dynamo reset); swapping into it would have no effect")
    handle = compiled.kernel(name)
    setattr(handle.module, handle.attr, replacement)


def restore(compiled: CompiledModel, name: str | None = None) -> None:
    """Put back the compiler's kernel ``name`` (all kernels when ``name`` is None)."""
    handles = [compiled.kernel(name)] if name else list(compiled.kernels.values())
    for handle in handles:
        setattr(handle.module, handle.attr, handle.original)


def candidate_kernel(path: str | Path, source: str | None = None) -> CandidateKernel:
    return CandidateKernel(load_candidate(path, source), label=str(path))


@contextlib.contextmanager
def swapped(compiled: CompiledModel, replacements: dict[str, Any]) -> Iterator[CompiledModel]:
    """Run the block with ``replacements`` ({kernel name: kernel object}) in place."""
    try:
        for name, replacement in replacements.items():
            swap(compiled, name, replacement)
        yield compiled
    finally:
        for name in replacements:
            restore(compiled, name)
