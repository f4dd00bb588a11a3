"""The ``anthropic`` backend: :class:`ClaudeCoder` (:mod:`.coder`) and the parsing of its replies
(:mod:`.reply`, pure text). Behind the agents' inner wall: it imports the shared roles (the Coder
protocol), never the search nor the loop; ``anthropic`` is imported only when a coder is made.
This file only re-exports.
"""

from __future__ import annotations

from .coder import BACKEND, DEFAULT_MODEL, ClaudeCoder, ClaudeOptions, price_for

__all__ = ["BACKEND", "DEFAULT_MODEL", "ClaudeCoder", "ClaudeOptions", "price_for"]
