"""The verifier: one entry point for the CLI, the gate, tuning and benchmarks.

A :class:`VerifySession` opens a problem once and then judges many candidates against it::

    with VerifySession("models/softmax.py", device="cuda") as session:
        for path in candidates:
            verdict = session.verify("triton_per_fused_softmax_0", path)

This file only re-exports. Where things are: ``session.py`` (the session, the parent's
side), ``stages.py`` (the stages, in order), ``pipeline.py`` (the worker's side),
``options.py`` (every default, the speed policy), ``limits.py`` (a candidate's size);
docs/cascade.md has the map.
"""

from __future__ import annotations

from typing import Any

from .limits import CANDIDATE_BYTES, size_problem
from .session import GIB, STATIC_MEMORY, STATIC_SECONDS, VerifySession, read_candidate, source_of, verify

__all__ = ["CANDIDATE_BYTES", "GIB", "STATIC_MEMORY", "STATIC_SECONDS", "CandidateSource", "SpeedPolicy",
           "VerifyOptions", "VerifySession", "read_candidate", "size_problem", "source_of", "verify"]


def __getattr__(name: str) -> Any:
    # Re-exported on first use: these import pydantic, and the static checker's process
    # imports this package without it (see worker.serve_static).
    if name in ("SpeedPolicy", "VerifyOptions"):
        from . import options

        return getattr(options, name)
    if name == "CandidateSource":
        from .protocol import CandidateSource

        return CandidateSource
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
