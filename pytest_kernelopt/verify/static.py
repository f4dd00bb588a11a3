"""Stage 1 of the verification cascade: a static check of a candidate's source.

A candidate is untrusted Python (an LLM or an agent may have written it) that will
be imported and run inside the model under test. Before anything executes it, this
module reads it with :mod:`ast` (it never imports or runs it, and imports neither
torch nor triton itself) and rejects what a Triton kernel file has no business
doing. The worker that later loads the candidate also runs it isolated; this check
is the cheap first line, so it is strict and errs on the side of rejecting.

Why each rule exists:

* **It parses.** Nothing else can be said about a file that does not.
* **The entry point** ``run(<the kernel's arguments>, *, stream=None)`` is a plain
  host function whose positional parameters are the replaced kernel's runtime
  arguments, in order: the compiled model calls it exactly as it called the kernel.
* **Imports** are limited to ``triton``, ``triton.language`` (and its ``math`` and
  ``libdevice``) and Python's ``math``. Any other module (os, sys, torch, time,
  threading, ctypes, ...) reaches the file system, the process, the clock or the
  tensors behind the kernel's back. Imports inside functions would dodge the check.
* **Forbidden builtins** (``open``, ``exec``, ``eval``, ``__import__``,
  ``getattr``, ``globals``, ``print``, ...) and **dunder attributes**
  (``__class__``, ``__globals__``, ``__subclasses__``, ...) are the classic ways out
  of a restricted namespace: to any module, to builtins, to arbitrary attributes.
* **Timers** (``globaltimer``, ``clock``, ``clock64``, ``smid`` and the PTX
  registers in inline assembly) would let a kernel notice it is being measured.
* **Only public triton API** (``triton.jit``, ``cdiv``, ``Config``, ...):
  ``triton.runtime``/``compiler``/``testing``/``knobs``... give access to streams,
  events, benchmarking, the driver and global configuration. ``tl.extra`` is open
  for ``libdevice`` only (``tl.extra.cuda`` holds the timers).
* **No hidden state or control flow**: no ``global``/``nonlocal``, classes, lambdas,
  generators, ``async``, ``with`` or ``match``; module level holds only imports,
  functions and immutable constants, and default values are literals. A candidate
  must behave the same on every call; a cache or counter would let it answer the
  correctness check and the benchmark differently.
* **Host code** (functions not decorated with ``triton.jit``/``autotune``/
  ``heuristics``) only computes launch parameters from sizes and strides and launches
  kernels: no method calls beyond tensor metadata (``.add_()``, ``.copy_()``,
  ``.item()``, ``.to()`` would do the work in torch, not in the kernel), no
  assignment to attributes or items (torch compute, or monkey-patching ``tl.load``),
  no calls to anything but a few pure builtins, the file's own functions, triton /
  math functions and ``kernel[grid](...)`` launches. Names that these rules trust
  (imported modules, the file's functions, the allowed builtins) may not be rebound.
* **Device code** (``@triton.jit``) is compiled by Triton, which allows only Triton
  constructs anyway; besides the rules above it may not assign attributes. It may
  use ``tl.core`` (Inductor's helpers do) and shadow names (a parameter ``input``).

A forbidden builtin's name is fine where a function binds it locally (it then names
the local, not the builtin); in host code calling such a local is still rejected.

Known limits, left to the later stages: arithmetic on tensors in host code
(``x * 2``) is not detected, resource exhaustion (``10 ** 10 ** 10``, endless loops)
is not detected, and under ``TRITON_INTERPRET=1`` device code runs as plain Python.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass, field

# `import X` / `import X as Y`: the modules a candidate may import.
ALLOWED_IMPORTS = frozenset({
    "triton",
    "triton.language",
    "triton.language.math",
    "triton.language.extra.libdevice",
    "triton.language.extra.cuda.libdevice",
    "math",
})
# `from M import N`: (M, N) -> the module bound.
ALLOWED_FROM_IMPORTS = {
    ("triton", "language"): "triton.language",
    ("triton.language", "math"): "triton.language.math",
    ("triton.language.extra", "libdevice"): "triton.language.extra.libdevice",
    ("triton.language.extra.cuda", "libdevice"): "triton.language.extra.cuda.libdevice",
    ("__future__", "annotations"): None,  # binds nothing
}
# `triton.X` for these X only; the rest is the runtime, compiler, driver, benchmarking.
TRITON_API = frozenset({
    "jit", "cdiv", "next_power_of_2", "language", "Config", "autotune", "heuristics", "constexpr",
})
# Submodules of triton.language: host code may not touch them; device code may (Inductor's
# helpers call tl.core._unwrap_if_constexpr / tl.core.get_int_dtype).
TRITON_INTERNALS = frozenset({"core", "semantic", "standard", "random", "target_info"})
# Python modules that Triton's own modules import (triton 3.x: tl.core.builtins, tl.core.knobs,
# ...): reaching them through a triton module would undo the import rules, in any code.
PYTHON_MODULE_ATTRS = frozenset({
    "builtins", "inspect", "ir", "knobs", "typing", "os", "sys", "importlib", "ctypes", "subprocess",
    "functools", "warnings", "runtime", "compiler", "driver", "_C",
})
# Decorators that make a function device code (and the only decorators allowed).
KERNEL_DECORATORS = frozenset({"triton.jit", "triton.autotune", "triton.heuristics"})

FORBIDDEN_NAMES = frozenset({
    "open", "exec", "eval", "compile", "__import__", "globals", "locals", "vars", "getattr", "setattr",
    "delattr", "input", "print", "breakpoint", "memoryview", "help", "exit", "quit",
    "__builtins__", "__loader__", "__spec__",
})
TIMER_ATTRS = frozenset({"globaltimer", "clock", "clock64", "smid"})
# PTX special registers read by inline assembly.
_TIMER_ASM = re.compile(r"%(globaltimer|clock|smid)")

# Host code may call these methods on any object (tensor metadata) ...
HOST_METHODS = frozenset({"stride", "size", "numel", "dim", "data_ptr", "is_contiguous", "element_size"})
# ... and these builtins.
HOST_BUILTINS = frozenset({
    "max", "min", "abs", "int", "float", "len", "range", "tuple", "bool", "round", "divmod",
    "isinstance", "sum", "any", "all", "zip", "enumerate", "pow",
    # Guards such as ``raise ValueError("xnumel must be a multiple of 4")``.
    "RuntimeError", "ValueError", "TypeError", "AssertionError", "NotImplementedError", "IndexError",
})

# Statements and expressions that are rejected wherever they appear.
_REJECTED_NODES = {
    ast.Global: "'global' statement is not allowed (hidden state)",
    ast.Nonlocal: "'nonlocal' statement is not allowed (hidden state)",
    ast.ClassDef: "class definition is not allowed",
    ast.Lambda: "lambda is not allowed (use a def)",
    ast.AsyncFunctionDef: "async function is not allowed",
    ast.Await: "'await' is not allowed",
    ast.AsyncFor: "'async for' is not allowed",
    ast.AsyncWith: "'async with' is not allowed",
    ast.Yield: "'yield' is not allowed",
    ast.YieldFrom: "'yield from' is not allowed",
    ast.With: "'with' statement is not allowed",
    ast.Match: "'match' statement is not allowed",
}
_MODULE_STATEMENT_NAMES = {
    ast.If: "'if'", ast.For: "'for'", ast.While: "'while'", ast.Try: "'try'", ast.Delete: "'del'",
    ast.Expr: "expression", ast.AugAssign: "augmented assignment", ast.Assert: "'assert'",
    ast.Raise: "'raise'", ast.Pass: "'pass'",
}
_CONSTANT_OPS = (ast.Add, ast.Sub, ast.Mult, ast.Div, ast.FloorDiv, ast.Mod, ast.Pow,
                 ast.LShift, ast.RShift, ast.BitOr, ast.BitAnd, ast.BitXor)


@dataclass
class StaticReport:
    ok: bool
    problems: list[str] = field(default_factory=list)  # each "line N: what is wrong"


def check_candidate(source: str, entry_args: list[str] | None = None, entry_point: str = "run") -> StaticReport:
    """Statically check candidate ``source``; ``entry_args`` are the kernel's runtime argument names."""
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning for "\d" in a string: not our concern
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport(False, [f"line {exc.lineno or 1}: syntax error: {exc.msg}"])
    except (ValueError, RecursionError, MemoryError) as exc:  # null bytes, absurd nesting
        return StaticReport(False, [f"line 1: cannot parse: {type(exc).__name__}: {exc}"])
    checker = _Checker(tree)
    try:
        checker.check_module()
        checker.visit(tree)
    except RecursionError:
        checker.add(tree, "source is nested too deeply to check")
    checker.check_entry_point(entry_point, entry_args)
    unique = dict.fromkeys(checker.problems)  # first occurrence order, no repeats
    problems = [f"line {line}: {msg}" for line, msg in sorted(unique, key=lambda p: p[0])]
    return StaticReport(not problems, problems)


