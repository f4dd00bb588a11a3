"""The launch configuration of a candidate file, as data: read it, change it, write it back.

A dump's entry point spells its launch out::

    def run(in_ptr0, out_ptr0, xnumel, r0_numel, *, stream=None):
        XBLOCK = 1
        R0_BLOCK = 2048
        grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
        triton_red_fused_sum_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK,
                                     num_warps=16, num_stages=1)

:func:`read_point` finds the tunable integers (block-size constants assigned in
``run`` and passed to the launch, ``num_warps``, ``num_stages``) and
:func:`with_point` rewrites exactly those literals, leaving every other byte of
the file as it was. :func:`neighbours` is the space the search walks: each
dimension doubled or halved (stages one up or down), within limits that keep a
launch valid: a block no larger than its dimension's extent rounded up to a power
of two, a block that divides its extent where the kernel has no mask for that
dimension, a tile Triton can hold in registers.
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass

from ..records import KernelInfo

MAX_WARPS = 32
MAX_STAGES = 5
MAX_TILE = 1 << 15  # elements per program (block sizes multiplied), beyond which registers spill badly
MAX_PER_THREAD = 256  # tile elements per thread

# XBLOCK -> xnumel, R0_BLOCK -> r0_numel, RBLOCK -> rnumel (older Inductor)
_BLOCK = re.compile(r"^([XYZ]|R\d*)_?BLOCK$")


@dataclass(frozen=True)
class _LaunchLiteral:
    name: str
    value: int
    line: int  # 1-based
    col: int
    end_col: int


def _int(node: ast.AST) -> int | None:
    if isinstance(node, ast.Constant) and type(node.value) is int:
        return node.value
    return None


def _literals(source: str) -> list[_LaunchLiteral]:
    """The tunable literals of ``run``: block constants it assigns and passes, num_warps, num_stages."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return []
    run = next((n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "run"), None)
    if run is None:
        return []
    assigned: dict[str, ast.Constant] = {}
    for stmt in run.body:
        if (isinstance(stmt, ast.Assign) and len(stmt.targets) == 1 and isinstance(stmt.targets[0], ast.Name)
                and _BLOCK.match(stmt.targets[0].id) and _int(stmt.value) is not None):
            assigned[stmt.targets[0].id] = stmt.value  # type: ignore[assignment]
    # A program-grid block (X/Y/Z) is tunable only when the grid is computed from its name.
    launch_calls = [n for n in ast.walk(run) if isinstance(n, ast.Call) and isinstance(n.func, ast.Subscript)]
    in_launch = {id(kw.value) for call in launch_calls for kw in call.keywords}
    used = {n.id for n in ast.walk(run) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)
            and id(n) not in in_launch}
    assigned = {k: v for k, v in assigned.items() if k.startswith("R") or k in used}
    found: dict[str, _LaunchLiteral] = {}
    for node in ast.walk(run):
        if not (isinstance(node, ast.Call) and isinstance(node.func, ast.Subscript)):
            continue  # the launch: fn[grid](...)
        for kw in node.keywords:
            if kw.arg in ("num_warps", "num_stages") and _int(kw.value) is not None:
                c = kw.value
                found[kw.arg] = _LaunchLiteral(kw.arg, _int(c), c.lineno, c.col_offset, c.end_col_offset)  # type: ignore[arg-type]
            elif (kw.arg in assigned and isinstance(kw.value, ast.Name) and kw.value.id == kw.arg):
                c = assigned[kw.arg]
                found[kw.arg] = _LaunchLiteral(kw.arg, c.value, c.lineno, c.col_offset, c.end_col_offset)  # type: ignore[arg-type]
    return list(found.values())


def read_point(source: str) -> dict[str, int]:
    """The launch configuration of a candidate, e.g. ``{"XBLOCK": 64, "num_warps": 4, "num_stages": 1}``."""
    return {lit.name: lit.value for lit in _literals(source)}


def with_point(source: str, point: dict[str, int]) -> str:
    """``source`` with the named launch literals set to ``point``'s values; every other byte unchanged."""
    lines = source.splitlines(keepends=True)
    for lit in sorted(_literals(source), key=lambda x: (x.line, x.col), reverse=True):
        if lit.name in point and point[lit.name] != lit.value:
            text = lines[lit.line - 1]
            lines[lit.line - 1] = text[: lit.col] + str(int(point[lit.name])) + text[lit.end_col:]
    return "".join(lines)


