"""Source rewrite rules: one function ``str -> str`` each, registered by name.

A rule takes a candidate file's text and returns it rewritten (or unchanged when it
does not apply). The search backend proposes ``rewrite:<name>`` of the best candidate
so far (:mod:`.strategies.rewrite`) for the kernels whose bottleneck class is in the
rule's ``classes`` (the Planner builds its strategy lists from them, in the order the
rules are registered here: the structural ones first, so a small budget reaches the
likelier wins); a stored
version's recipe replays rules by name after a compiler upgrade (``store/recipe.py``).

Adding a rule is one decorated function here::

    @rule("my-rule", classes=("memory",))
    def my_rule(source: str) -> str: ...

This module imports nothing of the package (the store's recipe imports it).
"""

from __future__ import annotations

import ast
import re
from typing import Callable, TypeGuard

REWRITES: dict[str, Callable[[str], str]] = {}
RULE_CLASSES: dict[str, tuple[str, ...]] = {}  # rule -> the bottleneck classes the Planner tries it on
RULES_FIRST: set[str] = set()  # rules tried on the compiler's kernel before Inductor's alternatives


def rule(name: str, *, classes: tuple[str, ...],
         first: bool = False) -> Callable[[Callable[[str], str]], Callable[[str], str]]:
    """Register a rewrite rule under ``name`` (``rewrite:<name>`` in a plan); order of registration is plan order.

    ``first``: tried before the harvest (Inductor's alternatives, several candidates that can
    spend a small ``--budget-s`` on their own), on the compiler's kernel, for rules measured to
    win there; the others come after it, on the best so far."""
    def register(fn: Callable[[str], str]) -> Callable[[str], str]:
        if name in REWRITES:
            raise ValueError(f"rewrite rule {name!r} is registered twice")
        REWRITES[name] = fn
        RULE_CLASSES[name] = tuple(classes)
        if first:
            RULES_FIRST.add(name)
        return fn
    return register


def _jit_functions(tree: ast.Module) -> list[ast.FunctionDef]:
    def jit(d: ast.expr) -> bool:
        d = d.func if isinstance(d, ast.Call) else d
        return isinstance(d, ast.Attribute) and d.attr == "jit" or isinstance(d, ast.Name) and d.id == "jit"
    return [f for f in tree.body if isinstance(f, ast.FunctionDef) and any(jit(d) for d in f.decorator_list)]


def _parsed(data: bytes) -> tuple[ast.Module, list[int]] | None:
    """The module of ``data`` and the byte offset where each line starts; None when it does not parse.

    The rules edit byte spans (ast's columns are byte offsets), so host code and formatting
    outside the edited spans stay exactly as they were."""
    try:
        tree = ast.parse(data)
    except SyntaxError:
        return None
    starts = [0]
    for line in data.splitlines(keepends=True):
        starts.append(starts[-1] + len(line))
    return tree, starts


def _edited(data: bytes, edits: list[tuple[int, int, bytes]]) -> str:
    """``data`` with each ``(start, end, replacement)`` byte span replaced (spans do not overlap)."""
    for begin, end, text in sorted(edits, reverse=True):
        data = data[:begin] + text + data[end:]
    return data.decode()


def _reduction_loop(node: ast.stmt) -> tuple[str, str, str] | None:
    """``(offset, numel, block)`` of a loop ``for r0_offset in tl.range(0, r0_numel, R0_BLOCK)`` (or ``range``)."""
    if not isinstance(node, ast.For) or not isinstance(node.target, ast.Name) or node.orelse:
        return None
    call = node.iter
    if not isinstance(call, ast.Call) or len(call.args) != 3:
        return None
    fn = call.func
    if not (isinstance(fn, ast.Name) and fn.id == "range" or isinstance(fn, ast.Attribute) and fn.attr == "range"
            and isinstance(fn.value, ast.Name) and fn.value.id == "tl"):
        return None
    start, numel, block = call.args
    if not (isinstance(start, ast.Constant) and start.value == 0 and isinstance(numel, ast.Name)
            and isinstance(block, ast.Name)):
        return None
    return node.target.id, numel.id, block.id


def _rereads(fn: ast.FunctionDef) -> bool:
    """Whether ``fn`` loops over the same reduction range more than once (a row read again)."""
    loops = [loop for node in fn.body if (loop := _reduction_loop(node)) is not None]
    return len(loops) > len(set(loops))


