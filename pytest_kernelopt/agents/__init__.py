"""Agents: five roles that turn a compiled problem into candidates the cascade judges.

    Profiler (profiler.py)   where the model's GPU time goes, and why (bottleneck class)
    Planner  (planner.py)    which kernels to tune, in which order, with which strategies
    Coder    (coder.py)      writes candidate files: search.py (offline) or claude.py (Anthropic)
    Reviewer (reviewer.py)   the static checks and a critique before anything runs
    Benchmarker (benchmarker.py)  the verification session; verdicts go back to the Coder

``loop.py`` drives them for ``kernelopt tune``; ``trace.py`` writes the run directory.
"""
