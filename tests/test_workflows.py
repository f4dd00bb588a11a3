"""The GitHub workflows parse and call only commands and options that exist.

Each ``run:`` script is split into commands (continuation lines joined; ``&&``, ``||``,
``;``, ``|`` and newlines separate commands; ``${{ ... }}`` expressions stand in as one
word). ``kernelopt SUB --opt`` is checked against the CLI's own parser, ``pytest --opt``
(also ``python -m pytest``) against ``pytest --help`` with the plugin installed, and
``make TARGET`` against the Makefile. Shell keywords and other programs are not checked.
The tuning workflow keeps its write token out of the job that runs candidate code, and
zizmor (the GitHub Actions security auditor) finds nothing in any workflow.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
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
    """The long options before ``--`` (after it every word is an argument)."""
    words = words[:words.index("--")] if "--" in words else words
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
    [step] = [s for s in job["steps"] if "--kernelopt-base-ref" in s.get("run", "")]
    assert base == "origin/$BASE_REF" and step["env"]["BASE_REF"] == "${{ github.base_ref }}"
    assert job["permissions"] == {"contents": "read"}


def _job_calls(job: dict) -> dict[str, tuple[int, list[str]]]:
    """What the job's steps call, with the index of the step that calls it."""
    called = {}
    for index, step in enumerate(job["steps"]):
        for words in commands(step.get("run", "")):
            what = check(words)
            if what:
                called[what] = (index, words)
    return called


def _uses(job: dict, action: str) -> list[tuple[int, dict]]:
    return [(i, s) for i, s in enumerate(job["steps"]) if s.get("uses", "").split("@")[0] == action]


def test_tune_runs_candidates_without_a_write_token_and_publishes_in_another_job():
    """The GPU job runs candidate code: it can read the repository and nothing more. A second job,
    on a fresh machine without a GPU, publishes the uploaded run with the token."""
    workflow = load(ROOT / ".github/workflows/tune.yml")
    assert "schedule" in workflow["on"] and "workflow_dispatch" in workflow["on"]
    assert workflow["permissions"] == {}
    tune, publish = workflow["jobs"]["tune"], workflow["jobs"]["publish"]

    assert set(tune["runs-on"]) == {"self-hosted", "h200"}
    assert tune["permissions"] == {"contents": "read"}
    text = yaml.safe_dump(tune)
    for token in ("GITHUB_TOKEN", "KERNELOPT_PR_TOKEN", "github.token", "secrets.GITHUB"):
        assert token not in text, f"the tune job mentions {token}"
    [(_, checkout)] = _uses(tune, "actions/checkout")
    assert checkout["with"]["persist-credentials"] is False
    index, call = _job_calls(tune)["kernelopt tune"]
    assert "--open-pr" not in call and "--agent" in call
    assert tune["steps"][index]["env"]["ANTHROPIC_API_KEY"] == "${{ secrets.ANTHROPIC_API_KEY }}"  # empty when unset
    runs = call[call.index("--runs-dir") + 1]
    [(_, upload)] = _uses(tune, "actions/upload-artifact")
    assert runs.startswith(upload["with"]["path"] + "/") and upload["if"] == "always()"

    assert publish["needs"] == "tune" and "self-hosted" not in publish["runs-on"]
    assert publish["permissions"] == {"contents": "write", "pull-requests": "write"}
    [(_, checkout)] = _uses(publish, "actions/checkout")
    assert checkout["with"]["persist-credentials"] is False
    [(download_at, download)] = _uses(publish, "actions/download-artifact")
    assert download["with"]["name"] == upload["with"]["name"]
    publish_at, call = _job_calls(publish)["kernelopt publish"]
    assert publish_at > download_at and "--base" in call
    install_at = next(i for i, s in enumerate(publish["steps"]) if "pip install" in s.get("run", ""))
    assert install_at < download_at  # nothing from the artifact is there when code is installed
    with_token = [i for i, s in enumerate(publish["steps"]) if "GITHUB_TOKEN" in s.get("env", {})]
    assert with_token == [publish_at]  # the token reaches the publish step alone
    assert "GITHUB_TOKEN" not in publish.get("env", {})


