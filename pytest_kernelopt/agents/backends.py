"""The Coder backends by name: the values of ``kernelopt tune --agent`` (and ``--kernelopt-agent``).

Each entry names a class implementing :class:`~.coder.Coder` as ``"module:Class"``
(relative to this package), imported only when chosen: the gate and the production
loader never import ``anthropic``, and ``--agent search`` does not either.

Adding a backend: a module with its class (the constructor takes the backend's options
as keywords) and one line in :data:`BACKENDS`; the command line and the pytest option
offer the names in ``settings.Agent`` (a test checks that the two agree).
"""

from __future__ import annotations

import importlib
from typing import Any

from ..errors import UsageError
from .coder import Coder

BACKENDS: dict[str, str] = {
    "search": "search:SearchCoder",  # offline: Inductor's alternatives, rewrites, launch descent
    "anthropic": "claude:ClaudeCoder",  # Claude through the Anthropic SDK (pip extra "agents")
}


def make_coder(name: str, **options: Any) -> Coder:
    """The backend registered as ``name``, constructed with ``options``."""
    if name not in BACKENDS:
        raise UsageError(f"unknown agent backend {name!r} (choose from {', '.join(BACKENDS)})")
    module, _, cls = BACKENDS[name].partition(":")
    return getattr(importlib.import_module(f".{module}", __package__), cls)(**options)
