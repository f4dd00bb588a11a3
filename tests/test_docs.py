"""The README, CONTRIBUTING.md and docs/*.md say only what is true of this repository.

Every fenced block carries a language. ``python`` blocks compile, ``toml`` blocks are settings the
loader accepts, ``sh`` blocks name only ``kernelopt`` subcommands and flags, ``pytest --kernelopt``
options, ``make`` targets and repository paths that exist; ``text`` blocks are not checked. A block
after ``<!-- snippet: run -->`` is also run from the repository's top folder (keep those cheap, CPU);
``<!-- snippet: gpu -->`` marks commands that need a GPU (names checked only). Inline code that
starts with ``kernelopt`` or ``--kernelopt`` is checked like a command, and relative links must
reach a file and, with ``#anchor``, one of its headings.
"""
from __future__ import annotations

import argparse
import glob
import os
import re
import shlex
import subprocess
import sys
import tomllib
from dataclasses import dataclass
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PAGES = [REPO / "README.md", REPO / "CONTRIBUTING.md", *sorted((REPO / "docs").glob("*.md"))]
LANGUAGES = {"python", "toml", "sh", "text"}
# Paths under these folders name files of this repository; any other path in a snippet is the
# user's own (models/my_model.py) or a placeholder (OUT, .kernelopt/runs/<run_id>).
REPO_FOLDERS = ("tests/", "bench/", "docs/", "templates/", "pytest_kernelopt/", ".github/")


@dataclass
class Block:
    page: Path
    line: int  # of the opening fence, counted from 1
    lang: str
    text: str
    marker: str | None  # from <!-- snippet: X --> on the line before the fence

    def __str__(self) -> str:
        return f"{self.page.relative_to(REPO)}:{self.line}"


def blocks(page: Path) -> list[Block]:
    lines = page.read_text().split("\n")
    found, i = [], 0
    while i < len(lines):
        m = re.match(r"( *)```(\S*)\s*$", lines[i])
        if not m:
            i += 1
            continue
        indent, start = len(m.group(1)), i
        end = next(j for j in range(i + 1, len(lines)) if lines[j].strip() == "```")
        body = "\n".join(line[indent:] for line in lines[i + 1:end]) + "\n"
        before = lines[start - 1].strip() if start else ""
        marker = re.fullmatch(r"<!-- snippet: (\w+) -->", before)
        found.append(Block(page, start + 1, m.group(2), body, marker.group(1) if marker else None))
        i = end + 1
    return found


def prose(page: Path) -> str:
    """The page without its fenced blocks."""
    return re.sub(r"(?ms)^ *```.*?^ *```\s*$", "", page.read_text())


ALL_BLOCKS = [b for page in PAGES for b in blocks(page)]


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    from pytest_kernelopt.cli import build_parser

    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


SUBCOMMANDS = _subparsers()


def _plugin_options() -> set[str]:
    from pytest_kernelopt import plugin

    class Recorder:  # stands in for pytest's parser and its option groups
        names: set[str] = set()

        def getgroup(self, *args, **kwargs):
            return self

        def addoption(self, *names, **kwargs):
            self.names.update(names)

        def __getattr__(self, name):
            return lambda *args, **kwargs: None

    recorder = Recorder()
    plugin.pytest_addoption(recorder)
    return recorder.names


PLUGIN_OPTIONS = _plugin_options()
MAKE_TARGETS = set(re.findall(r"(?m)^([A-Za-z][\w-]*):", (REPO / "Makefile").read_text()))


def _flags(tokens: list[str]) -> list[str]:
    """The --options among tokens, synopsis brackets and values stripped (`[--base B]`, `--x=1`)."""
    return [t.strip("[]").split("=")[0] for t in tokens if t.strip("[]").startswith("--")]


def command_problems(tokens: list[str]) -> list[str]:
    """What is wrong with one command: a subcommand, flag, option or target that does not exist."""
    while tokens and re.fullmatch(r"[A-Z_][A-Z0-9_]*=\S*", tokens[0]):  # KERNELOPT_SIZE=large ...
        tokens = tokens[1:]
    if tokens[:3] == ["python", "-m", "pytest"]:
        tokens = ["pytest", *tokens[3:]]
    if not tokens:
        return []
    head, rest = tokens[0], tokens[1:]
    if head == "kernelopt":
        if not rest or rest[0] in ("--help", "-h", "--version"):
            return []
        sub = SUBCOMMANDS.get(rest[0])
        if sub is None:
            return [f"no subcommand `kernelopt {rest[0]}`"] if not rest[0].isupper() else []
        known = set(sub._option_string_actions)
        return [f"`kernelopt {rest[0]}` has no {flag}" for flag in _flags(rest[1:]) if flag not in known]
    if head == "pytest":
        return [f"pytest has no {flag}" for flag in _flags(rest)
                if flag.startswith("--kernelopt") and flag not in PLUGIN_OPTIONS]
    if head == "make":
        return [f"no make target {t}" for t in rest if not t.startswith("-") and t not in MAKE_TARGETS]
    return []


def _braces(word: str) -> list[str]:
    m = re.search(r"\{([^{}]*,[^{}]*)\}", word)
    if not m:
        return [word]
    return [w for part in m.group(1).split(",") for w in _braces(word[:m.start()] + part + word[m.end():])]


def path_problems(tokens: list[str]) -> list[str]:
    missing = []
    for token in tokens:
        token = token.strip("\"'").rstrip(",;)")
        if not token.startswith(REPO_FOLDERS) or re.search(r"[<>$]|OUT", token):
            continue
        for path in _braces(token):
            if not glob.glob(str(REPO / path)):
                missing.append(f"no such path {path}")
    return missing


