"""How a gate item fails: :class:`GateFailure`, and the stale kernel that fails or is skipped."""

from __future__ import annotations

from typing import Any

import pytest


class GateFailure(Exception):
    """A gate item failed: the message is the whole story (stage, figures)."""


def reproduce(verdict: Any) -> str:
    """How a human runs a rejection again with the same inputs.

    The gate's own ``--kernelopt-seed`` only adds seeds (it never replays a run), so the hint
    names ``kernelopt verify --seed``, which reproduces exactly: the fresh seeds from the
    verdict's root, the pinned ones from the pinned seed. Every number here was drawn for this
    run alone; the next run draws new ones.
    """
    seed = getattr(verdict, "seed", None)
    if seed is None:
        return ""
    pinned = getattr(verdict, "pinned_seed", None)
    text = f" (inputs of the fresh seeds: reproduce with `kernelopt verify --seed {seed}`"
    if pinned is not None:
        text += f"; of the pinned ones: --seed {pinned}"
    check = getattr(verdict, "check_seed", None)
    return text + (f"; this check's own draws came from check seed {check})" if check is not None else ")")


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
