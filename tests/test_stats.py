"""Stats: the distribution-free median interval and the faster/slower decision on paired timings."""

from __future__ import annotations

import math
import random
from fractions import Fraction
from statistics import median

import pytest

from pytest_kernelopt.measure.stats import median_ci, median_ci_ranks, speed_estimate
from pytest_kernelopt.records import Timing
from pytest_kernelopt.verify.options import SpeedPolicy


def coverage(n: int, lo: int) -> Fraction:
    """P(sorted[lo] <= true median <= sorted[n-1-lo]) for n samples: 1 - 2 P(Binomial(n, 1/2) <= lo)."""
    tail = sum(math.comb(n, i) for i in range(lo + 1))
    return 1 - 2 * Fraction(tail, 2**n)


# --- median_ci_ranks --------------------------------------------------------------------

@pytest.mark.parametrize("n, ranks", [(20, (5, 14)), (100, (39, 60))])
def test_published_ranks(n, ranks):
    assert median_ci_ranks(n) == ranks


def test_ranks_are_the_narrowest_interval_reaching_95_percent():
    for n in range(6, 121):
        lo, hi = median_ci_ranks(n)

        assert hi == n - 1 - lo, n  # symmetric
        assert coverage(n, lo) >= Fraction(95, 100), n
        assert lo + 1 > hi - 1 or coverage(n, lo + 1) < Fraction(95, 100), n


@pytest.mark.parametrize("n", range(1, 6))
def test_too_few_samples_give_the_whole_range(n):
    assert median_ci_ranks(n) == (0, n - 1)


def test_higher_confidence_widens_the_interval():
    lo95, hi95 = median_ci_ranks(100, 0.95)
    lo99, hi99 = median_ci_ranks(100, 0.99)
    assert lo99 < lo95 and hi99 > hi95
    assert coverage(100, lo99) >= Fraction(99, 100)


def test_no_samples_is_an_error():
    with pytest.raises(ValueError):
        median_ci_ranks(0)


def test_median_ci_reads_the_sorted_sample():
    samples = [float(v) for v in random.Random(0).sample(range(100), 20)]
    ordered = sorted(samples)

    assert median_ci(samples) == (median(samples), ordered[5], ordered[14])


# --- speed_estimate on synthetic paired timings -----------------------------------------

def paired(ratio: float, pairs: int = 60, noise: float = 0.03, drift: float = 0.0, seed: int = 0):
    """(baseline, candidate) timings in ms; the candidate takes ``ratio`` times as long.

    ``noise`` is independent per timing; ``drift`` is a machine-wide factor shared by
    the two timings of a pair (clock changes, other jobs), which pairing cancels.
    """
    rng = random.Random(seed)
    baseline, candidate = [], []
    for _ in range(pairs):
        shared = math.exp(rng.gauss(0, drift))
        baseline.append(2.0 * shared * math.exp(rng.gauss(0, noise)))
        candidate.append(2.0 * ratio * shared * math.exp(rng.gauss(0, noise)))
    return baseline, candidate


def as_timing(estimate) -> Timing:
    """A paired estimate of a 1 ms model, as the speed stage reports it."""
    return Timing(baseline_ms=estimate.baseline_ms, candidate_ms=estimate.candidate_ms, speedup=estimate.speedup,
                  ci_low=estimate.ci_low, ci_high=estimate.ci_high, pairs=estimate.pairs, method="cuda-graph")


def faster(estimate, min_gain: float) -> bool:
    return SpeedPolicy(min_gain=min_gain).judge(as_timing(estimate))[0] is True


def slower(estimate, max_slowdown: float = 0.0) -> bool:
    return SpeedPolicy(max_slowdown=max_slowdown).slower(as_timing(estimate))


@pytest.mark.parametrize("seed", range(3))
def test_identical_distributions_are_neither_faster_nor_slower(seed):
    estimate = speed_estimate(*paired(1.0, seed=seed))

    assert estimate.ci_low <= 1.0 <= estimate.ci_high
    assert not faster(estimate, 0.02)
    assert not slower(estimate)


def test_ten_percent_faster_is_faster():
    estimate = speed_estimate(*paired(1 / 1.10))

    assert faster(estimate, 0.02)
    assert not slower(estimate)
    assert estimate.speedup == pytest.approx(1.10, rel=0.02)
    assert estimate.ci_low > 1.0


def test_five_percent_slower_is_slower():
    estimate = speed_estimate(*paired(1.05))

    assert slower(estimate)
    assert not faster(estimate, 0.0)
    assert estimate.speedup == pytest.approx(1 / 1.05, rel=0.02)


