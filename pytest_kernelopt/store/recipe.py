"""How a stored version was made, as data that ``kernelopt refresh`` replays on a new compiler kernel.

A version is one of:

* ``compiler``: the compiler's own kernel with its launch configuration pinned (the pin pass);
* ``launch``: the compiler's kernel with another launch configuration (block sizes,
  ``num_warps``, ``num_stages``);
* ``rewrite``: source rewrites of the search backend applied in order (``approx-div``,
  ``eviction``), then a launch configuration;
* ``inductor``: the kernel of another Inductor compile of the model (``max-autotune``,
  ``coordinate-descent``, ``looped-reductions``), then rewrites and a launch configuration;
* ``edit``: anything else (a hand or LLM edit): the unified diff against the compiler
  kernel it started from.

The recipe is *derived* from the bytes, never taken on trust: :func:`derive_recipe`
keeps a structured recipe only when replaying it on the compiler kernel gives exactly
the stored bytes, and records a diff otherwise. A manifest is data from a repository or
an artifact, so a recipe read back is trusted only while it is *bound* to its version:
:func:`binding_error` replays it on the compiler kernel recorded for that version (its
original file; for ``inductor``, the other compile's kernel recorded in the recipe) and
demands exactly the version's bytes. ``kernelopt refresh`` replays only bound recipes
(:func:`replay_bound`) and the store's check (the gate) fails a folder holding an
unbound one. Importing this module imports neither torch nor triton (the store reads it).
"""

from __future__ import annotations

import ast
import difflib
import re
from dataclasses import dataclass
from itertools import permutations
from typing import Any, Callable, Iterable, Literal

from pydantic import Field

from ..candidate.launch_space import Limits, describe, read_point, with_point
from ..candidate.rewrites import REWRITES
from ..capture.variants import VARIANTS
from ..errors import StoreError
from ..records import KernelInfo, Record

RecipeKind = Literal["compiler", "launch", "rewrite", "inductor", "edit"]


class RewriteStep(Record):
    """One source rewrite of the search backend (``candidate/rewrites.py`` REWRITES), with its parameters."""

    rule: str
    params: dict[str, Any] = Field(default_factory=dict)


class InductorRecipe(Record):
    """The Inductor compile the version's kernel came from (``agents/harvest.py`` VARIANTS)."""

    variant: str
    mode: str | None = None
    options: dict[str, Any] = Field(default_factory=dict)
    # The other compile's kernel (candidate format) the version was made from: what the recipe's
    # rewrites and launch are replayed on to check the binding. None before 2026-12-04: such a
    # recipe cannot be bound, and refresh does not replay it.
    base_source: str | None = None


class Recipe(Record):
    """How a version was made from the compiler kernel ``base_fingerprint``; see the module's docstring."""

    kind: RecipeKind
    # The launch configuration the version runs (every tunable literal of its ``run``) and the
    # compiler's at the time; empty when the file spells none out.
    launch: dict[str, int] = Field(default_factory=dict)
    compiler_launch: dict[str, int] = Field(default_factory=dict)
    rewrites: list[RewriteStep] = Field(default_factory=list)
    inductor: InductorRecipe | None = None
    # kind "edit": unified diff from the compiler kernel (candidate format) to the version. Since
    # 2026-12-02 the diff leaves out both files' leading docstring (``diff_skips_docstring``): the
    # dump's docstring names the compiler kernel's fingerprint, so a diff that included it (an
    # edit near the top, or a harvested kernel accepted by hand) never applied after an upgrade.
    diff: str | None = None
    diff_skips_docstring: bool = False
    base_fingerprint: str | None = None

    def describe(self) -> str:
        """A few words, e.g. ``rewrite approx-div, launch XBLOCK=2,num_warps=2``."""
        if self.kind == "edit":
            changed = sum(1 for line in (self.diff or "").splitlines()
                          if line[:1] in "+-" and not line.startswith(("+++", "---")))
            return f"hand/LLM edit ({changed} changed line(s))"
        parts = []
        if self.inductor is not None:
            parts.append(f"inductor {self.inductor.variant}")
        if self.rewrites:
            parts.append("rewrite " + " then ".join(s.rule for s in self.rewrites))
        if self.launch:
            pinned = "compiler's launch pinned" if self.kind == "compiler" else "launch"
            parts.append(f"{pinned} {','.join(f'{k}={v}' for k, v in sorted(self.launch.items()))}")
        return ", ".join(parts) or "the compiler's kernel"


