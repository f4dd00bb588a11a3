"""What a Claude reply holds: its candidate files, each checked for the kernel at hand.

Every fenced ```` ```python ```` (or untagged) block of a reply is a candidate,
validated structurally (:class:`ReplyCandidate`: it parses and defines ``run`` with the
kernel's runtime arguments, in order); the prose before a block is its rationale. The
candidate language itself is the Reviewer's and the static stage's business. Pure text
processing: no SDK, no network (``claude.py`` sends the requests).
"""

from __future__ import annotations

import ast
import re

from pydantic import BaseModel, ConfigDict, Field, ValidationError, ValidationInfo, field_validator

from ...candidate import ENTRY_POINT

MAX_SOURCE_CHARS = 200_000  # a candidate file larger than this is not a kernel
MAX_RATIONALE_CHARS = 1_000


class ReplyCandidate(BaseModel):
    """One fenced code block of a reply that is a candidate for the kernel at hand.

    Validated with ``context={"entry_args": [...]}``: it parses as Python and its
    module-level ``run`` takes the kernel's runtime arguments, in order (then ``stream``).
    """

    model_config = ConfigDict(extra="forbid")

    source: str
    rationale: str = ""

    @field_validator("source")
    @classmethod
    def _is_a_candidate_for_this_kernel(cls, source: str, info: ValidationInfo) -> str:
        if len(source) > MAX_SOURCE_CHARS:
            raise ValueError(f"the file has {len(source)} characters (at most {MAX_SOURCE_CHARS})")
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise ValueError(f"does not parse: line {exc.lineno or 1}: {exc.msg}") from None
        except (ValueError, RecursionError, MemoryError) as exc:
            raise ValueError(f"does not parse: {type(exc).__name__}") from None
        entry = [n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == ENTRY_POINT]
        if not entry:
            raise ValueError(f"no module-level `def {ENTRY_POINT}(...)` (the entry point)")
        expected = (info.context or {}).get("entry_args")
        args = entry[-1].args
        names = [a.arg for a in [*args.posonlyargs, *args.args]]
        if names and names[-1] == "stream" and args.defaults:
            names = names[:-1]  # a last positional ``stream=None`` is accepted, as by the static stage
        if expected is not None and (names != list(expected) or args.vararg or args.kwarg):
            got = ", ".join(names + ([f"*{args.vararg.arg}"] if args.vararg else [])
                            + ([f"**{args.kwarg.arg}"] if args.kwarg else []))
            raise ValueError(f"`{ENTRY_POINT}({got})` does not take the kernel's arguments "
                             f"({', '.join(expected)}), in that order")
        return source if source.endswith("\n") else source + "\n"


class ParsedReply(BaseModel):
    """A reply as this backend read it: candidates, and why other code blocks were refused."""

    model_config = ConfigDict(extra="forbid")

    candidates: list[ReplyCandidate] = Field(default_factory=list)
    rejected: list[str] = Field(default_factory=list)  # "block N: why"
    code_blocks: int = 0
    truncated: bool = False  # the reply ended inside a code block


_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)^[ \t]*```[ \t]*$", re.M | re.S)
_OPEN_FENCE = re.compile(r"^[ \t]*```[ \t]*(python3?|py)?[ \t]*$", re.M)
_PYTHON_TAGS = {"", "python", "python3", "py"}


def _clean_rationale(text: str) -> str:
    """The prose before a code block, from its last "Rationale:" (else its last paragraph)."""
    marks = list(re.finditer(r"\**rationale\**\s*:", text, re.I))
    if marks:
        text = text[marks[-1].start():]
    else:
        paragraphs = [p for p in re.split(r"\n\s*\n", text) if p.strip()]
        text = paragraphs[-1] if paragraphs else ""
    lines = [ln.strip() for ln in text.strip().splitlines()]
    lines = [ln for ln in lines if ln and not re.fullmatch(r"#+\s*candidate\b.*", ln, re.I)]
    text = re.sub(r"^\**rationale\**\s*:\s*\**\s*", "", " ".join(lines), flags=re.I)
    text = re.sub(r"\s+", " ", text).strip()
    return text if len(text) <= MAX_RATIONALE_CHARS else text[: MAX_RATIONALE_CHARS - 3] + "..."


def parse_reply(text: str, entry_args: list[str]) -> ParsedReply:
    """Every ```` ```python ```` (or untagged) block of ``text`` checked as a candidate for a
    kernel whose runtime arguments are ``entry_args``; the prose before a block is its rationale."""
    reply = ParsedReply()
    seen: set[str] = set()
    end = 0
    for match in _FENCE.finditer(text):
        tag, body = match.group(1).lower(), match.group(2)
        rationale = _clean_rationale(text[end : match.start()])
        end = match.end()
        if tag not in _PYTHON_TAGS:
            continue
        reply.code_blocks += 1
        try:
            candidate = ReplyCandidate.model_validate({"source": body, "rationale": rationale},
                                                      context={"entry_args": entry_args})
        except ValidationError as exc:
            reply.rejected.append(f"block {reply.code_blocks}: {exc.errors()[0]['msg'].removeprefix('Value error, ')}")
            continue
        if candidate.source in seen:
            reply.rejected.append(f"block {reply.code_blocks}: the same file as an earlier block")
            continue
        seen.add(candidate.source)
        reply.candidates.append(candidate)
    reply.truncated = _OPEN_FENCE.search(text, end) is not None
    return reply


__all__ = ["MAX_SOURCE_CHARS", "ParsedReply", "ReplyCandidate", "parse_reply"]
