"""What the verifier checks is what runs: attacks on the gate, the production loader, merge and reports.

* A kernel committed for another batch size than the problem file's (its fingerprint
  is the other shape's) fails the gate unless the user opts out, and the production
  loader runs a committed version only where its manifest records a passing
  verification of those bytes against the kernel it replaces.
* ``kernelopt merge`` recomputes the shard plan and refuses shard results that hide,
  duplicate or misplace items.
* A candidate's text (headings, links, HTML, fence breakers, ANSI escapes) renders as
  data in report.md, pull-request bodies, HTML and the terminal.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_kernelopt.runs import gate_result as results
from pytest_kernelopt.gate.output import summary_lines
from pytest_kernelopt.records import dump_json
from pytest_kernelopt.shard import Shard, shard_of

pytest_plugins = ["pytester"]

TESTS = Path(__file__).resolve().parent
ELEMENTWISE = TESTS / "problems" / "elementwise_chain.py"
SCALED = '''"""A pointwise kernel whose source names its batch size (Inductor bakes static sizes in)."""
import torch

BATCH = {batch}


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(BATCH, 64)]


def get_init_inputs():
    return []
'''
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n'
GONE = "triton_poi_fused_gone_0"

# What a hostile candidate puts in its exception text.
PAYLOAD = ("# Heading\n[link](http://x) <img src=x onerror=alert(1)> **bold**\n"
           "```\n# closed the fence\n````` `inline` \x1b[2J\x1b[31mPASSED\x1b[0m \r\u202eevil")


# --- 5. stale kernels: the gate ---------------------------------------------------------

@pytest.fixture(scope="module")
def stale_repo(tmp_path_factory: pytest.TempPathFactory, compiled_models: Any) -> Path:
    """problems/scaled.py at batch 16; its kernel committed as accepted at batch 8 (the other shape's
    fingerprint, a passing verification recorded for it), and a folder for a kernel the compiler
    does not generate at all."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

    repo = tmp_path_factory.mktemp("stale")
    other = repo / "batch8"
    other.mkdir()
    (other / "scaled.py").write_text(SCALED.format(batch=8))
    (repo / "problems").mkdir()
    (repo / "problems" / "scaled.py").write_text(SCALED.format(batch=16))
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (name, handle), = compiled_models.get(other / "scaled.py").kernels.items()
    assert "8" in handle.info.source or "512" in handle.info.source  # the shape is in the kernel
    dump = render_dump(handle.info, "scaled")
    store = KernelStore(repo / "kernels")
    for kernel in (name, GONE):
        store.add_version(model="scaled", kernel=kernel, fingerprint=handle.info.fingerprint, args=handle.info.args,
                          original_source=dump, source=dump, provenance=Provenance(proposed_by="attacker"),
                          evidence=Evidence(status="correct", speed_measured=False,
                                            fingerprint=handle.info.fingerprint, sha256=sha256_text(dump)),
                          environment=None)
    (repo / "kernel_name").write_text(name)
    return repo


@pytest.fixture
def stale(stale_repo: Path, pytester: pytest.Pytester) -> Path:
    shutil.copytree(stale_repo, pytester.path, dirs_exist_ok=True)
    return pytester.path


def _gate(pytester: pytest.Pytester, *args: str) -> pytest.RunResult:
    return pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore",
                                         "-p", "no:cacheprovider", "-ra", *args)


@pytest.mark.slow
def test_a_kernel_committed_for_another_batch_size_fails_the_gate_by_default(stale: Path,
                                                                              pytester: pytest.Pytester) -> None:
    kernel = (stale / "kernel_name").read_text()
    result = _gate(pytester, "--kernelopt-json", "gate.json")
    assert result.ret == 1
    result.assert_outcomes(failed=2)
    result.stdout.fnmatch_lines([f"FAILED problems/scaled.py::{kernel}*", "FAILED problems/scaled.py::model*"])
    out = result.stdout.str()
    assert "It was not verified at this shape, so the gate fails it" in out
    assert "--kernelopt-allow-stale or allow_stale = true" in out
    assert f"holds committed versions of {GONE}, which the compiler no longer generates" in out
    written = json.loads((stale / "gate.json").read_text())
    assert written["settings"]["strict"] is True  # stale kernels fail
    assert {i["nodeid"]: i["status"] for i in written["items"]}[f"problems/scaled.py::{kernel}"] == "stale"


