"""``kernelopt refresh`` in interpreter mode: recipes recorded at accept, replayed after the compiler's
kernel changed (here: the problem's eps and batch size changed, as a compiler upgrade changes the source).

One problem (rms_norm, one kernel), compiled twice in verification sessions (before and after the
change) for the whole module; each recipe lives in a kernel store of its own.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from conftest import TESTS

pytest_plugins = ["pytester"]

KERNEL = "triton_per_fused_add_mean_mul_pow_rsqrt_0"
# The launch version's manifest entry with a forged recipe (issue 40, class 6): other launch
# values than the file's (XBLOCK=2, num_warps=1), and a rewrite the file never had.
FORGED = {
    "forged-launch": {"launch": {"XBLOCK": 1, "num_warps": 8, "num_stages": 1}},
    "forged-rewrite": {"kind": "rewrite", "rewrites": [{"rule": "approx-div", "params": {}}]},
}
GRID = "grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)"


def _problem(folder: Path, batch: int, eps: str) -> Path:
    """rms_norm with ``batch`` and ``eps``, and 2 rows per batch instead of 8; the 64-long reduction is unchanged.
    Batches 4 and 5 (8 and 10 rows) both launch 8 rows per program in interpreter mode (Inductor's largest
    configuration for up to 16 rows, ``interpret._fewest_programs``), so an edit next to the launch replays."""
    text = (TESTS / "problems" / "rms_norm.py").read_text()
    text = text.replace("(2, 8, 64)", f"({batch}, 2, 64)").replace("return [HIDDEN, 1e-6]", f"return [HIDDEN, {eps}]")
    assert f"({batch}, 2, 64)" in text and eps in text
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "rms_norm.py").write_text(text)
    return folder / "rms_norm.py"


@pytest.fixture(scope="module")
def refreshed(tmp_path_factory: pytest.TempPathFactory, interpreter: str) -> dict[str, Any]:
    """Five stores, each with v1 of the kernel made one way, accepted against the old problem; then the problem
    changes and each store is refreshed against the new one. A copy of the launch store, still stale, is kept
    for the gate test."""
    from pytest_kernelopt.candidate.launch_space import with_point
    from pytest_kernelopt.candidate.rewrites import approximate_divisions
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.agents.refresh import Refresher
    from pytest_kernelopt.store import KernelStore, accept_verdict
    from pytest_kernelopt.verify import VerifySession, source_of
    from pytest_kernelopt.verify.options import VerifyOptions

    root = tmp_path_factory.mktemp("refresh")
    options = VerifyOptions(seeds=1, timeout=300)
    old_problem = _problem(root / "old", batch=4, eps="1e-6")
    with VerifySession(old_problem, interpreter, options) as session:
        info = session.kernel_info(KERNEL)
        original = render_dump(info, "rms_norm")
        candidates = {
            "launch": with_point(original, {"XBLOCK": 2, "num_warps": 1}),
            "rewrite": approximate_divisions(original),
            "legacy": with_point(original, {"XBLOCK": 4}),  # its manifest entry will lose its recipe (schema 2)
            "edit-stale": original.replace("tmp9 = tmp7 + tmp8", "tmp9 = tmp8 + tmp7"),  # beside the eps line
            "edit-wrong": original.replace(GRID, "grid = (1, 1, 1)"),  # one program of 8 rows: right for batch 4 only
        }
        stores = {}
        for name, text in candidates.items():
            assert text != original, name
            verdict = session.verify(KERNEL, source_of(text, name))
            assert verdict.status == "correct", (name, verdict.reason)
            stores[name] = KernelStore(root / f"kernels-{name}")
            assert accept_verdict(stores[name], "rms_norm", KERNEL, text, verdict).stored
            if name == "launch":  # the same reviewed file, whose manifest recipe is then forged
                for forged in FORGED:
                    stores[forged] = KernelStore(root / f"kernels-{forged}")
                    assert accept_verdict(stores[forged], "rms_norm", KERNEL, text, verdict).stored
    manifests = {name: json.loads((s.kernel_dir("rms_norm", KERNEL) / "manifest.json").read_text())
                 for name, s in stores.items()}
    for forged, recipe in FORGED.items():
        path = stores[forged].kernel_dir("rms_norm", KERNEL) / "manifest.json"
        data = json.loads(path.read_text())
        data["versions"][0]["recipe"] = {**data["versions"][0]["recipe"], **recipe}
        path.write_text(json.dumps(data))
    legacy = stores["legacy"].kernel_dir("rms_norm", KERNEL) / "manifest.json"
    data = json.loads(legacy.read_text())
    data["schema_version"] = 2
    del data["versions"][0]["recipe"]
    legacy.write_text(json.dumps(data))
    gate_kernels = root / "gate-kernels"
    shutil.copytree(stores["launch"].root, gate_kernels)

    new_problem = _problem(root / "new", batch=5, eps="1e-5")
    results = {}
    with VerifySession(new_problem, interpreter, options) as session:
        new_info = session.kernel_info(KERNEL)
        for name, store in stores.items():
            results[name] = Refresher(store, interpreter).refresh_problem(new_problem, session)
    return {"original": original, "candidates": candidates, "stores": stores, "manifests": manifests,
            "results": results, "old_info": info, "new_info": new_info, "new_problem": new_problem,
            "gate_kernels": gate_kernels, "new_original": render_dump(new_info, "rms_norm")}


def _only(refreshed: dict[str, Any], name: str) -> Any:
    result = refreshed["results"][name]
    assert result.error is None and len(result.kernels) == 1, result
    return result.kernels[0]


def _manifest(refreshed: dict[str, Any], name: str) -> Any:
    return refreshed["stores"][name].manifest("rms_norm", KERNEL)


def test_accept_records_how_each_version_was_made(refreshed: dict[str, Any]) -> None:
    recipes = {name: m["versions"][0]["recipe"] for name, m in refreshed["manifests"].items()}
    assert all(m["schema_version"] == 4 for m in refreshed["manifests"].values())
    assert recipes["launch"]["kind"] == "launch"
    assert recipes["launch"]["launch"] == {"XBLOCK": 2, "num_warps": 1, "num_stages": 1}
    assert recipes["launch"]["compiler_launch"] == {"XBLOCK": 8, "num_warps": 2, "num_stages": 1}
    assert recipes["rewrite"]["kind"] == "rewrite" and recipes["rewrite"]["rewrites"] == [
        {"rule": "approx-div", "params": {}}]
    assert recipes["edit-wrong"]["kind"] == "edit" and "+    grid = (1, 1, 1)" in recipes["edit-wrong"]["diff"]
    assert all(r["base_fingerprint"] == refreshed["old_info"].fingerprint for r in recipes.values())


@pytest.mark.parametrize("forged", sorted(FORGED))
def test_a_recipe_that_does_not_reproduce_its_file_is_refused_and_nothing_stored(refreshed: dict[str, Any],
                                                                                 forged: str) -> None:
    """The reviewed v1 is the honest launch version; its manifest recipe says something else. Replayed, the
    forged recipe would give code nobody reviewed (another launch, or a rewrite the file never had)."""
    k = _only(refreshed, forged)
    store = refreshed["stores"][forged]
    folder = store.kernel_dir("rms_norm", KERNEL)
    assert k.status == "not refreshable" and k.new_version is None and k.speed_after is None, k.reason
    assert f"{folder / 'manifest.json'}: the recipe recorded for v1 of rms_norm/{KERNEL} does not reproduce " \
           f"{folder / 'v1.py'}" in k.reason
    assert "`kernelopt refresh` derives one from the files" in k.reason and "`kernelopt tune`" in k.reason
    manifest = store.manifest("rms_norm", KERNEL)
    assert [v.version for v in manifest.versions] == [1] and manifest.active is None
    assert sorted(p.name for p in folder.iterdir()) == ["manifest.json", "original.py", "v1.py"]  # no v2
    # The honest store of the same file and verdict refreshed: only the recipe differs.
    assert _only(refreshed, "launch").status == "refreshed"


def test_the_store_check_fails_a_folder_whose_recipe_is_forged(refreshed: dict[str, Any]) -> None:
    """What the gate's kernel item runs first: the forged recipe is an integrity failure like a sha256 mismatch."""
    from pytest_kernelopt.errors import StoreError

    for forged in FORGED:
        with pytest.raises(StoreError, match="does not reproduce .*v1.py: replayed on the recorded compiler kernel "
                                             "it gives other code than the version"):
            refreshed["stores"][forged].check("rms_norm", KERNEL)
    for honest in ("launch", "rewrite", "legacy", "edit-stale", "edit-wrong"):
        assert refreshed["stores"][honest].check("rms_norm", KERNEL) is not None