def shell_commands(text: str) -> list[list[str]]:
    """Each command of a shell block as its words (continuations joined, comments and $(...) dropped)."""
    text = text.replace("\\\n", " ")
    commands = []
    for line in text.splitlines():
        try:
            words = shlex.split(line, comments=True)
        except ValueError:
            words = line.split()
        current: list[str] = []
        for word in words + [";"]:
            if word in (";", "&&", "||", "|", ">>", ">"):
                if current:
                    commands.append(current)
                current = []
            else:
                current.append(word)
    return commands


def test_every_block_says_its_language():
    bare = [f"{b} ```{b.lang}" for b in ALL_BLOCKS if b.lang not in LANGUAGES]
    assert ALL_BLOCKS and not bare, f"fence each block as one of {sorted(LANGUAGES)}: {bare}"


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "python"], ids=str)
def test_python_blocks_compile(block):
    compile(block.text, str(block), "exec")


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "toml"], ids=str)
def test_toml_blocks_are_settings_the_loader_accepts(block, tmp_path):
    data = tomllib.loads(block.text)
    if "tool" in data:
        from pytest_kernelopt.config import load_config

        (tmp_path / "pyproject.toml").write_text(block.text)
        load_config(tmp_path)  # an unknown key or a bad value raises, naming it


@pytest.mark.parametrize("block", [b for b in ALL_BLOCKS if b.lang == "sh"], ids=str)
def test_shell_blocks_name_real_commands_options_and_paths(block):
    problems = []
    for words in shell_commands(block.text):
        problems += command_problems(words) + path_problems(words)
    assert not problems, f"{block}: {problems}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_inline_commands_name_real_subcommands_and_options(page):
    problems = []
    for span in re.findall(r"`([^`\n]+)`", prose(page)):
        if span.startswith(("kernelopt ", "pytest ")):
            problems += command_problems(span.replace("\\|", "|").split())
        problems += [f"pytest has no {o}" for o in re.findall(r"--kernelopt(?:-\w+)*", span) if o not in PLUGIN_OPTIONS]
    assert not problems, problems


PACKAGE = REPO / "pytest_kernelopt"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_inline_paths_name_files_that_exist(page):
    """`tests/test_attacks.py`, `pytest_kernelopt/verify/static/`, `verify/numerics.py`: a module that
    moved leaves no page pointing at its old place."""
    missing = []
    for span in re.findall(r"`([^`\n]+)`", prose(page)):
        for word in span.split():
            word = word.strip("(),;:")
            if re.search(r"[<>$*{}]|OUT|_templates", word) or "/" not in word:
                continue
            if word.startswith(REPO_FOLDERS):
                missing += [] if (REPO / word).exists() else [word]
            elif re.fullmatch(r"(?:[a-z_]+/)+[a-z_]+\.py", word) and (PACKAGE / word.split("/")[0]).is_dir():
                missing += [] if (PACKAGE / word).exists() else [word]
    assert not missing, missing


def test_the_cli_page_names_every_flag_of_every_command():
    page = (REPO / "docs" / "cli.md").read_text()
    rows = {m.group(1): m.group(0) for m in re.finditer(r"(?m)^\| `kernelopt (\w+)[^\n]*", page)}
    missing = []
    for name, sub in SUBCOMMANDS.items():
        row = rows.get(name, "") + (rows.get("verify", "") if "[options of verify]" in rows.get(name, "") else "")
        missing += [f"{name} {flag}" for flag in sub._option_string_actions
                    if flag.startswith("--") and flag != "--help" and flag not in row]
    assert not missing, f"docs/cli.md's table lacks: {missing}"


def test_the_gate_page_names_every_pytest_option():
    page = (REPO / "docs" / "gate.md").read_text()
    assert PLUGIN_OPTIONS and not [o for o in PLUGIN_OPTIONS if f"`{o}" not in page]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(REPO)))
def test_links_reach_files_and_headings(page):
    broken = []
    for target in re.findall(r"\]\(([^)\s]+)\)", re.sub(r"`[^`\n]*`", "", prose(page))):
        if re.match(r"[a-z]+:", target):
            continue  # https:, mailto:
        path, _, anchor = target.partition("#")
        dest = (page.parent / path).resolve() if path else page
        if not dest.exists():
            broken.append(target)
        elif anchor and dest.suffix == ".md":
            slugs = {_slug(h) for h in re.findall(r"(?m)^#+ (.*)$", prose(dest))}
            if anchor not in slugs:
                broken.append(target)
    assert not broken, broken


def test_the_readme_is_a_front_door():
    """Under 15 KB; the rest is in docs/ (issue #25)."""
    readme = (REPO / "README.md").read_text()
    assert len(readme.encode()) < 15_000
    assert "make test" in readme and "docs/README.md" in readme


RUN_BLOCKS = [b for b in ALL_BLOCKS if b.marker == "run"]


@pytest.mark.parametrize("block", RUN_BLOCKS, ids=str)
def test_run_blocks_run_as_written(block):
    assert block.lang == "sh"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    for line in block.text.splitlines():
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        out = subprocess.run(["bash", "-c", line], cwd=REPO, env=env, capture_output=True, text=True, timeout=180)
        assert out.returncode == 0, f"{block}: {line}\n{out.stderr[-2000:]}"


def test_some_block_is_run():
    assert RUN_BLOCKS, "mark a cheap sh block with <!-- snippet: run -->"
