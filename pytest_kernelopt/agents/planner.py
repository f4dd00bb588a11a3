"""The Planner role: which kernels to tune, where the most is left to win first, and how.

A kernel below ``min_share`` of the model's GPU time is left alone and the plan
says so: even an infinitely fast version would gain the model less than that. So is
a kernel at :data:`LIMIT_PCT` percent or more of its memory limit (bytes it must move
over the measured copy bandwidth). The rest go largest share x distance to the limit
first, so the budget is spent where the model has the most to gain. None is searched when
every Triton kernel at its limit would still leave the model short of the gain a version
needs (the profile's ``swap_bound``): nothing the search finds could be stored.
Strategies follow the Profiler's class: every kernel gets Inductor's own
alternatives and a launch-configuration search; the source rewrites each name the
classes they are tried on (memory-bound kernels get the cache rules, all but
launch-bound ones the approximate division); launch-bound ones have their search start
from larger blocks (fewer, fuller programs). Which
strategy applies to which class is written beside each strategy (``strategies/``) and
rewrite rule (``rewrites.py``); :data:`STRATEGIES` collects them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import get_args

from .. import settings
from ..runs.records import Bottleneck, KernelOutcome, KernelProfile, ModelProfile
from .profiler import limit_reading
from .search.strategies import REGISTRY

MIN_SHARE: float = settings.default("min_share")  # kernelopt tune --min-share
BOTTLENECKS: tuple[Bottleneck, ...] = get_args(Bottleneck)  # the Profiler's classes

# bottleneck class -> plan entries, from the strategies' registry (agents/search/strategies/) and
# the rewrite rules' classes (candidate/rewrites.py): the rules registered first=True, harvest, the
# other rules that apply, launch.
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
    at_limit: bool = False  # skipped at LIMIT_PCT or more of its limit (still pinned where its pick varies)


# A kernel whose measured bandwidth reaches this percent of the copy ceiling is not searched (and a
# search stops once its best candidate reaches it): at most 1/0.9 - 1 = 11% of its time is left to win.
LIMIT_PCT = 90.0


def limit_pct(profile: KernelProfile | None, speedup: float = 1.0) -> float | None:
    """Percent of the memory limit (the measured copy ceiling) the kernel reaches ``speedup`` times faster, at
    most 100.

    None without a timed profile or where its estimate says nothing (``profiler.limit_reading``: over
    OVERCOUNT_PCT the bytes moved are overestimated: an indexed read counted whole, inputs that fit in L2); an estimate of
    100-125% reads as at the limit (inputs still in L2 from the kernel before)."""
    if profile is None or profile.source == "bytes":
        return None
    pct = limit_reading(profile.roofline_pct)
    return None if pct is None else min(pct * speedup, 100.0)


# max-autotune's kernels: the compiles whose Triton kernels are max-autotune's picks (the harvest
# compiles them without the GEMM/convolution templates, capture/variants.py). The harvested
# kernel's timing says where max-autotune stands.
MAX_AUTOTUNE_COMPILES = ("max-autotune", "max-autotune-extern")
MAX_AUTOTUNE_ORIGINS = tuple(f"harvest:{name}" for name in MAX_AUTOTUNE_COMPILES)


@dataclass
class KernelLimits:
    """Percent of a kernel's memory limit: the compiler's kernel, max-autotune's, the stored version (None: unknown)."""

    compiler: float | None
    max_autotune: float | None
    stored: float | None

    def text(self) -> str:
        """"78.5% / 80.1% -> 92.2%" (compiler / max-autotune -> stored); "-" for an unknown figure."""
        fmt = lambda v: f"{v:.1f}%" if v is not None else "-"  # noqa: E731
        if self.compiler is None:
            return "-"
        return f"{fmt(self.compiler)} / {fmt(self.max_autotune)}" + (f" -> {fmt(self.stored)}" if self.stored else "")


def kernel_limits(outcome: KernelOutcome, profile: KernelProfile | None = None,
                  compile_chosen: str | None = None) -> KernelLimits:
    """Where the compiler's kernel, max-autotune's and the stored version stand against the kernel's limit.

    The compiler's is the profile's; the others are it times their kernel speedup over the
    compiler's kernel, both timed in this run: max-autotune's harvested kernel (or the
    compiler's own where the kernels were tuned on a max-autotune compile), the stored
    version's best kernel timing."""
    profile = profile or outcome.profile
    compiler = limit_pct(profile)
    if compile_chosen in MAX_AUTOTUNE_COMPILES:
        autotuned = compiler
    else:
        timed = next((a.kernel_timing for a in outcome.history
                      if a.origin in MAX_AUTOTUNE_ORIGINS and a.kernel_timing is not None), None)
        autotuned = limit_pct(profile, timed.speedup) if timed is not None else None
    stored = (limit_pct(profile, outcome.best_kernel_timing.speedup)
              if outcome.stored_version is not None and outcome.best_kernel_timing is not None else None)
    rounded = lambda v: None if v is None else round(v, 1)  # noqa: E731
    return KernelLimits(rounded(compiler), rounded(autotuned), rounded(stored))


def _distance(k: KernelProfile | None) -> float:
    """What is left to win on the kernel, as a share of model time: its share times its distance to the limit."""
    if k is None:
        return 0.0
    pct = limit_pct(k)
    return k.share * (1.0 - pct / 100.0 if pct is not None else 1.0)


def plan(profile: ModelProfile, *, min_share: float = MIN_SHARE, only: list[str] | None = None,
         min_gain: float | None = None) -> list[PlanItem]:
    """Kernels in the order the budget goes: largest share of model time times distance to the limit first.

    ``min_gain``: the model-level gain a version needs (the speed policy's); where the profile's swap bound
    is under it, no kernel is searched (still pinned where its pick varies), unless ``only`` names them."""
    bound = profile.swap_bound
    if min_gain is not None and bound is not None and not only and bound < 1.0 + min_gain:
        why = (f"with every Triton kernel at its memory limit the model would run at most {bound:.3f}x faster "
               f"(roofline estimate; Triton {profile.triton_share or 0.0:.0%} of its GPU time), under the "
               f"{min_gain:.0%} a version needs: not searched (--kernel NAME searches it anyway)")
        return [PlanItem(i.kernel, i.profile, skip=i.skip or why, at_limit=i.at_limit or i.skip is None)
                for i in plan(profile, min_share=min_share)]
    items = []
    for k in profile.kernels:
        pct = limit_pct(k)
        if only and k.kernel not in only:
            items.append(PlanItem(k.kernel, k, skip="not selected (--kernel)"))
        elif only:  # named with --kernel: searched whatever its share or distance to the limit
            items.append(PlanItem(k.kernel, k, strategies=list(STRATEGIES[k.bottleneck]),
                                  at_limit=pct is not None and pct >= LIMIT_PCT))
        elif k.share < min_share:
            what = "bytes moved" if k.source == "bytes" else "model GPU time"
            items.append(PlanItem(k.kernel, k, skip=f"{k.share:.1%} of {what}, below the {min_share:.0%} threshold"))
        elif pct is not None and pct >= LIMIT_PCT:
            items.append(PlanItem(k.kernel, k, skip=f"at {pct:.0f}% of its memory limit (the measured copy bandwidth), "
                                                    f"at least {LIMIT_PCT:.0f}%: not searched", at_limit=True))
        else:
            items.append(PlanItem(k.kernel, k, strategies=list(STRATEGIES[k.bottleneck])))
    return sorted(items, key=lambda i: (i.skip is not None, -_distance(i.profile), -(i.profile.share if i.profile else 0.0)))