def test_the_problem_change_changed_the_compiler_kernel(refreshed: dict[str, Any]) -> None:
    assert refreshed["old_info"].fingerprint != refreshed["new_info"].fingerprint


def test_a_launch_recipe_is_replayed_and_stored_as_a_new_version(refreshed: dict[str, Any]) -> None:
    from pytest_kernelopt.candidate.launch_space import with_point

    k = _only(refreshed, "launch")
    assert (k.status, k.version, k.new_version, k.successor, k.match) == ("refreshed", 1, 2, KERNEL, "same name")
    assert "speed not measured (interpreter mode): stored because correct" in k.reason
    manifest = _manifest(refreshed, "launch")
    folder = refreshed["stores"]["launch"].kernel_dir("rms_norm", KERNEL)
    assert manifest.active == 2 and manifest.fingerprint == refreshed["new_info"].fingerprint
    assert (folder / "v1.py").read_text() == refreshed["candidates"]["launch"]  # kept
    expected = with_point(refreshed["new_original"], {"XBLOCK": 2, "num_warps": 1, "num_stages": 1})
    assert (folder / "v2.py").read_text() == expected
    v2 = manifest.version(2)
    assert v2.recipe.kind == "launch" and v2.recipe.base_fingerprint == refreshed["new_info"].fingerprint
    assert v2.provenance.refreshed_from == 1 and v2.provenance.backend == "search"
    assert v2.provenance.compiler_before == v2.provenance.compiler_after  # the same torch here: a changed model
    assert v2.provenance.compiler_after.startswith("torch ")
    assert v2.unverified_reason(refreshed["new_info"].fingerprint) is None  # production runs it