# --- helpers ---------------------------------------------------------------------------

def _attr_chain(node: ast.expr) -> list[str] | None:
    """``a.b.c`` -> ["a", "b", "c"]; None if the chain does not end in a plain name."""
    parts: list[str] = []
    while isinstance(node, ast.Attribute):
        parts.append(node.attr)
        node = node.value
    if not isinstance(node, ast.Name):
        return None
    return [node.id, *reversed(parts)]


def _is_dunder(name: str) -> bool:
    return len(name) > 4 and name.startswith("__") and name.endswith("__")


def _short(node: ast.AST, limit: int = 60) -> str:
    text = ast.unparse(node)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _triton_path_problem(path: list[str], host: bool) -> tuple[int, str] | None:
    """For a dotted name under ``triton``: (index of the offending part, why), or None."""
    if len(path) < 2:
        return None
    if path[1] not in TRITON_API:
        return 1, "only triton." + "/".join(sorted(TRITON_API)) + " are allowed"
    for i, part in enumerate(path[2:], 2):
        if part in PYTHON_MODULE_ATTRS:
            return i, "not part of the Triton language"
    if path[1] != "language":
        return None
    i = 2
    if path[i:i + 1] == ["math"]:
        i += 1
    elif path[i:i + 1] == ["extra"]:
        if path[i + 1:i + 2] == ["libdevice"]:
            i += 2
        elif path[i + 1:i + 3] == ["cuda", "libdevice"]:
            i += 3
        else:
            return min(i + 1, len(path) - 1), "only libdevice is allowed from triton.language.extra"
    if host and i < len(path) and path[i] in TRITON_INTERNALS:
        return i, "Triton internals are not allowed in host code"
    return None


