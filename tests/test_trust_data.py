"""Data is data (issue 40, class 6): a manifest recipe, a run directory and the text in them are checked
against what was verified before they become code or a claim.

* A recipe is trusted only when replaying it on the compiler kernel recorded for its version gives exactly
  the version's bytes (store/recipe.py ``binding_error``); the store's check fails a folder whose recipe
  does not (refresh's own refusal is in test_refresh.py, on real compiles).
* ``publish`` judges the exact bytes it pushes again and shows only that verdict's figures; a run's text is
  inert in the title, the body and the report (publishing happens on a local bare remote and the fake GitHub
  API of test_gitops.py).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
import synthetic_run as s
from markdown_it import MarkdownIt
from test_gitops import BRANCH, FOLDER, FakeGitHub, FakeJudge, git, github, judge, project, tune  # noqa: F401

from pytest_kernelopt.errors import StoreError
from pytest_kernelopt.gitops import RunChangedError, publish_run
from pytest_kernelopt.store import KernelStore
from pytest_kernelopt.store.recipe import Recipe, binding_error, derive_recipe, replay_bound, unified_diff

MARKUP = ("<img src=x onerror=alert(1)> [see](https://evil.example/x) <!-- the diff is below, hidden --> "
          "@maintainer fixes #1 ![i](https://evil.example/i.png) *bold* `tick` www.evil.example\n# Heading")


@pytest.fixture(autouse=True)
def _interpreter_before_triton(request):
    """Only the slow test compiles; it asks for the suite's ``interpreter`` fixture itself."""


def live_markup(markdown: str) -> list[str]:
    """What in ``markdown`` a renderer would read as markup, outside fenced blocks and code spans."""
    text = re.sub(r"(?ms)^(`{3,})[^\n]*\n.*?^\1`*[ \t]*$", "", markdown)  # fenced blocks
    text = re.sub(r"(`+)(?!`).*?(?<!`)\1(?!`)", "", text)  # code spans (on one line, as ours are)
    found = re.findall(r"<[A-Za-z!/][^>]*>?|\]\(|!\[|(?<![\w`])@\w+|(?<![\w&])#\d+|www\.\S+|https?://\S+", text)
    return found


# --- recipes ----------------------------------------------------------------------------------------------

HONEST = s.variant(1024, 8)  # the reviewed file: the compiler kernel with another launch


def test_a_derived_recipe_is_bound_to_its_file_and_a_forged_one_is_not() -> None:
    recipe = derive_recipe(s.ORIGINAL, HONEST)
    assert recipe.kind == "launch" and binding_error(recipe, s.ORIGINAL, HONEST) is None
    edit = derive_recipe(s.ORIGINAL, HONEST.replace("tmp0, xmask)", "tmp0 * 2.0, xmask)"))
    doubled = HONEST.replace("tmp0, xmask)", "tmp0 * 2.0, xmask)")
    assert edit.kind == "edit" and binding_error(edit, s.ORIGINAL, doubled) is None

    # The module docstring is not compared (no replay carries it): a dump worded otherwise still binds.
    worded = '"""Tuned: XBLOCK 1024."""\n' + HONEST
    assert binding_error(derive_recipe('"""The dump."""\n' + s.ORIGINAL, worded), s.ORIGINAL, worded) is None

    payload = s.ORIGINAL.replace("tl.store(out_ptr0 + xindex, tmp0, xmask)", "tl.store(out_ptr0 + xindex, 0.0, xmask)")
    forged = {
        # the launch the file has, but not the one recorded: another launch at the next refresh
        "other launch values": recipe.model_copy(update={"launch": {"XBLOCK": 128, "num_warps": 8}}),
        # a structured recipe of another kind: the file has no rewrite the recipe could have made
        "a rewrite the file never had": Recipe(kind="rewrite", launch=recipe.launch,
                                               rewrites=[{"rule": "eviction"}]),  # type: ignore[list-item]
        # a diff to a payload, recorded for the honest file
        "an edit to other code": Recipe(kind="edit", diff=unified_diff(s.ORIGINAL, payload)),
        # an Inductor compile whose kernel is not recorded: cannot be replayed to check
        "an inductor recipe without its base": Recipe(kind="inductor", inductor={"variant": "max-autotune"},  # type: ignore[arg-type]
                                                      launch=recipe.launch),
        # ... or whose recorded base is not what the file was made from
        "an inductor recipe on another base": Recipe(kind="inductor", launch={"XBLOCK": 1024},
                                                     inductor={"variant": "max-autotune", "base_source": payload}),  # type: ignore[arg-type]
        "rule parameters": Recipe(kind="rewrite", rewrites=[{"rule": "eviction", "params": {"policy": "x"}}]),  # type: ignore[list-item]
    }
    for what, bad in forged.items():
        why = binding_error(Recipe.model_validate(bad.model_dump()), s.ORIGINAL, HONEST)
        assert why is not None, what
        replayed = replay_bound(bad, (s.ORIGINAL, HONEST), s.variant(64), None)  # type: ignore[arg-type]
        assert replayed.refused and replayed.source is None and replayed.how == why, what