def _rewrites() -> dict[str, Callable[[str], str]]:
    return REWRITES


def _chains(names: list[str]) -> list[tuple[str, ...]]:
    """Every ordered selection of distinct rules, shortest first."""
    return [c for n in range(len(names) + 1) for c in permutations(names, n)]


def _apply_rules(text: str, chain: Iterable[str]) -> str | None:
    """``text`` with each rule applied in order; None when a rule changes nothing (it was not used)."""
    rules = _rewrites()
    for name in chain:
        changed = rules[name](text)
        if changed == text:
            return None
        text = changed
    return text


def derive_recipe(original: str, source: str, *, fingerprint: str | None = None,
                  alternatives: Iterable[tuple[str, str]] = ()) -> Recipe:
    """The recipe that turns ``original`` (the compiler kernel, candidate format) into ``source``.

    ``alternatives``: (variant, kernel source) of other Inductor compiles of the same kernel
    (the tuner's harvest) that ``source`` may have started from. A structured recipe is
    returned only when replaying it reproduces ``source`` byte for byte; otherwise an edit.
    """
    point, compiler_point = read_point(source), read_point(original)
    names = sorted(_rewrites())
    for variant, base in [(None, original), *alternatives]:
        for chain in _chains(names):
            text = _apply_rules(base, chain)
            if text is None or set(read_point(text)) != set(point) or with_point(text, point) != source:
                continue
            inductor = None
            if variant is not None:
                known = VARIANTS.get(variant)
                inductor = InductorRecipe(variant=variant, mode=known.mode if known else None,
                                          options=dict(known.patches) if known else {}, base_source=base)
            kind: RecipeKind = ("inductor" if inductor else "rewrite" if chain else
                                "launch" if point != compiler_point else "compiler")
            return Recipe(kind=kind, launch=point, compiler_launch=compiler_point, inductor=inductor,
                          rewrites=[RewriteStep(rule=r) for r in chain], base_fingerprint=fingerprint)
    return Recipe(kind="edit", launch=point, compiler_launch=compiler_point, base_fingerprint=fingerprint,
                  diff=unified_diff(split_docstring(original)[1], split_docstring(source)[1]),
                  diff_skips_docstring=True)


def split_docstring(text: str) -> tuple[str, str]:
    """``text`` as (its leading module docstring with the line end after it, the rest); ("", text) without one."""
    try:
        body = ast.parse(text).body
    except SyntaxError:
        return "", text
    first = body[0] if body else None
    if not (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
            and isinstance(first.value.value, str)) or first.end_lineno is None:
        return "", text
    lines = text.splitlines(keepends=True)
    return "".join(lines[:first.end_lineno]), "".join(lines[first.end_lineno:])


def unified_diff(before: str, after: str) -> str:
    return "".join(difflib.unified_diff(before.splitlines(keepends=True), after.splitlines(keepends=True),
                                        "original.py", "version.py", n=3))


_HUNK = re.compile(r"^@@ -(\d+)(?:,(\d+))? \+(\d+)(?:,(\d+))? @@")


def apply_patch(text: str, diff: str) -> tuple[str | None, str]:
    """``diff`` (unified, from :func:`unified_diff`) applied to ``text``: (patched text, "") or (None, why).

    A hunk applies where its context and removed lines appear exactly (whitespace included),
    at the recorded line or anywhere after the previous hunk, the nearest such place first, as
    ``patch`` does without fuzz. A hunk that matches nowhere makes the whole patch fail.
    """
    hunks: list[tuple[int, list[str], list[str]]] = []
    current: tuple[int, list[str], list[str]] | None = None
    for line in diff.splitlines(keepends=True):
        if line.startswith(("---", "+++")) and current is None:
            continue
        m = _HUNK.match(line)
        if m:
            current = (int(m.group(1)), [], [])
            hunks.append(current)
            continue
        if current is None or not line:
            continue
        tag, body = line[0], line[1:]
        if tag == "\\":  # "\ No newline at end of file": the previous line had none
            for block in (current[1], current[2]):
                if block and block[-1].endswith("\n"):
                    block[-1] = block[-1][:-1]
            continue
        if tag in " -":
            current[1].append(body)
        if tag in " +":
            current[2].append(body)
    if not hunks:
        return text, ""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    pos = 0  # lines[:pos] are done
    offset = 0
    for number, (start, old, new) in enumerate(hunks, 1):
        want = max(start - 1 + offset, pos) if old else max(start + offset, pos)
        places = [i for i in range(pos, len(lines) - len(old) + 1) if lines[i:i + len(old)] == old]
        if not places:
            first = next((s.strip() for s in old if s.strip()), "")
            return None, (f"hunk {number} of {len(hunks)} (line {start} of the old compiler kernel, at "
                          f"{first[:60]!r}) does not apply: its lines are not in the new compiler kernel")
        at = min(places, key=lambda i: abs(i - want))
        out += lines[pos:at] + new
        offset += at - (start - 1 if old else start)
        pos = at + len(old)
    return "".join(out + lines[pos:]), ""


