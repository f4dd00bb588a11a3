"""The ``search`` backend (offline): :class:`SearchCoder` (:mod:`.coder`) and its strategies
(:mod:`.strategies`). Behind the agents' inner wall: it imports the shared roles (the Coder
protocol, the harvest), never the Claude backend nor the loop. This file only re-exports.
"""

from __future__ import annotations

from .coder import BACKEND, SearchCoder

__all__ = ["BACKEND", "SearchCoder"]
