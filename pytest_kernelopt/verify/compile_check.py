"""The model compiled under other settings (``capture/variants.py``) against the default compile.

A compile setting, graph rewrites included (``max-autotune-rewrites``), has no single
kernel to compare launch by launch, so it is judged on the whole model's outputs, on the
same inputs as a kernel:

* **the seeded runs**: the session's seeds (``get_inputs()`` under each), every output
  element against that seed's float64 reference (computed when the session opened);
* **the input draws**: one per kind of :data:`.tensors.STRESS_VARIANTS` (whatever kinds
  it lists when the check runs), in a drawn order, each on inputs drawn under a seed of
  its own, fresh for this check, every floating-point input turned in place into that kind
  by :func:`.tensors.stress`; on about half of them (drawn which) the model's
  floating-point parameters are varied in place, for both compiles and the reference
  alike (each element times +-1, +-2 or +-4, drawn; undone exactly afterwards). Each
  draw's float64 reference is the eager model in float64 on those inputs and weights;
* **the incoming-gradient draws** (a training step only): every kind once more, in a draw of its
  own among the others (same order, seeds and weight draws), on the step's *incoming gradients*
  (the loss's gradient of each output, what a backward mostly reads) instead of the inputs (drawn
  plain), as the kernel stage draws them for a backward kernel (:class:`.kernel.IncomingDraw`,
  :func:`..capture.training.incoming_drawn`): made once, on the default compile's step, and the
  very same values (cast, exactly, to float64) given to the float64 reference and to the setting's
  step, so the three backwards start from one incoming gradient (:class:`_Incoming`).

Every output element is judged by the model stage's rule (:class:`.numerics.NumericsRule`,
:func:`.model.judge_output`): its error against float64 may exceed the *default* compile's
own error envelope on the same inputs by at most the error factor (a setting may reorder a
reduction as the compiler does, not be less exact), NaN/Inf exactly where the default
compile has them, integer outputs equal. A draw on which the default compile raises, or
returns no finite floating-point element, is skipped and named; where the float64 reference
is NaN/Inf and the default compile finite (nothing to judge against), the default compile's
value stands in. If the float64 model cannot run (on the device, then on the CPU), the fp32
eager model is the reference for the draws, and the detail says so. The setting is then
timed against the default compile, paired and interleaved, in one run.

The session holds one side already: opened under the defaults (``kernelopt tune``, which
tries several variants in one session), the variant is compiled here; opened under the
variant (the gate, whose kernels are that compile's), the default compile is. The other
side is a second ``torch.compile`` of the same module (same weights), with a backend of
its own so that Dynamo does not reuse the session's graphs.
"""

from __future__ import annotations

import contextlib
import copy
import functools
from typing import Any, Iterator

from ..capture.training import (backward_compiled_with_forward, incoming_drawn, is_training, output_names, run_eager,
                                step)
from ..records import SeedErrors, Timing
from . import tensors
from .kernel import IncomingDraw
from .model import (OutputReference, _float64_outputs, _output_reference, _scale, failed_row, flatten, judge_output,
                    rebase)
from .numerics import NumericsRule
from .prepared import Prepared, StageFailure


def _sides(prepared: Prepared, variant: str, launch_configs: dict[str, dict[str, int]] | None = None
           ) -> tuple[Any, Any]:
    """(the default compile, the variant's compile), as callables; one of them is the session's. ``launch_configs``:
    the variant's compiled here launches those (capture/launch_configs.py); a session opened under the variant
    was given its own when it opened."""
    if prepared.variant is None:
        return prepared.compiled, _other(prepared, variant, launch_configs)
    if prepared.variant == variant:
        return _other(prepared, None), prepared.compiled
    raise StageFailure(f"this session compiles the model as {prepared.variant!r}; it cannot check {variant!r} "
                       f"against the default compile")


