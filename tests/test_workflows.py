"""The GitHub workflows parse and call only commands and options that exist.

Each ``run:`` script is split into commands (continuation lines joined; ``&&``, ``||``,
``;``, ``|`` and newlines separate commands; ``${{ ... }}`` expressions stand in as one
word). ``kernelopt SUB --opt`` is checked against the CLI's own parser, ``pytest --opt``
(also ``python -m pytest``) against ``pytest --help`` with the plugin installed, and
``make TARGET`` against the Makefile. Shell keywords and other programs are not checked.
"""

from __future__ import annotations

import argparse
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest
import yaml

from pytest_kernelopt.cli import build_parser

ROOT = Path(__file__).resolve().parent.parent
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


def load(path: Path) -> dict:
    data = yaml.safe_load(path.read_text())
    assert isinstance(data, dict) and "jobs" in data, f"{path.name}: not a workflow"
    data["on"] = data.pop(True, data.get("on"))  # YAML 1.1 reads the key `on` as true
    return data


def runs(workflow: dict) -> list[str]:
    return [step["run"] for job in workflow["jobs"].values() for step in job.get("steps", []) if "run" in step]


def commands(script: str) -> list[list[str]]:
    script = re.sub(r"\$\{\{.*?\}\}", "EXPR", script, flags=re.S).replace("\\\n", " ")
    found = []
    for part in re.split(r"&&|\|\||;|\||\n", script):
        words = shlex.split(part, comments=True)
        while words and re.match(r"^[A-Za-z_][A-Za-z0-9_]*=", words[0]):  # VAR=value prefixes
            words.pop(0)
        if words:
            found.append(words)
    return found


# Every option string pytest accepts with the installed plugins (``--help`` shows only one spelling of
# each: ``--junit-xml`` but not ``--junitxml``). pytest's own argparse parser is ``Parser.optparser``
# in pytest 9.2, ``Parser._getparser()`` in pytest 8.
_DUMP_OPTIONS = """
import pytest
class Dump:
    @pytest.hookimpl(tryfirst=True)
    def pytest_cmdline_main(self, config):
        parser = getattr(config._parser, "optparser", None) or config._parser._getparser()
        print("\\n".join(sorted(parser._option_string_actions)))
        return 0
raise SystemExit(pytest.main(["-p", "no:cacheprovider"], plugins=[Dump()]))
"""


@cache
def pytest_options() -> frozenset[str]:
    out = subprocess.run([sys.executable, "-c", _DUMP_OPTIONS], capture_output=True, text=True, cwd=ROOT, check=True)
    options = frozenset(out.stdout.split())
    assert {"--junitxml", "--kernelopt", "-n"} <= options, out.stdout[-2000:]
    return options


def subcommands() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser()
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def long_options(words: list[str]) -> list[str]:
    return [w.split("=", 1)[0] for w in words if w.startswith("--")]


def check(words: list[str]) -> str | None:
    """What the command calls (for the assertions below), or None when it is not ours to check."""
    program = Path(words[0]).name
    if program == "python" or program.startswith("python3"):
        if words[1:3] != ["-m", "pytest"]:
            return None
        program, words = "pytest", ["pytest", *words[3:]]
    if program == "kernelopt":
        subs = subcommands()
        assert words[1] in subs, f"kernelopt has no subcommand {words[1]!r}"
        known = {o for a in subs[words[1]]._actions for o in a.option_strings}
        for option in long_options(words[2:]):
            assert option in known, f"kernelopt {words[1]} has no option {option}"
        return f"kernelopt {words[1]}"
    if program == "pytest":
        for option in long_options(words[1:]):
            assert option in pytest_options(), f"pytest has no option {option}"
        return "pytest"
    if program == "make":
        targets = re.findall(r"^([A-Za-z0-9_.-]+):", (ROOT / "Makefile").read_text(), re.M)
        for target in words[1:]:
            assert target in targets, f"the Makefile has no target {target}"
        return f"make {' '.join(words[1:])}"
    return None


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_run_command_of_ours_exists(path):
    for script in runs(load(path)):
        for words in commands(script):
            check(words)


def _called(path: Path) -> dict[str, list[list[str]]]:
    called: dict[str, list[list[str]]] = {}
    for script in runs(load(path)):
        for words in commands(script):
            what = check(words)
            if what:
                called.setdefault(what, []).append(words)
    return called


def test_gate_is_a_pull_request_check_on_the_h200_runner():
    workflow = load(ROOT / ".github/workflows/gate.yml")
    assert "pull_request" in workflow["on"]
    [job] = workflow["jobs"].values()
    assert set(job["runs-on"]) == {"self-hosted", "h200"}
    [pytest_call] = _called(ROOT / ".github/workflows/gate.yml")["pytest"]
    assert "--kernelopt" in pytest_call
    base = pytest_call[pytest_call.index("--kernelopt-base-ref") + 1]
    assert base == "origin/EXPR" and "github.base_ref" in (ROOT / ".github/workflows/gate.yml").read_text()


def test_tune_runs_on_a_schedule_and_by_hand_and_opens_pull_requests():
    path = ROOT / ".github/workflows/tune.yml"
    workflow = load(path)
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    assert workflow["permissions"] == {"contents": "write", "pull-requests": "write"}
    [job] = workflow["jobs"].values()
    assert set(job["runs-on"]) == {"self-hosted", "h200"}
    assert job["env"]["ANTHROPIC_API_KEY"] == "${{ secrets.ANTHROPIC_API_KEY }}"  # optional: empty when unset
    [tune] = _called(path)["kernelopt tune"]
    assert "--open-pr" in tune and "--agent" in tune


def test_ci_runs_make_test_on_a_cpu_runner():
    workflow = load(ROOT / ".github/workflows/ci.yml")
    [job] = workflow["jobs"].values()
    assert job["runs-on"] == "ubuntu-latest"
    assert "make test" in _called(ROOT / ".github/workflows/ci.yml")


def test_the_checker_catches_what_does_not_exist():
    with pytest.raises(AssertionError, match="kernelopt has no subcommand 'optimize'"):
        check(["kernelopt", "optimize", "x.py"])
    with pytest.raises(AssertionError, match="kernelopt tune has no option --open-prs"):
        check(["kernelopt", "tune", "x.py", "--open-prs"])
    with pytest.raises(AssertionError, match="pytest has no option --kernelopt-base"):
        check(["python", "-m", "pytest", "--kernelopt", "--kernelopt-base", "main"])
    with pytest.raises(AssertionError, match="the Makefile has no target tests"):
        check(["make", "tests"])
    assert commands("a=1 kernelopt report ${{ x }} \\\n  --format html && echo done # note") == \
        [["kernelopt", "report", "EXPR", "--format", "html"], ["echo", "done"]]
