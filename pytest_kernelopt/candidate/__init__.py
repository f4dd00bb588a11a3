"""The candidate: its format (a self-contained Triton file standing in for a compiler kernel,
:mod:`.format`), its launch configuration as data (:mod:`.launch_space`) and the source
rewrites the search and the store's recipes apply to it (:mod:`.rewrites`).

Below capture, verify and store: it imports none of them at import time (the candidate
language's checks, ``verify.static`` and ``verify.limits``, are standard library only and
sit below it; see tests/test_layout.py). This file only re-exports.
"""

from __future__ import annotations

from .format import (
    ENTRY_POINT,
    CandidateKernel,
    find_kernel_def,
    load_candidate,
    load_candidate_source,
    render_dump,
    write_dumps,
)

__all__ = ["ENTRY_POINT", "CandidateKernel", "find_kernel_def", "load_candidate", "load_candidate_source",
           "render_dump", "write_dumps"]
