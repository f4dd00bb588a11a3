"""The one speed rule: when a measured speedup counts as faster, the same, slower or a regression.

Every caller asks it: the verifier's ``accepted`` (:meth:`SpeedPolicy.judge`), the gate's
"slower than the compiler's kernel" and "regressed against the recorded speedup", the
tuner's keeper (which candidates are worth confirming, which versions are stored),
``kernelopt bench``'s faster / within noise / slower column and ``kernelopt refresh``.
Decisions are made on the 95% interval of the paired speedup, never on one ratio.

A timing here is anything with the fields of :class:`~pytest_kernelopt.measure.stats.SpeedEstimate`
(``speedup``, ``ci_low``, ``ci_high``, ``baseline_ms``, ``candidate_ms``): the estimate
itself or the record it becomes (:class:`~pytest_kernelopt.records.Timing`).
"""

from __future__ import annotations

from typing import Literal, Protocol

from pydantic import BaseModel, ConfigDict, Field

from .. import settings

Verdict = Literal["faster", "same", "slower", "too short"]


class Measured(Protocol):
    """A paired speedup with its 95% interval and the two medians (milliseconds)."""

    @property
    def speedup(self) -> float: ...
    @property
    def ci_low(self) -> float: ...
    @property
    def ci_high(self) -> float: ...
    @property
    def baseline_ms(self) -> float: ...
    @property
    def candidate_ms(self) -> float: ...


def above(t: Measured, reference: float | Measured = 1.0) -> bool:
    """Faster than ``reference`` beyond noise: ``t``'s whole interval above it (a number, or another
    timing's whole interval, both measured against the same baseline)."""
    return t.ci_low > (reference if isinstance(reference, (int, float)) else reference.ci_high)


def below(t: Measured, reference: float | Measured = 1.0) -> bool:
    """Slower than ``reference`` beyond noise, with no tolerance: ``t``'s whole interval below it
    (a number, or another timing's whole interval). For store decisions that claim no gain (a
    pinned configuration): the gate's failures use :meth:`SpeedPolicy.slower`, with its tolerance."""
    return t.ci_high < (reference if isinstance(reference, (int, float)) else reference.ci_low)


class SpeedPolicy(BaseModel):
    """When a measured model speedup counts as faster, slower or a regression.

    * too short to judge: the compiled model runs under ``min_model_us``. On the H200
      the unedited dump of a 5.7 us model measured 1.036x, 95% CI [1.028, 1.044], as
      CUDA-graph replays: below that scale, sub-microsecond differences between two
      builds of the same kernel decide, not the kernel's work.
    * faster: the whole 95% interval above 1 and the median gain at least ``min_gain``;
      for a compile setting of the catalogue (``capture/variants.py``: the compiler's own code, never a
      candidate's) at least ``min_setting_gain`` (:meth:`for_settings`). With 2% there too, a setting that
      won 1.7% [1.5%, 1.9%] on the cross-entropy training step (H100) was left out, and the model ran
      behind max-autotune by as much; a setting is what the user's alternative compiles anyway.
    * slower: the whole interval below ``1 - max_slowdown``. An unedited dump measured
      0.996x with its interval entirely below 1 in 15 of 20 runs (H200), hence a
      tolerance of 1% by default.
    * regressed: below a speedup recorded in an earlier run by more than
      ``max_regression``. Runs on different days and machines of one kind differ more
      than one run's interval says: softmax_rows' committed kernel was recorded at
      1.074x [1.073, 1.075] when tuned and gated at 1.046x [1.045, 1.047] on another
      H200 the next session, hence 5% by default.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    min_gain: float = Field(0.02, ge=0.0, lt=1.0)
    min_setting_gain: float = Field(0.005, ge=0.0, lt=1.0)
    max_slowdown: float = settings.field("max_slowdown")
    min_model_us: float = Field(20.0, ge=0.0)
    max_regression: float = settings.field("max_regression")
    max_baseline_drift: float = Field(0.05, ge=0.0, lt=1.0)

    def for_settings(self) -> SpeedPolicy:
        """This rule as it judges a compile setting against the default compile: ``min_setting_gain``."""
        return self.model_copy(update={"min_gain": self.min_setting_gain})

    def measurable(self, t: Measured) -> bool:
        return t.baseline_ms * 1e3 >= self.min_model_us

    def judge(self, t: Measured) -> tuple[bool | None, str]:
        """(faster?, why not). None: too short to judge."""
        if not self.measurable(t):
            return None, (f"too short to judge: the model runs in {t.baseline_ms * 1e3:.1f} us "
                          f"(floor {self.min_model_us:g} us)")
        if above(t) and t.speedup >= 1.0 + self.min_gain:
            return True, ""
        return False, f"not faster beyond noise (needs the 95% CI above 1 and a gain of at least {self.min_gain * 100:g}%)"

    def slower(self, t: Measured | None) -> bool:
        """Slower than the baseline beyond noise and beyond the tolerated slowdown."""
        return t is not None and self.measurable(t) and below(t, 1.0 - self.max_slowdown)

    def verdict(self, t: Measured) -> Verdict:
        """One word for ``t``: faster (:meth:`judge`), slower (:meth:`slower`), the same (neither), too short."""
        faster, _ = self.judge(t)
        if faster is None:
            return "too short"
        return "faster" if faster else "slower" if self.slower(t) else "same"

    def regressed(self, t: Measured | None, recorded_speedup: float) -> bool:
        """Below a speedup recorded earlier (in the same environment) beyond noise and ``max_regression``."""
        return t is not None and self.measurable(t) and below(t, recorded_speedup * (1.0 - self.max_regression))

    def against_recorded(self, t: Measured | None, recorded: Measured) -> tuple[bool, str | None]:
        """(regressed?, why the speedups were not compared) against a timing recorded in the same environment.

        A speedup is a ratio to the compiled model, and the compiled model itself is not
        the same from one compile to the next: Inductor picks among launch configurations
        by timing them while it compiles. On the H200 one pooling model's compiled kernel
        ran at 82.7 us in one compile and 51.3 us in another. So speedups are compared only
        while the compiled model runs within ``max_baseline_drift`` of its recorded time;
        beyond it, the model's time with the committed kernels is compared with the recorded
        one instead (regressed: slower by more than ``max_regression``).
        """
        if t is None or not self.measurable(t) or recorded.baseline_ms <= 0:
            return False, None
        if abs(t.baseline_ms / recorded.baseline_ms - 1.0) <= self.max_baseline_drift:
            return self.regressed(t, recorded.speedup), None
        slower = t.candidate_ms > recorded.candidate_ms * (1.0 + self.max_regression)
        return slower, (f"the compiled model runs in {t.baseline_ms * 1e3:.1f} us now, {recorded.baseline_ms * 1e3:.1f} us "
                        f"when recorded (Inductor chose other launch configurations): speedups not compared; with the "
                        f"committed kernels {t.candidate_ms * 1e3:.1f} us now, {recorded.candidate_ms * 1e3:.1f} us "
                        f"recorded")