@pytest.mark.slow
@pytest.mark.parametrize("how", ["option", "setting"])
def test_the_opt_out_skips_them_with_a_note_and_strict_overrides_the_setting(stale: Path, pytester: pytest.Pytester,
                                                                            how: str) -> None:
    if how == "setting":
        (stale / "pyproject.toml").write_text(PYPROJECT + "allow_stale = true\n")
    result = _gate(pytester, *(["--kernelopt-allow-stale"] if how == "option" else []))
    assert result.ret == 0, result.stdout.str()
    result.assert_outcomes(passed=1, skipped=1)
    out = result.stdout.str()
    assert "(allowed: not verified at this shape)" in out  # -rs shows the note
    assert "SKIPPED [1] problems/scaled.py:1: " in out and "gate.py" not in out  # at the problem, not our code
    assert f"committed versions of {GONE} are not used" in out  # the summary's note on the model item
    if how == "setting":  # the command line wins over the setting
        strict = _gate(pytester, "--kernelopt-strict")
        assert strict.ret == 1
        strict.assert_outcomes(failed=2)


@pytest.fixture(scope="module")
def unlaunched_repo(tmp_path_factory: pytest.TempPathFactory, compiled_models: Any) -> Path:
    """problems/elementwise_chain.py with its kernel committed at its own fingerprint, a passing verification
    recorded, but no launches (built outside the pytester test: its module snapshot would drop Inductor's)."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

    repo = tmp_path_factory.mktemp("unlaunched")
    (repo / "problems").mkdir()
    shutil.copy(ELEMENTWISE, repo / "problems")
    (repo / "pyproject.toml").write_text(PYPROJECT)
    (name, handle), = compiled_models.get(ELEMENTWISE).kernels.items()
    dump = render_dump(handle.info, "elementwise_chain")
    KernelStore(repo / "kernels").add_version(
        model="elementwise_chain", kernel=name, fingerprint=handle.info.fingerprint, args=handle.info.args,
        original_source=dump, source=dump, provenance=Provenance(), environment=None,
        evidence=Evidence(status="correct", speed_measured=False, fingerprint=handle.info.fingerprint,
                          sha256=sha256_text(dump)))
    (repo / "kernel_name").write_text(name)
    return repo


@pytest.mark.slow
def test_an_old_store_is_stale_naming_refresh_and_one_without_launches_needs_re_verification(
        unlaunched_repo: Path, pytester: pytest.Pytester) -> None:
    """A manifest of schema 3 (fingerprints of the text alone) is stale, whatever its fingerprint says; a
    schema 4 entry without the launches it was verified at is reported as needing re-verification (production
    runs it nowhere), not passed."""
    shutil.copytree(unlaunched_repo, pytester.path, dirs_exist_ok=True)
    name = (pytester.path / "kernel_name").read_text()
    manifest = pytester.path / "kernels" / "elementwise_chain" / name / "manifest.json"
    data = json.loads(manifest.read_text())
    manifest.write_text(json.dumps({**data, "schema_version": 3}))
    result = _gate(pytester, "-k", name)
    assert result.ret == 1
    result.assert_outcomes(failed=1, deselected=1)
    out = result.stdout.str()
    assert "(schema 3) was written by an older kernelopt" in out and "`kernelopt refresh`" in out

    manifest.write_text(json.dumps(data))  # schema 4, but no launches recorded
    result = _gate(pytester, "-k", name, "--kernelopt-allow-stale")
    assert result.ret == 0
    result.assert_outcomes(skipped=1, deselected=1)
    assert "needs re-verification" in result.stdout.str() and "records no launches" in result.stdout.str()


def test_strict_and_allow_stale_together_are_a_usage_error(pytester: pytest.Pytester) -> None:
    (pytester.path / "problems").mkdir()
    shutil.copy(ELEMENTWISE, pytester.path / "problems")
    (pytester.path / "pyproject.toml").write_text(PYPROJECT)
    result = pytester.runpytest("--kernelopt", "--kernelopt-strict", "--kernelopt-allow-stale", "-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    assert "--kernelopt-strict and --kernelopt-allow-stale contradict each other" in result.stderr.str()


def test_allow_stale_in_the_settings_must_be_a_boolean(tmp_path: Path) -> None:
    from pytest_kernelopt.config import load_config
    from pytest_kernelopt.errors import UsageError

    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nallow_stale = "yes"\n')
    with pytest.raises(UsageError, match="allow_stale: must be true or false, not 'yes'"):
        load_config(tmp_path)
    (tmp_path / "pyproject.toml").write_text("[tool.kernelopt]\nallow_stale = true\n")
    assert load_config(tmp_path).allow_stale is True


# --- 5. stale kernels: production ----------------------------------------------------------

def _commit(kernels: Path, info: Any, source: str, **evidence: Any) -> Path:
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance

    outcome = KernelStore(kernels).add_version(
        model="elementwise_chain", kernel=info.name, fingerprint=info.fingerprint, args=info.args,
        original_source=render_dump(info, "elementwise_chain"), source=source,
        evidence=Evidence(status="correct", speed_measured=False, **evidence), provenance=Provenance(),
        environment=None)
    return kernels / "elementwise_chain" / info.name / outcome.record.file


def _edit_manifest(file: Path, edit: Any) -> None:
    manifest = file.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    edit(data)
    manifest.write_text(json.dumps(data))


def _retarget(data: dict[str, Any]) -> None:
    """A version verified at another shape, re-pointed by hand at the kernel the compiler generates now."""
    data["versions"][0]["evidence"]["fingerprint"] = "f" * 16


def _other_bytes(data: dict[str, Any]) -> None:
    data["versions"][0]["evidence"]["sha256"] = "0" * 64


def _schema_1_without_fingerprints(data: dict[str, Any]) -> None:
    """The earliest manifests: no evidence record, no fingerprint per version."""
    data["schema_version"] = 1
    for version in data["versions"]:
        del version["evidence"]["fingerprint"], version["evidence"]["sha256"], version["fingerprint"]


UNVERIFIED = {
    # case: (evidence given at commit, manifest edit, words of the one warning)
    "no_record": ({}, None, ["not verified", "records no verification"]),
    "retargeted": ("verified", _retarget, ["not verified", f"verified against compiler kernel {'f' * 16}"]),
    "other_bytes": ("verified", _other_bytes, ["not verified", "evidence is of other bytes"]),
    "schema_1_unrecorded": ("verified", _schema_1_without_fingerprints, ["stale", "schema 1", "`kernelopt refresh`"]),
    # Complete, but recorded under another torch (as a pull request says, so that a gate here skips it as stale).
    "elsewhere": ("elsewhere", None, ["not verified here", "with torch 2.0.0", "`kernelopt refresh`"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(UNVERIFIED))
def test_production_refuses_a_version_without_a_passing_verification_at_this_fingerprint(
        case: str, compiled_models: Any, tmp_path: Path) -> None:
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.store import sha256_text
    from test_production import fresh, marked, run, wrapper_globals

    given, edit, words = UNVERIFIED[case]
    (name, handle), = compiled_models.get(ELEMENTWISE).kernels.items()
    source = marked(handle.info, "elementwise_chain")  # adds 1.0: shows whether it ran
    evidence = {"fingerprint": handle.info.fingerprint, "sha256": sha256_text(source)} if given else {}
    if given == "elsewhere":
        from test_production import here, verified_at

        evidence.update(launches=[verified_at(handle.info)], environment=here().model_copy(update={"torch": "2.0.0"}))
    file = _commit(tmp_path / "kernels", handle.info, source, **evidence)
    if edit is not None:
        _edit_manifest(file, edit)
    backend = pytest_kernelopt.backend("elementwise_chain", tmp_path / "kernels")
    problem, model = fresh(ELEMENTWISE)
    inputs = problem.make_inputs(0, "cpu")
    out, kernels, messages = wrapper_globals(torch.compile(model, backend=backend), *inputs)

    assert len(messages) == 1, messages
    for word in [f"elementwise_chain/{name}", str(file), "the compiler's kernel is used", *words]:
        assert word in messages[0], (word, messages[0])
    assert hasattr(kernels[name], "triton_meta")  # Inductor's own kernel object
    with torch.no_grad():
        assert torch.equal(out, compiled_models.live(ELEMENTWISE)(*inputs))
    # Once: a second model compiled through the same backend says nothing new.
    again, more = run(torch.compile(fresh(ELEMENTWISE)[1], backend=backend), *inputs)
    assert more == [] and torch.equal(again, out)
    assert [(k.name, k.runs) for k in backend.kernels] == [(name, "compiler"), (name, "compiler")]


def test_a_schema_1_manifest_reads_its_versions_fingerprint_as_the_verification(tmp_path: Path) -> None:
    from pytest_kernelopt.store import MANIFEST_SCHEMA_VERSION, Manifest

    record = {"version": 1, "file": "v1.py", "sha256": "a" * 64, "created": "2026-01-01T00:00:00Z",
              "evidence": {"status": "correct", "speed_measured": False}, "provenance": {}, "fingerprint": "f1"}
    old = Manifest.model_validate({"schema_version": 1, "model": "m", "kernel": "k", "fingerprint": "f1",
                                   "active": 1, "versions": [record]})
    assert "no launches it was verified at" in old.version(1).unverified_reason("f1")  # schema 4 records them
    assert "not against f2" in old.version(1).unverified_reason("f2")
    assert old.old_fingerprints() is not None  # and its fingerprints are of the text alone: stale
    assert Manifest(model="m", kernel="k", fingerprint="f1").schema_version == MANIFEST_SCHEMA_VERSION == 4
    # Schema 2 takes no such inference: its evidence says what was verified, or nothing was.
    new = Manifest.model_validate({"schema_version": 2, "model": "m", "kernel": "k", "fingerprint": "f1",
                                   "active": 1, "versions": [record]})
    assert "records no verification" in new.version(1).unverified_reason("f1")


# --- 6. merge checks what it merges ---------------------------------------------------------

ENV = results.ResultEnvironment(device="cpu", torch="2.13.0", triton="3.7.1", python="3.12.3")
SETTINGS = results.GateSettings(seeds=1, timeout=600.0, max_slowdown=0.01, strict=True)
MODELS = ["elementwise_chain", "gather_rows", "rms_norm", "sum_reduce"]  # shards of 2: 2, 1, 1, 2


def _items(model: str) -> list[results.ItemResult]:
    problem = f"problems/{model}.py"
    return [results.ItemResult(nodeid=f"{problem}::triton_poi_0", problem=problem, model=model, kernel="triton_poi_0",
                               item="kernel", outcome="passed", status="committed", version=1),
            results.ItemResult(nodeid=f"{problem}::model", problem=problem, model=model, item="model",
                               outcome="passed", kernels=1, committed=1, stale=0, baseline=0)]


def _shard(k: int) -> results.GateResult:
    mine = [m for m in MODELS if shard_of(m, 2) == k]
    return results.gate_result(shard=Shard(k, 2), problems=mine, environment=ENV, settings=SETTINGS,
                               items=[i for m in mine for i in _items(m)], run_problems=MODELS)


def _drop_items(model: str):
    return lambda s1, s2: s1.items.__setitem__(slice(None), [i for i in s1.items if i.model != model])


def _duplicate(s1: results.GateResult, s2: results.GateResult) -> None:
    s1.items.append(s1.items[0])


def _move(s1: results.GateResult, s2: results.GateResult) -> None:
    """An item of shard 2 put into shard 1's file (and taken out of shard 2's)."""
    moved = next(i for i in s2.items if i.item == "kernel")
    s2.items.remove(moved)
    s1.items.append(moved)


def _drop_problem(s1: results.GateResult, s2: results.GateResult) -> None:
    """Shard 1 leaves out a problem of its own, items and all: nothing else names it."""
    s1.problems.remove("rms_norm")
    s1.items[:] = [i for i in s1.items if i.model != "rms_norm"]


def _drop_kernel_item(s1: results.GateResult, s2: results.GateResult) -> None:
    s1.items[:] = [i for i in s1.items if not (i.model == "gather_rows" and i.item == "kernel")]


def _forge_plan(s1: results.GateResult, s2: results.GateResult) -> None:
    """Shard 1 claims a shorter run so that its missing problem looks planned elsewhere."""
    s1.run_problems = [m for m in MODELS if m != "rms_norm"]


def _other_tool(s1: results.GateResult, s2: results.GateResult) -> None:
    s1.tool_version = "0.0.1"


def _older_writer(s1: results.GateResult, s2: results.GateResult) -> None:
    s1.run_problems = None


def _mislabelled(s1: results.GateResult, s2: results.GateResult) -> None:
    """A shard-2 model's item relabelled as a shard-1 model's, node id left alone."""
    item = next(i for i in s1.items if i.item == "kernel")
    s1.items[s1.items.index(item)] = item.model_copy(update={"nodeid": "problems/sum_reduce.py::triton_poi_9"})


def _flip(s1: results.GateResult, s2: results.GateResult) -> None:
    """A failing item's outcome turned to passed, its status and message left as the gate wrote them."""
    item = next(i for i in s1.items if i.item == "kernel")
    s1.items[s1.items.index(item)] = item.model_copy(update={"outcome": "passed", "status": "broken",
                                                             "message": "v1.py: contents differ from the sha256"})