@dataclass
class _Frame:
    """What the checker knows about the function it is in."""

    params: set[str]
    local_names: set[str]  # names bound in this function's own scope
    local_defs: set[str]  # functions defined in it and never rebound (host code may call them)
    aliases: set[str] = field(default_factory=set)  # host code: names bound to an argument


def _scope_nodes(func: ast.FunctionDef) -> list[ast.AST]:
    """The nodes of ``func``'s body that belong to its own scope (not nested functions or comprehensions)."""
    out: list[ast.AST] = []
    pending: list[ast.AST] = list(func.body)
    while pending:
        node = pending.pop()
        out.append(node)
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef,
                             ast.ListComp, ast.SetComp, ast.DictComp, ast.GeneratorExp)):
            continue
        pending.extend(ast.iter_child_nodes(node))
    return out


def _frame_for(func: ast.FunctionDef) -> _Frame:
    args = func.args
    params = {a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg] if a}
    nodes = _scope_nodes(func)
    stored = {n.id for n in nodes if isinstance(n, ast.Name) and not isinstance(n.ctx, ast.Load)}
    stored |= {n.name for n in nodes if isinstance(n, ast.ExceptHandler) and n.name}
    defs = {n.name for n in nodes if isinstance(n, ast.FunctionDef)}
    return _Frame(params, params | stored | defs, defs - stored - params)