def test_a_real_but_small_gain_is_not_enough():
    estimate = speed_estimate(*paired(1 / 1.01, noise=0.002))

    assert estimate.ci_low > 1.0  # faster beyond noise ...
    assert not faster(estimate, 0.02)  # ... but by less than the required gain
    assert faster(estimate, 0.005)


def test_pairing_cancels_machine_drift():
    # Pair-to-pair drift (about 30%) far larger than the 5% gain.
    estimate = speed_estimate(*paired(1 / 1.05, drift=0.3, noise=0.01))

    assert faster(estimate, 0.02)


def test_estimate_reports_medians_and_pairs():
    baseline, candidate = paired(1 / 1.10, pairs=21)
    estimate = speed_estimate(baseline, candidate)

    assert estimate.pairs == 21
    assert estimate.baseline_ms == median(baseline)
    assert estimate.candidate_ms == median(candidate)
    assert estimate.speedup == median(b / c for b, c in zip(baseline, candidate))


@pytest.mark.parametrize("baseline, candidate", [([], []), ([1.0, 2.0], [1.0])])
def test_unpaired_timings_are_an_error(baseline, candidate):
    with pytest.raises(ValueError):
        speed_estimate(baseline, candidate)


def _timing(baseline_us: float, speedup: float, low: float, high: float):
    return Timing(baseline_ms=baseline_us / 1e3, candidate_ms=baseline_us / speedup / 1e3, speedup=speedup,
                  ci_low=low, ci_high=high, pairs=100, method="cuda-graph")


@pytest.mark.parametrize(
    "baseline_us, speedup, low, high, expected",
    [
        (100.0, 1.10, 1.05, 1.15, True),    # clearly faster
        (100.0, 1.01, 1.005, 1.02, False),  # beyond noise but under the 2% gain
        (100.0, 1.05, 0.99, 1.10, False),   # interval includes 1
        (5.7, 1.036, 1.028, 1.044, None),   # a 5.7 us model: below the floor, not judged
    ],
)
def test_judge_speed(baseline_us, speedup, low, high, expected):
    decision, why = SpeedPolicy(min_gain=0.02).judge(_timing(baseline_us, speedup, low, high))
    assert decision is expected
    assert (why == "") == (expected is True)


@pytest.mark.parametrize(
    "baseline_us, speedup, low, high, recorded, slower_, regressed",
    [
        (100.0, 0.996, 0.990, 0.999, 1.0, False, False),  # below 1, but within the tolerated 1%
        (100.0, 0.95, 0.94, 0.96, 1.0, True, False),      # 5% slower than the compiler; 4% under the recorded
        (100.0, 0.90, 0.89, 0.91, 1.0, True, True),       # 10% slower beyond noise
        (100.0, 1.30, 1.29, 1.31, 1.50, False, True),     # faster than the compiler, but lost its recorded 1.5x
        (5.7, 0.50, 0.40, 0.60, 1.0, False, False),       # too short to judge: never "slower"
    ],
)
def test_one_policy_for_slower_and_regressed(baseline_us, speedup, low, high, recorded, slower_, regressed):
    policy = SpeedPolicy(max_slowdown=0.01, max_regression=0.05)
    timing = _timing(baseline_us, speedup, low, high)
    assert policy.slower(timing) is slower_
    assert policy.regressed(timing, recorded) is regressed


def _times(baseline_us: float, candidate_us: float, half: float = 0.005) -> Timing:
    s = baseline_us / candidate_us
    return _timing(baseline_us, s, s - half, s + half)


@pytest.mark.parametrize(
    "now, recorded, regressed, compared",
    [
        ((83.0, 51.0), (82.7, 50.6), False, True),   # same compiled model, same speedup
        ((83.0, 70.0), (82.7, 50.6), True, True),    # same compiled model, the kernels lost their gain
        # The compiled model picked a faster launch configuration (H200: 82.7 -> 51.3 us): the
        # speedup fell from 1.63x to 1.01x, but the committed kernels run as fast as recorded.
        ((51.3, 50.9), (82.7, 50.6), False, False),
        ((51.3, 60.0), (82.7, 50.6), True, False),   # ... and here they did get slower
        ((90.0, 52.0), (82.7, 50.6), False, False),  # the compiled model slower, the kernels within 5% of recorded
    ],
)
def test_recorded_speedups_are_compared_only_while_the_compiled_model_keeps_its_time(now, recorded, regressed, compared):
    got, note = SpeedPolicy().against_recorded(_times(*now), _times(*recorded))
    assert got is regressed
    assert (note is None) is compared
    if note:
        assert "speedups not compared" in note and f"{now[1]:.1f} us now" in note
