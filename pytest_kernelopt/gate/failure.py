"""How a gate item fails: :class:`GateFailure`, and the stale kernel that fails or is skipped."""

from __future__ import annotations

from typing import Any

import pytest


class GateFailure(Exception):
    """A gate item failed: the message is the whole story (stage, figures)."""


def reproduce(verdict: Any) -> str:
    """How to run a rejection again with the same inputs (the seeds are the OS's otherwise)."""
    seed = getattr(verdict, "seed", None)
    return "" if seed is None else f" (inputs from seed {seed}: reproduce with --kernelopt-seed {seed})"


# Said wherever a committed kernel is stale: the command that carries it over to the compiler's new kernel.
REFRESH_HINT = "`kernelopt refresh` replays its recipe on the compiler's new kernel and stores what the cascade passes"


def stale(message: str, strict: bool) -> None:
    """A committed kernel the gate cannot verify at the problem's shape: fail, or skip with a note when allowed."""
    if strict:
        raise GateFailure(f"{message}. It was not verified at this shape, so the gate fails it ({REFRESH_HINT}; or "
                          f"re-tune, or remove it; to skip it instead, --kernelopt-allow-stale or allow_stale = true "
                          f"in [tool.kernelopt])")
    from ..report.untrusted import plain

    # Reported at the problem file (``-rs``: "problems/x.py:1: ..."), not at this line of the gate.
    raise pytest.skip.Exception(plain(f"{message} (allowed: not verified at this shape)"), _use_item_location=True)
