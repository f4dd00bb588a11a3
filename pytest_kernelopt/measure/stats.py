"""Numbers only: medians, distribution-free confidence intervals, the "faster" decision.

Timings come in interleaved pairs (baseline, candidate) measured back to back, so
each pair gives one speedup ratio ``baseline / candidate`` that shares the
machine's state of that moment. The median of those ratios is the speedup; its
95% confidence interval comes from order statistics (the binomial distribution of
how many ratios fall below the true median), which assumes nothing about the
shape of the timing distribution.

With more than two steps timed round-robin (:func:`~.timing.interleaved_timings`),
:func:`mode_estimates` gives each step its own median time with that interval and
its speedup over one baseline step, paired by round. :func:`geomean` summarises
speedups over several problems.
"""

from __future__ import annotations

import math
from statistics import median
from typing import Sequence

from pydantic import BaseModel


class SpeedEstimate(BaseModel):
    """Speedup of a candidate over the baseline from paired timings."""

    speedup: float
    ci_low: float
    ci_high: float
    pairs: int
    baseline_ms: float
    candidate_ms: float


def _binom_cdf(k: int, n: int) -> float:
    """P(X <= k) for X ~ Binomial(n, 1/2)."""
    return sum(math.comb(n, i) for i in range(k + 1)) / 2.0**n


def median_ci_ranks(n: int, confidence: float = 0.95) -> tuple[int, int]:
    """0-based ranks (lo, hi) of the sorted sample bounding the median with ``confidence``.

    The widest-possible interval (min, max) is returned when ``n`` is too small to
    reach the confidence level.
    """
    if n < 1:
        raise ValueError("need at least one sample")
    alpha = 1.0 - confidence
    # 1-based ranks [k, n-k+1] cover the median with probability 1 - 2 P(X <= k-1).
    best = 0
    for k in range(1, n // 2 + 1):
        if 2 * _binom_cdf(k - 1, n) <= alpha:
            best = k
        else:
            break
    if best == 0:
        return 0, n - 1
    return best - 1, n - best


def median_ci(samples: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(median, ci_low, ci_high) of ``samples``."""
    ordered = sorted(samples)
    lo, hi = median_ci_ranks(len(ordered), confidence)
    return median(ordered), ordered[lo], ordered[hi]


def speed_estimate(baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95) -> SpeedEstimate:
    """Paired speedup estimate from interleaved timings (milliseconds)."""
    if len(baseline) != len(candidate) or not baseline:
        raise ValueError("baseline and candidate need the same, non-zero number of timings")
    ratios = [b / c for b, c in zip(baseline, candidate) if c > 0]
    mid, low, high = median_ci(ratios, confidence)
    return SpeedEstimate(
        speedup=mid, ci_low=low, ci_high=high, pairs=len(ratios),
        baseline_ms=median(baseline), candidate_ms=median(candidate),
    )


class ModeEstimate(BaseModel):
    """One of several interleaved steps: its median time (95% CI) and its paired speedup over the baseline step."""

    median_ms: float
    ci_low_ms: float
    ci_high_ms: float
    samples: int
    vs_baseline: SpeedEstimate


def mode_estimates(times: dict[str, Sequence[float]], baseline: str,
                   confidence: float = 0.95) -> dict[str, ModeEstimate]:
    """Per step: median time with its interval, and ``speed_estimate(times[baseline], times[step])``.

    Entry ``i`` of every list must come from the same round (the samples are paired).
    The baseline's own speedup is 1 with the interval [1, 1].
    """
    if baseline not in times:
        raise ValueError(f"the baseline {baseline!r} has no timings")
    out = {}
    for name, samples in times.items():
        mid, low, high = median_ci(samples, confidence)
        out[name] = ModeEstimate(median_ms=mid, ci_low_ms=low, ci_high_ms=high, samples=len(samples),
                                 vs_baseline=speed_estimate(times[baseline], samples, confidence))
    return out


def geomean(values: Sequence[float], weights: Sequence[float] | None = None) -> float:
    """Geometric mean of positive ratios (speedups over several problems); with ``weights`` (positive, one per
    value), the weighted one (a problem's declared shapes by SHAPE_WEIGHTS)."""
    if not values or any(not v > 0 for v in values):
        raise ValueError("the geometric mean needs one or more positive values")
    if weights is None:
        return math.exp(sum(math.log(v) for v in values) / len(values))
    if len(weights) != len(values) or any(not w > 0 for w in weights):
        raise ValueError("a weighted geometric mean needs one positive weight per value")
    return math.exp(sum(w * math.log(v) for v, w in zip(values, weights)) / sum(weights))
