"""The one speed rule (measure/rule.py), asked by the keeper and bench alike, and one way to print a timing."""

from __future__ import annotations

from typing import Any

from pytest_kernelopt.agents.benchmarker import KernelState
from pytest_kernelopt.agents.keeper import Keeper
from pytest_kernelopt.runs.records import Attempt, KernelOutcome
from pytest_kernelopt.benchmark.one_problem import VS_DEFAULT
from pytest_kernelopt.measure.rule import SpeedPolicy, above, below
from pytest_kernelopt.measure.stats import SpeedEstimate
from pytest_kernelopt.measure.text import interval, speedup_text, time_text, timing_text
from pytest_kernelopt.records import KernelInfo, LaunchConfig, Timing, Verdict
from pytest_kernelopt.verify.options import SpeedPolicy as VerifySpeedPolicy
from pytest_kernelopt.verify.options import VerifyOptions


def _t(speedup: float, low: float, high: float, baseline_us: float = 100.0) -> Timing:
    return Timing(baseline_ms=baseline_us / 1e3, candidate_ms=baseline_us / 1e3 / speedup, speedup=speedup,
                  ci_low=low, ci_high=high, pairs=40, method="cuda-graph")


def test_one_rule_for_every_caller():
    assert VerifySpeedPolicy is SpeedPolicy and isinstance(VerifyOptions().speed, SpeedPolicy)
    policy = SpeedPolicy(max_slowdown=0.01, min_gain=0.02)
    assert policy.verdict(_t(1.05, 1.04, 1.06)) == "faster"
    assert policy.verdict(_t(1.01, 1.005, 1.015)) == "same"  # above 1 beyond noise, under the gain
    # a compile setting of the catalogue needs 0.5%, beyond noise as ever
    settings = policy.for_settings()
    assert settings.verdict(_t(1.01, 1.005, 1.015)) == "faster" and settings.verdict(_t(1.004, 1.002, 1.006)) == "same"
    assert settings.verdict(_t(1.01, 0.999, 1.021)) == "same" and settings.max_slowdown == policy.max_slowdown
    assert policy.verdict(_t(0.995, 0.993, 0.997)) == "same"  # below 1 beyond noise, within the tolerance
    assert policy.verdict(_t(0.98, 0.975, 0.985)) == "slower"
    assert policy.verdict(_t(0.5, 0.4, 0.6, baseline_us=5.0)) == "too short"
    # bench's column is the rule's word, and the rule takes the statistics' estimate as it is
    est = SpeedEstimate(speedup=0.98, ci_low=0.975, ci_high=0.985, pairs=30, baseline_ms=0.1, candidate_ms=0.102)
    assert VS_DEFAULT[policy.verdict(est)] == "slower"
    assert set(VS_DEFAULT) == {"faster", "same", "slower", "too short"}
    # intervals against a number or against another timing's interval
    assert above(_t(1.1, 1.05, 1.15), _t(1.0, 0.99, 1.04)) and not above(_t(1.1, 1.05, 1.15), _t(1.0, 0.99, 1.05))
    assert below(_t(0.997, 0.996, 0.998)) and not below(_t(0.997, 0.996, 0.998), 0.99)


class _Bench:
    """Records which candidates the keeper sends to a full-length confirmation (none is accepted)."""

    def __init__(self, verdicts: dict[str, Verdict]):
        self.verdicts, self.confirmed = verdicts, []

    def confirm(self, state: Any, sha: str, label: str, ev: Any) -> Verdict:
        self.confirmed.append(sha)
        return self.verdicts[sha].model_copy(update={"status": "correct"})


def test_the_keeper_skips_only_what_the_speed_rule_calls_slower():
    """Before, the keeper called a candidate slower when its short model interval lay below 1
    (``ci_high < 1.0``) where the rule says below ``1 - max_slowdown``: a candidate at
    0.995x [0.993, 0.997] whose kernel alone is 1.2x faster was never confirmed."""
    info = KernelInfo(name="k", function="k", graph=0, fingerprint="f" * 16, args=[], launch=LaunchConfig(), source="")

    def verdict(sha: str, model: Timing) -> Verdict:
        return Verdict(model="m", kernel="k", candidate="", candidate_sha256=sha, status="correct",
                       model_timing=model, kernel_timing=_t(1.2, 1.19, 1.21), speed_measured=True)

    verdicts = {"within": verdict("within", _t(0.995, 0.993, 0.997)), "slower": verdict("slower", _t(0.98, 0.975, 0.985))}
    state = KernelState(info=info, original="", best="", verdicts=verdicts,
                        attempts=[Attempt(kernel="k", origin=f"agent:{sha}", sha256=sha, status="correct") for sha in verdicts])
    bench = _Bench(verdicts)
    keeper = Keeper(None, None, bench, None, device="cuda", confirm=3, pin=False, run_left=lambda: 1e9,  # type: ignore[arg-type]
                    policy=SpeedPolicy(max_slowdown=0.01))
    keeper.keep("m", info, state, KernelOutcome(kernel="k", fingerprint="f" * 16), None, None, lambda *a, **k: None)
    assert bench.confirmed == ["within"]
    # A stricter policy (no tolerance) skips both: the keeper asks the policy it is given.
    bench.confirmed.clear()
    strict = Keeper(None, None, bench, None, device="cuda", confirm=3, pin=False, run_left=lambda: 1e9,  # type: ignore[arg-type]
                    policy=SpeedPolicy(max_slowdown=0.0))
    strict.keep("m", info, state, KernelOutcome(kernel="k", fingerprint="f" * 16), None, None, lambda *a, **k: None)
    assert bench.confirmed == []


def test_one_way_to_print_a_timing():
    t = _t(1.25, 1.2, 1.3)
    assert timing_text(t) == "1.250x [1.200, 1.300]" == speedup_text(1.25, 1.2, 1.3)
    assert timing_text(t, label=True) == "1.250x (95% CI [1.200, 1.300])"
    assert speedup_text(0.5) == "0.500x" and speedup_text(0.5, None, 0.6) == "0.500x"
    assert time_text(12.34, 12.0, 12.56) == "12.3 [12.0, 12.6]" and interval(1, 2, 1) == "[1.0, 2.0]"
