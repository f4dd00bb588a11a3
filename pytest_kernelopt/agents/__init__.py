"""Agents: five roles that turn a compiled problem into candidates the cascade judges.

Three parts behind inner walls (tests/test_layout.py checks them):

* the shared roles, which know no backend: the Coder protocol (coder.py), the Profiler
  (profiler.py: where the model's GPU time goes, and why), the Reviewer (reviewer.py: the
  static checks and a critique before anything runs), Inductor's harvested alternatives
  (harvest.py), the model's compile settings (compile_choice.py), the terminal (ui.py);
* the backends, which import the shared roles and never each other: ``search/`` (offline:
  SearchCoder and its strategies, one module each) and ``claude/`` (Claude through the
  Anthropic SDK, and the parsing of its replies);
* the shared loop above them: the Planner (planner.py: which kernels, in which order, with
  which of the search's strategies), the Benchmarker (benchmarker.py: judges candidates in
  the verification session and confirms the best at full length), what is stored
  (keeper.py), the loop (loop.py), a backend chosen by name and its options (backends.py,
  ``--agent``; the module is imported only when chosen or its flags listed), progress output, tuning on several GPUs
  (multi_gpu.py), ``kernelopt refresh`` (refresh.py) and ``kernelopt tune`` (tuning.py).

A run's records and its run directory are ``runs/``; the candidate's launch space and
source rewrites are ``candidate/``. Extension points: a Coder backend is one package declaring
``BACKEND`` (its coder, options, SDK) and one line in ``settings.AGENT_BACKENDS``; a search strategy one module and one line in
``search.strategies.REGISTRY``; a rewrite rule one decorated function in
``candidate/rewrites.py``. This file only re-exports.
"""

from __future__ import annotations

from .loop import UI, Tuner, TuneOptions
from .tuning import shape_shares, tune

__all__ = ["UI", "TuneOptions", "Tuner", "shape_shares", "tune"]
