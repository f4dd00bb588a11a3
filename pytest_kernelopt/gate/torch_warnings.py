"""Warnings that torch and triton raise from their own modules while the gate compiles and verifies."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def internal_warnings_ignored() -> Iterator[None]:
    """Ignore warnings raised inside torch and triton for the duration.

    Importing and compiling raised 14 DeprecationWarnings per gate run from inside torch
    (``torch.jit.script_method``, torch 2.13): nothing a user of the gate can act on. The
    user's own tests run outside this and keep every warning.
    """
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", module=r"(torch|triton)(\.|$)")
        yield