def test_no_workflow_expands_an_expression_into_a_shell_script():
    """Inputs and event fields reach ``run:`` through ``env:`` (quoted there), never as ``${{ }}`` text."""
    for path in WORKFLOWS:
        for script in runs(load(path)):
            assert "${{" not in script, f"{path.name}: {script[:80]}"


def _zizmor() -> str | None:
    beside = Path(sys.executable).with_name("zizmor")  # installed by the dev extra into this environment
    return str(beside) if beside.is_file() else shutil.which("zizmor")


@pytest.mark.skipif(_zizmor() is None, reason="zizmor is not installed (pip install -e '.[dev]')")
def test_zizmor_finds_nothing():
    """``zizmor --offline .github/workflows/``: pinned actions, no template injection, least
    permissions, no persisted credentials. A finding left in place needs an inline
    ``# zizmor: ignore[<audit>]`` with the reason; no zizmor.yml is read (``--no-config``)."""
    proc = subprocess.run([_zizmor(), "--offline", "--no-config", "--strict-collection", "--format", "json",
                           ".github/workflows/"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    findings = json.loads(proc.stdout or "null")
    assert findings == [] and proc.returncode == 0, proc.stderr[-3000:] + json.dumps(findings, indent=1)[:3000]
    for path in WORKFLOWS:  # every workflow parsed and audited (a YAML error is no pass)
        assert f"completed .github/workflows/{path.name}" in proc.stderr, proc.stderr[-3000:]


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


# --- workflows users copy: guard, timeout, concurrency, cache, the report where reviewers look -------

FORK_GUARD = "github.event.pull_request.head.repo.full_name == github.repository"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_job_has_a_timeout_and_every_workflow_a_concurrency_group(path):
    workflow = load(path)
    assert "group" in workflow.get("concurrency", {}), f"{path.name}: no concurrency group"
    for name, job in workflow["jobs"].items():
        assert isinstance(job.get("timeout-minutes"), int), f"{path.name}: job {name} has no timeout-minutes"


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_a_self_hosted_runner_never_runs_a_forks_pull_request(path):
    """A self-hosted runner keeps its disk between jobs: a fork's code must not run there."""
    workflow = load(path)
    if not {"pull_request", "pull_request_target"} & set(workflow["on"]):
        return
    jobs = workflow["jobs"]
    for name, job in jobs.items():
        condition = str(job.get("if", ""))
        if "self-hosted" not in job["runs-on"] or FORK_GUARD in condition:
            continue
        needs = job.get("needs")
        upstream = [needs] if isinstance(needs, str) else needs or []
        # Else it must come after guarded jobs only, and run only when they ran: a skipped job's dependants
        # are skipped unless their `if:` (always(), !cancelled()) runs them whatever the result.
        assert upstream and all(FORK_GUARD in str(jobs[u].get("if", "")) for u in upstream), \
            f"{path.name}: job {name} runs pull requests from forks on a self-hosted runner"
        if "always()" in condition or "cancelled()" in condition:
            assert all(f"needs.{u}.result ==" in condition for u in upstream) and "skipped" not in condition, \
                f"{path.name}: job {name} runs after its guarded job was skipped"


def _gate_report(words: list[str]) -> str | None:
    """The Markdown report a gate command writes, or None when it writes none."""
    for option in ("--kernelopt-report", "--report"):
        if option in words:
            return words[words.index(option) + 1]
    return None


@pytest.mark.parametrize("path", WORKFLOWS, ids=[p.name for p in WORKFLOWS])
def test_every_gate_puts_its_report_on_the_summary_page(path):
    """Reviewers look at the run's page, not its log: a job that gates (``pytest --kernelopt``
    without shards, or ``kernelopt merge``) writes a Markdown report and appends it to
    ``$GITHUB_STEP_SUMMARY``, also when the gate failed."""
    for name, job in load(path)["jobs"].items():
        calls = _job_calls(job)
        gate = calls.get("kernelopt merge") or calls.get("pytest")
        if gate is None or (gate[1][0] != "kernelopt" and ("--kernelopt" not in gate[1]
                                                           or "--kernelopt-shard" in gate[1])):
            continue
        report = _gate_report(gate[1])
        assert report, f"{path.name}: job {name} writes no gate report"
        summary = [s for s in job["steps"][gate[0] + 1:] if "$GITHUB_STEP_SUMMARY" in s.get("run", "")]
        assert summary and report in summary[0]["run"], f"{path.name}: job {name}'s report is not on the summary"
        assert summary[0].get("if") == "always()", f"{path.name}: job {name}: no report when the gate fails"


def test_the_example_gate_installs_a_form_that_works_today():
    """Until the first release ``pip install pytest-kernelopt`` finds nothing."""
    from pytest_kernelopt.errors import REPOSITORY

    workflow = load(ROOT / ".github/workflows/kernelopt-gate.example.yml")
    assert FORK_GUARD in workflow["jobs"]["gate"]["if"]
    for job in workflow["jobs"].values():
        installs = [s["run"] for s in job["steps"] if "pip install" in s.get("run", "")]
        assert installs and all(f"pytest-kernelopt @ git+{REPOSITORY}" in run for run in installs)


def test_the_example_gate_comments_on_the_pull_request_from_a_job_without_its_code():
    """The token that can write a comment is in a job that runs none of the pull request's code (no checkout),
    after the gate (passed or failed, never skipped), in the one step that posts; the gate job only reads."""
    jobs = load(ROOT / ".github/workflows/kernelopt-gate.example.yml")["jobs"]
    gate, comment = jobs["gate"], jobs["comment"]
    assert gate["permissions"] == {"contents": "read"}
    assert "--kernelopt-json" in _called(ROOT / ".github/workflows/kernelopt-gate.example.yml")["pytest"][0]
    assert comment["needs"] == "gate" and comment["permissions"] == {"pull-requests": "write"}
    assert "needs.gate.result == 'success' || needs.gate.result == 'failure'" in comment["if"]
    assert not [s for s in comment["steps"] if "actions/checkout" in s.get("uses", "")]
    [post] = [s for s in comment["steps"] if "GITHUB_TOKEN" in s.get("env", {})]
    assert post["env"]["GITHUB_TOKEN"] == "${{ github.token }}" and " comment " in post["run"]
    assert not [s for s in gate["steps"] if "token" in json.dumps(s).lower()]


CPU_TORCH = "https://download.pytorch.org/whl/cpu"


def test_github_hosted_test_jobs_take_the_cpu_torch_from_a_cache():
    """The CUDA build of torch is GBs: GitHub-hosted jobs (no GPU) take the CPU build, and keep pip's cache."""
    ci = load(ROOT / ".github/workflows/ci.yml")["jobs"]["test"]
    assert ci["env"]["TORCH_INDEX"] == CPU_TORCH
    assert "TORCH_INDEX" in (ROOT / "Makefile").read_text()
    compat = load(ROOT / ".github/workflows/compat.yml")["jobs"]["test"]
    install = next(s["run"] for s in compat["steps"] if "pip install" in s.get("run", ""))
    assert f"--index-url {CPU_TORCH}" in install
    for job in (ci, compat):
        [(_, setup)] = _uses(job, "actions/setup-python")
        assert setup["with"]["cache"] == "pip"


def test_compat_runs_the_oldest_supported_and_the_newest_torch():
    """The matrix's oldest end is pyproject's floor; its newest takes whatever is newest (no pin)."""
    import tomllib

    from packaging.requirements import Requirement

    deps = {r.name: r for r in map(Requirement, tomllib.loads((ROOT / "pyproject.toml").read_text())
                                   ["project"]["dependencies"])}
    floors = {name: next(s.version for s in deps[name].specifier if s.operator == ">=") for name in ("torch", "triton")}
    job = load(ROOT / ".github/workflows/compat.yml")["jobs"]["test"]
    assert "self-hosted" not in job["runs-on"]
    ends = {m["end"]: m for m in job["strategy"]["matrix"]["include"]}
    for name, floor in floors.items():
        assert ends["oldest"][name] == f"{name}=={floor}.*"
        assert ends["newest"][name] == name
    [(_, words)] = [c for w, c in _job_calls(job).items() if w == "pytest"]
    assert words[-2:] == ["-m", "not slow"]  # make test-fast's selection


def test_release_publishes_a_checked_build_by_trusted_publishing():
    workflow = load(ROOT / ".github/workflows/release.yml")
    assert workflow["on"] == {"push": {"tags": ["v*"]}} and workflow["permissions"] == {}
    build, publish = workflow["jobs"]["build"], workflow["jobs"]["publish"]
    assert build["permissions"] == {"contents": "read"}
    assert publish["permissions"] == {"id-token": "write"}  # the OIDC token, in the job that only uploads
    assert publish["needs"] == "build" and publish["environment"]["name"] == "pypi"
    script = "\n".join(s.get("run", "") for s in build["steps"])
    assert "python -m build" in script and "twine check --strict dist/*" in script
    assert '"$TAG" != "v$version"' in script  # a tag that is not the version builds nothing
    [(_, action)] = _uses(publish, "pypa/gh-action-pypi-publish")
    assert re.fullmatch(r"pypa/gh-action-pypi-publish@[0-9a-f]{40}", action["uses"])
    assert "with" not in action  # no password: trusted publishing
    assert all(s.get("run") is None for s in publish["steps"])  # nothing of the project runs beside the token
    for job in (build, publish):
        for _, setup in _uses(job, "actions/setup-python"):
            assert "cache" not in setup.get("with", {})  # a release is built from no cache


@pytest.mark.parametrize("tag, ok", [("v{version}", True), ("v{version}.post1", False), ("{version}", False)])
def test_release_refuses_a_tag_that_is_not_the_version(tag, ok):
    """The release job's own check, run as written: a tag must equal ``v`` + ``project.version``."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    build = load(ROOT / ".github/workflows/release.yml")["jobs"]["build"]
    [step] = [s for s in build["steps"] if "$TAG" in s.get("run", "")]
    proc = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=ROOT, capture_output=True, text=True,
                          env={"PATH": "/usr/bin:/bin", "TAG": tag.format(version=version)})
    assert (proc.returncode == 0) == ok, proc.stdout + proc.stderr
    if not ok:
        assert f"does not match pyproject.toml's version {version}" in proc.stdout


@pytest.mark.slow
def test_a_tag_pushed_to_a_bare_remote_builds_a_release_twine_accepts(tmp_path):
    """The release job's build steps, run as written on a checkout of a version tag pushed to a local
    bare remote (as actions/checkout fetches it): the tag check passes, `python -m build` makes the
    sdist and the wheel of that version, and `twine check --strict` accepts both."""
    import tomllib

    version = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]
    tag = f"v{version}"

    def git(*args, cwd):
        subprocess.run(["git", "-c", "user.name=release", "-c", "user.email=release@example.invalid", *args],
                       cwd=cwd, check=True, capture_output=True)

    remote, source, checkout = tmp_path / "remote.git", tmp_path / "source", tmp_path / "checkout"
    git("init", "-q", "--bare", str(remote), cwd=tmp_path)
    git("clone", "-q", "--no-hardlinks", str(ROOT), str(source), cwd=tmp_path)
    git("tag", tag, cwd=source)
    git("push", "-q", str(remote), "HEAD:refs/heads/main", f"refs/tags/{tag}", cwd=source)
    git("clone", "-q", "--depth", "1", "--branch", tag, f"file://{remote}", str(checkout), cwd=tmp_path)

    build = load(ROOT / ".github/workflows/release.yml")["jobs"]["build"]
    env = {**os.environ, "TAG": tag, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"}
    for step in (s for s in build["steps"] if "run" in s):
        done = subprocess.run(["bash", "-e", "-c", step["run"]], cwd=checkout, env=env, capture_output=True,
                              text=True, timeout=600)
        assert done.returncode == 0, f"{step['name']}: {done.stdout[-2000:]}{done.stderr[-2000:]}"
    built = sorted(p.name for p in (checkout / "dist").iterdir())
    assert built == [f"pytest_kernelopt-{version}-py3-none-any.whl", f"pytest_kernelopt-{version}.tar.gz"]