def _uncounted(s1: results.GateResult, s2: results.GateResult) -> None:
    """A kernel item dropped and its model item's count removed, so that no count gives it away."""
    _drop_kernel_item(s1, s2)
    item = next(i for i in s1.items if i.model == "gather_rows")
    s1.items[s1.items.index(item)] = item.model_copy(update={"kernels": None})


def _timed_on_a_cpu(s1: results.GateResult, s2: results.GateResult) -> None:
    item = next(i for i in s1.items if i.item == "model")
    s1.items[s1.items.index(item)] = item.model_copy(update={"speed_measured": True, "speedup": 1.8,
                                                             "speedup_ci": [1.7, 1.9], "gpu": "NVIDIA H200"})


FORGED = {
    "failing_item_flipped_to_passed": (_flip, "passed with status 'broken', which only a failing or skipped item has"),
    "kernel_count_removed": (_uncounted, "passed without counting its kernels"),
    "speed_figures_on_a_cpu_run": (_timed_on_a_cpu, "carries speed figures, but the run was on cpu, where nothing is "
                                                    "timed"),
    "items_of_a_problem_missing": (_drop_items("gather_rows"),
                                   "s1.json (shard 1/2): model gather_rows is planned in this shard but its items "
                                   "are missing"),
    "duplicated_item": (_duplicate, "s1.json (shard 1/2): item problems/gather_rows.py::model appears twice"),
    "item_in_the_wrong_shard": (_move, "s1.json (shard 1/2): item problems/elementwise_chain.py::triton_poi_0 is in "
                                       "the wrong shard (model elementwise_chain belongs to shard 2/2)"),
    "problem_left_out": (_drop_problem, "s1.json (shard 1/2): its problems are not the ones the shard plan gives it; "
                                        "missing rms_norm"),
    "kernel_item_missing": (_drop_kernel_item, "s1.json (shard 1/2): model gather_rows has 0 kernel item(s), but its "
                                               "model item counted 1 kernels"),
    "forged_plan": (_forge_plan, "ran over different problem lists (differing: rms_norm)"),
    "other_tool_version": (_other_tool, "were written by different versions of pytest-kernelopt"),
    "no_problem_list": (_older_writer, "s1.json (shard 1/2): records no problem list of the run"),
    "malformed_item": (_mislabelled, "s1.json (shard 1/2): item 'problems/sum_reduce.py::triton_poi_9' is malformed"),
}