def test_the_store_check_fails_a_forged_recipe_and_reads_manifests_without_one(tmp_path: Path) -> None:
    kernels = tmp_path / "kernels"
    s.store_version(kernels, s.SOFTMAX, s.SOFTMAX_KERNEL, HONEST, 1.1)
    store = KernelStore(kernels)
    path = store.kernel_dir(s.SOFTMAX, s.SOFTMAX_KERNEL) / "manifest.json"
    data = json.loads(path.read_text())
    data["versions"][0]["recipe"] = json.loads(derive_recipe(s.ORIGINAL, HONEST).model_dump_json())  # as accept records it
    path.write_text(json.dumps(data))
    assert store.check(s.SOFTMAX, s.SOFTMAX_KERNEL).versions[0].recipe.kind == "launch"
    data["versions"][0]["recipe"]["launch"]["num_warps"] = 2  # the file has num_warps=8
    path.write_text(json.dumps(data))
    with pytest.raises(StoreError) as caught:
        store.check(s.SOFTMAX, s.SOFTMAX_KERNEL)
    message = str(caught.value)
    assert message.startswith(f"{path}: the recipe recorded for v1 of {s.SOFTMAX}/{s.SOFTMAX_KERNEL} does not "
                              f"reproduce {path.parent / 'v1.py'}: replayed on the recorded compiler kernel")
    assert "`kernelopt refresh` derives one from the files" in message and "`kernelopt tune`" in message
    # A manifest written before recipes (schema 2) still reads and checks; so does an inductor recipe
    # recorded before its base was (it is only never replayed).
    del data["versions"][0]["recipe"]
    data["schema_version"] = 2
    path.write_text(json.dumps(data))
    assert store.check(s.SOFTMAX, s.SOFTMAX_KERNEL).versions[0].recipe is None
    assert Recipe.model_validate({"kind": "inductor", "inductor": {"variant": "max-autotune"}}).inductor.base_source is None


# --- publish ---------------------------------------------------------------------------------------------------

def tamper(clone: Path, run: Path, **changes: Any) -> None:
    """Edit the run directory's record of the softmax kernel (``run.json``), as whoever holds the artifact can."""
    path = run / "run.json"
    data = json.loads(path.read_text())
    outcome = next(k for p in data["problems"] for k in p["kernels"] if k["kernel"] == s.SOFTMAX_KERNEL)
    for key, value in changes.items():
        outcome[key] = value
    path.write_text(json.dumps(data))


def pushed(bare: Path) -> str:
    return git(bare, "branch", "--list", BRANCH)


