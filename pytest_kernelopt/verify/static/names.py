"""The rules on names, attributes and calls: what a name resolves to (a local, a module-level
definition, an allowed builtin, ``<alias>.<allowlisted member>``), which attributes device
and host code may read, and which calls and launches they may make. A mixin of
:class:`~.checker.Checker`, which walks statements and expressions and hands every name,
attribute and call to these methods.
"""

from __future__ import annotations

import ast
from typing import TYPE_CHECKING

from .allowlist import (
    CONSTEXPR_DECORATOR, DEVICE_BUILTINS, DEVICE_VALUE_ATTRS, HOST_BUILTINS, HOST_METADATA_ATTRS,
    HOST_METADATA_METHODS, LAUNCH_OPTIONS, LIBDEVICE_FUNCTIONS, MATH_CONSTANTS, MATH_FUNCTIONS, SUBMODULES,
    TL_CONSTANTS, TL_CORE_CALLS, TL_DTYPES, TL_ENUMS, TL_FUNCTIONS, TL_MATH_FUNCTIONS, TL_TYPES, TRITON_DECORATOR,
    TRITON_HOST_FUNCTIONS, TYPE_NAMES, WHY_NOT,
)
from .nodes import (
    ATTR_ROOT, CALL, DECORATOR, LAUNCH_ARG, LAUNCH_ROOT, TYPE, VALUE, Scope, is_dunder, short, short_path,
)