def test_an_honest_pair_of_shards_merges(tmp_path: Path, kernelopt: Any) -> None:
    for k in (1, 2):
        results.write(_shard(k), tmp_path / f"s{k}.json")
    done = kernelopt("merge", "s1.json", "s2.json", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert "8 passed" in done.stdout


@pytest.mark.parametrize("case", list(FORGED))
def test_merge_refuses_a_forged_or_partial_shard(case: str, tmp_path: Path, kernelopt: Any) -> None:
    forge, message = FORGED[case]
    s1, s2 = _shard(1), _shard(2)
    forge(s1, s2)
    (tmp_path / "s1.json").write_text(dump_json(s1))
    (tmp_path / "s2.json").write_text(dump_json(s2))
    done = kernelopt("merge", "s1.json", "s2.json", "--json", "merged.json", cwd=tmp_path)
    assert done.returncode == 2, done.stdout + done.stderr
    assert message in done.stderr, done.stderr
    assert not (tmp_path / "merged.json").exists()


def test_merge_errors_quote_result_files_inertly(tmp_path: Path, kernelopt: Any) -> None:
    s1, s2 = _shard(1), _shard(2)
    s1.items.append(s1.items[0].model_copy(update={"nodeid": "x\x1b[2Jy"}))
    (tmp_path / "s1.json").write_text(dump_json(s1))
    (tmp_path / "s2.json").write_text(dump_json(s2))
    done = kernelopt("merge", "s1.json", "s2.json", cwd=tmp_path)
    assert done.returncode == 2 and "\x1b" not in done.stderr and "\\x1b[2J" in done.stderr, done.stderr


# --- 7. reports treat candidate text as data ---------------------------------------------------

def _markdown_html(text: str) -> str:
    """What GitHub makes of the Markdown: CommonMark with tables (markdown-it-py, as rich ships it)."""
    from markdown_it import MarkdownIt

    return MarkdownIt("commonmark").enable("table").render(text)


def _assert_inert_html(html: str) -> None:
    assert "<h1>Heading" not in html and "<h1>closed" not in html
    assert "<a href" not in html and "<img" not in html and "<strong>bold" not in html
    assert "\x1b" not in html and "\r" not in html and "\u202e" not in html
    assert "&lt;img src=x onerror=alert(1)&gt;" in html  # shown, as text
    assert "\\x1b[2J" in html


def _gate_result() -> results.GateResult:
    problem = "problems/rms_norm.py"
    items = [results.ItemResult(nodeid=f"{problem}::triton_per_fused_0", problem=problem, model="rms_norm",
                                kernel="triton_per_fused_0", item="kernel", outcome="failed", status="rejected",
                                message=f"kernel stage: {PAYLOAD}"),
             results.ItemResult(nodeid=f"{problem}::model", problem=problem, model="rms_norm", item="model",
                                outcome="skipped", message=f"skipped: {PAYLOAD}")]
    return results.gate_result(shard=None, problems=["rms_norm"], environment=ENV, settings=SETTINGS, items=items)


def test_gate_report_shows_a_hostile_reason_as_text(tmp_path: Path) -> None:
    from pytest_kernelopt.report.gate import render_gate_report

    text = render_gate_report(_gate_result())
    assert "\x1b" not in text and "\r" not in text
    assert "\n# Heading" not in text and "\n# closed the fence" not in text.split("## Failures")[0]
    _assert_inert_html(_markdown_html(text))
    # The failure's whole text is kept, in a fence longer than the candidate's own backtick runs.
    assert "``````\nkernel stage: # Heading\n[link](http://x)" in text


def test_tuning_report_and_pull_request_body_show_a_hostile_reason_as_text(tmp_path: Path) -> None:
    import synthetic_run as s
    from pytest_kernelopt.runs.trace import load_run
    from pytest_kernelopt.report import build_view, render_report

    outcome = s.softmax_outcome(s.variant(64), 1)
    outcome.history[0].status, outcome.history[0].stage, outcome.history[0].reason = "rejected", "kernel", PAYLOAD
    outcome.message = PAYLOAD
    outcome.best_origin = "[origin](http://x)"
    run_dir = s.write_run(tmp_path / "runs", tmp_path / "kernels", [s.softmax_problem(outcome)])
    view = build_view(*load_run(run_dir))
    markdown = render_report(view, "md")  # also the pull request's body (gitops renders it so)
    assert "\x1b" not in markdown and "\r" not in markdown
    _assert_inert_html(_markdown_html(markdown))
    html = render_report(view, "html")
    assert "<img src=x" not in html and "\x1b" not in html and "&lt;img src=x onerror=alert(1)&gt;" in html


def test_untrusted_text_is_capped_and_fenced_past_any_backtick_run() -> None:
    from pytest_kernelopt.report.untrusted import INLINE_LIMIT, md_block, md_cell, md_inline

    span = md_inline("a" * 5000)
    assert len(span) < INLINE_LIMIT + 100 and "more characters" in span
    assert md_inline("``x`") == "``` ``x` ```"
    assert md_cell("a | b") == "` a \\| b `"
    assert md_block("```\n````").startswith("`````\n")
    table = _markdown_html("| a |\n|---|\n| " + md_cell("x | <b>y</b>") + " |\n")
    assert "<td><code>x | &lt;b&gt;y&lt;/b&gt;</code></td>" in table and table.count("<td>") == 1


def test_the_terminal_and_junit_get_no_control_characters() -> None:
    from pytest_kernelopt.gate import GateFailure, GateItem
    from pytest_kernelopt.report import gate_lines

    text = GateItem.repr_failure(None, SimpleNamespace(value=GateFailure(PAYLOAD)))  # type: ignore[arg-type]
    assert "\x1b" not in text and "\r" not in text and "\u202e" not in text and "\\x1b[31mPASSED" in text
    rows = [("problems/x\x1b[2J.py::model", "passed",
             {"item": "model", "committed": 0, "stale": 0, "baseline": 1, "recorded_note": PAYLOAD,
              "orphaned": ["gone\x1b[31m"]})]
    lines = gate_lines(rows)
    assert lines and not any("\x1b" in line or "\r" in line for line in lines), lines
    lines = summary_lines(_gate_result().model_copy(
        update={"environment": ENV.model_copy(update={"torch": "2.13\x1b[2J"})}))
    assert not any("\x1b" in line for line in lines)
