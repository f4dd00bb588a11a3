"""The rules on the text itself, before and beside the syntax tree: characters, the coding
declaration, non-ASCII identifiers and lines a re-reader of a Triton function could take
for its ``def``. Standard library only: the loader runs :func:`text_problems` on every path.
"""

from __future__ import annotations

import ast
import io
import re
import tokenize
from typing import TypeGuard

# --- the text itself: what every reader of the file sees -----------------------------------
#
# The text checked here is compiled and run as it is, but Triton reads a kernel's source
# again: ``inspect.getsourcelines`` (through ``linecache``, which splits lines with
# ``str.splitlines``) for ``JITFunction.src`` on the GPU, and, in the interpreter, from the
# *last* line of that text that starts with ``def``. Two rules keep every reader on the
# text that was checked: (1) no character on which Python's parser and ``str.splitlines``
# disagree about where lines end (and no invisible formatting character a reviewer cannot
# see), so a line number names the same line for everyone; (2) inside a Triton function no
# line but its own ``def`` line starts with ``def``. The loader
# (:func:`pytest_kernelopt.candidate.load_candidate_source`) then checks that what each of
# Triton's readers will compile parses to the very tree checked here.

# Control characters allowed in a candidate: tab and newline (\r only as part of \r\n).
_ALLOWED_CONTROL = {"\t", "\n"}
_NOT_PLAIN = re.compile(r"[^\x20-\x7e\t\n]")
_MAX_TEXT_PROBLEMS = 5


def _char_problem(ch: str, following: str) -> str | None:
    import unicodedata

    if ch == "\r" and following == "\n":
        return None
    category = unicodedata.category(ch)
    if category not in ("Cc", "Cf", "Zl", "Zp", "Cs") or ch in _ALLOWED_CONTROL:
        return None
    name = unicodedata.name(ch, "a control character")
    why = ("Python's parser and str.splitlines() (linecache, inspect, Triton) disagree about where lines end "
           "around it" if category in ("Cc", "Zl", "Zp") else "it is invisible: a reviewer would not see it")
    return f"character U+{ord(ch):04X} ({name}) is not allowed: {why}"


def text_problems(source: str) -> list[tuple[int, str]]:
    """(line, message) for characters no candidate may hold and for a coding declaration
    other than UTF-8. Cheap (one regex pass); also run by the loader on every path."""
    problems: list[tuple[int, str]] = []
    if source.startswith("\ufeff"):  # some editors write one; the bytes are what is verified and stored
        problems.append((1, "the file starts with a UTF-8 byte-order mark (U+FEFF): save it without one"))
    bad = 0
    for match in _NOT_PLAIN.finditer(source):
        start = match.start()
        if start == 0 and problems:
            continue
        why = _char_problem(match.group(), source[start + 1:start + 2])
        if why is None:
            continue
        bad += 1
        if bad <= _MAX_TEXT_PROBLEMS:
            problems.append((source.count("\n", 0, start) + 1, why))
    if bad > _MAX_TEXT_PROBLEMS:
        problems.append((1, f"{bad - _MAX_TEXT_PROBLEMS} more such character(s) not listed"))
    if not problems:
        problems += _coding_problems(source)
    return problems


def _coding_problems(source: str) -> list[tuple[int, str]]:
    """A coding declaration (PEP 263) other than UTF-8 makes Python decode the file on import
    differently from the text checked here: under ``# coding: utf-7``, ``+AAo-`` is a
    newline, so code hidden in a comment runs (seen with Python 3.11). Python's own
    detection decides, so no spelling of a declaration escapes it."""
    head = source.split("\n", 2)[:2]
    try:
        encoding, _ = tokenize.detect_encoding(io.BytesIO("\n".join(head).encode("utf-8")).readline)
    except SyntaxError as exc:
        return [(1, f"coding declaration is not allowed ({exc.msg})")]
    if encoding == "utf-8":
        return []
    for number, line in enumerate(head, 1):
        match = re.match(r"^[ \t\f]*#.*?coding[:=][ \t]*([-\w.]+)", line)
        if match:
            return [(number, f"coding declaration '{match.group(1)}' is not allowed "
                             "(candidates are UTF-8; another codec decodes differently on import)")]
    return [(1, f"coding declaration ({encoding}) is not allowed (candidates are UTF-8)")]


_DEF_LINE = re.compile(r"[ \t]*def\s")


def _is_triton_function(node: ast.stmt) -> TypeGuard[ast.FunctionDef]:
    return isinstance(node, ast.FunctionDef) and bool(node.decorator_list)


def reread_problems(source: str, tree: ast.Module) -> list[tuple[int, str]]:
    """Lines inside a Triton function that a reader of its source could take for its ``def``.

    Triton's interpreter re-reads a function from the last line of its source that starts
    with ``def`` (triton 3.7), so such a line inside a string would make it run the text
    after it, which nobody checked. Nested functions are not in the language, so any other
    such line is inside a string or a continuation.
    """
    lines = source.split("\n")
    problems = []
    for node in tree.body:
        if not _is_triton_function(node):
            continue
        first = min([node.lineno, *(d.lineno for d in node.decorator_list)])
        for number in range(first, (node.end_lineno or node.lineno) + 1):
            if number != node.lineno and number <= len(lines) and _DEF_LINE.match(lines[number - 1]):
                problems.append((number, f"a line inside Triton function '{node.name}' starts with 'def' (in a "
                                         "string?): Triton re-reads a kernel's source from such a line; reword it"))
    return problems


def identifier_problems(source: str) -> list[tuple[int, str]]:
    """The identifier rule the syntax tree cannot see (the rules on characters and the
    coding declaration ran before parsing: :func:`text_problems`).

    Non-ASCII identifiers are NFKC-normalized by the parser (``ｅｘｅｃ`` is ``exec``):
    the tree is what runs, but a reviewer reading the file would see something else.
    """
    problems: list[tuple[int, str]] = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(source).readline):
            if token.type == tokenize.NAME and not token.string.isascii():
                problems.append((token.start[0], f"identifier '{token.string}' is not ASCII"))
    except (tokenize.TokenError, SyntaxError):  # ast.parse accepted it; nothing to add
        pass
    return problems
