"""Text that came from a candidate or a worker, shown as data wherever it is shown.

Verdict reasons, stage details, exception text, candidate labels and file names are
written by whoever wrote the candidate. Every renderer passes them through here, and
nowhere else decides how:

* :func:`plain` (terminal, junit XML, HTML before autoescaping): control and format
  characters (ANSI escape sequences, carriage returns, bidi overrides) are shown as
  escapes (``\\x1b``), never sent; the text is cut at a length limit.
* :func:`md_inline` / :func:`md_cell` (Markdown: ``report.md``, pull-request bodies,
  the gate report): a code span longer than any run of backticks inside, on one line,
  so headings, links, images, HTML and emphasis stay text; ``md_cell`` also escapes
  ``|`` for a table cell.
* :func:`md_block`: a fenced code block whose fence is longer than any backtick run
  inside, so the text cannot close it.

The Jinja filters of the report templates (``text``, ``text_cell``, ``block``) are these
functions; :data:`MD_FILTERS` and :data:`HTML_FILTERS` register them.

Markdown has no autoescaping of its own, and a filter that a template (or a user's copy of
one) forgets is markup in a pull request. So the Markdown renderers escape by default:
:func:`md_finalize` is Jinja's ``finalize``, applied to every ``{{ ... }}``. Text these
functions (or the number filters) produced is :class:`MdSafe` and printed as it is; numbers
are printed as they are; any other text is printed as it is only when it is one line of
letters, digits and a few punctuation marks that no Markdown link, image, HTML, autolink,
mention or issue reference is made of, and otherwise as a code span (:func:`md_inline`).
"""

from __future__ import annotations

import re
from typing import Any

# A reason or a one-line message; a failure's whole text (a block).
INLINE_LIMIT = 500
BLOCK_LIMIT = 4000


def plain(value: Any, limit: int = BLOCK_LIMIT, *, lines: bool = True) -> str:
    """``value`` as inert text: non-printable characters escaped, at most ``limit`` characters.

    ``lines``: keep newlines and tabs (a block); otherwise they become spaces (one line).
    """
    text = "" if value is None else str(value)
    keep = "\n\t" if lines else ""
    if not lines:
        text = re.sub(r"[\r\n\t]+", " ", text)
    if not text.isprintable():
        text = "".join(ch if ch.isprintable() or ch in keep else ch.encode("unicode_escape").decode("ascii")
                       for ch in text)
    if len(text) > limit:
        text = f"{text[:limit]}... ({len(text) - limit} more characters)"
    return text


class MdSafe(str):
    """Markdown this package wrote (a filter's output): :func:`md_finalize` prints it as it is."""


# One line of words and figures ("1.184x", "2026-12-01T12:00:00+00:00", "tests/problems/x.py"): nothing
# Markdown or HTML reads. ``_`` only inside a word (``_a_`` is emphasis); "www." and "://" are autolinks.
# Brackets, parentheses, quotes, ``!`` and ``?`` are text unless a bracket closes into a link: ``](``, ``][``
# (references) or ``]:`` (a definition); ``#`` (issue links), ``@`` (mentions), ``&`` (entities), ``<``, ``*``,
# ``~``, ``\`` and backticks are never.
_INERT = re.compile(r"[A-Za-z0-9 .,:;%=+/()\[\]'\"!?-]*(?:[A-Za-z0-9]_+[A-Za-z0-9][A-Za-z0-9 .,:;%=+/()\[\]'\"!?-]*)*")
_AUTOLINK = re.compile(r"(?i)www\.|://|\]\s*[(\[:]")


def md_finalize(value: Any) -> Any:
    """Every ``{{ ... }}`` of a Markdown template: see the module's docstring."""
    if isinstance(value, MdSafe) or value is None or isinstance(value, (bool, int, float)):
        return value
    text = str(value)
    if len(text) <= 1000 and _INERT.fullmatch(text) and not _AUTOLINK.search(text):
        return text
    return md_inline(text)


def _ticks(text: str, least: int) -> str:
    longest = max((len(m) for m in re.findall(r"`+", text)), default=0)
    return "`" * max(least, longest + 1)


def md_inline(value: Any, limit: int = INLINE_LIMIT) -> str:
    """A Markdown code span holding ``value`` on one line (empty text: nothing)."""
    text = plain(value, limit, lines=False).strip()
    if not text:
        return ""
    ticks = _ticks(text, 1)
    # One space inside each end: stripped by the renderer, and a backtick at either end
    # of the text can no longer join the fence.
    return MdSafe(f"{ticks} {text} {ticks}")


def md_cell(value: Any, limit: int = INLINE_LIMIT) -> str:
    """:func:`md_inline` for a table cell: ``|`` escaped (GitHub unescapes it inside code spans too)."""
    return MdSafe(md_inline(value, limit).replace("|", "\\|"))


def md_block(value: Any, limit: int = BLOCK_LIMIT, info: str = "") -> str:
    """A fenced code block holding ``value`` (no trailing newline)."""
    text = plain(value, limit).rstrip()
    fence = _ticks(text, 3)
    return MdSafe(f"{fence}{info}\n{text}\n{fence}")


def html_inline(value: Any, limit: int = INLINE_LIMIT) -> str:
    """For autoescaped HTML: :func:`plain`, one line (the template escapes it)."""
    return plain(value, limit, lines=False)


def html_block(value: Any, limit: int = BLOCK_LIMIT) -> Any:
    """A ``<pre>`` holding ``value``, escaped here."""
    from markupsafe import Markup, escape

    return Markup("<pre>") + escape(plain(value, limit).rstrip()) + Markup("</pre>")


MD_FILTERS = {"text": md_inline, "text_cell": md_cell, "block": md_block}
HTML_FILTERS = {"text": html_inline, "text_cell": html_inline, "block": html_block}