def _other(prepared: Prepared, variant: str | None, launch_configs: dict[str, dict[str, int]] | None = None) -> Any:
    """The session's model compiled again under ``variant`` (None: the defaults), kept until another is asked for.

    Called without autograd, as the session's compile is (``CompiledModel.__call__``): called with
    gradients recorded, Dynamo (which guards on the grad mode) would compile it again for training
    (found 2026-12-03 on the H200: the timed calls did, and the group norm rewrite, which declines
    where gradients are recorded, timed as the default compile, 0.9997x, where it ran 1.076x)."""
    if variant in prepared.others and getattr(prepared.others[variant], "given", None) == launch_configs:
        return prepared.others[variant]
    import gc

    import torch
    from torch._inductor.compile_fx import compile_fx

    from ..capture import launch_signature
    from ..capture.compiled import _record_wrapper_modules, autotuner_fingerprint, fresh_races, graph_kernels
    from ..capture.launch_configs import fixed_at_first_call, picked
    from ..capture.graph_rewrites import rewrites_done
    from ..capture.variants import NOTHING_REWRITTEN, VARIANTS, compiling

    prepared.others.clear()  # one other compile at a time: tune tries several in one session
    gc.collect()
    if prepared.device == "cuda":
        torch.cuda.empty_cache()

    graphs: set[tuple[str, ...]] = set()  # each graph's inputs as compiled: where production applies the setting
    modules: list[Any] = []  # the compiled graphs' wrapper modules: their kernels' launch points, once raced

    problem = prepared.compiled.problem
    training = is_training(problem)

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.add(tuple(launch_signature(example_inputs)))
        # A training step's backward compiles inside this block too, under the same options (not lazily
        # on the first backward call, outside it), as in capture and production.
        # Its kernels race their launch configurations here, as the session's own compile's do
        # (capture.compiled.fresh_races), never reusing a pick raced elsewhere on this machine.
        with compiling(variant) as patches, fresh_races(), _record_wrapper_modules() as loaded, \
                (backward_compiled_with_forward() if training else contextlib.nullcontext()):
            compiled = compile_fx(gm, example_inputs, config_patches=patches or None)
        modules.extend(loaded)
        return compiled

    model = prepared.compiled.model
    compiled = torch.compile(model, backend=backend)

    def other(*inputs: Any) -> Any:
        if training:  # the whole step: outputs, then every gradient, as the session's compile returns
            return step(compiled, model, problem, inputs)
        with torch.no_grad():
            return compiled(*inputs)

    other.graphs = graphs  # type: ignore[attr-defined]

    before = rewrites_done()
    with fixed_at_first_call(launch_configs, autotuner_fingerprint):
        other(*prepared.inputs(prepared.seeds[0]))  # compiled now, not inside a timed run
    # Each kernel raced its configurations on that first call (or launched the one given); what the checks and the
    # timing below run.
    other.launch_configs = picked(graph_kernels(modules), autotuner_fingerprint)  # type: ignore[attr-defined]
    other.given = launch_configs  # type: ignore[attr-defined]
    if variant is not None and VARIANTS[variant].rewrites and rewrites_done() == before:
        raise StageFailure(f"{variant!r}: {NOTHING_REWRITTEN} (it compiles as without them)")
    prepared.others[variant] = other
    return other


def verified_graphs(prepared: Prepared, variant: str) -> list[list[str]] | None:
    """The inputs of each graph of ``variant``'s compile that :func:`compile_stage` checked (capture.launch_signature
    of what Dynamo passed the backend): of the session's own compile when the session compiles under it (the gate's
    sessions do); None where they were not read."""
    if prepared.variant == variant:
        return prepared.compiled.graph_inputs
    other = prepared.others.get(variant) if prepared.variant is None else None
    graphs = getattr(other, "graphs", None)
    return None if graphs is None else [list(g) for g in sorted(graphs)]


def timed_configs(prepared: Prepared, variant: str) -> dict[str, dict[str, int]] | None:
    """The launch point each kernel of ``variant``'s compile ran after its first-call race (kernel fingerprint ->
    point, capture/launch_configs.py): what :func:`compile_stage` checked and :func:`compile_speed` times; None
    when the session itself compiles under it (its launch configurations were given, not raced)."""
    other = prepared.others.get(variant) if prepared.variant is None else None
    return getattr(other, "launch_configs", None)


