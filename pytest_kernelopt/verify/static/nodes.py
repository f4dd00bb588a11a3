"""Helpers on syntax-tree nodes shared by the checker's rules: short spellings of a node,
statement and expression names for messages, the roles a name plays where it is used,
and the scope of the function being checked.
"""

from __future__ import annotations

import ast
from dataclasses import dataclass, field


def is_dunder(name: str) -> bool:
    """Dunder names (``__class__``) and, to keep one simple rule, any name starting with ``__``."""
    return name.startswith("__")


def short(node: ast.AST, limit: int = 60) -> str:
    try:
        text = ast.unparse(node)
    except Exception:  # an unparsable fragment: still name the node
        text = type(node).__name__
    return text if len(text) <= limit else text[: limit - 3] + "..."


def import_spelling(stmt: ast.Import | ast.ImportFrom) -> list[str]:
    """One canonical spelling per name imported: ``from a import b as c`` -> "from a import b as c"."""
    out = []
    for alias in stmt.names:
        suffix = f" as {alias.asname}" if alias.asname else ""
        if isinstance(stmt, ast.Import):
            out.append(f"import {alias.name}{suffix}")
        else:
            out.append(f"from {'.' * stmt.level}{stmt.module or ''} import {alias.name}{suffix}")
    return out


def is_docstring(stmt: ast.stmt) -> bool:
    return isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str)


def stored_names(nodes: list[ast.stmt]) -> set[str]:
    """Names bound by these statements (Python makes them locals of the enclosing function)."""
    return {
        n.id for stmt in nodes for n in ast.walk(stmt) if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)
    }


STATEMENT_NAMES = {
    ast.Global: "'global' (hidden state)", ast.Nonlocal: "'nonlocal' (hidden state)", ast.ClassDef: "class",
    ast.With: "'with'", ast.AsyncWith: "'async with'", ast.Try: "'try'", ast.Delete: "'del'",
    ast.Import: "import", ast.ImportFrom: "import", ast.FunctionDef: "nested function",
    ast.AsyncFunctionDef: "async function", ast.AsyncFor: "'async for'", ast.Match: "'match'",
    ast.Raise: "'raise'", ast.While: "'while'", ast.If: "'if'", ast.For: "'for'", ast.Assert: "'assert'",
    ast.AugAssign: "augmented assignment", ast.Pass: "'pass'", ast.Return: "'return'", ast.Expr: "expression",
}
if hasattr(ast, "TryStar"):  # Python 3.11+
    STATEMENT_NAMES[ast.TryStar] = "'try'"
if hasattr(ast, "TypeAlias"):  # Python 3.12+
    STATEMENT_NAMES[ast.TypeAlias] = "'type' alias"

EXPRESSION_NAMES = {
    ast.Lambda: "lambda", ast.NamedExpr: "':=' (assignment expression)", ast.Starred: "'*' unpacking",
    ast.Dict: "dict", ast.Set: "set", ast.ListComp: "comprehension", ast.SetComp: "comprehension",
    ast.DictComp: "comprehension", ast.GeneratorExp: "generator expression", ast.Await: "'await'",
    ast.Yield: "'yield'", ast.YieldFrom: "'yield from'", ast.JoinedStr: "f-string",
    ast.FormattedValue: "f-string", ast.List: "list",
}

# Annotations (also as strings): Triton reads tl.constexpr; the rest document.
ANNOTATIONS = frozenset({"int", "float", "bool", "str", "tl.constexpr", "tl.tensor", "tl.dtype"})

# Roles a name or attribute can play where it is used.
VALUE, CALL, ATTR_ROOT, LAUNCH_ROOT, LAUNCH_ARG, TYPE, DECORATOR = (
    "value", "call", "attribute root", "launch root", "launch argument", "type", "decorator",
)


@dataclass
class Scope:
    """The function being checked."""

    func: ast.FunctionDef
    kind: str  # "device" or "host"
    locals: set[str]
    params: set[str]
    assigned: set[str] = field(default_factory=set)  # names assigned in the body
    tensors: set[str] = field(default_factory=set)  # host: arguments that may hold tensors
    stream: str | None = None  # host entry point: its stream parameter


def short_path(module: str, name: str) -> str:
    alias = {"triton.language": "tl", "triton.language.math": "tl.math"}.get(module, module)
    return f"{alias}.{name}"
