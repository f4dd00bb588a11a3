"""The shapes a problem declares: ``SHAPES = {"b8": {"batch_size": 8}, "b64": {"batch_size": 64}}``.

Each named shape overrides module-level names that ``get_inputs()`` reads (KernelBench problem
files size their inputs from module globals). The overrides are in force only while
``get_inputs()`` runs and are restored after, under a lock (the verifier's worker is
single-threaded; the lock keeps two threads of one process from seeing each other's shape).
Weights (``get_init_inputs()``) are built once from the module's own globals: shapes vary the
inputs, not the weights. ``SHAPE_WEIGHTS = {"b8": 3, "b64": 1}`` (default: equal) says how tune
shares its budget. A problem without ``SHAPES`` has one shape, as before: nothing changes for it.

A shape's kernels are stored in ``kernels/<model>/<kernel>@<shape>/`` (:func:`store_name`).
"""

from __future__ import annotations

import contextlib
import re
import threading
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from ..errors import ProblemError
from ..records import at_shape

SHAPE_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,63}")
# What the problem file's own API needs: a shape may not replace it.
_RESERVED = ("Model", "get_inputs", "get_init_inputs", "SHAPES", "SHAPE_WEIGHTS")
_LOCK = threading.RLock()


def read_shapes(path: Path, module: ModuleType) -> tuple[dict[str, dict[str, Any]], dict[str, float]]:
    """``SHAPES`` and ``SHAPE_WEIGHTS`` of a loaded problem module, checked: ({}, {}) when it declares none.
    Any defect is a ProblemError naming the file and the shape."""
    shapes = getattr(module, "SHAPES", None)
    if shapes is None:
        if getattr(module, "SHAPE_WEIGHTS", None) is not None:
            raise ProblemError(path, "SHAPE_WEIGHTS without SHAPES: declare the shapes it weighs")
        return {}, {}
    if not isinstance(shapes, dict) or not shapes:
        raise ProblemError(path, "SHAPES must be a non-empty dict of shape name -> {global name: value}, "
                                 f"not {type(shapes).__name__}{' (empty)' if shapes == {} else ''}")
    checked: dict[str, dict[str, Any]] = {}
    for name, overrides in shapes.items():
        if not isinstance(name, str) or not SHAPE_NAME_RE.fullmatch(name):
            raise ProblemError(path, f"SHAPES: shape name {name!r} is not an identifier (letters, digits and _, "
                                     "not starting with a digit, at most 64): it names store folders <kernel>@<shape>")
        if not isinstance(overrides, dict):
            raise ProblemError(path, f"SHAPES[{name!r}] must be a dict of module-level name -> value, "
                                     f"not {type(overrides).__name__}")
        for key in overrides:
            if not isinstance(key, str) or not key.isidentifier():
                raise ProblemError(path, f"SHAPES[{name!r}]: {key!r} is not a module-level name")
            if key in _RESERVED:
                raise ProblemError(path, f"SHAPES[{name!r}] overrides {key}, which a shape may not replace "
                                         "(a shape overrides the globals get_inputs() reads)")
            if not hasattr(module, key):
                raise ProblemError(path, f"SHAPES[{name!r}] overrides {key}, but the file defines no global {key} "
                                         "(a shape can only override the module-level names get_inputs() reads)")
        checked[name] = dict(overrides)
    return checked, _read_weights(path, module, checked)


def _read_weights(path: Path, module: ModuleType, shapes: dict[str, dict[str, Any]]) -> dict[str, float]:
    weights = getattr(module, "SHAPE_WEIGHTS", None)
    if weights is None:
        return {name: 1.0 for name in shapes}
    if not isinstance(weights, dict):
        raise ProblemError(path, f"SHAPE_WEIGHTS must be a dict of shape name -> weight, not {type(weights).__name__}")
    unknown = [k for k in weights if k not in shapes]
    missing = [k for k in shapes if k not in weights]
    if unknown or missing:
        said = [f"not in SHAPES: {', '.join(map(repr, unknown))}" if unknown else "",
                f"missing: {', '.join(missing)}" if missing else ""]
        raise ProblemError(path, "SHAPE_WEIGHTS must weigh every declared shape and no other: "
                                 + "; ".join(filter(None, said)))
    out: dict[str, float] = {}
    for name, weight in weights.items():
        if isinstance(weight, bool) or not isinstance(weight, (int, float)) or not weight > 0 or weight == float("inf"):
            raise ProblemError(path, f"SHAPE_WEIGHTS[{name!r}] = {weight!r}: a weight is a positive finite number")
        out[name] = float(weight)
    return out


def choose_shape(path: Path, shapes: dict[str, dict[str, Any]], shape: str | None) -> str | None:
    """The shape a problem is opened at: ``shape`` (checked), else the first declared one (None: no SHAPES)."""
    if shape is None:
        return next(iter(shapes), None)
    if not shapes:
        raise ProblemError(path, f"declares no SHAPES, so it has no shape {shape!r} (drop --shape)")
    if shape not in shapes:
        raise ProblemError(path, f"no shape {shape!r}; its SHAPES declare {', '.join(shapes)}")
    return shape


@contextlib.contextmanager
def overridden(module: ModuleType, overrides: dict[str, Any]) -> Iterator[None]:
    """The module's globals set to ``overrides`` while the block runs, restored after (even on an error)."""
    if not overrides:
        yield
        return
    with _LOCK:
        saved = {key: getattr(module, key) for key in overrides}
        try:
            for key, value in overrides.items():
                setattr(module, key, value)
            yield
        finally:
            for key, value in saved.items():
                setattr(module, key, value)


def store_name(kernel: str, shape: str | None) -> str:
    """The store folder of ``kernel`` at ``shape``: ``<kernel>@<shape>`` (``<kernel>`` for a problem without SHAPES)."""
    return at_shape(kernel, shape)


def split_name(folder: str) -> tuple[str, str | None]:
    """``(kernel, shape)`` of a store folder name (shape None: a problem without SHAPES)."""
    kernel, sep, shape = folder.partition("@")
    return (kernel, shape) if sep else (folder, None)


def declared_names(path: Path) -> list[str] | None:
    """The shape names a problem file declares, read from its text without running it (bench's parent imports
    no torch): [] when nothing in it names ``SHAPES``; the names when it assigns ``SHAPES`` once, at module level,
    a literal dict with string keys; else None (``SHAPES`` chosen under an ``if``, built by a call, assigned twice,
    set through ``globals()``: only loading the file tells)."""
    import ast

    try:
        text = Path(path).read_text()
        tree = ast.parse(text)
    except (OSError, SyntaxError, UnicodeDecodeError, ValueError):
        return None  # loading it says what is wrong
    top = [node for node in tree.body if isinstance(node, (ast.Assign, ast.AnnAssign)) and any(
        isinstance(t, ast.Name) and t.id == "SHAPES"
        for t in (node.targets if isinstance(node, ast.Assign) else [node.target]))]
    named = sum(1 for node in ast.walk(tree) if isinstance(node, ast.Name) and node.id == "SHAPES"
                and isinstance(node.ctx, (ast.Store, ast.Del)))
    if not top and not named and "SHAPES" not in text:
        return []
    if len(top) != 1 or named != 1:
        return None
    value = top[0].value
    keys = value.keys if isinstance(value, ast.Dict) else None
    names = [k.value for k in keys or [] if isinstance(k, ast.Constant) and isinstance(k.value, str)]
    return names if keys is not None and len(names) == len(keys) else None

