"""The ``search`` backend: offline, no network, no key.

Per kernel, in rounds (the Planner's strategies decide which apply):

1. ``harvest``: Inductor's own alternatives for the same kernel: the other launch
   configurations the default compile built (it raced them once, briefly, at the first
   call) and recompiles (:mod:`.harvest`: max-autotune, coordinate descent, looped
   reductions), each a drop-in candidate.
2. ``rewrite:<rule>``: source rewrites chosen by the bottleneck class: ``eviction``
   drops the loads' cache-eviction hints (memory-bound kernels); ``approx-div`` turns
   the device code's divisions into ``tl.fdiv`` (every class but launch-bound; a
   Welford reduction divides once per element).
3. ``launch``: coordinate descent over the launch configuration of the best
   candidate so far (:mod:`.launch_space`: single steps, then diagonal steps that
   keep the tile size or the work per thread): every neighbour not yet tried, each
   judged by the session; when the best stops changing, every neighbour of it has
   been tried and the search ends.

The loop decides what "best" is from the verdicts; this module never times anything.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path
from typing import Any

from ..store import sha256_text
from .coder import Spend
from .harvest import CPU_VARIANTS, VARIANTS, HarvestResult, harvest, matches
from .launch_space import Limits, describe, neighbours, read_point, with_point
from .run_records import CoderContext, Proposal

HARVEST_TIMEOUT = 900.0
# In interpreter mode nothing is timed, so the launch search has no direction: a few
# neighbours still exercise the loop and the cascade.
CPU_LAUNCH_POINTS = 2


def drop_eviction_hints(source: str) -> str:
    """Loads without ``eviction_policy=...``: the hardware's default caching instead of Inductor's hint."""
    return re.sub(r",\s*eviction_policy\s*=\s*'evict_(?:first|last)'", "", source)


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    def jit(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return isinstance(d, ast.Attribute) and d.attr == "jit" or isinstance(d, ast.Name) and d.id == "jit"
    return [f for f in tree.body if isinstance(f, ast.FunctionDef) and any(jit(d) for d in f.decorator_list)]


def _is_div(node: ast.AST) -> bool:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)


def _float(operand: bytes) -> bytes:
    """An integer literal as a float one: ``x / 3`` divides as floats in Python, ``tl.fdiv`` wants floats."""
    return operand + b".0" if operand.isdigit() else operand


def approximate_divisions(source: str) -> str:
    """Every ``a / b`` in device code as ``tl.fdiv(a, b)``: the approximate division (about 2 ulp)
    instead of the IEEE-rounded one, a few instructions instead of a dozen.

    The cascade judges the result like any candidate: precision against the float64
    reference, and a division of integers (which ``tl.fdiv`` refuses) fails to compile
    and is rejected. Host code (``run``) is left alone; so is a file that does not
    import ``triton.language as tl``.
    """
    if not re.search(r"^import triton\.language as tl$", source, re.M):
        return source
    data = source.encode()
    for _ in range(256):  # innermost divisions first; each pass removes at least one
        try:
            tree = ast.parse(data)
        except SyntaxError:
            return source
        lines = [0]
        for line in data.splitlines(keepends=True):
            lines.append(lines[-1] + len(line))
        spans = []
        for fn in _jit_functions(tree):
            for node in ast.walk(fn):
                if _is_div(node) and not any(_is_div(n) for side in (node.left, node.right) for n in ast.walk(side)):
                    span = [lines[n.lineno - 1] + n.col_offset for n in (node, node.left, node.right)]
                    ends = [lines[n.end_lineno - 1] + n.end_col_offset for n in (node, node.left, node.right)]  # type: ignore[operator]
                    spans.append((span, ends))
        if not spans:
            return data.decode()
        for (start, l0, r0), (end, l1, r1) in sorted(spans, reverse=True):
            data = data[:start] + b"tl.fdiv(" + _float(data[l0:l1]) + b", " + _float(data[r0:r1]) + b")" + data[end:]
    return data.decode()


REWRITES = {"eviction": drop_eviction_hints, "approx-div": approximate_divisions}


class SearchCoder:
    name = "search"
    model = None

    def __init__(self, *, variants: list[str] | None = None, launch_per_round: int = 8,
                 harvest_timeout: float = HARVEST_TIMEOUT, progress: Any = None):
        self.variants = variants
        self.launch_per_round = launch_per_round
        self.harvest_timeout = harvest_timeout
        self.progress = progress or (lambda _: None)
        self.harvested: HarvestResult = HarvestResult()
        self._device = "cpu"
        self._done: dict[str, set[str]] = {}  # kernel -> strategies already proposed
        self._cpu_points: dict[str, int] = {}

    @property
    def spend(self) -> Spend:
        return Spend()

    @property
    def stopped(self) -> str | None:
        return None

    def prepare(self, problem: Path, device: str, kernels: list[Any]) -> None:
        self._device = device
        variants = self.variants if self.variants is not None else (
            list(VARIANTS) if device == "cuda" else list(CPU_VARIANTS))
        self._done.clear()
        self._cpu_points.clear()
        if not variants:
            self.harvested = HarvestResult()
            return
        self.progress(f"harvesting Inductor's alternatives ({', '.join(variants)})")
        self.harvested = harvest(problem, device, variants, self.harvest_timeout)

    def propose(self, ctx: CoderContext) -> list[Proposal]:
        done = self._done.setdefault(ctx.kernel.name, set())
        tried = {a.sha256 for a in ctx.attempts} | {sha256_text(ctx.original)}
        for strategy in ctx.strategies:
            if strategy in done or strategy == "launch":
                continue
            done.add(strategy)
            proposals = self._strategy(strategy, ctx, tried)
            if proposals:
                return proposals
        if "launch" in ctx.strategies:
            return self._launch(ctx, tried)
        return []

    def _strategy(self, strategy: str, ctx: CoderContext, tried: set[str]) -> list[Proposal]:
        out: list[Proposal] = []
        seen = set(tried)
        if strategy == "harvest":
            n = ctx.kernel.launch.compiled_configs or len(ctx.kernel.launch.alternatives) + 1
            base = read_point(ctx.original)
            for point in ctx.kernel.launch.alternatives:
                if not base or not set(point) <= set(base):
                    continue  # a setting the dump does not spell out: not a drop-in
                text = with_point(ctx.original, point)
                if read_point(text) == point | {k: v for k, v in base.items() if k not in point} and \
                        sha256_text(text) not in seen:
                    seen.add(sha256_text(text))
                    out.append(Proposal(source=text, origin="harvest:compiled",
                                        rationale=f"one of the {n} configurations Inductor compiled for this kernel "
                                                  f"and raced once at the first call: {describe(point)}"))
            for alt in self.harvested.kernels:
                if matches(ctx.kernel, alt) and sha256_text(alt.source) not in seen:
                    seen.add(sha256_text(alt.source))
                    same = "same kernel source" if alt.fingerprint == ctx.kernel.fingerprint else f"as {alt.name}"
                    out.append(Proposal(source=alt.source, origin=f"harvest:{alt.variant}",
                                        rationale=f"Inductor's {alt.variant} compile of this kernel ({same}), "
                                                  f"launch {describe(read_point(alt.source))}"))
        elif strategy.startswith("rewrite:"):
            rule = REWRITES.get(strategy.split(":", 1)[1])
            if rule is not None:
                text = rule(ctx.best)
                if sha256_text(text) not in seen and text != ctx.best:
                    out.append(Proposal(source=text, origin=strategy,
                                        rationale=f"{strategy} applied to the best so far ({ctx.best_origin})"))
        return out

    def _launch(self, ctx: CoderContext, tried: set[str]) -> list[Proposal]:
        point = read_point(ctx.best)
        if not point:
            return []
        limits = Limits(ctx.kernel, ctx.best)
        out = []
        for p in neighbours(point, limits):
            text = with_point(ctx.best, p)
            if sha256_text(text) in tried:
                continue
            changed = {k: v for k, v in p.items() if point.get(k) != v}
            out.append(Proposal(source=text, origin=f"launch:{describe(p)}",
                                rationale=f"one step from the best so far ({ctx.best_origin}, {describe(point)}): "
                                          f"{describe(changed)}"))
        if self._device != "cuda":
            left = CPU_LAUNCH_POINTS - self._cpu_points.get(ctx.kernel.name, 0)
            out = out[:max(0, left)]
            self._cpu_points[ctx.kernel.name] = self._cpu_points.get(ctx.kernel.name, 0) + len(out)
        return out[: self.launch_per_round]