INCOMING = " of the incoming gradients"  # in a draw's label: the draw is of the step's incoming gradients


class CompileRows(list):
    """The compile check's rows (one :class:`SeedErrors` per seed), with what its input draws did."""

    draws: list[str]  # draws judged, "kind[ of the incoming gradients] (input seed S[, weights varied])"
    skipped: list[str]  # "kind (why)": the default compile raised on it, or gave no finite output
    reference_note: str | None  # why the draws' reference is the fp32 eager model (None: float64)
    weights_note: str | None  # why no draw varied the weights (None: some did)
    worst: float  # the worst element's error as a fraction of its allowance, seeds and draws
    gradients: list[str]  # a training step's gradients judged with its outputs (``gradient of ...``)

    def __init__(self, rows: Any = ()) -> None:
        super().__init__(rows)
        self.draws, self.skipped = [], []
        self.reference_note = self.weights_note = None
        self.worst = 0.0
        self.gradients = []

    def describe(self) -> str:
        """One phrase for the stage's detail: the draws judged and skipped, and their reference."""
        on_inputs = [d for d in self.draws if INCOMING not in d]
        on_gradients = [d.replace(INCOMING, "", 1) for d in self.draws if INCOMING in d]
        text = f"{len(on_inputs)} input draw(s)"
        if self.gradients:
            # The counts first: a long detail is cut in its middle (child.clip).
            text = (f"the whole step ({', '.join(self.gradients)}, element by element), {text} and "
                    f"{len(on_gradients)} draw(s){INCOMING}")
        if on_inputs:
            text += f": {', '.join(on_inputs)}"
        if on_gradients:
            text += f"; draws{INCOMING}: {', '.join(on_gradients)}"
        if self.skipped:
            text += f"; skipped: {'; '.join(self.skipped)}"
        text += (f"; the draws judged against the fp32 eager model ({self.reference_note})" if self.reference_note
                 else "; each against float64")
        if self.weights_note:
            text += f"; {self.weights_note}"
        return text


def compile_stage(prepared: Prepared, variant: str, error_factor: float, reduced_precision: bool,
                  launch_configs: dict[str, dict[str, int]] | None = None) -> CompileRows:
    """The variant's compile against float64 on every seed, then on every input draw; the default
    compile's own error on the same inputs is the allowance (see the module's docstring). ``launch_configs``:
    what the variant's compile launches (:func:`_sides`)."""
    import torch

    default, chosen = _sides(prepared, variant, launch_configs)
    rule = NumericsRule(error_factor=error_factor, reduced_precision=reduced_precision, whole_compile=True)
    rows = CompileRows()
    names: list[str] = []  # each result's name in a verdict (the same for every seed and draw)
    for seed in prepared.seeds:
        inputs = prepared.inputs(seed)
        try:
            with torch.no_grad():
                outs = [t.clone() for t in flatten(chosen(*inputs))]
                base = flatten(default(*inputs)) if prepared.variant is not None else None
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise StageFailure(f"the model compiled as {variant!r} raised on seed {seed}: {type(exc).__name__}: "
                               f"{_short(exc)}") from exc
        prepared.check_inputs(seed, inputs)
        if not names:
            names = output_names(prepared.compiled.problem, prepared.compiled.model, inputs, len(outs))
            rows.gradients = [n for n in names if n.startswith("gradient")]
        del inputs
        refs = prepared.references[seed].outputs
        if len(outs) != len(refs):
            raise StageFailure(f"seed {seed}: the model compiled as {variant!r} returned {len(outs)} tensors "
                               f"instead of {len(refs)}")
        row = SeedErrors(seed=seed, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0, scale=0.0, model_ratio=0.0)
        for k, (c, r) in enumerate(zip(outs, refs)):
            if base is not None:  # the session's references judge its own compile: take the default's error
                r = rebase(copy.copy(r), base[k])
            _judge(c, r, rule, f"seed {seed}, {names[k]}", row, rows)
        del outs, base
        rows.append(row)
    _draws(prepared, variant, default, chosen, rule, rows, names)
    return rows


