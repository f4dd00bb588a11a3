"""Source rewrite rules: one function ``str -> str`` each, registered by name.

A rule takes a candidate file's text and returns it rewritten (or unchanged when it
does not apply). The search backend proposes ``rewrite:<name>`` of the best candidate
so far (:mod:`.strategies.rewrite`) for the kernels whose bottleneck class is in the
rule's ``classes`` (the Planner builds its strategy lists from them); a stored
version's recipe replays rules by name after a compiler upgrade (``store/recipe.py``).

Adding a rule is one decorated function here::

    @rule("my-rule", classes=("memory",))
    def my_rule(source: str) -> str: ...

This module imports nothing of the package (the store's recipe imports it).
"""

from __future__ import annotations

import ast
import re
from typing import Callable

REWRITES: dict[str, Callable[[str], str]] = {}
RULE_CLASSES: dict[str, tuple[str, ...]] = {}  # rule -> the bottleneck classes the Planner tries it on


def rule(name: str, *, classes: tuple[str, ...]) -> Callable[[Callable[[str], str]], Callable[[str], str]]:
    """Register a rewrite rule under ``name`` (``rewrite:<name>`` in a plan); order of registration is plan order."""
    def register(fn: Callable[[str], str]) -> Callable[[str], str]:
        if name in REWRITES:
            raise ValueError(f"rewrite rule {name!r} is registered twice")
        REWRITES[name] = fn
        RULE_CLASSES[name] = tuple(classes)
        return fn
    return register


@rule("eviction", classes=("memory", "unknown"))
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
