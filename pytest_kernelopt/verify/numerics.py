"""The one numerics rule: how close a result must be, element by element, to what judges it.

Every numerical judgement of the tool asks :class:`NumericsRule`: the kernel stage (the
candidate against the compiler's kernel at each launch), the model stage and the gate's
model item (the model with candidates against a float64 reference), and ``kernelopt
bench`` (each compile mode against the same float64 reference). An element passes when::

    |actual - expected| <= atol + rtol * |expected|

with NaN/Inf where ``expected`` has them (Inf with the same sign) and nowhere else;
integers and bools must be equal. Where the two numbers come from:

* **kernel stage** (expected: the compiler's kernel on the same arguments): ``rtol`` by
  dtype (:data:`KERNEL_RTOL`; bf16's for every float with ``reduced_precision``; for an
  fp32 *pointwise* kernel :data:`POINTWISE_ULPS` ulp, since each element is computed on its
  own and a faithful rewrite differs only by its math functions' last bits, while a
  reduction's order may legitimately move further) and
  ``atol = rtol * typical``, ``typical`` being the median ``|expected|`` over finite
  elements (of at most :data:`SAMPLE` elements spread over the tensor), at least the
  dtype's smallest normal. The size of an ordinary element, not of the largest: one huge
  element no longer loosens the allowance of every other (it did while atol was scaled by
  the maximum), while an element that cancels to near zero (``x - mean``) is judged at the
  scale of its neighbours, where a reordered reduction's rounding lives.
* **model stage** (expected: the float64 reference): the compiled baseline's own error
  sets both. With ``u = ulps * eps(compute dtype)`` (the output's dtype, but float32 for a
  float16 or bfloat16 output, which is computed in float32 and rounded once; bf16's eps for
  every output with ``reduced_precision``) and ``r`` the output dtype's eps where that dtype
  is narrower than the computation (its rounding: one ulp, so either neighbour of the true
  value passes, however the float32 value before it was rounded fell; 0 otherwise), the
  baseline's *envelope* is ``(baseline_atol, u)``, ``baseline_atol`` the smallest absolute
  term with which the baseline itself passes (:func:`envelope_atol`: the largest
  ``|baseline - reference| - (u + r) * |reference|``, 0 when the compiler is within
  ``ulps`` float32 ulp of a neighbour of the true value everywhere). A run may have
  ``error_factor`` times that envelope plus its own rounding:
  ``rtol = error_factor * u + r``, ``atol = error_factor * baseline_atol + tiny``. The
  rounding is not multiplied: every implementation pays it once, and multiplied it would
  let a bf16 output be 4 ulps (3%) off; as it is, a bf16 output 1% off fails. The compiled
  baseline passes by construction (``error_factor >= 1``); ``tiny``, the dtype's smallest
  normal, lets a result that would be subnormal be flushed to zero.

A 16-bit output (narrower than its float32 computation) is also judged as a whole in the model stage
and bench: the sum of its errors, up and away from zero, may differ from the compiled baseline's own by at most
:data:`DRIFT_SHARE` of the summed allowance (:func:`judge_drift`): each element within one ulp and every
one rounded up is a sum that drifts.

A passing judgement reports its worst element as a fraction of that element's allowance
(at most 1); a failing one names the element (flat index and multi-index), the expected
and actual values and the allowance, never a maximum error next to a tolerance it exceeds.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

# Kernel stage: relative tolerance by dtype (in limits.py, below tensors.py, whose offset draw
# is sized from it); with reduced precision every float gets bf16's.
from .limits import KERNEL_RTOL, OFFSET_GROWTH  # noqa: E402
REDUCED_PRECISION_RTOL = 1.6e-2
REDUCED_PRECISION_EPS = 2.0**-7  # bf16's eps (8 significant bits): its ulp at 1.0, torch.finfo(torch.bfloat16).eps
# Half-precision outputs are computed in float32 and rounded once (Inductor loads fp16/bf16 into
# float32 registers and stores the result rounded): a run's computing error is measured in
# float32's ulps, and rounding the output lands on one of the two neighbours of the true value:
# at most one ulp of the output's dtype, which is at most its eps x |value|.
COMPUTE_DTYPE = {"float16": "float32", "bfloat16": "float32"}
# Model stage: a run's error may be this many times the compiled baseline's envelope, whose
# relative part is ``ULP_FLOOR`` units in the last place of the output's dtype.
ERROR_FACTOR = 4.0
# The model stage's offset runs (inputs far from zero against their spread): this many times the seeds' factor,
# each slice of the output against the baseline's envelope on that slice (verify/model.slice_envelope). There
# a reduction's error is one rounding of a sum common to a whole row or group, not many independent ones, and
# an honest order's is several times the compiler's: a looped sum (chunks of 64 added in sequence) against the
# compiler's tree was over 4x its largest error in 2-6% of runs of a GroupNorm and a BatchNorm (1,000 spreads
# and more from zero; Monte Carlo with this rule, 2026-12-07), never over 0.6 of 16x. A one-pass variance
# (error c^2 eps) is 20x over 16x at 100 spreads; a fully sequential sum of 1,024 (10x the tree's) is out too.
OFFSET_RUN_FACTOR = 4.0
# Kernel stage, fp32 pointwise kernels: this many units in the last place. A rewrite with
# other math functions (fast division, another tanh) stays within a few; 1/sqrt(2) written
# as 0.7071 in a GELU is ~24 ulp off, which the model stage alone let through on the H200
# where a cuBLAS GEMM before it made the compiled baseline's own error larger (2026-12-02).
POINTWISE_ULPS = 16.0
# A compile setting is chosen only while its worst output element used at most this fraction of its
# allowance: the gate checks the stored setting again on input draws of its own, and a setting near its
# allowance fails some of them. On an H100 (2026-12-05) the same max-autotune-nd-tiling compile of a
# cross-entropy training step used 54% of it on one tune's draws and 109% (rejected) on another's.
SETTING_HEADROOM = 0.5
ULP_FLOOR = 4.0
SAMPLE = 1 << 16  # elements the typical magnitude is estimated from, at most
# The signed drift of an output narrower than its computation (bfloat16/float16 from float32), model stage
# and bench: every element may be within its allowance while all of them err the same way (a kernel that
# rounds every result up: each within one ulp, every sum of the outputs 0.3% high, red team 2026-12-07). The
# sum of (result - reference) over the tensor may differ from the compiled baseline's own by at most DRIFT_SHARE
# of the summed allowance, or DRIFT_Z of the baseline's standard error (from DRIFT_BLOCKS contiguous blocks) where
# that is larger; tensors of fewer than DRIFT_MIN_ELEMENTS elements are not judged so. Against the baseline's
# lean, not its size: the CPU interpreter's bf16 stores truncate (every candidate run there does too), and a lean
# as large the other way passed while sizes were compared (red team 2026-12-07). A faithful rewrite rounds
# once to nearest like the compiler (its drift is the compiler's within a thousandth of an ulp at 8192
# elements); float32's own error common to a whole row (a reduction's order) moves a 16-bit result by a few
# millionths of its value, far under a tenth of its ulp. float32 outputs are not judged so: there a row's
# reduction error, common to the row, is legitimately of the size of the allowance itself.
DRIFT_SHARE = 0.1
DRIFT_Z = 6.0
DRIFT_BLOCKS = 64
DRIFT_MIN_ELEMENTS = 256


@dataclass(frozen=True)
class Tolerance:
    """One tensor's allowance: ``atol + rtol * |expected|`` per element; ``origin`` says where it came from.

    ``row_atol`` and ``row_rtol`` (the offset draws': :meth:`NumericsRule.row_tolerance`,
    :meth:`NumericsRule.model_tolerance` with slices): one per slice of the tensor, element ``i`` (row-major)
    judged by slice ``(i // row_length) % len(row_atol)``'s (rows of ``row_length`` elements: the row; a
    dimension: ``row_length`` the product of the sizes after it); ``row_rtol`` None: ``rtol`` for all;
    ``rtol`` and ``atol`` are then the largest."""

    rtol: float
    atol: float
    origin: str = ""
    row_rtol: Any = None
    row_atol: Any = None
    row_length: int = 1

    def describe(self) -> str:
        text = f"|actual - expected| <= {self.atol:.3g} + {self.rtol:.3g} * |expected|"
        if self.row_atol is not None:
            text = f"{text} at most, each {'row' if self.row_rtol is not None else 'slice'}'s own"
        return f"{text} ({self.origin})" if self.origin else text

    def allowance(self, e: Any, offset: int) -> Any:
        """The allowance of each element of ``e`` (float64), a piece starting at flat index ``offset``."""
        if self.row_atol is None:
            return self.atol + self.rtol * e.abs()
        import torch

        row = (torch.arange(offset, offset + e.numel(), device=e.device) // self.row_length) % len(self.row_atol)
        rtol = self.rtol if self.row_rtol is None else self.row_rtol.to(e.device)[row]
        return self.row_atol.to(e.device)[row] + rtol * e.abs()


@dataclass
class Judgement:
    """What :func:`judge` found: the worst element's error as a fraction of its allowance."""

    worst_ratio: float = 0.0
    max_abs: float = 0.0
    max_rel: float = 0.0
    checked: int = 0