class _Checker(ast.NodeVisitor):
    """Walks the module once, knowing whether it is in module, host or device code."""

    def __init__(self, tree: ast.Module):
        self.tree = tree
        self.problems: list[tuple[int, str]] = []
        self.modules: dict[str, str] = {}  # local name -> module it is bound to
        self.functions: dict[str, ast.FunctionDef] = {}  # module-level functions
        self.constants: set[str] = set()  # module-level constants
        self.kind = "module"  # or "host" / "device"
        self.frames: list[_Frame] = []  # the functions the visitor is in, innermost last
        self._collect_module_names()

    def add(self, node: ast.AST, message: str) -> None:
        self.problems.append((getattr(node, "lineno", 1), message))

    @property
    def module_names(self) -> set[str]:
        return set(self.modules) | set(self.functions) | self.constants

    def _is_device(self, func: ast.FunctionDef) -> bool:
        return any(self._decorator_name(d) in KERNEL_DECORATORS for d in func.decorator_list)

    def _decorator_name(self, node: ast.expr) -> str | None:
        path = self._module_path(node.func if isinstance(node, ast.Call) else node)
        return ".".join(path) if path else None

    def _module_path(self, node: ast.expr) -> list[str] | None:
        """The dotted name ``node`` spells, with its root import alias expanded; None if not rooted at one."""
        chain = _attr_chain(node)
        if chain is None or chain[0] not in self.modules:
            return None
        return [*self.modules[chain[0]].split("."), *chain[1:]]

    # --- module level -------------------------------------------------------------

    def _collect_module_names(self) -> None:
        """Import aliases, functions and constants bound at module level (first pass)."""
        seen: dict[str, object] = {}

        def bind(node: ast.AST, name: str, what: object) -> None:
            if name in seen and (seen[name] != what or not isinstance(what, str)):
                self.add(node, f"'{name}' is defined more than once at module level")
            seen[name] = what

        for stmt in self.tree.body:
            if isinstance(stmt, ast.Import):
                for alias in stmt.names:
                    if alias.name in ALLOWED_IMPORTS:
                        local = alias.asname or alias.name.split(".")[0]
                        self.modules[local] = alias.name if alias.asname else local
                        bind(stmt, local, self.modules[local])  # `import triton` twice is fine
            elif isinstance(stmt, ast.ImportFrom) and stmt.level == 0:
                for alias in stmt.names:
                    module = ALLOWED_FROM_IMPORTS.get((stmt.module or "", alias.name))
                    if module is not None:
                        local = alias.asname or alias.name
                        self.modules[local] = module
                        bind(stmt, local, module)
            elif isinstance(stmt, ast.FunctionDef):
                bind(stmt, stmt.name, stmt)
                self.functions[stmt.name] = stmt
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        bind(stmt, target.id, stmt)
                        self.constants.add(target.id)

    def is_constant(self, node: ast.expr, known: set[str]) -> bool:
        """A literal, a tuple/arithmetic of those, ``tl.constexpr(<that>)`` or an earlier constant."""
        if isinstance(node, ast.Constant):
            return True
        if isinstance(node, ast.Name):
            return node.id in known
        if isinstance(node, ast.Tuple):
            return all(self.is_constant(e, known) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            return self.is_constant(node.operand, known)
        if isinstance(node, ast.BinOp):
            return isinstance(node.op, _CONSTANT_OPS) and self.is_constant(node.left, known) \
                and self.is_constant(node.right, known)
        if isinstance(node, ast.Call):
            path = self._module_path(node.func)
            return path in (["triton", "language", "constexpr"], ["triton", "constexpr"]) \
                and len(node.args) == 1 and not node.keywords and self.is_constant(node.args[0], known)
        return False

    def check_module(self) -> None:
        """Rule: module level holds a docstring, imports, functions and immutable constants only."""
        known: set[str] = set()
        for i, stmt in enumerate(self.tree.body):
            if isinstance(stmt, (ast.Import, ast.ImportFrom, ast.FunctionDef)):
                continue
            if i == 0 and isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) \
                    and isinstance(stmt.value.value, str):
                continue  # docstring
            if isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                names = [t.id for t in targets if isinstance(t, ast.Name)]
                if len(names) != len(targets):
                    self.add(stmt, "module-level assignment must bind plain names")
                if isinstance(stmt, ast.AnnAssign) and _attr_chain(stmt.annotation) is None:
                    self.add(stmt, f"module-level annotation '{_short(stmt.annotation)}' must be a plain name")
                if stmt.value is not None and not self.is_constant(stmt.value, known):
                    what = ", ".join(f"'{n}'" for n in names) or _short(targets[0])
                    self.add(stmt, f"module-level mutable state: {what} = {_short(stmt.value)} "
                                   "(only immutable constants: numbers, strings, tuples, tl.constexpr(...))")
                known.update(names)
                continue
            if isinstance(stmt, tuple(_REJECTED_NODES)):
                continue  # reported by the visitor
            what = _MODULE_STATEMENT_NAMES.get(type(stmt), type(stmt).__name__)
            self.add(stmt, f"module-level {what} statement is not allowed "
                           "(only imports, functions and constants)")

    # --- entry point ------------------------------------------------------------------

    def check_entry_point(self, name: str, entry_args: list[str] | None) -> None:
        func = self.functions.get(name)
        if func is None:
            self.add(self.tree, f"no module-level function '{name}' (the entry point)")
            return
        if self._is_device(func):
            self.add(func, f"entry point '{name}' must be a plain host function, not a Triton kernel")
        args = func.args
        positional = [*args.posonlyargs, *args.args]
        defaults = dict(zip(reversed(positional), reversed(args.defaults)))
        names = [a.arg for a in positional]
        stream_positional = bool(names) and names[-1] == "stream" and positional[-1] in defaults \
            and positional[-1] not in args.posonlyargs
        if stream_positional:
            names = names[:-1]
        if entry_args is not None and names != list(entry_args):
            self.add(func, f"entry point '{name}' parameters are ({', '.join(names)}); "
                           f"expected ({', '.join(entry_args)}) in that order")
        if args.vararg is not None:
            self.add(func, f"entry point '{name}' must not take *{args.vararg.arg}; "
                           "name the kernel's arguments")
        kwonly = [a.arg for a in args.kwonlyargs]
        if not (stream_positional or "stream" in kwonly or args.kwarg is not None):
            self.add(func, f"entry point '{name}' must accept a 'stream' keyword (..., *, stream=None)")
        for arg, default in zip(args.kwonlyargs, args.kw_defaults):
            if default is None and arg.arg != "stream":
                self.add(func, f"entry point '{name}' keyword-only parameter '{arg.arg}' needs a default")

    # --- functions ----------------------------------------------------------------------

    def visit_FunctionDef(self, node: ast.FunctionDef) -> None:
        outer = self.kind
        kind = ("device" if self._is_device(node) else "host") if outer == "module" else outer
        if outer != "module":
            self._check_binding(node, node.name, outer)
        for decorator in node.decorator_list:
            if self._decorator_name(decorator) not in KERNEL_DECORATORS:
                self.add(decorator, f"decorator '{_short(decorator)}' is not allowed "
                                    "(only triton.jit, triton.autotune, triton.heuristics)")
        args = node.args
        all_args = [*args.posonlyargs, *args.args, *args.kwonlyargs, args.vararg, args.kwarg]
        for arg in filter(None, all_args):
            self._check_binding(arg, arg.arg, kind)
        for default in [*args.defaults, *filter(None, args.kw_defaults)]:
            if not self.is_constant(default, self.constants):
                self.add(default, f"default value '{_short(default)}' of '{node.name}' must be an immutable literal")

        # Decorators, defaults and annotations run when the module is imported: host code.
        self.kind = "host" if outer == "module" else outer
        for expr in [*node.decorator_list, *args.defaults, *filter(None, args.kw_defaults), node.returns,
                     *(a.annotation for a in filter(None, all_args))]:
            if expr is not None:
                self.visit(expr)

        self.frames.append(_frame_for(node))
        self.kind = kind
        for stmt in node.body:
            self.visit(stmt)
        self.frames.pop()
        self.kind = outer

    def _check_binding(self, node: ast.AST, name: str, kind: str | None = None) -> None:
        """In host code, names the call rules trust (module-level names, allowed builtins) stay put.

        Device code may shadow them (Inductor's helpers have locals like ``exp``): what
        device code calls is not restricted, so shadowing there opens nothing.
        """
        if (kind or self.kind) != "host":
            return
        if name in self.module_names:
            self.add(node, f"'{name}' rebinds a module-level name in host code")
        elif name in HOST_BUILTINS:
            self.add(node, f"'{name}' rebinds an allowed builtin in host code")

    def _is_local(self, name: str) -> bool:
        """Whether ``name`` is bound in an enclosing function, so it is not the builtin of that name."""
        return any(name in frame.local_names for frame in self.frames)

    # --- statements and expressions rejected everywhere -----------------------------------

    def generic_visit(self, node: ast.AST) -> None:
        message = _REJECTED_NODES.get(type(node))
        if message:
            self.add(node, message)
        super().generic_visit(node)

    def _check_import(self, node: ast.Import | ast.ImportFrom) -> None:
        if isinstance(node, ast.ImportFrom):
            module = node.module or ""
            if node.level:
                self.add(node, f"relative import of '{'.' * node.level}{module}' is not allowed")
                return
            bad = [f"{module}.{a.name}" for a in node.names if (module, a.name) not in ALLOWED_FROM_IMPORTS]
        else:
            bad = [a.name for a in node.names if a.name not in ALLOWED_IMPORTS]
        for name in bad:
            self.add(node, f"import of '{name}' is not allowed (only triton, triton.language "
                           "and its math/libdevice, and math)")
        if self.kind != "module":
            self.add(node, "imports are only allowed at module level")

    visit_Import = visit_ImportFrom = _check_import

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> None:
        if node.name:
            self._check_binding(node, node.name)
        self.generic_visit(node)

    def visit_Name(self, node: ast.Name) -> None:
        if _is_dunder(node.id) or (node.id in FORBIDDEN_NAMES and not self._is_local(node.id)):
            self.add(node, f"use of '{node.id}' is not allowed")
        elif node.id in self.modules and isinstance(node.ctx, ast.Load):
            self.add(node, f"module '{node.id}' may only be used as '{node.id}.<name>'")
        if not isinstance(node.ctx, ast.Load):
            self._check_binding(node, node.id)

    def visit_Constant(self, node: ast.Constant) -> None:
        if isinstance(node.value, str) and _TIMER_ASM.search(node.value):
            self.add(node, "inline assembly reading a timer register is not allowed")

    def _check_attr_name(self, node: ast.AST, name: str) -> None:
        if _is_dunder(name):
            self.add(node, f"access to attribute '{name}' is not allowed")
        elif name in TIMER_ATTRS:
            self.add(node, f"timer '{name}' is not allowed")

    def visit_Attribute(self, node: ast.Attribute) -> None:
        if not isinstance(node.ctx, ast.Load):
            self.add(node, f"assignment to attribute '{_short(node)}' is not allowed (monkey-patching)")
        chain = _attr_chain(node)
        path = self._module_path(node)
        if chain is None or path is None:
            self._check_attr_name(node, node.attr)
            self.generic_visit(node)
            return
        # A dotted name rooted at an import: check it whole, once, here.
        for part in chain[1:]:
            self._check_attr_name(node, part)
        if path[0] == "triton":
            found = _triton_path_problem(path, host=self.kind != "device")
            if found:
                index, why = found
                spelled = ".".join(chain[: index + 1 - (len(path) - len(chain))])
                canonical = ".".join(path[: index + 1])
                also = "" if spelled == canonical else f", i.e. {canonical}"
                self.add(node, f"access to '{spelled}' is not allowed ({why}{also})")

    def visit_Subscript(self, node: ast.Subscript) -> None:
        if self.kind == "host" and not isinstance(node.ctx, ast.Load):
            self.add(node, f"assignment to item '{_short(node)}' in host code is not allowed (torch compute)")
        elif self.kind == "host" and isinstance(node.value, ast.Name) and node.value.id in self._tensor_like():
            # Reading tensor values on the host (``out_ptr0[0, 0]``) lets a candidate see
            # what the harness put in its outputs and behave differently.
            self.add(node, f"reading values of argument '{node.value.id}' in host code is not allowed")
        self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> None:
        # Track host-code aliases of arguments (``o = out_ptr0``) for the checks above.
        if self.kind == "host" and isinstance(node.value, ast.Name) and node.value.id in self._tensor_like():
            for target in node.targets:
                if isinstance(target, ast.Name):
                    self.frames[0].aliases.add(target.id)
        self.generic_visit(node)

    def _tensor_like(self) -> set[str]:
        """Names that may hold the top-level host function's arguments (tensors), as seen from here.

        Parameters of a nested function (a grid callable's ``meta``) are its own.
        """
        if not self.frames:
            return set()
        names = self.frames[0].params | self.frames[0].aliases
        return names - self.frames[-1].params if len(self.frames) > 1 else names

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        # ``x += ...`` on a tensor (or an alias of one) is in-place torch compute; host
        # launch code has no need for augmented assignment at all.
        if self.kind == "host":
            self.add(node, f"augmented assignment '{_short(node)}' in host code is not allowed "
                           "(in-place torch compute on an argument or an alias of one)")
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if self.kind == "host":
            problem = self._host_call_problem(node.func)
            if problem:
                self.add(node, problem)
        self.generic_visit(node)

    def _host_call_problem(self, func: ast.expr) -> str | None:
        """Host code calls pure builtins, the file's functions, triton/math and launches only."""
        if isinstance(func, ast.Name):
            if any(func.id in frame.local_defs for frame in self.frames):
                return None  # a function defined in this one
            if self._is_local(func.id):
                return f"call to local value '{func.id}' is not allowed in host code"
            if func.id in HOST_BUILTINS or func.id in self.functions or func.id in FORBIDDEN_NAMES:
                return None  # (forbidden names are reported on their own)
            return f"call to '{func.id}' is not allowed in host code"
        if isinstance(func, ast.Attribute):
            if self._module_path(func) is not None or func.attr in HOST_METHODS:
                return None
            return (f"torch compute in host code: method call '{_short(func)}()' is not allowed "
                    f"(only {', '.join(sorted(HOST_METHODS))})")
        if isinstance(func, ast.Subscript) and isinstance(func.value, ast.Name):
            kernel = self.functions.get(func.value.id)
            if kernel is not None and self._is_device(kernel):
                return None  # kernel[grid](...)
        return f"call of '{_short(func)}' is not allowed in host code (only kernel[grid](...) launches)"