def test_a_rewrite_recipe_is_replayed(refreshed: dict[str, Any]) -> None:
    k = _only(refreshed, "rewrite")
    assert (k.status, k.new_version) == ("refreshed", 2), k.reason
    assert k.recipe.startswith("rewrite approx-div")
    v2 = refreshed["stores"]["rewrite"].active_file("rms_norm", KERNEL)
    assert v2.record.version == 2 and "tl.fdiv(" in v2.source and "1e-05" in v2.source
    assert [s.rule for s in v2.record.recipe.rewrites] == ["approx-div"]


def test_a_manifest_without_recipes_is_refreshed_from_a_derived_recipe(refreshed: dict[str, Any]) -> None:
    k = _only(refreshed, "legacy")
    assert (k.status, k.recipe_derived, k.new_version) == ("refreshed", True, 2), k.reason
    assert "XBLOCK=4" in k.recipe
    assert _manifest(refreshed, "legacy").schema_version == 4


def test_an_edit_that_no_longer_applies_is_reported_and_the_kernel_retired(refreshed: dict[str, Any]) -> None:
    k = _only(refreshed, "edit-stale")
    assert k.status == "not refreshable" and k.new_version is None
    assert "does not apply" in k.reason and "not refreshable by the search backend" in k.reason
    manifest = _manifest(refreshed, "edit-stale")
    assert manifest.active is None and manifest.retired.version == 1 and "does not apply" in manifest.retired.reason
    folder = refreshed["stores"]["edit-stale"].kernel_dir("rms_norm", KERNEL)
    assert (folder / "v1.py").is_file() and not (folder / "v2.py").exists()  # retired, not deleted
    assert refreshed["stores"]["edit-stale"].active_file("rms_norm", KERNEL) is None  # the compiler's kernel runs


def test_a_replayed_kernel_that_is_now_wrong_is_not_stored(refreshed: dict[str, Any]) -> None:
    k = _only(refreshed, "edit-wrong")
    assert k.status == "retired" and "rejected at kernel" in k.reason, k.reason
    assert "re-applied as a patch" in k.reason
    manifest = _manifest(refreshed, "edit-wrong")
    assert manifest.active is None and [v.version for v in manifest.versions] == [1]
    assert not (refreshed["stores"]["edit-wrong"].kernel_dir("rms_norm", KERNEL) / "v2.py").exists()


def test_the_table_says_what_happened_to_each_kernel(refreshed: dict[str, Any]) -> None:
    from rich.console import Console

    from pytest_kernelopt.agents.refresh import RefreshRecord
    from pytest_kernelopt.report.terminal import refresh_table

    record = RefreshRecord(device="cpu", kernels_dir="k", problems=list(refreshed["results"].values()))
    console = Console(width=300, record=True)
    console.print(refresh_table(record))
    text = console.export_text()
    assert text.count("refreshed") >= 3 and "not refreshable" in text and "retired" in text
    assert "v2: not measured" in text


def test_patches_apply_at_an_offset_and_fail_naming_the_hunk() -> None:
    from pytest_kernelopt.store.recipe import apply_patch, unified_diff

    before = "".join(f"line {i}\n" for i in range(20))
    after = before.replace("line 10\n", "line ten\n")
    diff = unified_diff(before, after)
    moved = "extra\nextra\n" + before
    assert apply_patch(moved, diff) == ("extra\nextra\n" + after, "")
    patched, why = apply_patch(before.replace("line 9\n", "line nine\n"), diff)
    assert patched is None and "hunk 1 of 1" in why and "does not apply" in why