@dataclass
class Replay:
    """What replaying a recipe gave: the candidate text, or None and why it does not apply."""

    source: str | None
    how: str
    # The recipe was not bound to the version it was recorded for (:func:`replay_bound`): not replayed.
    refused: bool = False


def replay(recipe: Recipe, original: str, info: KernelInfo,
           alternative: Callable[[str], str | None] | None = None) -> Replay:
    """``recipe`` replayed on the compiler kernel ``info`` (``original``: its candidate-format dump).

    ``alternative(variant)``: the new compile's kernel of that Inductor variant matching
    ``info`` (None: none). The result still has to go through the cascade.
    """

    if recipe.kind == "edit":
        # The new compiler kernel's docstring (its fingerprint) heads the result; the code is patched.
        head, code = split_docstring(original) if recipe.diff_skips_docstring else ("", original)
        patched, why = apply_patch(code, recipe.diff or "")
        if patched is None:
            return Replay(None, f"the hand/LLM edit does not apply to the new compiler kernel ({why})")
        return Replay(head + patched, "hand/LLM edit re-applied as a patch")
    text, steps = original, []
    if recipe.inductor is not None:
        found = alternative(recipe.inductor.variant) if alternative is not None else None
        if found is None:
            return Replay(None, f"Inductor's {recipe.inductor.variant} compile has no kernel matching the new one")
        text = found
        steps.append(f"inductor {recipe.inductor.variant}")
    rules = _rewrites()
    for step in recipe.rewrites:
        rule = rules.get(step.rule)
        if rule is None:
            return Replay(None, f"rewrite {step.rule} is not a rule of this version of the search backend "
                                f"(known: {', '.join(sorted(rules))})")
        changed = rule(text)
        if changed == text:
            # Nothing left for the rule to rewrite (seen on the H200, 2026-12-02: cross_entropy with one more
            # row had no division for approx-div); the rest of the recipe still applies, and the cascade
            # judges the result against the new compiler kernel like any other.
            steps.append(f"rewrite {step.rule} skipped (nothing to rewrite in the new compiler kernel)")
            continue
        text = changed
        steps.append(f"rewrite {step.rule}")
    if recipe.launch:
        now = read_point(text)
        missing = sorted(set(recipe.launch) - set(now))
        if missing:
            return Replay(None, f"the new compiler kernel has no launch parameter {', '.join(missing)} "
                                f"(it has {describe(now) or 'none'})")
        target = dict(now, **recipe.launch)
        if not Limits(info, text).valid(target):
            return Replay(None, f"launch {describe(recipe.launch)} is not valid for the new compiler kernel "
                                f"(block beyond its extent, an unmasked block that does not divide it, or too "
                                f"large a tile)")
        text = with_point(text, target)
        steps.append(f"launch {describe(recipe.launch)}")
    if text == original and recipe.kind != "compiler":
        return Replay(None, f"nothing of the recipe changes the new compiler kernel ({', '.join(steps)})")
    return Replay(text, ", ".join(steps) or "the compiler's kernel")