def test_an_inflated_figure_is_never_shown_only_the_re_verified_one(project, github, tmp_path, judge) -> None:
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    source = (clone / FOLDER / "v2.py").read_text()
    judge.measured[s.sha256_text(source)] = 1.093  # what the cascade measures for these bytes here
    tamper(clone, run, best_timing=s.timing(1.934).model_dump(), best_kernel_timing=s.timing(2.5).model_dump())
    manifest = clone / FOLDER / "manifest.json"  # the manifest's evidence inflated too
    data = json.loads(manifest.read_text())
    data["versions"][-1]["evidence"]["model_timing"] = s.timing(1.934).model_dump()
    manifest.write_text(json.dumps(data, indent=2))

    [result] = publish_run(run, clone)
    assert result.status == "pushed", result.line()
    post = next(r[2] for r in github.requests if r[0] == "POST")
    message = git(bare, "log", "-1", "--format=%B", result.commit)
    assert post["title"] == f"kernelopt: {s.SOFTMAX}/{s.SOFTMAX_KERNEL} v2 (1.093x model speedup)"
    for text in (post["title"], post["body"], message, result.message):
        assert "1.934" not in text and "2.500" not in text and "1.184" not in text, text
    assert "1.093x [1.073, 1.113]" in post["body"] and "model 1.093x faster" in message


def test_a_measured_figure_that_does_not_beat_the_committed_version_is_not_published(project, github, tmp_path,
                                                                                     judge) -> None:
    clone, bare = project  # v1 is committed at 1.050x; the run claims 1.934x, the cascade measures 1.010x
    run = tune(clone, tmp_path, 1024, 1.934, "run-1")
    judge.measured[s.sha256_text((clone / FOLDER / "v2.py").read_text())] = 1.01
    [result] = publish_run(run, clone)
    assert result.status == "skipped" and "1.010x re-verified" in result.message and "1.934" not in result.message
    assert pushed(bare) == "" and github.requests == []


def test_a_swapped_kernel_with_its_sha256_recorded_again_is_refused(project, github, tmp_path, judge) -> None:
    """The artifact's version file replaced by other code, its sha256 written into the manifest and into run.json:
    every recorded hash agrees, and the run claims a figure. The cascade judges the bytes, not the records."""
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    version = clone / FOLDER / "v2.py"
    swapped = version.read_text().replace("tl.store(out_ptr0 + xindex, tmp0, xmask)",
                                          "tl.store(out_ptr0 + xindex, tmp0 * 0.0, xmask)")
    version.write_text(swapped)
    digest = s.sha256_text(swapped)
    manifest = clone / FOLDER / "manifest.json"
    data = json.loads(manifest.read_text())
    data["versions"][-1]["sha256"] = data["versions"][-1]["evidence"]["sha256"] = digest
    data["versions"][-1]["recipe"] = None
    manifest.write_text(json.dumps(data, indent=2))
    tamper(clone, run, best_sha256=digest, best_timing=s.timing(1.934).model_dump())

    [result] = publish_run(run, clone)
    assert result.status == "refused" and not result.ok, result.line()
    assert result.message.startswith(f"{FOLDER}/v2.py: re-verified before publishing and rejected at kernel: ")
    assert [c[3] for c in judge.calls] == [swapped]  # the exact bytes that would have been pushed
    assert pushed(bare) == "" and github.requests == []
    assert git(clone, "branch", "--list", BRANCH) == ""


def test_a_problem_file_that_is_not_the_repositorys_own_is_never_run(project, github, tmp_path, judge) -> None:
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    evil = tmp_path / "evil_problem.py"
    evil.write_text("raise SystemExit('imported')\n")
    data = json.loads((run / "run.json").read_text())
    data["problems"][0]["problem"] = str(evil)
    (run / "run.json").write_text(json.dumps(data))
    [result] = publish_run(run, clone)
    assert result.status == "refused" and "outside the repository" in result.message, result.line()
    (clone / "models" / "untracked.py").write_text("x = 1\n")  # inside, but not reviewed: not tracked at HEAD
    data["problems"][0]["problem"] = "models/untracked.py"
    (run / "run.json").write_text(json.dumps(data))
    [result] = publish_run(run, clone)
    assert result.status == "refused" and "not tracked at HEAD" in result.message, result.line()
    assert judge.calls == [] and pushed(bare) == "" and github.requests == []