def test_an_edit_recipe_leaves_the_docstring_out_so_a_new_fingerprint_does_not_break_it() -> None:
    """A dump's docstring names its compiler kernel's fingerprint; an edit within three lines of it (or
    a harvested kernel accepted by hand, whose docstring differs) used to record a hunk that never applied."""
    from pytest_kernelopt.store.recipe import derive_recipe, replay

    def dump(fingerprint: str, body: str) -> str:
        return (f'"""kernelopt candidate.\n\nDumped (fingerprint {fingerprint}).\n"""\nimport triton\n'
                f"import triton.language as tl\n\n\n@triton.jit\ndef k(x):\n{body}")

    old = dump("aaaa", "    y = x + 1\n    return y\n")
    version = dump("aaaa", "    y = x + 1.0\n    return y\n").replace("kernelopt candidate.", "tuned by hand.")
    recipe = derive_recipe(old, version)
    assert recipe.kind == "edit" and recipe.diff_skips_docstring and "fingerprint" not in (recipe.diff or "")
    new = dump("bbbb", "    y = x + 1\n    return y\n")
    out = replay(recipe, new, None)  # type: ignore[arg-type]  # an edit does not read the kernel info
    assert out.source == dump("bbbb", "    y = x + 1.0\n    return y\n"), out.how
    assert "fingerprint bbbb" in out.source  # the new compiler kernel's docstring heads it
    # A recipe recorded before the change (whole-file diff) is still replayed as it was written.
    legacy = recipe.model_copy(update={"diff_skips_docstring": False, "diff": None})
    assert replay(legacy, new, None).source == new  # type: ignore[arg-type]


def test_a_rewrite_with_nothing_left_to_rewrite_is_skipped_and_the_rest_replayed() -> None:
    """Seen on the H200: cross_entropy with one more row had no division left for approx-div; the recipe
    was reported not refreshable although its eviction rewrite still applied."""
    from pytest_kernelopt.store.recipe import Recipe, RewriteStep, replay

    kernel = ('import triton\nimport triton.language as tl\n\n\n@triton.jit\ndef k(in_ptr0, out_ptr0):\n'
              "    x = tl.load(in_ptr0 + 0, eviction_policy='evict_last')\n    tl.store(out_ptr0 + 0, x * 2.0)\n")
    both = Recipe(kind="rewrite", rewrites=[RewriteStep(rule="approx-div"), RewriteStep(rule="eviction")])
    out = replay(both, kernel, None)  # type: ignore[arg-type]  # no launch: the kernel info is not read
    assert out.source == kernel.replace(", eviction_policy='evict_last'", "")
    assert "approx-div skipped" in out.how and "rewrite eviction" in out.how
    only_div = Recipe(kind="rewrite", rewrites=[RewriteStep(rule="approx-div")])
    out = replay(only_div, kernel, None)  # type: ignore[arg-type]
    assert out.source is None and "nothing of the recipe changes the new compiler kernel" in out.how


def test_a_successor_is_found_by_structure_when_the_name_changed(refreshed: dict[str, Any]) -> None:
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.agents.refresh import find_successor

    info = refreshed["new_info"]
    renamed = info.model_copy(update={"name": "triton_per_fused_add_mean_mul_pow_rsqrt_3"})
    found = find_successor(KERNEL, refreshed["original"], {renamed.name: renamed}, set(),
                           lambda k: render_dump(k, "rms_norm"))
    assert found is not None and found[0] == renamed.name and "same fused operations" in found[1]
    assert find_successor(KERNEL, refreshed["original"], {renamed.name: renamed}, {renamed.name},
                          lambda k: render_dump(k, "rms_norm")) is None


@pytest.mark.slow
def test_the_stale_gate_fails_before_and_passes_after_refresh(refreshed: dict[str, Any],
                                                              pytester: pytest.Pytester) -> None:
    (pytester.path / "problems").mkdir()
    shutil.copy(refreshed["new_problem"], pytester.path / "problems")
    shutil.copytree(refreshed["gate_kernels"], pytester.path / "kernels")
    (pytester.path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n')
    args = ("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p", "no:cacheprovider", "-ra")
    before = pytester.runpytest_subprocess(*args)
    assert before.ret == 1
    assert "stale:" in before.stdout.str()
    after = pytester.runpytest_subprocess(*args, "--kernelopt-refresh")
    out = after.stdout.str()
    assert after.ret == 0, out
    assert f"kernelopt refresh: rms_norm/{KERNEL} v1: refreshed" in out
    manifest = json.loads((pytester.path / "kernels" / "rms_norm" / KERNEL / "manifest.json").read_text())
    assert manifest["active"] == 2 and manifest["versions"][1]["provenance"]["refreshed_from"] == 1
    run_dirs = list((pytester.path / ".kernelopt" / "runs").iterdir())
    assert len(run_dirs) == 1 and (run_dirs[0] / "refresh.json").is_file() and (run_dirs[0] / "run.json").is_file()
