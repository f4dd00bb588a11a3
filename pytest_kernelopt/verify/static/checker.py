"""The candidate language's grammar: module level, the entry point, functions, statements
and expressions. What a name, an attribute or a call may be is decided in :mod:`.names`;
the allowlists are :mod:`.allowlist`.
"""

from __future__ import annotations

import ast

from .allowlist import (
    BUILTINS, CONSTEXPR_DECORATOR, HOST_BUILTINS, IMPORTS, MATH_CONSTANTS, SCALAR_ARG, TL_CONSTANTS, TL_DTYPES,
    TL_TYPES, TRITON_DECORATOR, WHY_NOT,
)
from .names import NameRules
from .nodes import (
    ANNOTATIONS, EXPRESSION_NAMES, STATEMENT_NAMES, VALUE, Scope, import_spelling, is_docstring, is_dunder, short,
    stored_names,
)


class Checker(NameRules):
    """Checks a parsed candidate against the candidate language; collects (line, message).

    This class walks the module, its functions, statements and expressions; the rules on
    names, attributes and calls come from :class:`~.names.NameRules`.
    """

    def __init__(self, tree: ast.Module, entry_point: str, entry_args: list[str] | None):
        self.tree = tree
        self.entry_point = entry_point
        self.entry_args = entry_args
        self.problems: list[tuple[int, str]] = []
        self.modules: dict[str, str] = {}  # import alias -> canonical module
        self.device_fns: dict[str, ast.FunctionDef] = {}
        self.constexpr_fns: set[str] = set()  # device functions Triton evaluates at compile time
        self.host_fns: dict[str, ast.FunctionDef] = {}
        self.constants: set[str] = set()
        self.scope: Scope | None = None

    def add(self, node: ast.AST, message: str) -> None:
        self.problems.append((getattr(node, "lineno", 1) or 1, message))

    @property
    def kind(self) -> str:
        return self.scope.kind if self.scope else "module"

    # --- module level -------------------------------------------------------------------

    def check(self) -> None:
        self._collect()
        for i, stmt in enumerate(self.tree.body):
            if isinstance(stmt, ast.FunctionDef):
                self._function(stmt)
            elif isinstance(stmt, (ast.Import, ast.ImportFrom)) or (i == 0 and is_docstring(stmt)):
                continue  # checked in _collect
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                self._module_constant(stmt)
            else:
                what = STATEMENT_NAMES.get(type(stmt), f"'{type(stmt).__name__}'")
                self.add(stmt, f"module level: {what} statement is not allowed "
                               "(only a docstring, imports, constants and function definitions)")
        self._check_entry_point()

    def _collect(self) -> None:
        """Import aliases, functions and constants bound at module level, each bound once."""
        bound: dict[str, object] = {}

        def bind(node: ast.AST, name: str, what: object) -> None:
            if is_dunder(name):
                self.add(node, f"name '{name}' is not allowed (dunder)")
            elif name in BUILTINS:
                self.add(node, f"'{name}' rebinds an allowed builtin")
            elif name in bound and not (isinstance(what, str) and bound[name] == what):
                self.add(node, f"'{name}' is defined more than once at module level")
            bound[name] = what

        for stmt in self.tree.body:
            if isinstance(stmt, (ast.Import, ast.ImportFrom)):
                for spelled in import_spelling(stmt):
                    if spelled not in IMPORTS:
                        self.add(stmt, f"'{spelled}' is not allowed (only import triton, import triton.language as "
                                       "tl, from triton.language import math as tl_math, from triton.language.extra "
                                       "import libdevice, import math)")
                        continue
                    local, module = IMPORTS[spelled]
                    if local is not None and module is not None:  # both or neither (allowlist.IMPORTS)
                        bind(stmt, local, module)
                        self.modules[local] = module
            elif isinstance(stmt, ast.FunctionDef):
                bind(stmt, stmt.name, stmt)
                (self.device_fns if stmt.decorator_list else self.host_fns)[stmt.name] = stmt
                if any(self._module_member(d) == ("triton", CONSTEXPR_DECORATOR, []) for d in stmt.decorator_list):
                    self.constexpr_fns.add(stmt.name)
            elif isinstance(stmt, (ast.Assign, ast.AnnAssign)):
                targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
                for target in targets:
                    if isinstance(target, ast.Name):
                        bind(stmt, target.id, stmt)
                        self.constants.add(target.id)
        for name in set(self.modules) & (set(self.device_fns) | set(self.host_fns) | self.constants):
            self.constants.discard(name)
            self.device_fns.pop(name, None)
            self.host_fns.pop(name, None)

    def _module_constant(self, stmt: ast.Assign | ast.AnnAssign) -> None:
        """``NAME = <constant>`` or ``NAME: <annotation> = <constant>``: immutable, computed from literals."""
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target]
        if len(targets) != 1 or not isinstance(targets[0], ast.Name):
            self.add(stmt, f"module level: '{short(stmt)}' must assign one plain name")
            return
        if isinstance(stmt, ast.AnnAssign):
            self._annotation(stmt.annotation)
        if stmt.value is None:
            self.add(stmt, f"module level: '{targets[0].id}' needs a value")
        elif not self._constant(stmt.value):
            self.add(stmt, f"module-level mutable or computed state: {targets[0].id} = {short(stmt.value)} "
                           "(only constants: numbers, strings, tuples of them, tl.constexpr(<constant>))")

    def _constant(self, node: ast.expr) -> bool:
        """A compile-time constant: a literal, a tuple or arithmetic of constants, a module
        constant, a tl dtype, or ``tl.constexpr(<constant>)``."""
        if isinstance(node, ast.Constant):
            return node.value is None or isinstance(node.value, (bool, int, float, str))
        if isinstance(node, ast.Name):
            return node.id in self.constants
        if isinstance(node, ast.Tuple):
            return all(self._constant(e) for e in node.elts)
        if isinstance(node, ast.UnaryOp):
            return self._constant(node.operand)
        if isinstance(node, ast.BinOp):
            return self._constant(node.left) and self._constant(node.right)
        member = self._module_member(node)
        if member is not None:
            module, name, extra = member
            return not extra and ((module == "triton.language" and name in TL_DTYPES | TL_CONSTANTS)
                                  or (module == "math" and name in MATH_CONSTANTS))
        if isinstance(node, ast.Call):
            member = self._module_member(node.func)
            return member == ("triton.language", "constexpr", []) and len(node.args) == 1 \
                and not node.keywords and self._constant(node.args[0])
        return False

    # --- the entry point ----------------------------------------------------------------

    def _check_entry_point(self) -> None:
        name = self.entry_point
        func = self.host_fns.get(name) or self.device_fns.get(name)
        if func is None:
            self.add(self.tree, f"no module-level function '{name}' (the entry point)")
            return
        if name in self.device_fns:
            self.add(func, f"entry point '{name}' must be a plain host function, not a Triton kernel")
        if func.args.defaults and not (len(func.args.defaults) == 1 and self._entry_positional(func) != [
                a.arg for a in func.args.args]):
            self.add(func, f"entry point '{name}': the kernel's arguments may not have default values")
        names = self._entry_positional(func)
        if self.entry_args is not None and names != list(self.entry_args):
            self.add(func, f"entry point '{name}' parameters are ({', '.join(names)}); "
                           f"expected ({', '.join(self.entry_args)}) in that order")
        if self._stream_param(func) is None:
            self.add(func, f"entry point '{name}' must take the stream as its last parameter: "
                           f"def {name}(<the kernel's arguments>, *, stream=None)")

    @staticmethod
    def _entry_positional(func: ast.FunctionDef) -> list[str]:
        names = [a.arg for a in [*func.args.posonlyargs, *func.args.args]]
        return names[:-1] if names and names[-1] == "stream" and func.args.defaults else names

    @staticmethod
    def _stream_param(func: ast.FunctionDef) -> str | None:
        """``*, stream=None`` (or a last positional ``stream=None``); None if absent or malformed."""
        args = func.args
        if args.vararg or args.kwarg or args.posonlyargs:
            return None
        none = lambda d: isinstance(d, ast.Constant) and d.value is None  # noqa: E731
        if [a.arg for a in args.kwonlyargs] == ["stream"] and none(args.kw_defaults[0]):
            return "stream" if not args.defaults else None
        if not args.kwonlyargs and args.args and args.args[-1].arg == "stream" and len(args.defaults) == 1 \
                and none(args.defaults[0]):
            return "stream"
        return None

    # --- functions ----------------------------------------------------------------------

    def _function(self, func: ast.FunctionDef) -> None:
        device = bool(func.decorator_list)
        for decorator in func.decorator_list:
            if self._module_member(decorator) not in (("triton", TRITON_DECORATOR, []),
                                                      ("triton", CONSTEXPR_DECORATOR, [])):
                member = self._module_member(decorator.func if isinstance(decorator, ast.Call) else decorator)
                why = WHY_NOT.get(member[1]) if member else None
                self.add(decorator, f"decorator '{short(decorator)}' is not allowed "
                                    f"({why + '; ' if why else ''}only a bare @triton.jit or @triton.constexpr_function)")
        if len(func.decorator_list) > 1:
            self.add(func, f"'{func.name}' has more than one decorator (only a bare @triton.jit or "
                           "@triton.constexpr_function)")
        if func.returns is not None:
            self._annotation(func.returns)
        self._parameters(func, device)
        args = func.args
        params = [a.arg for a in [*args.posonlyargs, *args.args, *args.kwonlyargs]]
        kind = "device" if device else "host"
        assigned = stored_names(func.body)
        scope = Scope(func, kind, set(params) | assigned, set(params), assigned)
        if not device and func.name == self.entry_point:
            # Other host functions only ever receive numbers: a tensor cannot be passed to them.
            scope.stream = self._stream_param(func)
            scope.tensors = {p for p in params if not SCALAR_ARG.match(p) and p != scope.stream}
        self.scope = scope
        for i, stmt in enumerate(func.body):
            if i == 0 and is_docstring(stmt):
                continue
            self._statement(stmt)
        self.scope = None

    def _parameters(self, func: ast.FunctionDef, device: bool) -> None:
        args = func.args
        if args.vararg or args.kwarg:
            star = f"*{args.vararg.arg}" if args.vararg else f"**{args.kwarg.arg}"  # type: ignore[union-attr]
            self.add(func, f"'{func.name}' must not take {star}; name its parameters")
        if args.posonlyargs:
            self.add(func, f"'{func.name}': positional-only parameters are not allowed")
        if device and args.kwonlyargs:
            self.add(func, f"'{func.name}': keyword-only parameters are not allowed in device code")
        if not device and func.name != self.entry_point and args.kwonlyargs:
            self.add(func, f"'{func.name}': keyword-only parameters are not allowed")
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            self._binding(arg, arg.arg, "host" if not device else "device")
            if arg.annotation is not None:
                self._annotation(arg.annotation)
        for default in [*args.defaults, *args.kw_defaults]:
            if default is not None and not self._constant(default):
                self.add(default, f"default value '{short(default)}' of '{func.name}' must be a constant "
                                  "(a literal, a tl dtype or tl.constexpr(<literal>))")

    def _annotation(self, node: ast.expr) -> None:
        """Annotations: tl.constexpr/tl.tensor/tl.dtype, int/float/bool/str, or such a name as a string."""
        if isinstance(node, ast.Constant) and node.value in ANNOTATIONS:  # a forward reference: 'bool'
            return
        if isinstance(node, ast.Name) and node.id in ANNOTATIONS:
            return
        member = self._module_member(node)
        if member is not None and member[0] == "triton.language" and member[1] in TL_TYPES and not member[2]:
            return
        self.add(node, f"annotation '{short(node)}' is not allowed "
                       "(only tl.constexpr, tl.tensor, tl.dtype, int, float, bool, str)")

    def _binding(self, node: ast.AST, name: str, kind: str | None = None) -> None:
        """A name bound inside a function: never a dunder, an import alias or an allowed builtin;
        in host code never a module-level function or a parameter.

        Device code may shadow the file's function names (Inductor's inlined ``pow_integer``
        has a local ``exp`` next to the helper ``exp``): a local is never callable in this
        language, so the shadowing opens nothing.
        """
        kind = kind or self.kind
        if is_dunder(name):
            self.add(node, f"name '{name}' is not allowed (dunder)")
        elif name in self.modules:
            self.add(node, f"'{name}' rebinds an imported module")
        elif name in BUILTINS:
            self.add(node, f"'{name}' rebinds an allowed builtin")
        elif kind == "host" and (name in self.device_fns or name in self.host_fns):
            self.add(node, f"'{name}' rebinds a module-level function in host code")

    # --- statements ---------------------------------------------------------------------

    def _statement(self, stmt: ast.stmt) -> None:
        device = self.kind == "device"
        if isinstance(stmt, ast.Expr):
            if isinstance(stmt.value, ast.Call):
                self._call(stmt.value, statement=True)
            elif not is_docstring(stmt):
                what = EXPRESSION_NAMES.get(type(stmt.value))
                self.add(stmt, f"expression statement '{short(stmt)}' is not allowed (only calls"
                               f"{'; ' + what + ' is not part of the language' if what else ''})")
        elif isinstance(stmt, ast.Assign):
            for target in stmt.targets:
                self._target(target)
            self._expr(stmt.value)
        elif isinstance(stmt, ast.AnnAssign):
            self._target(stmt.target, plain=True)
            self._annotation(stmt.annotation)
            if stmt.value is not None:
                self._expr(stmt.value)
        elif isinstance(stmt, ast.AugAssign):
            self._target(stmt.target, plain=True)
            self._expr(stmt.value)
        elif isinstance(stmt, ast.If):
            self._expr(stmt.test)
            self._body(stmt.body + stmt.orelse)
        elif isinstance(stmt, ast.For):
            self._target(stmt.target)
            self._loop_range(stmt.iter)
            if stmt.orelse:
                self.add(stmt.orelse[0], "'for ... else' is not allowed")
            self._body(stmt.body)
        elif isinstance(stmt, ast.While):  # (a host loop that never ends is the worker's time limit's job)
            self._expr(stmt.test)
            if stmt.orelse:
                self.add(stmt.orelse[0], "'while ... else' is not allowed")
            self._body(stmt.body)
        elif isinstance(stmt, ast.Return):
            if stmt.value is not None:
                self._expr(stmt.value)
        elif isinstance(stmt, ast.Assert):
            self._expr(stmt.test)
            if stmt.msg is not None:
                self._expr(stmt.msg)
        elif isinstance(stmt, ast.Raise) and not device:
            self._raise(stmt)
        elif isinstance(stmt, (ast.Pass, ast.Break, ast.Continue)):
            pass
        else:
            what = STATEMENT_NAMES.get(type(stmt), f"'{type(stmt).__name__}'")
            self.add(stmt, f"{what} statement is not allowed in {self.kind} code")

    def _body(self, stmts: list[ast.stmt]) -> None:
        for stmt in stmts:
            self._statement(stmt)

    def _target(self, node: ast.expr, plain: bool = False) -> None:
        """Assignment targets: names (or, unless ``plain``, tuples/lists of names)."""
        if isinstance(node, ast.Name):
            self._binding(node, node.id)
            scope = self.scope
            if scope and scope.kind == "host" and node.id in scope.params:
                self.add(node, f"host code may not assign to parameter '{node.id}'")
        elif isinstance(node, (ast.Tuple, ast.List)) and not plain:
            for element in node.elts:
                self._target(element)
        elif isinstance(node, ast.Attribute):
            self.add(node, f"assignment to attribute '{short(node)}' is not allowed (monkey-patching, hidden state)")
        elif isinstance(node, ast.Subscript):
            self.add(node, f"assignment to item '{short(node)}' is not allowed (only names are assigned)")
        else:
            self.add(node, f"assignment target '{short(node)}' is not allowed (only names)")

    def _loop_range(self, node: ast.expr) -> None:
        """``for`` iterates over ``range(...)``, ``tl.range(...)`` or ``tl.static_range(...)`` only."""
        if isinstance(node, ast.Call):
            member = self._module_member(node.func)
            is_builtin_range = isinstance(node.func, ast.Name) and node.func.id == "range" \
                and not self._is_local(node.func.id)
            if is_builtin_range or (self.kind == "device" and member in (
                    ("triton.language", "range", []), ("triton.language", "static_range", []))):
                self._call(node)
                return
        self.add(node, f"'for' must iterate over range(...)"
                       f"{', tl.range(...) or tl.static_range(...)' if self.kind == 'device' else ''}, "
                       f"not '{short(node)}'")

    def _raise(self, stmt: ast.Raise) -> None:
        """Host guards: ``raise ValueError("...")``."""
        exc = stmt.exc
        if stmt.cause is not None:
            self.add(stmt, "'raise ... from' is not allowed")
        if isinstance(exc, ast.Call) and isinstance(exc.func, ast.Name) and exc.func.id[:1].isupper() \
                and exc.func.id in HOST_BUILTINS:
            self._call(exc)
        else:
            self.add(stmt, f"'raise {short(exc) if exc else ''}' is not allowed "
                           "(only raise ValueError(...)/RuntimeError(...)/... with a message)")

    # --- expressions ----------------------------------------------------------------------

    def _expr(self, node: ast.expr, role: str = VALUE) -> None:
        if isinstance(node, ast.Constant):
            if not (node.value is None or isinstance(node.value, (bool, int, float, str))):
                self.add(node, f"constant '{short(node)}' is not allowed (only numbers, strings, True/False/None)")
        elif isinstance(node, ast.Name):
            self._name(node, role)
        elif isinstance(node, ast.Attribute):
            self._attribute(node, role)
        elif isinstance(node, ast.Call):
            self._call(node)
        elif isinstance(node, ast.BinOp):
            self._expr(node.left)
            self._expr(node.right)
        elif isinstance(node, ast.UnaryOp):
            self._expr(node.operand)
        elif isinstance(node, ast.BoolOp):
            for value in node.values:
                self._expr(value)
        elif isinstance(node, ast.Compare):
            for value in [node.left, *node.comparators]:
                self._expr(value)
        elif isinstance(node, ast.IfExp):
            for value in (node.test, node.body, node.orelse):
                self._expr(value)
        elif isinstance(node, ast.Subscript):
            self._expr(node.value)
            self._expr(node.slice)
        elif isinstance(node, ast.Slice):
            for bound in (node.lower, node.upper, node.step):
                if bound is not None:
                    self._expr(bound)
        elif isinstance(node, ast.Tuple) or (isinstance(node, ast.List) and self.kind == "device"):
            for element in node.elts:
                self._expr(element)
        else:
            what = EXPRESSION_NAMES.get(type(node), f"'{type(node).__name__}'")
            hint = " (use a tuple)" if isinstance(node, ast.List) else ""
            self.add(node, f"{what} is not allowed in {self.kind} code{hint}")