def test_run_text_is_inert_in_the_title_the_body_and_the_report(project, github, tmp_path, judge) -> None:
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    data = json.loads((run / "run.json").read_text())
    problem = data["problems"][0]
    problem["note"] = problem["error"] = MARKUP
    outcome = problem["kernels"][0]
    outcome["best_origin"] = outcome["stored_recipe"] = outcome["message"] = MARKUP
    for attempt in outcome["history"]:
        attempt["reason"] = attempt["origin"] = MARKUP
    data["agent_model"] = data["stop_reason"] = MARKUP
    (run / "run.json").write_text(json.dumps(data))
    manifest = clone / FOLDER / "manifest.json"
    entry = json.loads(manifest.read_text())
    entry["versions"][-1]["provenance"]["proposed_by"] = MARKUP
    entry["versions"][-1]["recipe"] = None  # its words come from the provenance, then
    manifest.write_text(json.dumps(entry, indent=2))

    [result] = publish_run(run, clone)
    assert result.status == "pushed", result.line()
    post = next(r[2] for r in github.requests if r[0] == "POST")
    assert "\n" not in post["title"] and live_markup(post["title"]) == [] and "<" not in post["title"]
    assert live_markup(post["body"]) == [], post["body"]
    assert "<img src=x" in post["body"]  # shown, as text
    html = MarkdownIt("commonmark").enable("table").render(post["body"])  # what GitHub makes of it, near enough
    assert "<img" not in html and "<a href" not in html and "<!--" not in html and "<h1>" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html
    report = git(bare, "show", f"{result.commit}:{FOLDER}/report.md")
    ours = "![speedup per model and stored kernel](speedup.png)"  # the template's own chart link
    assert ours in report and live_markup(report.replace(ours, "")) == [] and "<img src=x" in report
    html = MarkdownIt("commonmark").enable("table").render(report.replace(ours, ""))
    assert "<img" not in html and "<a href" not in html and "<!--" not in html and "<h1>Heading" not in html
    message = git(bare, "log", "-1", "--format=%B", result.commit)
    assert "@maintainer" not in message and "#1" not in message and "<img" not in message
    assert message.rstrip().endswith(f"Kernelopt-Kernel: {s.SOFTMAX}/{s.SOFTMAX_KERNEL}")


def test_a_kernel_named_with_markup_is_refused_before_anything_is_pushed(project, github, tmp_path, judge) -> None:
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    tamper(clone, run, kernel="x<img src=y>[a](b)")
    with pytest.raises(RunChangedError, match="cannot name a folder in the kernel store"):
        publish_run(run, clone)
    assert judge.calls == [] and github.requests == []
    assert git(bare, "for-each-ref", "refs/heads/kernelopt") == ""


def test_markdown_reports_escape_what_a_template_leaves_unfiltered(tmp_path: Path) -> None:
    """The mechanism, not a field: a template (or a user's copy) that prints run text without a filter prints
    it inert; our own filters' output (figures, code spans, blocks) stays Markdown."""
    from pytest_kernelopt.report.render import MD
    from pytest_kernelopt.report.untrusted import md_finalize
    from pytest_kernelopt.templates import render

    folder = tmp_path / "templates"
    folder.mkdir()
    (folder / "t.md.j2").write_text("# {{ name }}\n\n{{ note }} | {{ timing | ci }} | {{ note | text }} | {{ n }}\n"
                                    "{{ plain }}\n")
    out = render("t.md.j2", {"name": "softmax_rows", "note": MARKUP, "timing": s.timing(1.2), "n": 3,
                             "plain": "tests/problems/softmax_rows.py, 2026-12-01T12:00:00+00:00 (3 seeds)"},
                 folder, filters=MD, finalize=md_finalize)
    assert live_markup(out) == [], out
    assert out.startswith("# softmax_rows\n") and "1.200x [1.180, 1.220]" in out and "| 3\n" in out
    assert "tests/problems/softmax_rows.py, 2026-12-01T12:00:00+00:00 (3 seeds)" in out


