"""Stage 3: the whole model with the candidate swapped in, against a float64 reference.

The judge is a float64 copy of the eager model, run once per seed when the session
opens, in float64 throughout (:mod:`.float64`: casts its forward names become float64).
Every output element is judged by the one numerics rule (:mod:`.numerics`)::

    |candidate - reference| <= error_factor * (envelope + ulps * eps * |reference|) + rounding * |reference|

where ``(envelope, ulps * eps)`` is the compiled baseline's own error envelope against
the same reference: ``ulps`` (4) units in the last place of the dtype the output is
computed in (the output's; float32 for a float16 or bfloat16 output, whose own rounding,
one ulp, is ``rounding``, added once) relative to each element, plus the smallest
absolute term ``envelope`` with which the baseline itself passes (0 when the compiler is
within 4 ulp everywhere). The allowance is thus
not scaled by the output's largest element: a huge element no longer widens what the
others may be off by. A reordered reduction passes; an fp16/bf16 round trip or TF32
where the compiler used fp32 fails (``allow_reduced_precision`` puts the relative part
at bf16's). NaN/Inf positions must match the compiled baseline's; integer outputs must
equal it. A failure names the element (index, reference, candidate, allowance); a pass
reports the worst element's fraction of its allowance.

What is kept per seed is small: the reference rounded to the output's dtype
(float64 itself up to 32 MiB) with a bound on its rounding per element, the
compiled baseline's error, envelope and the output's scale, and the baseline's NaN/Inf
mask only when it has any. The bound (``residue`` x |element| + ``residue_abs``) is added
to each element's error, so the check is conservative by about one ulp of that element
(a bound taken from the largest element, as before 2026-12-02, failed the unedited dumps
of two 2^25-element problems on the H200: their small elements' allowance is smaller than
the largest element's rounding).

Besides the seeds, the offset runs (:func:`.prepared.offset_runs`: inputs shifted far from zero
against their spread, one run per :data:`.tensors.OFFSET_VARIANTS`) are judged the same way, with the
baseline's envelope taken slice by slice along the draw (:func:`slice_envelope`) and OFFSET_RUN_FACTOR
times the error factor (an honest looped sum is several times the compiler's tree there), so a kernel
must be about as exact as the compiler's where a reduction is ill-conditioned, sample by sample and
channel by channel; their figures go into the stage's detail, not its rows.

If the float64 reference cannot be built or run (a model that does not support
float64, or not enough memory even on the CPU), the fp32 eager model is the judge
and every verdict says so (``reference: "eager"`` and ``reference_note``).

The reference and the baseline are computed when the session opens, before any
candidate runs, from the session's seeds (drawn from the OS for each worker), each seed
with its own weights (:meth:`.prepared.Prepared.inputs`: the problem's own for the first,
perturbed from the seed for the others; the float64 copy is made of the model as it then
is): a candidate cannot corrupt what it is judged against, nor fit one set of weights. During the stage each seed's
checked run follows 1-3 unchecked ones (drawn), so a candidate that counts its calls
cannot know which run is checked; in every run, every launch of a candidate is on
guarded copies, as in the kernel stage (:class:`.guards.GuardedKernel`: canary kind,
padding and output pre-fill drawn per launch; a store outside an argument or into an
argument the compiler's kernel only reads fails). Inputs and weights are checksummed
after the run as well.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..capture.outputs import flatten  # noqa: F401 - where the verifier's stages and bench import it from
from ..capture.training import run_eager
from ..records import SeedErrors
from .guards import GuardedKernel
from .numerics import (OFFSET_RUN_FACTOR, Drift, Judgement, NumericsFailure, NumericsRule, drift, envelope_atol, judge,
                       judge_drift)
from .prepared import Prepared, StageFailure
from .tensors import any_nonfinite, chunks, offset_conditions

EXACT_REFERENCE_BYTES = 32 << 20  # float64 references up to this size; larger ones rounded, with their residue
# The offset runs (prepared.offset_runs) keep a reference more each on the device: only while one seed's
# references take at most this much (an output of many GiB, elementwise work, goes without them, said).
OFFSET_REFERENCE_BYTES = 1 << 30
# An offset run's envelope is taken slice by slice only where each slice holds at least this many elements:
# the largest error over a few is luck (an honest order 4x the baseline's on one element is common).
SLICE_ELEMENTS = 64
# Slices shifted by at most this many spreads set the floor's constant part (slice_envelope).
SLICE_LOW_SHIFT = 3.0
# judge_growth: an offset run's slice may be this many times what the candidate's own errors on the slices
# shifted least and most give at its shift, growing linearly; judged where the baseline's own errors grow with
# the shift (the slices within a decade of the largest at least GROWTH_STRUCTURE x those shifted least).
GROWTH_FACTOR = 4.0
GROWTH_STRUCTURE = 100.0
ONE_SHIFT_RUNS = ("offset_whole", "offset_moderate")  # judge_shift_growth holds these to each other


@dataclass
class OutputReference:
    shape: tuple[int, ...]
    dtype: Any
    floating: bool
    exact: Any = None  # integer outputs: the compiled baseline's values
    ref_hi: Any = None  # the reference, rounded to ref_hi's dtype
    residue: float = 0.0  # |reference - ref_hi| <= residue * |ref_hi| + residue_abs, element by element
    residue_abs: float = 0.0
    baseline_err: float = 0.0  # max |baseline - reference| over finite elements
    envelope: float = 0.0  # the baseline's absolute envelope term (numerics.envelope_atol), residue included
    scale: float = 0.0  # max |reference| over finite elements
    nonfinite: Any = None  # the baseline's NaN/Inf mask (None: all finite)
    drift: Drift = field(default_factory=Drift)  # the baseline's signed error against the reference
    # An offset run's: the envelope slice by slice along its draw (slice_envelope), element i in slice
    # (i // slice_length) % len(slices); None: ``envelope`` for every element.
    slices: Any = None
    slice_length: int = 1
    # An offset run whose baseline error grows with the shift (slice_envelope): each slice's shift and the
    # baseline's a and b (judge_growth); None: not judged so.
    growth: tuple[Any, float, float] | None = None
    shift: float = 0.0  # an offset run of one shift for every element (offset_whole, offset_moderate): that shift


@dataclass
class SeedReference:
    outputs: list[OutputReference] = field(default_factory=list)


def _max_err(a: Any, ref: Any) -> float:
    """Max |a - ref| over elements finite in both, in chunks, read once at the end."""
    import torch

    worst = torch.zeros((), dtype=torch.float64, device=a.device)
    for x, r in chunks(a, ref.to(a.device)):
        x, r = x.double(), r.double()
        finite = torch.isfinite(x) & torch.isfinite(r)
        worst = torch.maximum(worst, torch.where(finite, (x - r).abs(), 0.0).max())
    return float(worst)


def _scale(ref: Any) -> float:
    import torch

    worst = torch.zeros((), dtype=torch.float64, device=ref.device)
    for (r,) in chunks(ref):
        r = r.double()
        worst = torch.maximum(worst, torch.where(torch.isfinite(r), r.abs(), 0.0).max())
    return float(worst)


def _eps(dtype: Any) -> float:
    import torch

    return float(torch.finfo(dtype).eps) if dtype.is_floating_point else 0.0


def _float64_outputs(model: Any, inputs: list[Any], device: str, notes: list[str] | None = None,
                     problem: Any = None) -> list[Any]:
    """The model (a training problem: its step) in float64 on ``device`` (:func:`.float64.float64_outputs`);
    raises whatever goes wrong."""
    from .float64 import float64_outputs

    return float64_outputs(model, inputs, device, notes, problem)


def build_references(prepared: Prepared) -> tuple[dict[int, SeedReference], str, str | None]:
    """Per seed: the compiled baseline's outputs judged against float64 (or, failing that, eager).

    One seed at a time, so only one seed's inputs and float64 copies are on the device.
    Returns (references, "float64" | "eager", why not float64).
    """
    import torch

    compiled = prepared.compiled
    kind, note = "float64", None
    kept_casts: list[str] = []  # the forward could not run in float64 throughout (verify/float64.py)
    refs: dict[int, SeedReference] = {}
    for seed in prepared.seeds:
        xs = prepared.inputs(seed)
        state = _state(compiled.model, xs) if seed == prepared.seeds[0] else None
        with torch.no_grad():
            base = [t.clone() for t in _compared_outputs(compiled, compiled(*xs))]
        if state is not None:
            _refuse_a_changed_state(compiled, xs, state)
        reference = None
        if kind == "float64":
            try:
                reference = _float64_outputs(compiled.model, xs, compiled.device, kept_casts, compiled.problem)
            except torch.OutOfMemoryError:
                torch.cuda.empty_cache()
                try:  # not enough device memory: the same in float64 on the CPU, slower
                    reference = _float64_outputs(compiled.model, prepared.inputs(seed), "cpu", kept_casts, compiled.problem)
                    note = "float64 reference computed on the CPU (not enough GPU memory)"
                except Exception as exc:  # noqa: BLE001 - any failure falls back, and says so
                    kind, note = "eager", f"float64 reference failed on the CPU too: {type(exc).__name__}: {_short(exc)}"
            except Exception as exc:  # noqa: BLE001 - a model that has no float64 path
                kind, note = "eager", f"float64 reference failed: {type(exc).__name__}: {_short(exc)}"
            if reference is not None and len(reference) != len(base):
                kind, note = "eager", f"the float64 model returned {len(reference)} tensors, the compiled one {len(base)}"
                reference = None
        if reference is None:
            reference = run_eager(compiled.model, compiled.problem, xs or prepared.inputs(seed))
        refs[seed] = SeedReference([_output_reference(b, r.to(b.device)) for b, r in zip(base, reference)])
        del base, reference, xs
    if kind == "float64" and kept_casts:
        note = "; ".join(n for n in (note, kept_casts[0]) if n)
    _offset_references(prepared, refs, kind)
    return refs, kind, note


def _offset_references(prepared: Prepared, refs: dict[int, SeedReference], kind: str) -> None:
    """Add the offset runs' references to ``refs`` (against float64 only). A run the compiled baseline or the
    float64 model cannot do on its inputs (a model that checks its inputs' range, memory) is dropped, as are all
    of them without a float64 reference or where a seed's references are large (OFFSET_REFERENCE_BYTES); the
    model stage's detail says why (:attr:`.prepared.Prepared.offsets_note`). Never the candidate's failure."""
    import torch

    compiled = prepared.compiled
    held = _reference_bytes(refs[prepared.seeds[0]]) if prepared.seeds else 0
    why = ("the reference is not float64" if kind != "float64" else
           f"a seed's references take {held / 2**30:.2f} GiB (over {OFFSET_REFERENCE_BYTES / 2**30:.2f} GiB), and "
           "each offset run's would take as much" if held > OFFSET_REFERENCE_BYTES else None)
    if why is not None:
        prepared.offsets, prepared.offsets_note = {}, f"no offset runs: {why}"
        return
    dropped: list[str] = []
    for seed, variant in list(prepared.offsets.items()):
        try:
            xs = prepared.inputs(seed)
            with torch.no_grad():
                base = [t.clone() for t in _compared_outputs(compiled, compiled(*xs))]
            shifts = offset_conditions(xs, variant, seed, prepared.within())  # before the float64 run empties xs
            reference = _float64_outputs(compiled.model, xs, compiled.device, [], compiled.problem)
            if len(reference) != len(base):
                raise ValueError(f"the float64 model returned {len(reference)} tensors, the compiled one {len(base)}")
            refs[seed] = SeedReference([_output_reference(b, r.to(b.device)) for b, r in zip(base, reference)])
            for out, b, r in zip(refs[seed].outputs, base, reference):
                if out.floating:
                    slice_envelope(out, b, r.to(b.device), shifts, variant)
            del xs, base, reference
        except Exception as exc:  # noqa: BLE001 - out of memory included: the run is dropped, and said
            if isinstance(exc, torch.OutOfMemoryError) and torch.cuda.is_available():
                torch.cuda.empty_cache()
            del prepared.offsets[seed]
            dropped.append(f"{variant} ({type(exc).__name__}: {_short(exc)})")
    if dropped:
        prepared.offsets_note = "offset runs dropped, the compiled baseline or float64 failing on their inputs: " + \
            "; ".join(dropped)


def slice_envelope(out: OutputReference, base: Any, ref: Any, shifts: list[tuple[tuple[int, int], Any]],
                   variant: str) -> None:
    """An offset run's envelope slice by slice along its draw, into ``out.slices``.

    The draw shifts the inputs' samples, features, rows or columns by different amounts (``shifts``:
    :func:`.tensors.offset_conditions`), so the compiled baseline's error on an output's slices differs by
    orders of magnitude: one envelope for all, set by the slices shifted most, would let a candidate be
    hundreds of times the compiler's error on the slices shifted moderately (a one-pass variance guarded
    against large shifts only: red team 2026-12-07). An output slice is matched to an input's by size (the
    same count along the draw's layout, :func:`.tensors.offset_layout`; rows also an output holding one
    element per input row); each slice's envelope is the baseline's largest excess there, at least
    ``a + b x (c + 1)`` (c the largest input shift matched to the slice; an honest error grows about linearly
    with the shift: ``a`` the largest excess of the slices shifted at most SLICE_LOW_SHIFT, ``b`` the largest
    excess per unit of shift of the others) and at least the largest excess of any slice shifted less: a
    baseline lucky on one slice does not hold a candidate to its luck. A draw of one shift for every element
    is one slice (its shift kept in ``out.shift`` for judge_shift_growth). No input matched (a reshape, a
    concatenation or a permute of the drawn axis, a layer that mixes the slices), or slices of fewer than
    SLICE_ELEMENTS elements: ``out.envelope`` for all, as before."""
    import torch

    from .tensors import offset_layout

    layout = offset_layout(tuple(base.shape), variant)
    matched: list[tuple[tuple[int, int], Any]] = []
    for (_, count), c in shifts:
        if layout is not None and layout[1] == count:
            matched.append((layout, c))
        elif variant == "offset" and base.numel() == count:  # one output element per input row (a row reduction)
            matched.append(((1, count), c))
    if not matched or out.envelope <= 0.0 or base.numel() < SLICE_ELEMENTS * matched[0][0][1]:
        return
    length, count = matched[0][0]
    conditions = torch.stack([c.to(base.device) for m, c in matched if m == matched[0][0]]).amax(dim=0).double()
    per = _slice_excess(base, ref, NumericsRule().envelope_rtol(base.dtype), length, count)
    grown = conditions + 1.0
    # The floor, an honest error's a + b x (c + 1): a the largest error of the slices shifted little (what does not
    # grow with the shift), b the largest error per unit of shift of the others; and at least the largest error
    # of any slice shifted no more than this one (an honest error does not shrink as the shift grows).
    low = conditions <= SLICE_LOW_SHIFT
    a = float(per[low].max()) if bool(low.any()) else 0.0
    b = float((per[~low] / grown[~low]).max()) if bool((~low).any()) else 0.0
    order = torch.argsort(grown)
    below = torch.empty_like(per)
    below[order] = torch.cummax(per[order], dim=0).values
    floor = torch.maximum(a + b * grown, below)
    out.slices = torch.maximum(per, floor).clamp_(max=out.envelope)
    out.slice_length = length
    if count == 1:
        out.shift = float(conditions[0])
    top = conditions >= float(conditions.max()) / 10.0
    least = conditions <= max(SLICE_LOW_SHIFT, float(conditions.min()))
    if count >= 4 and int(top.sum()) >= 2 and \
            float(per[top].median()) >= GROWTH_STRUCTURE * max(float(per[least].max()), 1e-300):
        out.growth = (conditions, float(per[least].max()), b)


def _slice_excess(t: Any, ref: Any, u: float, length: int, count: int, residue: float = 0.0,
                  residue_abs: float = 0.0) -> Any:
    """Per slice (element i in slice (i // length) % count), the largest ``|t - ref| - u x |ref|`` (0 at least),
    less the reference's own rounding bound (``residue x |ref| + residue_abs``); float64, on ``t``'s device."""
    import torch

    per = torch.zeros(count, dtype=torch.float64, device=t.device)
    done = 0
    for x, r in chunks(t, ref.to(t.device)):
        x, r = x.double(), r.double()
        finite = torch.isfinite(x) & torch.isfinite(r)
        excess = torch.where(finite, (x - r).abs() - (u + residue) * r.abs() - residue_abs, 0.0).clamp_(min=0.0)
        index = (torch.arange(done, done + x.numel(), device=x.device) // length) % count
        per.scatter_reduce_(0, index, excess, "amax")
        done += x.numel()
    return per


def judge_shift_growth(far: tuple[float, float, float], near: tuple[float, float, float], what: str) -> None:
    """The two offset runs of one shift for every element (``(shift, candidate's largest error, baseline's)``
    each, ``far`` the larger shift): StageFailure where the candidate's error at the smaller shift is over
    GROWTH_FACTOR x what its error at the larger gives there, growing linearly, plus the baseline's own there.
    judge_growth across runs, for outputs no slice of the draws matches (a reshape, a cat or a permute of the
    sample or channel axis: a red-team round of 2026-12-07); judged where the shifts are a decade apart at
    least and the baseline's error grows with them."""
    (c_far, cand_far, base_far), (c_near, cand_near, base_near) = far, near
    if c_far < 10.0 * c_near or base_far < base_near * (c_far / c_near) / 10.0:
        return
    bound = GROWTH_FACTOR * (max(cand_far, base_far) / (c_far + 1.0) * (c_near + 1.0) + base_near)
    if cand_near > bound:
        raise StageFailure(
            f"{what} against the float64 reference: the error with every element {c_near:.3g} spreads from zero is "
            f"{cand_near:.3g}, {cand_near / bound * GROWTH_FACTOR:.3g}x what its error at {c_far:.3g} spreads "
            f"({cand_far:.3g}) gives there growing linearly, plus the compiled baseline's own ({base_near:.3g}; "
            f"{GROWTH_FACTOR:g}x allowed): an error growing faster than the shift")


def judge_growth(c: Any, r: OutputReference, what: str) -> None:
    """An offset run's output whose baseline error grows with the shift (``r.growth``): StageFailure where the
    candidate's error on a slice is over GROWTH_FACTOR x what its own errors give at that shift, linearly:
    ``a + b x (c + 1)``, ``a`` its largest error on the slices shifted least, ``b`` its largest per unit of
    shift on the slices shifted most (each at least the baseline's). An honest order is off in proportion
    to the shift, more or less exact than the compiler's; a one-pass variance guarded to be exact where the
    shift is large is off as its square below (red team 2026-12-07: exact beyond 100 spreads, 25x its own
    linear error at 30). Within the run's allowance (judge_output) a kernel can still be up to it anywhere."""
    import torch

    conditions, a_base, b_base = r.growth  # type: ignore[misc]
    per = _slice_excess(c, r.ref_hi, NumericsRule().envelope_rtol(c.dtype), r.slice_length, len(conditions),
                        r.residue, r.residue_abs)
    grown = conditions.to(per.device) + 1.0
    top = conditions >= float(conditions.max()) / 10.0
    least = conditions <= max(SLICE_LOW_SHIFT, float(conditions.min()))
    a = max(a_base, float(per[least.to(per.device)].max()))
    b = max(b_base, float((per[top.to(per.device)] / grown[top.to(per.device)]).max()))
    ratio = per / (GROWTH_FACTOR * (a + b * grown) + torch.finfo(torch.float64).tiny)
    worst = int(ratio.argmax())
    if float(ratio[worst]) > 1.0:
        raise StageFailure(
            f"{what} against the float64 reference: on slice {worst} along the draw (shifted {float(conditions[worst]):.3g} "
            f"spreads from zero) the error is {float(per[worst]):.3g} beyond the ulps, {float(ratio[worst]) * GROWTH_FACTOR:.3g}x "
            f"what the kernel's own errors give at that shift growing linearly ({a:.3g} + {b:.3g} x (c + 1), from the "
            f"slices shifted least and most; {GROWTH_FACTOR:g}x allowed): an error growing faster than the shift")


def _reference_bytes(ref: SeedReference) -> int:
    """What one seed's references hold on the device (bytes)."""
    return sum(t.numel() * t.element_size() for o in ref.outputs for t in (o.ref_hi, o.exact) if t is not None)


def _compared_outputs(compiled: Any, out: Any) -> list[Any]:
    """The tensors of the baseline's first outputs, or the problem's error: outputs of a type :func:`flatten`
    cannot compare, or none at all, would leave every check with nothing to judge."""
    from ..capture.outputs import RETURNS, UnsupportedOutput
    from ..errors import ProblemError

    try:
        tensors = flatten(out)
    except UnsupportedOutput as exc:
        raise ProblemError(compiled.problem.path, str(exc)) from None
    if not tensors:
        raise ProblemError(compiled.problem.path, f"the model returns no tensor ({type(out).__name__}), so there is "
                                                  f"nothing to compare; return {RETURNS}")
    return tensors


def _state(model: Any, inputs: list[Any]) -> dict[str, Any]:
    """Checksums of what a run may only read: each tensor input, each parameter and buffer, by name."""
    import torch

    from .tensors import checksum

    named = {f"input {i}": x for i, x in enumerate(inputs) if isinstance(x, torch.Tensor)}
    named.update({f"parameter {n}": t for n, t in model.named_parameters()})
    named.update({f"buffer {n}": t for n, t in model.named_buffers()})
    return {name: checksum(t) for name, t in named.items()}


def _refuse_a_changed_state(compiled: Any, inputs: list[Any], before: dict[str, Any]) -> None:
    """A problem whose model (the default compile in a session, the eager model in bench), run once, wrote into
    its inputs, parameters or buffers (a KV cache, a step counter, ``x.mul_(2)`` on an input) cannot be judged:
    every check compares a candidate's run with the default compile's on the same inputs and weights, and each
    run would start from another state. Said before any candidate runs, as the problem's error: never a
    candidate's rejection."""
    from ..errors import ProblemError

    changed = [name for name, sums in _state(compiled.model, inputs).items() if sums != before.get(name, sums)]
    if changed:
        shown = ", ".join(changed[:4]) + (f" and {len(changed) - 4} more" if len(changed) > 4 else "")
        raise ProblemError(compiled.problem.path, (
            f"the model writes into its own state when it runs ({shown} changed during one run); kernelopt judges models whose forward only reads its inputs, parameters and buffers: "
            "copy what it updates (x = x.clone()), or pass the state in and return the new one"))


def _output_reference(base: Any, ref: Any) -> OutputReference:
    import torch

    out = OutputReference(shape=tuple(base.shape), dtype=base.dtype, floating=base.dtype.is_floating_point)
    if not out.floating:
        out.exact = base
        return out
    if ref.numel() * 8 <= EXACT_REFERENCE_BYTES:
        out.ref_hi = ref.double()
    else:
        hi_dtype = base.dtype if base.dtype in (torch.float32, torch.float64) else torch.float32
        out.ref_hi = ref.to(hi_dtype)
        # Round to nearest is within half an ulp of each element; one ulp is claimed, and
        # whatever the rounding exceeds that by (subnormals) is measured, not assumed.
        out.residue = float(torch.finfo(hi_dtype).eps)
        out.residue_abs = envelope_atol(out.ref_hi, ref, out.residue)
    rebase(out, base, ref)
    out.scale = _scale(ref)
    return out


def rebase(out: OutputReference, base: Any, ref: Any = None) -> OutputReference:
    """Make ``base`` the baseline ``out`` judges against: its error, envelope and NaN/Inf mask.

    ``ref``: the float64 reference when at hand (the session opening), else ``out.ref_hi``
    with its residue (``kernelopt bench``, which rebases on the default compile).
    """
    import torch

    if not out.floating:
        out.exact = base
        return out
    rel, absolute = (0.0, 0.0) if ref is not None else (out.residue, out.residue_abs)
    ref = out.ref_hi if ref is None else ref
    out.slices = out.growth = None  # an offset run's slices were the session's baseline's
    out.shift = 0.0
    out.baseline_err = _max_err(base, ref) + absolute + rel * _scale(ref)
    rule = NumericsRule()
    out.envelope = envelope_atol(base, ref, rule.envelope_rtol(base.dtype), absolute, rel)
    out.nonfinite = ~torch.isfinite(base) if any_nonfinite(base) else None
    out.drift = drift(ref, base, out.nonfinite) if rule.rounding(base.dtype) else Drift()
    return out


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def model_stage(prepared: Prepared, candidates: dict[str, Any], error_factor: float,
                reduced_precision: bool) -> tuple[list[SeedErrors], dict[str, SeedErrors]]:
    """Each seed's run, then the offset runs' (:attr:`.prepared.Prepared.offsets`), judged alike: (the seeds'
    rows, each offset run's row by its draw). A failure raises StageFailure with the rows so far."""
    import torch

    from ..capture.swap import swapped
    from ..capture.training import output_names

    compiled = prepared.compiled
    rule = NumericsRule(error_factor=error_factor, reduced_precision=reduced_precision)
    offset_rule = NumericsRule(error_factor=error_factor * OFFSET_RUN_FACTOR, reduced_precision=reduced_precision)
    rows: list[SeedErrors] = []
    single: dict[int, dict[str, tuple[float, float, float]]] = {}  # output -> one-shift run -> (shift, errors)
    names: list[str] = []
    shares = unguarded_shares(prepared)
    for seed in prepared.model_seeds:
        inputs = prepared.inputs(seed)
        label = f"the {prepared.offsets[seed]} run (seed {seed})" if seed in prepared.offsets else f"seed {seed}"

        def guarded(run: str, share: float = 0.0, label: str = label) -> dict[str, GuardedKernel]:
            return {name: GuardedKernel(c, compiled.kernel(name).info.args, f"{label}{run}, kernel {name}",
                                        prepared.device, prepared.entropy, unguarded=share)
                    for name, c in candidates.items()}

        unchecked = guarded(" (an unchecked run)")
        prepared.extra_runs(unchecked, inputs, label)
        failure = next((g.failure for g in unchecked.values() if g.failure is not None), None)
        if failure is not None:
            raise StageFailure(failure)
        guards = guarded("", shares[seed])
        try:
            with swapped(compiled, guards), torch.no_grad():
                outs = flatten(compiled(*inputs))
                if prepared.device == "cuda":
                    torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise StageFailure(f"model raised with the candidate on {label}: {type(exc).__name__}: {_short(exc)}") from exc
        failure = next((g.failure for g in guards.values() if g.failure is not None), None)
        if failure is not None:
            raise StageFailure(failure)
        prepared.check_inputs(seed, inputs)
        ref = prepared.references[seed].outputs
        names = output_names(compiled.problem, compiled.model, inputs, len(ref))  # gradients named in training
        del inputs
        if len(outs) != len(ref):
            raise StageFailure(f"{label}: the model returned {len(outs)} tensors instead of {len(ref)}")
        row = SeedErrors(seed=seed, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0, scale=0.0, model_ratio=0.0)
        for k, (c, r) in enumerate(zip(outs, ref)):
            try:
                j = judge_output(c, r, offset_rule if seed in prepared.offsets else rule, f"{label}, {names[k]}")
                if r.growth is not None and seed in prepared.offsets:
                    judge_growth(c, r, f"{label}, {names[k]}")
            except StageFailure as caught:
                caught.errors = [*rows, failed_row(row, r, caught)]
                raise
            if j is None:
                continue  # an integer output, equal to the baseline's
            row.candidate_vs_fp64 = max(row.candidate_vs_fp64 or 0.0, j.max_abs)
            row.baseline_vs_fp64 = max(row.baseline_vs_fp64 or 0.0, r.baseline_err)
            row.scale = max(row.scale or 0.0, r.scale)
            row.model_ratio = max(row.model_ratio or 0.0, j.worst_ratio)
            if prepared.offsets.get(seed) in ONE_SHIFT_RUNS and r.shift > 0.0:
                single.setdefault(k, {})[prepared.offsets[seed]] = (r.shift, j.max_abs, r.baseline_err)
        del outs
        rows.append(row)
    for k, runs in single.items():
        if len(runs) == len(ONE_SHIFT_RUNS):
            try:
                far, near = sorted(runs.values(), reverse=True)
                judge_shift_growth(far, near, f"the offset_whole and offset_moderate runs, "
                                              f"{names[k] if k < len(names) else f'output {k}'}")
            except StageFailure as caught:
                caught.errors = list(rows)
                raise
    return ([r for r in rows if r.seed not in prepared.offsets],
            {prepared.offsets[r.seed]: r for r in rows if r.seed in prepared.offsets})


def failed_row(row: SeedErrors, r: OutputReference, failure: StageFailure) -> SeedErrors:
    """``row`` with the figures of the output that failed: its measured error where the judge measured one
    (elements outside the allowance), else None (NaN/Inf, shape, dtype or integer mismatch: not measured);
    never the 0 the row started from."""
    j = getattr(failure, "judgement", None)
    if j is None:
        row.candidate_vs_fp64 = row.model_ratio = None
    else:
        row.candidate_vs_fp64 = max(row.candidate_vs_fp64 or 0.0, j.max_abs)
        row.model_ratio = max(row.model_ratio or 0.0, j.worst_ratio)
    if r.floating:
        row.baseline_vs_fp64 = max(row.baseline_vs_fp64 or 0.0, r.baseline_err)
        row.scale = max(row.scale or 0.0, r.scale)
    return row


def unguarded_shares(prepared: Prepared) -> dict[int, float]:
    """Per seed, the share of the checked run's launches that run on the model's own tensors.

    One seed, drawn, runs every launch so (its outputs are what production would compute);
    each other seed a share drawn from 0, 1/4, ..., 1, each launch drawn. The unchecked runs
    stay on guarded copies: they catch stores out of bounds where no kernel stage runs.
    """
    entropy = prepared.entropy
    production = prepared.seeds[entropy.below(len(prepared.seeds))] if prepared.seeds else None
    return {seed: 1.0 if seed == production else entropy.below(5) / 4 for seed in prepared.model_seeds}


def judge_output(c: Any, r: OutputReference, rule: NumericsRule, what: str,
                 baseline: str = "the compiled baseline") -> Judgement | None:
    """One output against its reference by the one numerics rule (None for an integer output).

    StageFailure, naming ``what``, for a changed shape or dtype, a different integer
    output, NaN/Inf where ``baseline`` (whose envelope and mask ``r`` holds) has none or
    elsewhere, or an element outside ``rule``'s allowance. Also used by ``kernelopt
    bench``, which rebases ``r`` on the default compile (:func:`rebase`).
    """
    import torch

    if tuple(c.shape) != r.shape or c.dtype != r.dtype:
        raise StageFailure(f"{what}: shape/dtype changed")
    if not r.floating:
        if not torch.equal(c, r.exact):
            raise StageFailure(f"{what}: integer output differs from {baseline}")
        return None
    if r.nonfinite is None and any_nonfinite(c):
        raise StageFailure(f"{what}: NaN/Inf where {baseline} is finite")
    if r.nonfinite is not None and not torch.equal(~torch.isfinite(c), r.nonfinite):
        raise StageFailure(f"{what}: NaN/Inf positions differ from {baseline}")
    tol = rule.model_tolerance(c.dtype, r.envelope, baseline, r.slices, r.slice_length)
    try:
        # Where the baseline is NaN/Inf the candidate is too (checked above): not compared further.
        judged = judge(r.ref_hi, c, tol, f"{what} against the float64 reference", residue=r.residue_abs,
                       residue_rel=r.residue, ignore=r.nonfinite)
        if rule.rounding(c.dtype):  # a 16-bit output: its errors may not all lean one way (numerics.DRIFT_SHARE)
            try:
                judge_drift(drift(r.ref_hi, c, r.nonfinite), r.drift, tol, f"{what} against the float64 reference",
                            baseline)
            except NumericsFailure as leaning:
                leaning.judgement = judged  # every element within its allowance: the figures hold
                raise
        return judged
    except NumericsFailure as exc:
        failure = StageFailure(str(exc))
        failure.judgement = exc.judgement  # type: ignore[attr-defined]  # bench reports the figures
        raise failure from exc