# The L2 rules: for memory-bound kernels, and for "occupancy" ones (below half the copy limit:
# without Nsight Compute's counters that is all the class says, and a kernel that reads its
# input twice is one). Each changes which bytes come from L2, nothing else.
@rule("reverse-pass", classes=("memory", "occupancy"), first=True)
def reverse_second_passes(source: str) -> str:
    """A multi-pass reduction's later passes over the row walk it backwards, alternating direction.

    Inductor's looped reduction reads a row chunk by chunk to reduce it, then reads it again
    from the start to use the result (normalise, write). When the rows in flight do not fit
    in L2, the start of each row is evicted by the time the second pass comes back for it and
    every chunk is read from memory twice. Walking the second pass from the end reads first
    what the first pass loaded last, while it is still cached. Each loop over the same
    reduction range after the first is reversed when the one before it ran forwards
    (forwards, backwards, forwards...); the body indexes ``last - offset`` instead of
    ``offset``, with ``last`` the start of the final chunk. A kernel with one pass (or whose
    loops are not Inductor's ``range(0, numel, BLOCK)`` over one offset) is left unchanged.
    Summation order changes in a reversed reducing pass; the cascade judges the rounding.
    """
    data = source.encode()
    if (parsed := _parsed(data)) is None:
        return source
    tree, starts = parsed
    edits: list[tuple[int, int, bytes]] = []
    for fn in _jit_functions(tree):
        seen: dict[tuple[str, str, str], int] = {}  # loop signature -> loops of it so far
        for node in fn.body:
            loop = _reduction_loop(node)
            if loop is None:
                continue
            assert isinstance(node, ast.For)  # _reduction_loop matches only a For
            count = seen.get(loop, 0)
            seen[loop] = count + 1
            if count % 2 == 0:
                continue
            offset, numel, block = loop
            names = {n.id for n in ast.walk(fn) if isinstance(n, ast.Name)}
            last = f"{offset}_last"
            if last in names:
                return source
            indent = b" " * node.col_offset
            at = starts[node.lineno - 1]
            edits.append((at, at, indent + f"{last} = (({numel} - 1) // {block}) * {block}\n".encode()))
            for stmt in node.body:
                for name in ast.walk(stmt):
                    if isinstance(name, ast.Name) and name.id == offset:
                        if isinstance(name.ctx, ast.Store):
                            return source  # the body rebinds the offset: not Inductor's loop
                        begin = starts[name.lineno - 1] + name.col_offset
                        edits.append((begin, begin + len(offset), f"({last} - {offset})".encode()))
    return _edited(data, edits)


def _store_calls(fn: ast.FunctionDef) -> list[ast.Call]:
    return [n for n in ast.walk(fn) if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute)
            and n.func.attr == "store" and isinstance(n.func.value, ast.Name) and n.func.value.id == "tl"]


@rule("streaming-stores", classes=("memory", "occupancy"), first=True)
def streaming_stores(source: str) -> str:
    """In a kernel that reads its rows again (a looped reduction with later passes over the
    same range), every ``tl.store`` without a cache hint gets ``eviction_policy='evict_first'``.

    A kernel's outputs are written once; marking them first to be evicted leaves L2 to the
    inputs the later pass reads again. Only such kernels: on the H200 (2026-12-03) the rule
    won 1.03-1.17x on four of the five two-pass row kernels it met (the fifth, an RMS norm
    whose 128 KB rows stay in L2 anyway, 1.000x) and never on a one-pass kernel (0.991-1.000x
    on six: RMS and group norm, Frobenius norm, a cross-entropy's statistics, a scan's flip,
    3-D pooling), where it only spent a candidate's budget. Whether it pays is still the
    model's timing to say.
    """
    data = source.encode()
    if (parsed := _parsed(data)) is None:
        return source
    tree, starts = parsed
    edits: list[tuple[int, int, bytes]] = []
    for fn in _jit_functions(tree):
        if not _rereads(fn):
            continue
        for call in _store_calls(fn):
            if any(k.arg in ("eviction_policy", "cache_modifier") or k.arg is None for k in call.keywords):
                continue
            end = starts[call.end_lineno - 1] + call.end_col_offset - 1  # type: ignore[operator]
            if data[end:end + 1] != b")":
                return source
            edits.append((end, end, b", eviction_policy='evict_first'"))
    return _edited(data, edits)


@rule("eviction", classes=("memory", "unknown"))
def drop_eviction_hints(source: str) -> str:
    """Loads without ``eviction_policy=...``: the hardware's default caching instead of Inductor's hint."""
    return re.sub(r",\s*eviction_policy\s*=\s*'evict_(?:first|last)'", "", source)


def _is_div(node: ast.AST) -> TypeGuard[ast.BinOp]:
    return isinstance(node, ast.BinOp) and isinstance(node.op, ast.Div)


def _float(operand: bytes) -> bytes:
    """An integer literal as a float one: ``x / 3`` divides as floats in Python, ``tl.fdiv`` wants floats."""
    return operand + b".0" if operand.isdigit() else operand


# Every class but launch-bound: a kernel far from its memory roofline is often paying for
# IEEE divisions (a Welford reduction divides once per element).
@rule("approx-div", classes=("memory", "compute", "occupancy", "unknown"))
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
        if (parsed := _parsed(data)) is None:
            return source
        tree, lines = parsed
        edits: list[tuple[int, int, bytes]] = []
        for fn in _jit_functions(tree):
            for node in ast.walk(fn):
                if _is_div(node) and not any(_is_div(n) for side in (node.left, node.right) for n in ast.walk(side)):
                    start, l0, r0 = (lines[n.lineno - 1] + n.col_offset for n in (node, node.left, node.right))
                    end, l1, r1 = (lines[n.end_lineno - 1] + n.end_col_offset  # type: ignore[operator]
                                   for n in (node, node.left, node.right))
                    edits.append((start, end, b"tl.fdiv(" + _float(data[l0:l1]) + b", " + _float(data[r0:r1]) + b")"))
        if not edits:
            return data.decode()
        data = _edited(data, edits).encode()
    return data.decode()
