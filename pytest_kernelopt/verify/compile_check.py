"""The model compiled under other settings (``capture/variants.py``) against the default compile.

A model's compile choice (``model.json``'s ``compile``) is verified like a kernel: the
whole model compiled under the variant, every output element judged against the float64
reference by the model stage's rule with the *default* compile's own error as the
allowance (a variant may reorder a reduction as the compiler does, not be less exact),
and timed against the default compile, paired and interleaved, in one run.

The session holds one side already: opened under the defaults (``kernelopt tune``, which
tries several variants in one session), the variant is compiled here; opened under the
variant (the gate, whose kernels are that compile's), the default compile is. The other
side is a second ``torch.compile`` of the same module (same weights), with a backend of
its own so that Dynamo does not reuse the session's graphs.
"""

from __future__ import annotations

import copy
from typing import Any

from ..records import SeedErrors, Timing
from .model import flatten, judge_output, rebase
from .numerics import NumericsRule
from .prepared import Prepared, StageFailure


def _sides(prepared: Prepared, variant: str) -> tuple[Any, Any]:
    """(the default compile, the variant's compile), as callables; one of them is the session's."""
    if prepared.variant is None:
        return prepared.compiled, _other(prepared, variant)
    if prepared.variant == variant:
        return _other(prepared, None), prepared.compiled
    raise StageFailure(f"this session compiles the model as {prepared.variant!r}; it cannot check {variant!r} "
                       f"against the default compile")


def _other(prepared: Prepared, variant: str | None) -> Any:
    """The session's model compiled again under ``variant`` (None: the defaults), kept until another is asked for.

    Called without autograd, as the session's compile is (``CompiledModel.__call__``): called with
    gradients recorded, Dynamo (which guards on the grad mode) would compile it again for training
    (found 2026-12-03 on the H200: the timed calls did, and the group norm rewrite, which declines
    where gradients are recorded, timed as the default compile, 0.9997x, where it ran 1.076x)."""
    if variant in prepared.others:
        return prepared.others[variant]
    import gc

    import torch
    from torch._inductor.compile_fx import compile_fx

    from ..capture import launch_signature
    from ..capture.graph_rewrites import rewrites_done
    from ..capture.variants import VARIANTS, compiling

    prepared.others.clear()  # one other compile at a time: tune tries several in one session
    gc.collect()
    if prepared.device == "cuda":
        torch.cuda.empty_cache()

    graphs: set[tuple[str, ...]] = set()  # each graph's inputs as compiled: where production applies the setting

    def backend(gm: Any, example_inputs: Any) -> Any:
        graphs.add(tuple(launch_signature(example_inputs)))
        with compiling(variant) as patches:
            return compile_fx(gm, example_inputs, config_patches=patches or None)

    compiled = torch.compile(prepared.compiled.model, backend=backend)

    def other(*inputs: Any) -> Any:
        with torch.no_grad():
            return compiled(*inputs)

    other.graphs = graphs  # type: ignore[attr-defined]

    before = rewrites_done()
    other(*prepared.inputs(prepared.seeds[0]))  # compiled now, not inside a timed run
    if variant is not None and VARIANTS[variant].rewrites and rewrites_done() == before:
        raise StageFailure(f"{variant!r}: kernelopt's graph rewrites found nothing to rewrite in this model "
                           f"(it compiles as without them)")
    prepared.others[variant] = other
    return other


def verified_graphs(prepared: Prepared, variant: str) -> list[list[str]] | None:
    """The inputs of each graph of ``variant``'s compile that :func:`compile_stage` checked (capture.launch_signature
    of what Dynamo passed the backend); None when the session itself compiles under it (not recorded)."""
    other = prepared.others.get(variant) if prepared.variant is None else None
    graphs = getattr(other, "graphs", None)
    return None if graphs is None else [list(g) for g in sorted(graphs)]


def compile_stage(prepared: Prepared, variant: str, error_factor: float, reduced_precision: bool) -> list[SeedErrors]:
    """Every seed's outputs of the variant's compile against float64, the default compile's error allowed."""
    import torch

    default, chosen = _sides(prepared, variant)
    rule = NumericsRule(error_factor=error_factor, reduced_precision=reduced_precision)
    rows = []
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
                               f"{str(exc).strip()[:200]}") from exc
        prepared.check_inputs(seed, inputs)
        del inputs
        refs = prepared.references[seed].outputs
        if len(outs) != len(refs):
            raise StageFailure(f"seed {seed}: the model compiled as {variant!r} returned {len(outs)} tensors "
                               f"instead of {len(refs)}")
        row = SeedErrors(seed=seed, candidate_vs_fp64=0.0, baseline_vs_fp64=0.0, scale=0.0, model_ratio=0.0)
        for k, (c, r) in enumerate(zip(outs, refs)):
            if base is not None:  # the session's references judge its own compile: take the default's error
                r = rebase(copy.copy(r), base[k])
            try:
                j = judge_output(c, r, rule, f"seed {seed}, output {k}", baseline="the default compile")
            except StageFailure as failure:
                failure.errors = [row]
                raise
            if j is None:
                continue
            row.candidate_vs_fp64 = max(row.candidate_vs_fp64 or 0.0, j.max_abs)
            row.baseline_vs_fp64 = max(row.baseline_vs_fp64 or 0.0, r.baseline_err)
            row.scale = max(row.scale or 0.0, r.scale)
            row.model_ratio = max(row.model_ratio or 0.0, j.worst_ratio)
        del outs, base
        rows.append(row)
    return rows


def compile_speed(prepared: Prepared, variant: str, model_seconds: float) -> Timing:
    """The default compile (baseline) against the variant's (candidate), paired and interleaved."""
    from ..measure.timing import paired_timings
    from .speed import _steps, _timing

    default, chosen = _sides(prepared, variant)
    inputs = prepared.inputs(prepared.seeds[0])
    nothing = lambda: None  # noqa: E731
    a, b, method = _steps(nothing, lambda: default(*inputs), nothing, nothing, lambda: chosen(*inputs), nothing)
    return _timing(paired_timings(a, b, target_seconds=model_seconds), method)
