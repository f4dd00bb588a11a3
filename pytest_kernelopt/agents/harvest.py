"""Inductor's own alternatives for a problem's kernels, harvested as drop-in candidates.

The same problem is compiled again under other Inductor settings (max-autotune's
wider configuration search, coordinate-descent tuning, looped instead of
persistent reductions) in a child process that exits before the verification
session opens, so its GPU memory is never held beside the session's. Each kernel
of each variant is rendered as a candidate file; the parent keeps those that fit a
kernel of the default compile: the same graph, the same argument list (names, which
it writes, and each one's shape, strides, dtype and scalar value: a kernel compiled for
another layout indexes its arguments differently) and the same fused operations (the
name without Inductor's ``triton_per_``/``triton_red_``/``triton_poi_`` prefix and its
counter). The cascade then judges them like any other candidate.

Run as ``python -m pytest_kernelopt.agents.harvest PROBLEM DEVICE OUT.json VARIANT...``.
"""

from __future__ import annotations

import json
import re
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict

# The catalogue of compile settings is capture/variants.py (shared with the model-level choice).
from ..capture.variants import CPU_VARIANTS, HARVEST_VARIANTS, VARIANTS, persistent_up_to  # noqa: F401
from ..records import KernelInfo


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
    seconds: dict[str, float] = {}


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


def harvest(problem: Path, device: str, variants: list[str], timeout: float, shape: str | None = None) -> HarvestResult:
    """Run the variants in a child process (secrets scrubbed from its environment); ``shape``: a declared shape
    of a problem with SHAPES (None: its first)."""
    import tempfile

    from ..child import child_env, module_command, run_child, scrubbed_env

    with tempfile.TemporaryDirectory(prefix="kernelopt-harvest-") as tmp:
        out = Path(tmp) / "harvest.json"
        cmd = module_command("pytest_kernelopt.agents.harvest", str(problem), device, str(out),
                             *([f"--shape={shape}"] if shape else []), *variants)
        done = run_child(cmd, env=child_env(scrubbed_env()), cwd=tmp, timeout=timeout, lines=1)
        if done.timed_out:
            return HarvestResult(errors={v: f"timed out after {timeout:g} s" for v in variants})
        if out.is_file():
            return HarvestResult.model_validate_json(out.read_text())
        tail = done.output_tail or f"exit {done.returncode}"
        return HarvestResult(errors={v: tail[:300] for v in variants})


def _compile_variant(problem: Any, device: str, variant: str) -> list[KernelInfo]:
    from ..capture import compile_problem

    return compile_problem(problem, device, variant=variant).summary().kernels


def main(argv: list[str]) -> int:
    import warnings

    warnings.filterwarnings("ignore")
    problem_path, device, out, *variants = argv
    shape = variants.pop(0).removeprefix("--shape=") if variants and variants[0].startswith("--shape=") else None
    from ..candidate import render_dump
    from ..config import resolve_device
    from ..capture.problem import load_problem

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