class NameRules:
    """Names, attributes, calls and launches; the state they read is the checker's."""

    if TYPE_CHECKING:
        entry_point: str
        modules: dict[str, str]
        device_fns: dict[str, ast.FunctionDef]
        constexpr_fns: set[str]
        host_fns: dict[str, ast.FunctionDef]
        constants: set[str]
        scope: Scope | None

        @property
        def kind(self) -> str: ...
        def add(self, node: ast.AST, message: str) -> None: ...
        def _expr(self, node: ast.expr, role: str = VALUE) -> None: ...

    def _is_local(self, name: str) -> bool:
        return self.scope is not None and name in self.scope.locals

    def _name(self, node: ast.Name, role: str) -> None:
        """A name must resolve: a local, a module-level definition, an allowed builtin."""
        name, scope, device = node.id, self.scope, self.kind == "device"
        if is_dunder(name):
            self.add(node, f"name '{name}' is not allowed (dunder)")
        elif scope is not None and name in scope.locals:
            if scope.stream is not None and name == scope.stream:
                self.add(node, f"the '{name}' parameter may not be used (Triton launches on the current stream)")
            elif name in scope.tensors and role not in (LAUNCH_ARG, ATTR_ROOT):
                self.add(node, f"tensor argument '{name}' may only be passed to a kernel launch or read for "
                               "metadata (.shape, .stride(), ...) in host code")
            elif role == CALL and not (device and name in scope.params and name not in scope.assigned):
                # A device function's parameter may be called: Inductor's scan helpers take
                # ``combine_fn``. Only the file's device functions can reach a parameter (host
                # code cannot pass a function), so the call stays inside the file.
                self.add(node, f"call of local value '{name}' is not allowed")
            elif role in (LAUNCH_ROOT, TYPE, DECORATOR):
                self.add(node, f"'{name}' is a local value, not a {'kernel' if role == LAUNCH_ROOT else role}")
        elif name in self.modules:
            if role != ATTR_ROOT:
                self.add(node, f"module '{name}' may only be used as '{name}.<name>'")
        elif name in self.device_fns:
            if device and role not in (CALL, VALUE):
                self.add(node, f"device function '{name}' may only be called or passed to tl.reduce/associative_scan")
            elif not device and role != LAUNCH_ROOT:
                self.add(node, f"kernel '{name}' may only be launched from host code: {name}[grid](...)")
        elif name in self.host_fns:
            if device:
                self.add(node, f"device code may not use host function '{name}'")
            elif role != CALL:
                self.add(node, f"host function '{name}' may only be called")
            elif name == self.entry_point:
                self.add(node, f"the entry point '{name}' may not be called from the candidate")
        elif name in self.constants:
            if role not in (VALUE, LAUNCH_ARG):
                self.add(node, f"module constant '{name}' may only be used as a value")
        elif name in (DEVICE_BUILTINS if device else HOST_BUILTINS):
            if not (role == CALL or (role == TYPE and name in TYPE_NAMES)):
                self.add(node, f"builtin '{name}' may only be called")
        else:
            allowed = DEVICE_BUILTINS if device else HOST_BUILTINS
            self.add(node, f"unknown name '{name}' (not a local, a module-level definition or an allowed "
                           f"builtin: {', '.join(sorted(n for n in allowed if n[0].islower()))})")

    def _module_member(self, node: ast.expr) -> tuple[str, str, list[str]] | None:
        """``tl.load`` -> ("triton.language", "load", []); ``tl.PropagateNan.ALL`` ->
        (..., "PropagateNan", ["ALL"]); None if ``node`` is not rooted at an import alias or
        names a module itself (then ("<module>", "", [])).
        """
        chain: list[str] = []
        while isinstance(node, ast.Attribute):
            chain.append(node.attr)
            node = node.value
        if not isinstance(node, ast.Name) or node.id not in self.modules or self._is_local(node.id):
            return None
        module, chain = self.modules[node.id], chain[::-1]
        while chain and (module, chain[0]) in SUBMODULES:
            module = SUBMODULES[(module, chain.pop(0))]
        if not chain:
            return module, "", []
        return module, chain[0], chain[1:]

    def _attribute(self, node: ast.Attribute, role: str) -> None:
        member = self._module_member(node)
        if member is not None:
            self._member(node, member, role)
            return
        if self.kind == "device":
            if is_dunder(node.attr):
                self.add(node, f"attribute '{node.attr}' is not allowed (dunder)")
            elif node.attr not in DEVICE_VALUE_ATTRS:
                self.add(node, f"attribute '.{node.attr}' is not allowed in device code (tensor and dtype "
                               "attributes only: .to(), .dtype, .shape, .broadcast_to(), ...)")
            value = node.value
            if isinstance(value, ast.Call) and (m := self._module_member(value.func)) and m[0] == "triton.language" \
                    and m[1] == "core":
                self.add(node, f"attribute access on the result of '{short(value.func)}(...)' is not allowed")
                return
            self._expr(value, ATTR_ROOT if isinstance(value, ast.Name) else VALUE)
            return
        # Host code: tensor metadata of a parameter, nothing else.
        value, scope = node.value, self.scope
        is_param = isinstance(value, ast.Name) and scope is not None and value.id in scope.params
        wanted = HOST_METADATA_METHODS if role == CALL else HOST_METADATA_ATTRS
        if is_param and node.attr in wanted:
            self._expr(value, ATTR_ROOT)
            return
        if is_param and node.attr in HOST_METADATA_METHODS | HOST_METADATA_ATTRS:
            self.add(node, f"'{short(node)}' must be {'called' if role != CALL else 'read, not called'}")
            return
        self._expr(value, ATTR_ROOT if isinstance(value, ast.Name) else VALUE)  # e.g. an unknown name
        self.add(node, f"attribute access '{short(node)}' is not allowed in host code (only <module>.<name> "
                       f"and metadata of the arguments: .{', .'.join(sorted(HOST_METADATA_ATTRS))}, "
                       f".{'(), .'.join(sorted(HOST_METADATA_METHODS))}())")

    def _member(self, node: ast.expr, member: tuple[str, str, list[str]], role: str) -> None:
        """``<alias>.<name>``: allowed by name, in this kind of code, in this role."""
        module, name, extra = member
        device = self.kind == "device"
        spelled = short(node)
        if not name:
            self.add(node, f"module '{spelled}' may only be used as '{spelled}.<name>'")
            return
        if is_dunder(name) or any(is_dunder(e) for e in extra):
            self.add(node, f"'{spelled}' is not allowed (dunder)")
            return
        if module == "triton.language" and name in TL_ENUMS:
            if len(extra) == 1 and extra[0] in TL_ENUMS[name] and role == VALUE and device:
                return
            self.add(node, f"'{spelled}' is not allowed (only {', '.join(f'tl.{name}.{m}' for m in sorted(TL_ENUMS[name]))} "
                           "in device code)")
            return
        if extra:
            why = WHY_NOT.get(name) if module in ("triton", "triton.language") else None
            self.add(node, f"'{spelled}' is not allowed ({why or 'no attribute access on ' + short_path(module, name)})")
            return
        why = None
        if module == "triton.language":
            if name in TL_FUNCTIONS:
                why = None if device and role == CALL else ("only called, in device code" if device else
                                                            "device code only")
            elif name in TL_DTYPES | TL_CONSTANTS:
                why = None if role in (VALUE, LAUNCH_ARG) else "a value, not callable"
            elif name in TL_TYPES:
                ok = role == TYPE or (name == "constexpr" and role == CALL)
                why = None if ok else "only in annotations, isinstance(...) and tl.constexpr(<value>)"
            else:
                why = WHY_NOT.get(name, "not in the allowlist of triton.language")
        elif module == "triton.language.math":
            why = None if name in TL_MATH_FUNCTIONS and device and role == CALL else (
                "not in the allowlist of triton.language.math" if name not in TL_MATH_FUNCTIONS
                else "only called, in device code")
        elif module == "libdevice":
            why = None if name in LIBDEVICE_FUNCTIONS and device and role == CALL else (
                "not a libdevice function" if name not in LIBDEVICE_FUNCTIONS else "only called, in device code")
        elif module == "math":
            if name in MATH_CONSTANTS:
                why = None if role in (VALUE, LAUNCH_ARG) else "a value, not callable"
            elif name in MATH_FUNCTIONS:
                why = None if role == CALL and not device else (
                    "host code only (Triton cannot call Python's math)" if device else "only called")
            else:
                why = "not in the allowlist of math"
        elif module == "triton":
            if name in TRITON_HOST_FUNCTIONS:
                why = None if role == CALL and not device else ("host code only" if device else "only called")
            elif name in (TRITON_DECORATOR, CONSTEXPR_DECORATOR):
                why = None if role == DECORATOR else f"only as the decorator @triton.{name}"
            else:
                why = WHY_NOT.get(name, f"only triton.{TRITON_DECORATOR}, "
                                         f"triton.{', triton.'.join(sorted(TRITON_HOST_FUNCTIONS))}")
        if why:
            self.add(node, f"'{spelled}' is not allowed ({why})")

    def _call(self, node: ast.Call, statement: bool = False) -> None:
        func = node.func
        for arg in node.args:
            if isinstance(arg, ast.Starred):
                self.add(arg, f"'*' unpacking in a call is not allowed: '{short(arg)}'")
        for keyword in node.keywords:
            if keyword.arg is None:
                self.add(keyword.value, f"'**' unpacking in a call is not allowed: '**{short(keyword.value)}'")
            elif is_dunder(keyword.arg):
                self.add(keyword.value, f"keyword '{keyword.arg}' is not allowed (dunder)")
        args = [a for a in node.args if not isinstance(a, ast.Starred)]
        keywords = [k for k in node.keywords if k.arg is not None]
        if isinstance(func, ast.Subscript):
            if not statement and self.kind == "host":
                # Triton returns the compiled kernel object: nothing host code should hold.
                self.add(node, f"the result of the launch '{short(func)}(...)' may not be used (a launch is a statement)")
            self._launch(node, func, args, keywords)
            return
        if self.kind == "device" and isinstance(func, ast.Attribute):
            member = self._module_member(func)
            if member is not None and member[0] == "triton.language" and member[1] == "core":
                self._core_call(node, func, member, args, keywords)
                return
        if isinstance(func, (ast.Name, ast.Attribute)):
            self._expr(func, CALL)
        else:
            self.add(node, f"call of '{short(func)}' is not allowed")
            return
        type_arg = isinstance(func, ast.Name) and func.id == "isinstance" and not self._is_local("isinstance")
        for i, arg in enumerate(args):
            if type_arg and i == 1:
                self._isinstance_type(arg)
            else:
                self._expr(arg)
        for keyword in keywords:
            self._expr(keyword.value)

    def _isinstance_type(self, node: ast.expr) -> None:
        for element in node.elts if isinstance(node, ast.Tuple) else [node]:
            self._expr(element, TYPE)

    def _core_call(self, node: ast.Call, func: ast.Attribute, member: tuple[str, str, list[str]],
                   args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        """``tl.core._unwrap_if_constexpr(<local>)`` and ``tl.core.get_int_dtype(<values>)``, exactly."""
        _, _, extra = member
        if len(extra) != 1 or extra[0] not in TL_CORE_CALLS:
            self.add(func, f"'{short(func)}' is not allowed ({WHY_NOT['core']})")
            return
        if extra[0] == "_unwrap_if_constexpr":
            plain = len(args) == 1 and not keywords and isinstance(args[0], ast.Name) and self._is_local(args[0].id)
            if not plain:
                self.add(node, "tl.core._unwrap_if_constexpr takes exactly one local name")
                return
        elif any(k.arg not in ("bitwidth", "signed") for k in keywords) or len(args) > 2:
            self.add(node, "tl.core.get_int_dtype takes (bitwidth, signed) only")
            return
        for arg in args:
            self._expr(arg)
        for keyword in keywords:
            self._expr(keyword.value)

    def _launch(self, node: ast.Call, func: ast.Subscript, args: list[ast.expr], keywords: list[ast.keyword]) -> None:
        """``kernel[grid](args..., NAME=..., num_warps=...)``: host code launching one of the file's kernels."""
        kernel = func.value
        if self.kind != "host" or not isinstance(kernel, ast.Name) or kernel.id not in self.device_fns \
                or kernel.id in self.constexpr_fns or self._is_local(kernel.id):
            self.add(node, f"call of '{short(func)}' is not allowed (only kernel[grid](...) launches of the "
                           "file's @triton.jit functions, from host code)")
            return
        self._expr(func.slice)
        target = self.device_fns[kernel.id]
        params = [a.arg for a in target.args.args]
        constexpr = {a.arg for a in target.args.args if a.annotation is not None and "constexpr" in short(a.annotation)}
        for i, arg in enumerate(args):
            self._launch_arg(arg, params[i] if i < len(params) else None, constexpr)
        for keyword in keywords:
            name = keyword.arg
            if name not in params and name not in LAUNCH_OPTIONS:
                self.add(keyword.value, f"launch keyword '{name}' is neither a parameter of '{kernel.id}' nor a "
                                        f"launch option ({', '.join(sorted(LAUNCH_OPTIONS))})")
            self._launch_arg(keyword.value, name, constexpr)

    def _launch_arg(self, arg: ast.expr, param: str | None, constexpr: set[str]) -> None:
        scope = self.scope
        if isinstance(arg, ast.Name) and scope is not None and arg.id in scope.tensors and param in constexpr:
            self.add(arg, f"tensor argument '{arg.id}' may not be passed as constexpr '{param}'")
            return
        self._expr(arg, LAUNCH_ARG if isinstance(arg, ast.Name) else VALUE)