# --- the real cascade --------------------------------------------------------------------------------------------

@pytest.mark.slow
def test_publish_re_judges_a_zeros_kernel_in_interpreter_mode(tmp_path, monkeypatch, interpreter) -> None:
    """A real problem and its real compiler kernel: the run's version swapped for a kernel that writes zeros,
    every sha256 recorded again and the figure inflated. Publish's own cascade (interpreter mode) rejects it."""
    import shutil

    from pytest_kernelopt.runs.records import KernelOutcome, ProblemOutcome
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.gitops import reverify
    from pytest_kernelopt.store import Evidence, Provenance
    from pytest_kernelopt.verify import VerifySession

    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))
    fake = FakeGitHub()
    monkeypatch.setenv("GITHUB_API_URL", fake.url)
    monkeypatch.setenv("GITHUB_TOKEN", "t")
    bare, clone = tmp_path / "remote.git", tmp_path / "work"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    git(tmp_path, "init", "-q", "-b", "main", str(clone))
    for key, value in (("user.name", "Alice"), ("user.email", "a@example.com")):
        git(clone, "config", key, value)
    git(clone, "remote", "add", "origin", str(bare))
    (clone / "problems").mkdir()
    shutil.copy(Path(__file__).parent / "problems" / "sum_reduce.py", clone / "problems")
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "problem")
    git(clone, "push", "-q", "origin", "main")
    problem = clone / "problems" / "sum_reduce.py"
    with VerifySession(problem, interpreter) as session:
        session.open()
        [info] = session.kernels.values()
    original = render_dump(info, "sum_reduce")
    zeros = re.sub(r"tl\.store\((in_out_ptr0 \+ \(x3\)), tmp9,", r"tl.store(\1, 0.0 * tmp9,", original)
    assert zeros != original
    evidence = Evidence(status="accepted", speed_measured=True, model_timing=s.timing(1.934), fingerprint=info.fingerprint,
                        sha256=s.sha256_text(zeros), environment=s.ENV)
    stored = KernelStore(clone / "kernels").add_version(
        model="sum_reduce", kernel=info.name, fingerprint=info.fingerprint, args=info.args, original_source=original,
        source=zeros, evidence=evidence, provenance=Provenance(proposed_by="agent"), environment=s.ENV)
    outcome = KernelOutcome(kernel=info.name, fingerprint=info.fingerprint, stored_version=stored.record.version,
                            best_sha256=stored.record.sha256, best_timing=s.timing(1.934), best_origin="launch")
    run = s.write_run(tmp_path / "runs", clone / "kernels", [ProblemOutcome(
        model="sum_reduce", problem="problems/sum_reduce.py", device="cuda", speed_measured=True, kernels=[outcome])])

    import pytest_kernelopt.gitops.publish as gitops

    monkeypatch.setattr(gitops, "SessionJudge", reverify.SessionJudge)  # not test_gitops's fake: the real cascade
    judged: list[Any] = []
    real = reverify.SessionJudge.__call__
    monkeypatch.setattr(reverify.SessionJudge, "__call__",
                        lambda self, *a: judged.append(verdict := real(self, *a)) or verdict)
    try:
        [result] = publish_run(run, clone, device="cpu")
    finally:
        fake.close()
    assert result.status == "refused" and "re-verified before publishing and rejected at" in result.message, \
        result.line()
    assert [v.status for v in judged] == ["rejected"] and not judged[0].speed_measured
    assert git(bare, "for-each-ref", "refs/heads/kernelopt") == "" and fake.requests == []