def _judge(c: Any, r: OutputReference, rule: NumericsRule, what: str, row: SeedErrors, rows: CompileRows) -> None:
    """One output by the model stage's rule, the default compile's envelope the allowance; figures into ``row``."""
    try:
        j = judge_output(c, r, rule, what, baseline="the default compile")
    except StageFailure as failure:
        failure.errors = [*rows, failed_row(row, r, failure)]
        raise
    if j is None:
        return  # an integer output, equal to the default compile's
    row.candidate_vs_fp64 = max(row.candidate_vs_fp64 or 0.0, j.max_abs)
    row.baseline_vs_fp64 = max(row.baseline_vs_fp64 or 0.0, r.baseline_err)
    row.scale = max(row.scale or 0.0, r.scale)
    row.model_ratio = max(row.model_ratio or 0.0, j.worst_ratio)
    rows.worst = max(rows.worst, j.worst_ratio)


def _draws(prepared: Prepared, variant: str, default: Any, chosen: Any, rule: NumericsRule,
           rows: CompileRows, names: list[str]) -> None:
    """Every kind of input draw and, for a training step, of incoming-gradient draw, one run of each compile
    and one float64 reference each (``names``: each result's name in a verdict)."""
    import torch

    entropy = prepared.entropy
    problem = prepared.compiled.problem
    kinds = list(tensors.STRESS_VARIANTS)  # read now: the kinds listed when the check runs
    # (kind, on the incoming gradients): a training step's backward reads mostly its incoming gradients,
    # so each kind runs on them too, apart from the input draws, as in the kernel stage (kernel.py).
    draws = [(kind, False) for kind in kinds] + ([(kind, True) for kind in kinds] if is_training(problem) else [])
    order = entropy.shuffled(draws)
    # Weights varied on every other draw (one at least), which ones drawn.
    varied = set(order[entropy.below(min(2, len(order))):][::2]) if order else set()
    model = prepared.compiled.model
    if order and not _parameters(model):
        rows.weights_note = "weights not varied: the model has no floating-point parameter"
    for kind, on_gradients in order:
        seed, transform, weight_seed = entropy.input_seed(), entropy.seed(), entropy.seed()
        inputs = _drawn(prepared, seed, kind, transform, on_gradients)
        if inputs is None:
            if not is_training(problem):
                rows.skipped.append("every draw (no floating-point model input)")
                return
            if "every draw of the inputs (no floating-point model input)" not in rows.skipped:
                rows.skipped.append("every draw of the inputs (no floating-point model input)")
            continue
        incoming = _Incoming(kind, transform) if on_gradients else None
        of = INCOMING if on_gradients else ""
        with _varied_weights(model, weight_seed, (kind, on_gradients) in varied) as note, \
                incoming_drawn(problem, incoming):
            label = f"{kind}{of} (input seed {seed}{note})"
            where = f"draw {kind!r}{of} (input seed {seed}, transform seed {transform}{note})"
            try:
                with torch.no_grad():
                    base = [t.clone() for t in flatten(default(*inputs))]
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:  # noqa: BLE001 - the model itself rejects these inputs
                rows.skipped.append(f"{label}: the default compile raises on it ({type(exc).__name__})")
                continue
            floating = [b for b in base if b.dtype.is_floating_point]
            if floating and not any(_any_finite(b) for b in floating):
                rows.skipped.append(f"{label}: the default compile returns no finite number")
                continue
            again = functools.partial(_drawn, prepared, seed, kind, transform, on_gradients)  # the same inputs, anew
            # The reference first (it takes the inputs' place), then the setting on the inputs drawn anew:
            # one draw's inputs and one float64 copy at a time, as when the session opened.
            refs = _reference(prepared, inputs, again, len(base), rows)
            references = [_draw_reference(b, r) for b, r in zip(base, refs)]
            del inputs, refs, base, floating
            inputs = again()
            assert inputs is not None  # the same draw as above, which had floating-point inputs
            try:
                with torch.no_grad():
                    outs = [t.clone() for t in flatten(chosen(*inputs))]
            except torch.OutOfMemoryError:
                raise
            except Exception as exc:
                raise StageFailure(f"{where}: the model compiled as {variant!r} raised, the default compile did not: "
                                   f"{type(exc).__name__}: {_short(exc)}") from exc
            del inputs
        del incoming  # its copy of the incoming gradients
        if len(outs) != len(references):
            raise StageFailure(f"{where}: the model compiled as {variant!r} returned {len(outs)} tensors "
                               f"instead of {len(references)}")
        row = SeedErrors(seed=seed, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0, scale=0.0, model_ratio=0.0)
        for k, (c, r) in enumerate(zip(outs, references)):
            _judge(c, r, rule, f"{where}, {names[k]}", row, rows)
        del outs, references
        rows.draws.append(label)


