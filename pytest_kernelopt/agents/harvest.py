"""Inductor's own alternatives for a problem's kernels, harvested as drop-in candidates.

The same problem is compiled again under other Inductor settings (max-autotune's
wider configuration search, coordinate-descent tuning, looped instead of
persistent reductions), each setting in a child process of its own that exits
before the verification session opens, so its GPU memory is never held beside the
session's. Each kernel of each variant is rendered as a candidate file; the parent
keeps those that fit a kernel of the default compile: the same graph, the same argument list (names, which
it writes, and each one's shape, strides, dtype and scalar value: a kernel compiled for
another layout indexes its arguments differently) and the same fused operations (the
name without Inductor's ``triton_per_``/``triton_red_``/``triton_poi_`` prefix and its
counter). The cascade then judges them like any other candidate.

The children run at the same time, up to :func:`harvest_jobs` of them (the ``harvest_jobs``
setting, ``kernelopt tune --harvest-jobs``), so the harvest takes about its slowest variant's
time, not the sum (H100, a bf16 softmax training step: 35 + 15 + 2 + 8 s one after another).
That is safe enough because a harvested kernel is only a candidate: every one is judged by
the cascade (numerics against float64, then timing in the session) before anything is kept.
What concurrency can change is which configuration a compile picks: max-autotune and
coordinate descent benchmark their configurations on the GPU while the other children use it,
so a pick may differ from a run alone (another candidate, not a wrong one). A child that runs
out of GPU memory beside the others is run again alone, in the time left. The result is the
same whatever order the children finish in: kernels, errors and seconds in the variants' order.

Run as ``python -m pytest_kernelopt.agents.harvest PROBLEM DEVICE OUT.json VARIANT...``.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, ConfigDict

# The catalogue of compile settings is capture/variants.py (shared with the model-level choice).
from ..capture.variants import CPU_VARIANTS, HARVEST_VARIANTS, VARIANTS, persistent_up_to  # noqa: F401
from ..records import KernelInfo

if TYPE_CHECKING:
    from ..child import ChildRun


class Harvested(BaseModel):
    model_config = ConfigDict(extra="forbid")

    variant: str
    name: str
    graph: int
    fingerprint: str
    args: list[str]
    written: list[str]
    source: str  # the kernel in candidate format
    layout: list[list[Any]] | None = None  # per argument (:func:`layout`); None: not recorded, not compared


class HarvestResult(BaseModel):
    model_config = ConfigDict(extra="forbid")

    kernels: list[Harvested] = []
    errors: dict[str, str] = {}  # variant -> why it produced nothing
    seconds: dict[str, float] = {}  # variant -> its compile's seconds (its child's, when the child failed)
    wall_seconds: float = 0.0  # the whole harvest, its children running at the same time
    jobs: int = 1  # children run at once


_PREFIX = re.compile(r"^triton_(?:per|red|poi|tem|for|spl)_")


def kind(name: str) -> str:
    """Inductor's kind prefix of a kernel name (``triton_per_``, ``triton_red_``, ...; "" without one)."""
    found = _PREFIX.match(name)
    return found.group(0) if found else ""


def stem(name: str) -> str:
    """What a kernel fuses, without Inductor's kind prefix, counter, graph suffix and backward suffix (the
    graph, which ``matches`` compares, tells a training step's backward kernels apart)."""
    from ..capture.training import BACKWARD_SUFFIX

    name = re.sub(r"__g\d+$", "", name).removesuffix(BACKWARD_SUFFIX)
    return re.sub(r"_\d+$", "", _PREFIX.sub("", name))


def layout(info: KernelInfo) -> list[list[Any]]:
    """What a kernel's arguments are, as the compiled model passes them: kind, shape, strides, dtype, scalar value."""
    return [[a.kind, a.shape, a.stride, a.dtype, a.value] for a in info.args]


def matches(base: KernelInfo, alt: Harvested) -> bool:
    """Whether ``alt`` can stand in for ``base``: the same kernel, or the same job on the same arguments.

    On the H200 a convolution's layout kernel of the coordinate-descent compile had the default
    compile's name and argument names but another layout job (it left 6.4 million outputs unwritten)."""
    if alt.graph != base.graph:
        return False
    if alt.fingerprint == base.fingerprint:
        return True
    return (stem(alt.name) == stem(base.name) and alt.args == [a.name for a in base.args]
            and sorted(alt.written) == sorted(base.written_args)
            and (alt.layout is None or alt.layout == layout(base)))


def fitting(base: KernelInfo, kernels: list[Harvested]) -> list[Harvested]:
    """The harvested kernels that can stand in for ``base`` (:func:`matches`), in their order; of a variant that
    holds ``base`` itself (its name or its fingerprint), only that one. Kernels of one job on arguments of one
    layout match each other: the query, key and value slices of a fused projection (a held-out BERT block,
    2026-12-07) were each offered the others' kernel, a candidate spent on a certain rejection."""
    found = [k for k in kernels if matches(base, k)]

    def itself(k: Harvested) -> bool:
        return k.name == base.name or k.fingerprint == base.fingerprint

    holding = {k.variant for k in found if itself(k)}
    return [k for k in found if k.variant not in holding or itself(k)]