def _pow2_ceil(n: int) -> int:
    return 1 if n <= 1 else 1 << (n - 1).bit_length()


def _extent_name(block: str) -> str:
    prefix = block[: -len("BLOCK")].rstrip("_").lower()
    return f"{prefix}_numel" if prefix[1:].isdigit() else f"{prefix}numel"


class Limits:
    """What makes a launch point valid for one kernel (from its source and argument values)."""

    def __init__(self, info: KernelInfo, source: str):
        values = {a.name: a.value for a in info.args if a.kind == "int" and isinstance(a.value, int)}
        self.extent: dict[str, int] = {}
        self.unmasked: set[str] = set()
        # Extents the kernel hard-codes (Inductor writes ``xnumel = 4096`` in the body).
        for name, value in re.findall(r"^\s*(\w+numel) = (\d+)\s*$", source, re.M):
            values.setdefault(name, int(value))
        for block in _block_names(source):
            extent = values.get(_extent_name(block))
            if extent is None and block == "RBLOCK":
                extent = values.get("r0_numel")
            if extent is not None:
                self.extent[block] = extent
            prefix = _extent_name(block)[: -len("numel")]
            # ``xmask = tl.full(...)``: Inductor proved the block divides the extent and left the mask out.
            if re.search(rf"\b{prefix}_?mask = tl\.full\(", source):
                self.unmasked.add(block)
        # Block sizes fixed inside the kernel (persistent reductions) count towards the tile.
        self.fixed = 1
        for _, value in re.findall(r"^\s*(\w*BLOCK)\s*:\s*tl\.constexpr\s*=\s*(\d+)", source, re.M):
            self.fixed *= int(value)

    def valid(self, point: dict[str, int]) -> bool:
        warps = point.get("num_warps", 4)
        if not (1 <= warps <= MAX_WARPS and warps & (warps - 1) == 0):
            return False
        if not 1 <= point.get("num_stages", 1) <= MAX_STAGES:
            return False
        tile = self.fixed
        for name, value in point.items():
            if not _BLOCK.match(name):
                continue
            if value < 1 or value & (value - 1):
                return False
            extent = self.extent.get(name)
            if extent is not None:
                if value > _pow2_ceil(extent):
                    return False
                if name in self.unmasked and extent % value:
                    return False
            tile *= value
        return tile <= MAX_TILE and tile // (32 * warps) <= MAX_PER_THREAD


def _block_names(source: str) -> list[str]:
    return sorted(set(re.findall(r"\b((?:[XYZ]|R\d*)_?BLOCK)\b", source)))


def neighbours(point: dict[str, int], limits: Limits) -> list[dict[str, int]]:
    """Every valid point one step away, then every valid diagonal step.

    One step: a block or num_warps doubled or halved, num_stages +-1; ordered so that
    the steps most often worth it come first: warps, then blocks, then stages.
    Diagonal steps change two things in opposite directions so that the work per
    program or per thread stays the same: one block doubled while another halves
    (the tile's shape changes, not its size), and a block doubled or halved together
    with num_warps. Coordinate descent alone never takes them: each half of such a
    move is often slower alone.
    """
    out: list[dict[str, int]] = []
    names = sorted(point, key=lambda n: (n != "num_warps", n == "num_stages", n))

    def add(p: dict[str, int]) -> None:
        if p != point and limits.valid(p) and p not in out:
            out.append(p)

    for name in names:
        steps = (point[name] + 1, point[name] - 1) if name == "num_stages" else (point[name] * 2, point[name] // 2)
        for value in steps:
            add(dict(point, **{name: value}))
    blocks = [n for n in names if _BLOCK.match(n)]
    for i, a in enumerate(blocks):
        for b in blocks[i + 1:]:
            add(dict(point, **{a: point[a] * 2, b: point[b] // 2}))
            add(dict(point, **{a: point[a] // 2, b: point[b] * 2}))
    if "num_warps" in point:
        for a in blocks:
            add(dict(point, **{a: point[a] * 2, "num_warps": point["num_warps"] * 2}))
            add(dict(point, **{a: point[a] // 2, "num_warps": point["num_warps"] // 2}))
    return out


def describe(point: dict[str, int]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(point.items()))
