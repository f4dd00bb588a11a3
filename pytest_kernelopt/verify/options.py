"""Every default of the verifier.

:class:`VerifyOptions` is what callers (CLI, gate, tune, bench) configure; its ``speed``
is the one speed rule every one of them asks (:class:`~pytest_kernelopt.measure.rule.SpeedPolicy`,
re-exported here): the verdict's ``accepted``, the gate's "slower than the compiler's kernel"
and "regressed against the recorded speedup" all come from it.
"""

from __future__ import annotations

import hashlib
import math
import random
import secrets

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .. import settings
from ..measure.rule import SpeedPolicy
# The numerics defaults are written once, in the one numerics rule (:mod:`.numerics`).
from .numerics import ERROR_FACTOR, KERNEL_RTOL, REDUCED_PRECISION_RTOL, ULP_FLOOR, NumericsRule  # noqa: F401


class SessionSeeds(BaseModel):
    """The input seeds of one session (or one restarted worker) and where they come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    root: int  # the fresh seeds derive from it (``kernelopt verify --seed ROOT`` reproduces them)
    seeds: list[int]  # the pinned seed's first, when one was given
    pinned: int | None = None  # a seed given (the gate's --kernelopt-seed, accept/tune --seed): its seeds were added
    exact: bool = False  # every seed, and every check's draws, derive from ``root`` (reproduction)


class VerifyOptions(BaseModel):
    """How a candidate is verified. Every default of the cascade lives here."""

    model_config = ConfigDict(extra="forbid")

    # Shared with the command line and the gate: defaults, bounds and help in :mod:`..settings`.
    seeds: int = settings.field("seeds")
    # A seed given by a human (``--seed``): see :meth:`session_seeds` for what it does.
    seed: int | None = settings.field("seed")
    # ``seed`` reproduces exactly (``kernelopt verify``); otherwise it only adds its seeds to fresh ones.
    exact: bool = False
    # Replays one check's own draws (a verdict's ``check_seed``); programmatic only, never a setting.
    check_seed: int | None = Field(None, ge=0, lt=1 << 63)
    # Seconds one candidate's checks may take in the worker (kernel, model, speed).
    timeout: float = settings.field("timeout")
    # Seconds opening a session may take: starting the worker, compiling the problem,
    # drawing inputs and computing the float64 reference. Not a candidate's fault.
    open_timeout: float = 1800.0
    allow_reduced_precision: bool = settings.field("allow_reduced_precision")
    error_factor: float = Field(ERROR_FACTOR, gt=0.0)
    measure_speed: bool = True
    speed: SpeedPolicy = SpeedPolicy()
    # Target seconds of paired timing for the model and for the kernel alone.
    model_seconds: float = Field(1.0, gt=0.0)
    kernel_seconds: float = Field(0.5, gt=0.0)

    @field_validator("timeout", "open_timeout")
    @classmethod
    def _finite_positive(cls, value: float) -> float:
        if not math.isfinite(value) or value <= 0:
            raise ValueError("must be a positive number of seconds")
        return value

    def session_seeds(self) -> SessionSeeds:
        """The seeds of one session (or of a restarted worker), drawn afresh on every call.

        Without ``seed``: a root from the OS (``secrets``) and its ``seeds`` seeds. With it
        and ``exact`` (``kernelopt verify --seed``): its seeds alone, the same every time. With
        it and not ``exact`` (the gate, ``accept``, ``tune``, ``refresh``: whatever stores a
        kernel or passes a gate): its seeds *and* as many from a fresh OS root, so a pinned
        seed only adds to what is checked.
        """
        if self.seed is not None and self.exact:
            return SessionSeeds(root=self.seed, seeds=seeds_from(self.seed, self.seeds), exact=True)
        root = secrets.randbits(63)
        fresh = seeds_from(root, self.seeds)
        if self.seed is None:
            return SessionSeeds(root=root, seeds=fresh)
        pinned = seeds_from(self.seed, self.seeds)
        return SessionSeeds(root=root, seeds=pinned + [s for s in fresh if s not in pinned], pinned=self.seed)

    def check_entropy(self, session: SessionSeeds, index: int) -> int:
        """The root of check number ``index`` of a session: every fill, canary, padding, run count and
        draw of that check derives from it. From the OS per check, unless a human asked for
        reproduction (``check_seed``, or ``seed`` with ``exact``: derived from it and ``index``)."""
        if self.check_seed is not None:
            return self.check_seed
        if session.exact:
            digest = hashlib.sha256(f"kernelopt-check:{session.root}:{index}".encode()).digest()
            return int.from_bytes(digest[:8], "little") >> 1
        return secrets.randbits(63)

    @property
    def rule(self) -> NumericsRule:
        """The one numerics rule, with these options' factor and precision."""
        return NumericsRule(error_factor=self.error_factor, reduced_precision=self.allow_reduced_precision)

    def kernel_rtol(self, dtype: str) -> float:
        return self.rule.kernel_rtol(dtype)


def seeds_from(root: int, count: int) -> list[int]:
    """``count`` distinct input seeds derived from ``root`` (the same root, the same seeds)."""
    draw = random.Random(root)
    seeds: list[int] = []
    while len(seeds) < count:
        s = draw.getrandbits(31)
        if s not in seeds:
            seeds.append(s)
    return seeds