class _Incoming:
    """One draw of a training step's incoming gradients for the compile check: the first step that runs
    under it (the default compile's) draws them (:class:`.kernel.IncomingDraw`) and keeps a copy; every
    later one (the float64 reference's, the setting's) gets those very values, cast to its dtype (exact
    into float64), so the setting and the reference differentiate from the default compile's incoming
    gradients, not from a draw of their own (a draw in float64 would round otherwise and scale by
    float64's limits)."""

    def __init__(self, kind: str, seed: int):
        self.draw = IncomingDraw(kind, seed)
        self.kept: list[Any] | None = None

    def __call__(self, gradients: list[Any]) -> None:
        if self.kept is None:
            self.draw(gradients)
            self.kept = [g.clone() for g in gradients]
            return
        if [tuple(g.shape) for g in gradients] != [tuple(k.shape) for k in self.kept]:
            raise StageFailure(f"the step's outputs that need a gradient are shaped "
                               f"{[tuple(g.shape) for g in gradients]} here and "
                               f"{[tuple(k.shape) for k in self.kept]} in the default compile")
        for g, k in zip(gradients, self.kept):
            g.copy_(k)


def _drawn(prepared: Prepared, seed: int, kind: str, transform: int, on_gradients: bool = False) -> list[Any] | None:
    """The inputs drawn under ``seed``, each floating-point tensor turned into ``kind`` (None: there is none);
    ``on_gradients``: as drawn (the draw is of the incoming gradients)."""
    inputs = prepared.inputs(seed)
    if on_gradients:
        return inputs
    floating, _ = tensors.stress_inputs(inputs, kind, transform)
    return inputs if floating else None


def _reference(prepared: Prepared, inputs: list[Any], again: Any, count: int, rows: CompileRows) -> list[Any]:
    """The draw's reference outputs: the eager model in float64 (on the device, else the CPU), else in fp32.

    ``inputs`` is emptied (the float64 copy takes its place); ``again()`` draws them anew where a
    fallback needs them. Once float64 has failed, the later draws go straight to fp32 (said once).
    """
    import torch

    model, device, problem = prepared.compiled.model, prepared.device, prepared.compiled.problem
    if rows.reference_note is None:
        try:
            out = _float64_outputs(model, inputs, device, problem=problem)
        except torch.OutOfMemoryError:
            if device == "cuda":
                torch.cuda.empty_cache()
            try:  # not enough device memory: the same in float64 on the CPU, slower
                out = _float64_outputs(model, again(), "cpu", problem=problem)
            except Exception as exc:  # noqa: BLE001 - any failure falls back, and says so
                rows.reference_note = f"float64 failed on the CPU too: {type(exc).__name__}: {_short(exc)}"
                out = None
        except Exception as exc:  # noqa: BLE001 - a model that has no float64 path
            rows.reference_note = f"float64 reference failed: {type(exc).__name__}: {_short(exc)}"
            out = None
        if out is not None and len(out) != count:
            rows.reference_note = f"the float64 model returned {len(out)} tensors, the compiled one {count}"
            out = None
        if out is not None:
            return out
    if is_training(problem):  # fp32 fallback: the eager step
        return [t.detach().clone() for t in run_eager(model, problem, list(inputs or again()))]
    with torch.no_grad():
        return [t.detach().clone() for t in flatten(model(*(inputs or again())))]


