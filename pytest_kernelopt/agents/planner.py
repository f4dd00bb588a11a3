"""The Planner role: which kernels to tune, largest share of model time first, and how.

A kernel below ``min_share`` of the model's GPU time is left alone and the plan
says so: even an infinitely fast version would gain the model less than that.
Strategies follow the Profiler's class: every kernel gets Inductor's own
alternatives and a launch-configuration search; memory-bound kernels also get the
cache-hint rewrite; all but launch-bound ones the approximate-division rewrite (a
kernel far from its memory roofline is often paying for IEEE divisions); launch-bound
ones have their search start from larger blocks (fewer, fuller programs). Which
strategy applies to which class is written beside each strategy (``strategies/``) and
rewrite rule (``rewrites.py``); :data:`STRATEGIES` collects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from .. import settings
from .run_records import Bottleneck, KernelProfile, ModelProfile
from .strategies import REGISTRY

MIN_SHARE: float = settings.default("min_share")  # kernelopt tune --min-share
BOTTLENECKS: tuple[Bottleneck, ...] = get_args(Bottleneck)  # the Profiler's classes

# bottleneck class -> plan entries, from the strategies' registry (agents/strategies/) and
# the rewrite rules' classes (agents/rewrites.py): harvest, the rules that apply, launch.
STRATEGIES: dict[str, list[str]] = {
    bottleneck: [entry for name, strategy in REGISTRY.items() for entry in strategy.entries(name, bottleneck)]
    for bottleneck in BOTTLENECKS
}


@dataclass
class PlanItem:
    kernel: str
    profile: KernelProfile | None
    strategies: list[str] = field(default_factory=list)
    skip: str | None = None  # why the kernel is not tuned


def plan(profile: ModelProfile, *, min_share: float = MIN_SHARE, only: list[str] | None = None) -> list[PlanItem]:
    items = []
    for k in profile.kernels:  # largest share first
        if only and k.kernel not in only:
            items.append(PlanItem(k.kernel, k, skip="not selected (--kernel)"))
        elif k.share < min_share:
            what = "bytes moved" if k.source == "bytes" else "model GPU time"
            items.append(PlanItem(k.kernel, k, skip=f"{k.share:.1%} of {what}, below the {min_share:.0%} threshold"))
        else:
            items.append(PlanItem(k.kernel, k, strategies=list(STRATEGIES[k.bottleneck])))
    return sorted(items, key=lambda i: (i.skip is not None, -(i.profile.share if i.profile else 0.0)))