class NumericsFailure(Exception):
    """A judgement failed; the message names the element. Stages turn it into their own failure.

    ``judgement``: the figures, when the failure is elements outside the allowance (not a
    shape, dtype or NaN/Inf pattern).
    """

    def __init__(self, message: str, judgement: Judgement | None = None):
        super().__init__(message)
        self.judgement = judgement


class NumericsRule(BaseModel):
    """The tool's one numerics rule (see the module's docstring); every caller builds its tolerances here."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    error_factor: float = Field(ERROR_FACTOR, gt=0.0)
    ulps: float = Field(ULP_FLOOR, gt=0.0)
    reduced_precision: bool = False
    pointwise: bool = False  # the kernel stage's kernel computes each element on its own
    # The run is a whole compile (a bench mode, a compile setting), not the default compile with
    # kernels swapped in: it may round intermediates to the model's half-precision dtype where the
    # default compile kept them in float32 (eager does, as the user's code says), so its rounding
    # allowance is ``error_factor`` ulps of a half-precision output instead of one. Measured on a
    # bf16 RMSNorm with a residual: eager, which rounds three times, was up to 1.1 ulps off float64
    # where the fused kernel (rounding once) was within half an ulp.
    whole_compile: bool = False

    # --- kernel stage ---------------------------------------------------------------

    def kernel_rtol(self, dtype: Any) -> float:
        if self.reduced_precision:
            return REDUCED_PRECISION_RTOL
        if self.pointwise and _name(dtype) == "float32":
            return POINTWISE_ULPS * 2.0**-23  # fp32 eps
        return KERNEL_RTOL.get(_name(dtype), 1e-4)

    def shifted_rtol(self, dtype: Any, shift: float) -> float:
        """The kernel stage's rtol for a reduction's output on the offset draw, whose rows were shifted by up
        to ``shift`` times their spread (limits.OFFSET_GROWTH)."""
        import torch

        compute = torch.float64 if _name(dtype) == "float64" else torch.float32
        return max(self.kernel_rtol(dtype), OFFSET_GROWTH * torch.finfo(compute).eps * shift)

    def row_tolerance(self, expected: Any, conditions: Any, row_length: int) -> Tolerance:
        """The kernel stage's allowance on the offset draw, row by row: each row's rtol widened as
        :meth:`shifted_rtol` by that row's own condition (``conditions``, one a row of ``row_length``
        elements), its atol that rtol times the median ``|expected|``."""
        import torch

        compute = torch.float64 if _name(expected.dtype) == "float64" else torch.float32
        base = self.kernel_rtol(expected.dtype)
        row_rtol = (conditions.double() * (OFFSET_GROWTH * torch.finfo(compute).eps)).clamp(min=base)
        typical = typical_magnitude(expected)
        row_atol = (row_rtol * typical).clamp(min=_tiny(expected.dtype))
        return Tolerance(float(row_rtol.max()), float(row_atol.max()),
                         f"rtol widened row by row for the offset draw, from {base:g} for {_name(expected.dtype)}; "
                         f"atol rtol x the median |expected| {typical:.3g}", row_rtol, row_atol, row_length)

    def kernel_tolerance(self, expected: Any, rtol: float | None = None) -> Tolerance:
        """The kernel stage's allowance for one output of the compiler's kernel (``rtol``: not the dtype's)."""
        rtol = self.kernel_rtol(expected.dtype) if rtol is None else rtol
        typical = typical_magnitude(expected)
        atol = max(rtol * typical, _tiny(expected.dtype))
        return Tolerance(rtol, atol, f"rtol {rtol:g} for {_name(expected.dtype)}, atol rtol x the median "
                                     f"|expected| {typical:.3g}")

    # --- model stage and bench --------------------------------------------------------

    def _compute_eps(self, dtype: Any) -> float:
        """The eps of the dtype an output of ``dtype`` is computed in."""
        if self.reduced_precision:
            return REDUCED_PRECISION_EPS
        compute = COMPUTE_DTYPE.get(_name(dtype))
        return _eps(_dtype(compute)) if compute else _eps(dtype)

    def unit(self, dtype: Any) -> float:
        """``ulps`` units in the last place (relative) of the dtype an output of ``dtype`` is computed
        in (float32 for float16 and bfloat16): the envelope's relative part, multiplied by the factor."""
        return self.ulps * self._compute_eps(dtype)

    def rounding(self, dtype: Any) -> float:
        """The eps of ``dtype`` where it is narrower than the computation (a half-precision output of a
        float32 computation), else 0: rounding the output once, to either neighbour of the true value
        (round to nearest is within half of it; a float32 value a little off may round to the other)."""
        eps = _eps(dtype)
        if eps <= self._compute_eps(dtype):
            return 0.0
        return eps * (self.error_factor if self.whole_compile else 1.0)

    def model_tolerance(self, dtype: Any, baseline_atol: float, baseline: str = "the compiled baseline",
                        slices: Any = None, slice_length: int = 1) -> Tolerance:
        """A run's allowance against the float64 reference, from ``baseline``'s envelope; with ``slices`` (an
        offset run's, :func:`.model.slice_envelope`) the envelope's absolute term slice by slice (element ``i``
        by slice ``(i // slice_length) % len(slices)``'s), ``baseline_atol`` their largest."""
        u, r = self.unit(dtype), self.rounding(dtype)
        atol = self.error_factor * baseline_atol + _tiny(dtype)
        rounding = f" + {r:.3g} * |reference| ({_name(dtype)} rounding)" if r else ""
        envelope = f"{baseline_atol:.3g}" if slices is None else \
            f"each of {len(slices)} slices along the draw its own, at most {baseline_atol:.3g},"
        row_atol = None if slices is None else slices.double() * self.error_factor + _tiny(dtype)
        return Tolerance(self.error_factor * u + r, atol,
                         f"{self.error_factor:g} x ({baseline}'s envelope: {envelope} + {u:.3g} * |reference|)"
                         f"{rounding}", row_atol=row_atol, row_length=slice_length)

    def envelope_rtol(self, dtype: Any) -> float:
        """The relative part the baseline's envelope is measured beyond: its computing unit and its rounding."""
        return self.unit(dtype) + self.rounding(dtype)

    def envelope_atol(self, baseline: Any, reference: Any) -> float:
        """See :func:`envelope_atol`, with this rule's relative part for the baseline's dtype."""
        return envelope_atol(baseline, reference, self.envelope_rtol(baseline.dtype))


def envelope_atol(baseline: Any, reference: Any, u: float, residue: float = 0.0, residue_rel: float = 0.0) -> float:
    """The largest ``|baseline - reference| - u * |reference|`` over elements finite in both (0 at least).

    Chunked; the reference's own rounding, ``residue + residue_rel * |reference|``, is
    added to every error.
    """
    import torch

    from .tensors import chunks

    worst = torch.zeros((), dtype=torch.float64, device=baseline.device)
    for b, r in chunks(baseline, reference.to(baseline.device)):
        b, r = b.double(), r.double()
        finite = torch.isfinite(b) & torch.isfinite(r)
        excess = (b - r).abs() + residue - (u - residue_rel) * r.abs()
        worst = torch.maximum(worst, torch.where(finite, excess, 0.0).max())
    return max(0.0, float(worst))


@dataclass(frozen=True)
class Drift:
    """How a tensor's errors against its reference lean, over the elements judged: ``up`` the sum of
    ``actual - expected`` (toward +Inf), ``out`` the sum of ``(actual - expected) * sign(expected)``
    (away from zero: magnitudes inflated), each with its standard error (``up_spread``, ``out_spread``,
    from block sums); ``scale`` the sum of ``|expected|``, ``count`` the elements summed."""

    up: float = 0.0
    out: float = 0.0
    up_spread: float = 0.0
    out_spread: float = 0.0
    scale: float = 0.0
    count: int = 0


def drift(expected: Any, actual: Any, ignore: Any = None) -> Drift:
    """The :class:`Drift` of ``actual`` against ``expected`` over elements finite in both (and not in
    ``ignore``); blocks are contiguous runs of the row-major order, so an error common to a row stays in few."""
    import torch

    from .tensors import chunks

    n = expected.numel()
    blocks = max(1, min(DRIFT_BLOCKS, n))
    device = expected.device
    sums = torch.zeros(2, blocks, dtype=torch.float64, device=device)
    scale = torch.zeros((), dtype=torch.float64, device=device)
    count = torch.zeros((), dtype=torch.int64, device=device)
    offset = 0
    pieces = chunks(expected, actual) if ignore is None else chunks(expected, actual, ignore.to(device))
    for e, a, *skip in pieces:
        e, a = e.double(), a.double()
        keep = torch.isfinite(e) & torch.isfinite(a)
        if skip:
            keep = keep & ~skip[0]
        where = (torch.arange(offset, offset + e.numel(), device=device) * blocks) // max(n, 1)
        err = torch.where(keep, a - e, 0.0)
        sums[0].index_add_(0, where, err)
        sums[1].index_add_(0, where, err * torch.sign(e))
        scale = scale + torch.where(keep, e.abs(), 0.0).sum()
        count = count + keep.sum()
        offset += e.numel()
    totals = sums.sum(dim=1)
    if blocks > 1:
        spreads = ((sums - totals[:, None] / blocks) ** 2).sum(dim=1).mul(blocks / (blocks - 1)).sqrt()
    else:
        spreads = torch.zeros(2, dtype=torch.float64)
    return Drift(up=float(totals[0]), out=float(totals[1]), up_spread=float(spreads[0]),
                 out_spread=float(spreads[1]), scale=float(scale), count=int(count))


def judge_drift(actual: Drift, baseline: Drift, tol: Tolerance, what: str, baseline_name: str) -> None:
    """Raise NumericsFailure when ``actual`` leans otherwise than ``baseline`` (see :data:`DRIFT_SHARE`), up or
    away from zero: both measured against the same reference, the allowance summed over the same elements. The
    noise allowed for is the baseline's (its block sums' spread): a candidate leaning opposite ways in different
    blocks would widen its own."""
    if actual.count < DRIFT_MIN_ELEMENTS or actual.scale <= 0:
        return
    allowance = tol.rtol * actual.scale + tol.atol * actual.count  # the summed per-element allowance
    for way, total, own, spread in (("up (toward +Inf)", actual.up, baseline.up, baseline.up_spread),
                                    ("away from zero", actual.out, baseline.out, baseline.out_spread)):
        beyond = (total - own) / allowance
        slack = max(DRIFT_SHARE, DRIFT_Z * spread / allowance)
        if abs(beyond) > slack:
            lean = way if beyond > 0 else ("down (toward -Inf)" if way.startswith("up") else "toward zero")
            raise NumericsFailure(
                f"{what}: its errors lean {lean} {abs(beyond):.3g} of the summed allowance further than "
                f"{baseline_name}'s: their sum over {actual.count} elements is {total / allowance:+.3g} of it "
                f"({total / actual.scale:+.3g} of the sum of |reference|), {baseline_name}'s {own / allowance:+.3g}; "
                f"at most {slack:.3g} is allowed (each element may be within its allowance and every sum of the "
                "outputs still drift: a result rounded one way)")


def typical_magnitude(t: Any) -> float:
    """The median ``|t|`` over finite elements of an even sample of at most :data:`SAMPLE` elements."""
    import torch

    from .tensors import chunks

    n = t.numel()
    if n == 0:
        return 0.0
    step = max(1, n // SAMPLE)
    picked, offset = [], 0
    for (flat,) in chunks(t):
        start = (-offset) % step
        picked.append(flat[start::step].double())
        offset += flat.numel()
    sample = torch.cat(picked).abs()
    sample = sample[torch.isfinite(sample)]
    if sample.numel() == 0:
        return 0.0
    return float(sample.median())


def judge(expected: Any, actual: Any, tol: Tolerance, what: str, residue: float = 0.0,
          ignore: Any = None, residue_rel: float = 0.0) -> Judgement:
    """Check ``actual`` against ``expected`` element by element; raise NumericsFailure naming the element.

    NaN/Inf of ``expected`` must be in ``actual`` at the same places (Inf of the same sign);
    where ``expected`` is finite, ``actual`` must be finite and within ``tol``.
    ``residue + residue_rel * |expected|`` is added to each element's error (the model
    stage's reference may be rounded; see :mod:`.model`).
    ``ignore``: a bool mask of elements not judged (the model stage's baseline NaN/Inf,
    matched beforehand).
    Figures accumulate on the device and are read once at the end; only a failure walks
    the tensors again, to name the first offending element.
    """
    import torch

    from .tensors import chunks

    floats = expected.dtype.is_floating_point and actual.dtype.is_floating_point  # a reference may be float64
    if tuple(expected.shape) != tuple(actual.shape) or (expected.dtype != actual.dtype and not floats):
        raise NumericsFailure(f"{what}: shape/dtype changed ({actual.dtype}{list(actual.shape)}, expected "
                              f"{expected.dtype}{list(expected.shape)})")
    if not (expected.dtype.is_floating_point or expected.dtype.is_complex):
        differ = None
        for e, a in chunks(expected, actual):
            n = (e != a).sum()
            differ = n if differ is None else differ + n
        if differ is not None and int(differ):
            index = _first(expected, actual, lambda e, a: e != a)
            raise NumericsFailure(f"{what}: {int(differ)} element(s) differ, the first at {_where(expected, index)}: "
                                  f"expected {_at(expected, index)}, got {_at(actual, index)}")
        return Judgement(checked=expected.numel())
    zero = torch.zeros((), dtype=torch.float64, device=expected.device)
    n_bad, n_odd = zero.long(), zero.long()
    worst, max_abs, max_rel = zero, zero, zero
    pieces = chunks(expected, actual) if ignore is None else chunks(expected, actual, ignore.to(expected.device))
    offset = 0
    for e, a, *skip in pieces:
        e, a = e.double(), a.double()
        finite = torch.isfinite(e)
        odd = _odd(e, a)
        if skip:
            finite, odd = finite & ~skip[0], odd & ~skip[0]
        err = torch.where(finite, (a - e).abs() + residue + residue_rel * e.abs(), 0.0)
        err = torch.where(torch.isnan(err), float("inf"), err)  # NaN where a finite value was expected
        allow = tol.allowance(e, offset)
        offset += e.numel()
        ratio = torch.where(finite, err / allow, 0.0)
        n_bad = n_bad + ((ratio > 1.0) & finite).sum()
        n_odd = n_odd + odd.sum()
        worst = torch.maximum(worst, ratio.max())
        max_abs = torch.maximum(max_abs, err.max())
        max_rel = torch.maximum(max_rel, torch.where(finite & (e != 0), err / e.abs(), 0.0).max())
    bad, odd_count = int(n_bad), int(n_odd)
    if odd_count:
        index = _first(expected, actual, lambda e, a, *skip: _odd(e.double(), a.double()) & _keep(e, skip), ignore)
        exp_v, act_v = _at(expected, index), _at(actual, index)
        raise NumericsFailure(f"{what}: {odd_count} element(s) with NaN/Inf where the expected result has none, "
                              f"or not where it has them; the first at {_where(expected, index)}: expected {exp_v}, "
                              f"got {act_v}")
    if bad:
        def over(e: Any, a: Any, *skip: Any, offset: int = 0) -> Any:
            e, a = e.double(), a.double()
            err = (a - e).abs() + residue + residue_rel * e.abs()
            return torch.isfinite(e) & ~(err <= tol.allowance(e, offset)) & _keep(e, skip)

        index = _first(expected, actual, over, ignore, offsets=True)
        exp_v, act_v = _at(expected, index), _at(actual, index)
        allow = float(tol.allowance(torch.tensor([float(exp_v)], dtype=torch.float64), index)[0])
        diff = abs(act_v - exp_v) + residue + residue_rel * abs(exp_v)
        raise NumericsFailure(
            f"{what}: {bad} of {expected.numel()} element(s) outside the allowance {tol.describe()}; the first at "
            f"{_where(expected, index)}: expected {exp_v:.9g}, got {act_v:.9g}, |difference| {diff:.3g} > allowance "
            f"{allow:.3g} ({diff / allow:.4g}x); the worst is {float(worst):.4g}x its allowance",
            Judgement(worst_ratio=float(worst), max_abs=float(max_abs), max_rel=float(max_rel), checked=expected.numel()))
    return Judgement(worst_ratio=float(worst), max_abs=float(max_abs), max_rel=float(max_rel),
                     checked=expected.numel())


def _odd(e: Any, a: Any) -> Any:
    import torch

    return (torch.isnan(e) != torch.isnan(a)) | (torch.isinf(e) != torch.isinf(a)) | (torch.isinf(e) & (e != a))


def _keep(e: Any, skip: Any) -> Any:
    import torch

    return ~skip[0] if skip else torch.ones_like(e, dtype=torch.bool)


def _first(expected: Any, actual: Any, test: Any, ignore: Any = None, offsets: bool = False) -> int:
    """The flat index (in ``chunks`` order: row-major) of the first element where ``test`` holds (given each
    piece's flat offset as ``offset=`` with ``offsets``)."""
    from .tensors import chunks

    offset = 0
    tensors = (expected, actual) if ignore is None else (expected, actual, ignore.to(expected.device))
    for e, a, *skip in chunks(*tensors):
        hit = test(e, a, *skip, offset=offset) if offsets else test(e, a, *skip)
        if bool(hit.any()):
            return offset + int(hit.nonzero()[0, 0])
        offset += e.numel()
    return 0


def _at(t: Any, index: int) -> Any:
    from .tensors import chunks

    offset = 0
    for (flat,) in chunks(t):
        if index < offset + flat.numel():
            return flat[index - offset].item()
        offset += flat.numel()
    return None


def _where(t: Any, index: int) -> str:
    """``flat index 17 [0, 17]``: the row-major flat index and the multi-index."""
    multi, rest = [], index
    for size in reversed(tuple(t.shape)):
        multi.append(rest % size if size else 0)
        rest //= max(size, 1)
    return f"flat index {index} {list(reversed(multi))}"


def _name(dtype: Any) -> str:
    return str(dtype).removeprefix("torch.")


def _dtype(name: str) -> Any:
    import torch

    return getattr(torch, name)


def _eps(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _tiny(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).tiny) if dtype.is_floating_point else 0.0