def harvest_jobs(variants: int, jobs: int | None = None) -> int:
    """How many harvest children run at once for ``variants`` variants: ``jobs`` (the ``harvest_jobs``
    setting), else one per variant up to half the CPU cores (each child compiles with Inductor's pool of
    compile workers and the interpreter's kernels run on the CPU), at least one and never more than the variants."""
    if jobs is None:
        jobs = (os.cpu_count() or 1) // 2
    return max(1, min(jobs, variants))


# Why a child's variant failed when it ran out of GPU memory (torch.OutOfMemoryError, or the CUDA error);
# not Triton's "out of resource" (a kernel's shared memory), which running alone does not change.
_OUT_OF_MEMORY = re.compile(r"OutOfMemoryError|out of memory")


def harvest(problem: Path, device: str, variants: list[str], timeout: float, shape: str | None = None,
            jobs: int | None = None) -> HarvestResult:
    """Run each variant in a child process of its own (secrets scrubbed from its environment), up to
    :func:`harvest_jobs` at once, the whole within ``timeout`` seconds; ``shape``: a declared shape of a
    problem with SHAPES (None: its first). Ctrl-C or SIGTERM kills every child before it propagates."""
    import tempfile

    from ..child import child_env, module_command, run_children, scrubbed_env, shape_flag

    variants = list(dict.fromkeys(variants))  # a variant named twice compiles once
    jobs = harvest_jobs(len(variants), jobs)
    started = time.monotonic()
    # Each child's Inductor keeps its pool of compile workers as large as the machine (up to 32, torch 2.11
    # and 2.13): while all run the OS shares the cores, and the slowest (max-autotune's) gets them all once
    # the others end, where a fixed share would hold it to a fraction of them for its whole compile.
    env = child_env(scrubbed_env())
    parts: dict[str, HarvestResult] = {}
    with tempfile.TemporaryDirectory(prefix="kernelopt-harvest-") as tmp:
        def run(names: list[str], at_once: int, limit: float, tag: str) -> None:
            outs = {v: Path(tmp) / f"{tag}-{i}.json" for i, v in enumerate(names)}
            cmds = [module_command("pytest_kernelopt.agents.harvest", str(problem), device, str(outs[v]),
                                   *shape_flag(shape), v) for v in names]
            for v, done in zip(names, run_children(cmds, env=env, cwd=tmp, timeout=limit, jobs=at_once, lines=1)):
                parts[v] = _part(v, outs[v], done, timeout)

        run(variants, jobs, timeout, "together")
        # Beside the others a child may find the GPU's memory taken; alone, in the time left, it may not.
        again = [v for v in variants if jobs > 1 and _OUT_OF_MEMORY.search(parts[v].errors.get(v, ""))]
        left = timeout - (time.monotonic() - started)
        if again and left > 1:
            run(again, 1, left, "alone")
    result = HarvestResult(wall_seconds=round(time.monotonic() - started, 2), jobs=jobs)
    for v in variants:  # in the variants' order, whatever order the children finished in
        result.kernels.extend(parts[v].kernels)
        result.errors.update(parts[v].errors)
        result.seconds.update(parts[v].seconds)
    return result


def _part(variant: str, out: Path, done: ChildRun, timeout: float) -> HarvestResult:
    """What one variant's child gave (``done``: its ``ChildRun``), or why it gave nothing."""
    if not done.started:
        return HarvestResult(errors={variant: f"not started: the harvest's {timeout:g} s ran out first"})
    seconds = {variant: done.seconds}
    if done.timed_out:
        return HarvestResult(errors={variant: f"timed out after {done.seconds:g} s (the harvest's limit: {timeout:g} s)"},
                             seconds=seconds)
    if out.is_file():
        try:
            return HarvestResult.model_validate_json(out.read_text())
        except ValueError as exc:  # pydantic's ValidationError and bad JSON alike
            return HarvestResult(errors={variant: f"its child wrote an unreadable result: {str(exc)[:200]}"},
                                 seconds=seconds)
    tail = done.output_tail or "no output"
    return HarvestResult(errors={variant: f"its child exited with {done.returncode}: {tail}"[:400]}, seconds=seconds)


def _compile_variant(problem: Any, device: str, variant: str) -> list[KernelInfo]:
    from ..capture import compile_problem

    return compile_problem(problem, device, variant=variant).summary().kernels


def main(argv: list[str]) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    problem_path, device, out, *variants = argv
    from ..candidate import render_dump
    from ..child import pop_shape
    from ..config import resolve_device
    from ..capture.problem import load_problem

    shape = pop_shape(variants)
    device = resolve_device(device)
    problem = load_problem(Path(problem_path), shape=shape)
    result = HarvestResult()
    for variant in variants:
        t0 = time.monotonic()
        try:
            for info in _compile_variant(problem, device, variant):
                result.kernels.append(Harvested(
                    variant=variant, name=info.name, graph=info.graph, fingerprint=info.fingerprint,
                    args=[a.name for a in info.args], written=info.written_args, layout=layout(info),
                    source=render_dump(info, problem.id)))
        except Exception as exc:  # one variant failing leaves the others
            result.errors[variant] = f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ''}"
        result.seconds[variant] = round(time.monotonic() - t0, 2)
    Path(out).write_text(json.dumps(result.model_dump()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