def _draw_reference(base: Any, ref: Any) -> OutputReference:
    """``base`` (the default compile's output) judged against ``ref``; where ``ref`` is NaN/Inf and ``base``
    finite, ``base`` stands in (no finite value to judge against; the candidate is still held to its mask)."""
    import torch

    ref = ref.to(base.device)
    if base.dtype.is_floating_point and tensors.any_nonfinite(ref):
        ref = torch.where(torch.isfinite(ref) | ~torch.isfinite(base), ref, base.to(ref.dtype))
    return _output_reference(base, ref)


def _any_finite(t: Any) -> bool:
    import torch

    return any(bool(torch.isfinite(flat).any()) for (flat,) in tensors.chunks(t))


# Factors a varied weight element is multiplied by: powers of two with either sign, so that
# dividing by the same factor afterwards gives back the very bits (barring overflow, checked).
_FACTORS = (1.0, -1.0, 2.0, -2.0, 4.0, -4.0)


@contextlib.contextmanager
def _varied_weights(model: Any, seed: int, vary: bool) -> Iterator[str]:
    """While the block runs, every floating-point parameter of ``model`` times a factor per element
    (:data:`_FACTORS`, drawn from ``seed``); put back bit for bit afterwards. Yields the phrase that
    says so for the detail ("" when not varied). Both compiles read the module's parameters (not
    frozen into the graph), so both, and the float64 copy made inside the block, see the same."""
    import torch

    params = _parameters(model) if vary else []
    if not params:
        yield ""
        return
    before = [tensors.checksum(p) for p in params]
    # A parameter within a factor 4 of its dtype's largest value gets signs only (x 4 would overflow):
    # decided on the values as they were, so that undoing it takes the same factors.
    signs_only = [bool(_scale(p.detach()) * 4.0 > torch.finfo(p.dtype).max) for p in params]

    def apply(inverse: bool) -> None:
        with torch.no_grad():
            for k, p in enumerate(params):
                factors = torch.tensor(_FACTORS[:2] if signs_only[k] else _FACTORS, device=p.device)
                gen = torch.Generator(device=p.device).manual_seed(seed + k)
                for piece in tensors.views(p.data):
                    pick = torch.randint(0, len(factors), piece.shape, generator=gen, device=p.device)
                    factor = factors[pick].to(piece.dtype)
                    piece.div_(factor) if inverse else piece.mul_(factor)

    apply(False)
    try:
        yield f", weights varied (seed {seed})"
    finally:
        apply(True)
        if [tensors.checksum(p) for p in params] != before:  # an overflow: the verifier's own failure
            raise RuntimeError("the model's weights were not restored exactly after a weight draw of the compile check")


def _parameters(model: Any) -> list[Any]:
    """The model's floating-point parameters (what a weight draw varies; buffers such as running
    statistics are left as they are)."""
    return [p for p in model.parameters() if p.dtype.is_floating_point]


def _short(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:200] if text else ""


def compile_speed(prepared: Prepared, variant: str, model_seconds: float,
                  launch_configs: dict[str, dict[str, int]] | None = None) -> Timing:
    """The default compile (baseline) against the variant's (candidate), paired and interleaved."""
    from ..measure.timing import paired_timings
    from .speed import _steps, _timing

    default, chosen = _sides(prepared, variant, launch_configs)
    inputs = prepared.inputs(prepared.seeds[0])
    nothing = lambda: None  # noqa: E731
    a, b, method = _steps(nothing, lambda: default(*inputs), nothing, nothing, lambda: chosen(*inputs), nothing)
    return _timing(paired_timings(a, b, target_seconds=model_seconds), method)