def binding_error(recipe: Recipe, original: str, source: str) -> str | None:
    """Why ``recipe`` is not bound to ``source`` (a version's bytes): replaying it on ``original``
    (the compiler kernel recorded for that version, candidate format) does not give exactly
    ``source``; None when it does.

    Every field :func:`replay` reads is checked: the edit's diff, the rules and their order, the
    launch values. An ``inductor`` recipe is replayed on its recorded ``base_source`` (the other
    compile's kernel cannot be compiled again under the old compiler); its variant name only
    chooses which of the new compiler's own kernels a refresh starts from. The module docstring, which
    no replay carries over, is not compared. Text only, no compile.
    """

    if recipe.kind == "edit":
        if recipe.rewrites or recipe.inductor is not None:
            return "an edit recipe with rewrites or an Inductor compile (an edit replays its diff only)"
        skip = recipe.diff_skips_docstring
        code = split_docstring(original)[1] if skip else original
        want = split_docstring(source)[1] if skip else source
        patched, why = apply_patch(code, recipe.diff or "")
        if patched is None:
            return f"its diff does not apply to the recorded compiler kernel ({why})"
        if patched != want:
            return (f"its diff applied to the recorded compiler kernel gives other code than the version "
                    f"({_first_difference(patched, want)})")
        return None
    if recipe.diff is not None:
        return f"a {recipe.kind} recipe that carries a diff"
    if recipe.inductor is not None:
        if recipe.kind != "inductor":
            return f"a {recipe.kind} recipe that names an Inductor compile"
        if recipe.inductor.base_source is None:
            return (f"it names Inductor's {recipe.inductor.variant} compile but records no kernel of it to replay on "
                    f"(recorded before recipes were bound)")
        text = recipe.inductor.base_source
    elif recipe.kind == "inductor":
        return "an inductor recipe that names no Inductor compile"
    else:
        text = original
    rules = _rewrites()
    for step in recipe.rewrites:
        if step.rule not in rules:
            return f"rewrite {step.rule!r} is not a rule of the search backend"
        if step.params:
            return f"rewrite {step.rule} with parameters {sorted(step.params)} (the rules take none)"
        changed = rules[step.rule](text)
        if changed == text:
            return f"rewrite {step.rule} changes nothing where the recipe applies it"
        text = changed
    if recipe.rewrites and recipe.kind not in ("rewrite", "inductor"):
        return f"a {recipe.kind} recipe with rewrites"
    now = read_point(text)
    missing = sorted(set(recipe.launch) - set(now))
    if missing:
        return f"launch parameter(s) {', '.join(missing)} that the recorded compiler kernel does not have"
    text = with_point(text, dict(now, **recipe.launch))
    # The module docstring is left out, as in an edit's diff: a replay never carries it (the new compiler
    # kernel's heads the result), and the dump's wording may differ between the original and the version.
    got, want = split_docstring(text)[1], split_docstring(source)[1]
    if got != want:
        return (f"replayed on the recorded compiler kernel it gives other code than the version "
                f"({_first_difference(got, want)})")
    return None


def _first_difference(got: str, want: str) -> str:
    """Where two texts first differ, in a few words (line numbers only: both texts are the caller's)."""
    a, b = got.splitlines(), want.splitlines()
    for number, (x, y) in enumerate(zip(a, b), 1):
        if x != y:
            return f"first at line {number}"
    return f"{len(a)} line(s) against {len(b)}" if len(a) != len(b) else "line ends differ"


def replay_bound(recipe: Recipe, made: tuple[str, str], original: str, info: KernelInfo,
                 alternative: Callable[[str], str | None] | None = None) -> Replay:
    """:func:`replay`, only for a recipe bound to the version it was recorded for.

    ``made``: (the compiler kernel recorded for that version, the version's bytes as the store
    checked them against their sha256). An unbound recipe replays nothing: ``Replay.refused`` says why.
    """
    why = binding_error(recipe, *made)
    if why is not None:
        return Replay(None, why, refused=True)
    return replay(recipe, original, info, alternative)


def check_recipe(folder: Any, manifest: Any, record: Any, source: str) -> None:
    """Raise StoreError naming the files when ``record`` (a VersionRecord of ``manifest`` in ``folder``)
    carries a recipe that is not bound to ``source``, its bytes; versions without a recipe pass."""

    if record.recipe is None:
        return
    name = record.original or manifest.original
    try:
        original = (folder / name).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise StoreError(f"{folder / name}: cannot read the compiler kernel v{record.version}'s recipe is "
                         f"checked against ({exc})") from None
    why = binding_error(record.recipe, original, source)
    if why is not None:
        raise StoreError(unbound_message(folder / "manifest.json", manifest.model, manifest.kernel, record.version,
                                         folder / record.file, why))


def unbound_message(manifest_path: Any, model: str, kernel: str, version: int, file: Any, why: str) -> str:
    """The one line for a recipe that is not bound to its version, with the ways out."""
    return (f"{manifest_path}: the recipe recorded for v{version} of {model}/{kernel} does not reproduce {file}: "
            f"{why}; the recipe is not trusted and nothing is replayed from it (delete that version's \"recipe\" "
            f"so that `kernelopt refresh` derives one from the files, or re-tune the kernel: `kernelopt tune`, "
            f"or port it by hand and `kernelopt accept` it)")
