"""Stage 1 of the verification cascade: the candidate's source against a small allowlisted language.

A candidate is untrusted Python (a language model or a stranger's pull request wrote
it) that will be imported and run inside the model under test. This module reads it
with :mod:`ast` (it never imports or runs it, and imports neither torch nor triton)
and accepts it only if every statement, expression, name and attribute belongs to
the *candidate language*: Triton device code plus a launch function, as Inductor
writes them. Whatever the grammar below does not name is rejected, so a way out that
nobody thought of is rejected too; a blocklist (the previous design) let through
every path it did not list (``c = tl.core; c.builtins``, ``[tl.core][0]``, a call on
``tl.core``, ``tl.math.core.knobs.os``, state hung on ``tl.dtype``).

The language, in brief (docs/candidate-language.md has the full grammar and the
reasons):

* **module level**: a docstring, the import forms of :data:`IMPORTS`, constants
  (literals, tuples and arithmetic of them, ``tl.constexpr(<constant>)``) and
  functions: ``@triton.jit`` device functions (``@triton.constexpr_function`` ones too,
  Triton's compile-time helpers: device-code rules, never launched) and undecorated
  host functions;
* **names** resolve to a local, a module-level definition, an allowed builtin, or
  are an import alias followed by an allowlisted member
  (:data:`TL_FUNCTIONS`, :data:`LIBDEVICE_FUNCTIONS`, ...). Aliases are never values;
  trusted names are never rebound; no dunder anywhere; identifiers are ASCII;
* **device code** (``@triton.jit``): assignments to names, ``if``/``for`` over a
  range/``while``, ``return``, ``assert``; calls of allowlisted ``tl``/``libdevice``/
  ``tl_math`` functions, of the file's device functions and of tensor methods
  (:data:`DEVICE_VALUE_ATTRS`);
* **host code**: computes the grid from the integer size arguments and tensor
  metadata and launches the file's kernels: ``kernel[grid](args, NAME=..., num_warps=...)``.
  A tensor argument may only be passed to a launch or read for metadata
  (``.shape``, ``.stride()``, ...): host code can neither compute with tensors nor
  look at their values (which would let a candidate tell the harness's poisoned
  buffers from the model's);
* **the entry point** ``run(<the kernel's runtime arguments, in order>, *, stream=None)``.

Known limits, left to the later stages and the sandboxed worker: resource
exhaustion (``10 ** 10 ** 10``, endless loops), and under ``TRITON_INTERPRET=1``
device code runs as plain Python (the grammar keeps it to the same names).
"""

from __future__ import annotations

# The static stage, by concern: text.py (characters, the coding declaration, identifiers,
# lines a re-reader could mistake for a def), allowlist.py (the names, calls and attributes
# allowed, as data), checker.py (module level, functions, statements, expressions) and
# names.py (what a name, an attribute or a call may be). The stage runs in a process of its
# own (``python -S -m pytest_kernelopt.verify.worker --static``: verify/worker.py's
# serve_static), so this package imports the standard library only.

import ast
import warnings
from dataclasses import dataclass, field

from .allowlist import (
    BUILTINS, CONSTEXPR_DECORATOR, DEVICE_BUILTINS, DEVICE_VALUE_ATTRS, HOST_BUILTINS, HOST_METADATA_ATTRS,
    HOST_METADATA_METHODS, IMPORTS, LAUNCH_OPTIONS, LIBDEVICE_FUNCTIONS, MATH_CONSTANTS, MATH_FUNCTIONS, SCALAR_ARG,
    SUBMODULES, TL_CONSTANTS, TL_CORE_CALLS, TL_DTYPES, TL_ENUMS, TL_FUNCTIONS, TL_MATH_FUNCTIONS, TL_TYPES,
    TRITON_DECORATOR, TRITON_HOST_FUNCTIONS, TYPE_NAMES,
)
from .checker import Checker
from .text import identifier_problems, reread_problems, text_problems

__all__ = [
    "BUILTINS", "CONSTEXPR_DECORATOR", "DEVICE_BUILTINS", "DEVICE_VALUE_ATTRS", "HOST_BUILTINS", "HOST_METADATA_ATTRS",
    "HOST_METADATA_METHODS", "IMPORTS", "LAUNCH_OPTIONS", "LIBDEVICE_FUNCTIONS", "MATH_CONSTANTS", "MATH_FUNCTIONS",
    "SCALAR_ARG", "SUBMODULES", "TL_CONSTANTS", "TL_CORE_CALLS", "TL_DTYPES", "TL_ENUMS", "TL_FUNCTIONS",
    "TL_MATH_FUNCTIONS", "TL_TYPES", "TRITON_DECORATOR", "TRITON_HOST_FUNCTIONS", "TYPE_NAMES",
    "Checker", "StaticReport", "check_candidate", "identifier_problems", "reread_problems", "text_problems",
]


@dataclass
class StaticReport:
    ok: bool
    problems: list[str] = field(default_factory=list)  # each "line N: what is wrong"


def check_candidate(source: str, entry_args: list[str] | None = None, entry_point: str = "run") -> StaticReport:
    """Statically check candidate ``source``; ``entry_args`` are the kernel's runtime argument names."""
    ambiguous = text_problems(source)
    if ambiguous:  # line numbers past such a character mean different lines to different readers
        return StaticReport(False, [f"line {line}: {msg}" for line, msg in ambiguous])
    try:
        with warnings.catch_warnings():  # e.g. SyntaxWarning for "\d" in a string: not our concern
            warnings.simplefilter("ignore")
            tree = ast.parse(source)
    except SyntaxError as exc:
        return StaticReport(False, [f"line {exc.lineno or 1}: syntax error: {exc.msg}"])
    except (ValueError, RecursionError, MemoryError) as exc:  # absurd nesting
        return StaticReport(False, [f"line 1: cannot parse: {type(exc).__name__}: {exc}"])
    checker = Checker(tree, entry_point, entry_args)
    checker.problems += identifier_problems(source)
    checker.problems += reread_problems(source, tree)
    try:
        checker.check()
    except RecursionError:
        checker.add(tree, "source is nested too deeply to check")
    unique = dict.fromkeys(checker.problems)  # first occurrence order, no repeats
    problems = [f"line {line}: {msg}" for line, msg in sorted(unique, key=lambda p: p[0])]
    return StaticReport(not problems, problems)

