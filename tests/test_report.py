"""The report of a tuning run, rendered from a synthetic run directory (records only, no compile)."""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import synthetic_run as s

from pytest_kernelopt.runs.records import ProblemOutcome
from pytest_kernelopt.cli import main
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.report import build_view, render_report, write_report
from pytest_kernelopt.runs.trace import load_run

ROOT = Path(__file__).resolve().parent.parent


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


@pytest.fixture
def run(tmp_path):
    return s.standard_run(tmp_path)


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    return struct.unpack(">II", data[16:24])


def test_markdown_report_shows_the_records_figures(run):
    run_dir, kernels = run
    files = write_report(run_dir)
    assert files.report == run_dir / "report.md" and files.chart == run_dir / "speedup.png"
    text = files.report.read_text()
    # environment and agent
    for row in ("| GPU | NVIDIA H200 |", "| torch | 2.11.0 |", "| triton | 3.6.0 |", "| CUDA | 13.0 |",
                "| agent backend | search |", "| budget | 3600 s |"):
        assert row in text
    # per model: baseline, tuned, speedup [CI], Triton share, stored count; rms_norm unchanged
    assert ("| softmax_rows | `models/softmax_rows.py` | 0.61 | 0.53 | 1.151x [1.131, 1.171] | 83.0% | 1 of 1 |"
            in text)
    # the Triton share with what kernel swaps could give the model at most (swap_bound), where measured
    assert "| rms_norm | `models/rms_norm.py` | - | - | unchanged | 35.0% (1.012x) | 0 of 1 |" in text
    # per kernel: class, percent of the memory limit (compiler's -> the stored version's: 62.5% x its kernel
    # speedup 1.41), share, candidates, stages, result, speedup, errors vs float64
    assert (f"| `{s.SOFTMAX_KERNEL}` | memory | 62.5% / - -> 88.1% | 71.0% | 5 | reviewed 1, static 1, kernel 1, correct 1, "
            f"accepted 1 | stored v1 | 1.184x [1.164, 1.204] | 2.4e-06 / 1.5e-06 |") in text
    assert f"| `{s.RMS_KERNEL}` | launch | 11.0% / - | 35.0% | 3 | model 3 | no candidate passed | - | - |" in text
    # Reasons are the candidate's words: a code span (tests/test_trust_gate.py attacks it).
    assert "- kernel: ` out_ptr0: 12 of 4096 written values differ (max abs 0.5) `" in text
    assert "- model (x3): ` error vs float64 9.1e-03 exceeds 4x the compiled baseline's 1.2e-06 `" in text
    # the diff against the compiler's original, and the chart beside the report
    diff = text.split("```diff\n", 1)[1].split("```", 1)[0]
    assert diff.startswith(f"--- {s.SOFTMAX}/{s.SOFTMAX_KERNEL}/original.py\n+++ {s.SOFTMAX}/{s.SOFTMAX_KERNEL}/v1.py")
    assert "-    XBLOCK = 128\n" in diff and "+    XBLOCK = 1024\n" in diff and "+    kernel[" in diff
    # how the stored version was made (its recipe), so a reader sees which rules produced it
    assert "; made by: ` rewrite reverse-pass then streaming-stores, launch R0_BLOCK=2048,num_warps=8 `" in text
    assert "![speedup per model and stored kernel](speedup.png)" in text
    assert png_size(files.chart) == (800, 210)  # two bars: the model and its stored kernel
    assert "4 event(s): benchmarker 2, run 2." in text


def test_html_report_escapes_what_agents_wrote(run, tmp_path):
    run_dir, kernels = run
    record, events = load_run(run_dir)
    attempt = record.problems[0].kernels[0].history[1]
    attempt.reason = "<script>alert(1)</script> | not allowed"
    record.problems[0].kernels[0].by_stage = {}  # counted from the history instead
    view = build_view(record, events)
    html = render_report(view, "html")
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html
    assert '<span class="add">+    XBLOCK = 1024</span>' in html
    assert "<p>Made by: rewrite reverse-pass then streaming-stores, launch R0_BLOCK=2048,num_warps=8.</p>" in html
    markdown = render_report(view, "md")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; \\| not allowed" not in markdown  # Markdown is not HTML-escaped
    assert "- static: ` <script>alert(1)</script> | not allowed `" in markdown  # a code span: shown, not run
    assert "reviewed 1, static 1, kernel 1, correct 1, accepted 1" in markdown


def test_a_kernel_with_nothing_kept_shows_its_fastest_candidate(tmp_path):
    outcome = s.softmax_outcome(s.variant(64), 1)
    outcome.stored_version = outcome.best_timing = outcome.best_sha256 = None
    outcome.history[-1].status = "correct"  # measured 1.184x but not confirmed: nothing stored
    run_dir = s.write_run(tmp_path / "runs", tmp_path / "kernels", [s.softmax_problem(outcome)])
    text = write_report(run_dir).report.read_text()
    assert "| correct, not faster | best tried 1.184x [1.164, 1.204] | 2.4e-06 / 1.5e-06 |" in text
    assert "No kernel got faster in this run: nothing was stored." in text


def test_interpreter_run_says_not_measured_and_draws_no_chart(tmp_path):
    kernels = tmp_path / "kernels"
    source = s.variant(512)
    record = s.store_version(kernels, s.SOFTMAX, s.SOFTMAX_KERNEL, source, None)
    outcome = s.softmax_outcome(source, record.version)
    outcome.best_timing = outcome.best_kernel_timing = None
    problem = ProblemOutcome(model=s.SOFTMAX, problem="p.py", device="cpu", speed_measured=False, kernels=[outcome])
    run_dir = s.write_run(tmp_path / "runs", kernels, [problem])
    files = write_report(run_dir)
    text = files.report.read_text()
    assert files.chart is None and not (run_dir / "speedup.png").exists()
    assert "Speed was **not measured** (interpreter mode)" in text
    assert "_no speed was measured in this run (interpreter mode): no chart_" in text
    assert "| softmax_rows | `p.py` | - | - | not measured |" in text
    assert "- model speedup: not measured" in text


def test_a_problem_with_shapes_has_a_row_and_a_section_per_shape(tmp_path):
    """Two shapes' outcomes of one model: each labelled ``<model>@<shape>``, as the terminal table labels them."""
    outcomes = [ProblemOutcome(model=s.SOFTMAX, problem="p.py", device="cpu", speed_measured=False, shape=shape,
                               kernels=[s.softmax_outcome(s.variant(512), None)]) for shape in ("b8", "b64")]
    for outcome in outcomes:
        outcome.kernels[0].best_timing = outcome.kernels[0].best_kernel_timing = None
    text = write_report(s.write_run(tmp_path / "runs", tmp_path / "kernels", outcomes)).report.read_text()
    for shape in ("b8", "b64"):  # "@" in a code span: no GitHub mention
        assert f"| ` softmax_rows@{shape} ` | `p.py` |" in text
        assert f"### ` softmax_rows@{shape} `" in text


def test_without_matplotlib_the_report_says_how_to_get_the_chart(run, monkeypatch):
    run_dir, _ = run
    for name in [m for m in sys.modules if m == "matplotlib" or m.startswith("matplotlib.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib raises ImportError
    files = write_report(run_dir)
    assert files.chart is None
    from pytest_kernelopt.errors import install_hint

    assert f"chart not drawn: matplotlib is not installed ({install_hint('report')})" in files.report.read_text()


def test_diff_says_why_it_is_missing(run):
    run_dir, kernels = run
    folder = kernels / s.SOFTMAX / s.SOFTMAX_KERNEL
    (folder / "v1.py").write_text((folder / "v1.py").read_text() + "# edited\n")
    text = write_report(run_dir).report.read_text()
    assert f"_no diff: {folder / 'v1.py'} is not the file the run stored" in text
    (folder / "original.py").unlink()
    text = write_report(run_dir).report.read_text()
    assert f"_no diff: cannot read {folder / 'original.py'} (No such file or directory)_" in text


def test_interrupted_run_says_so(tmp_path):
    kernels = tmp_path / "kernels"
    run_dir = s.write_run(tmp_path / "runs", kernels, [s.rms_problem()])
    record = json.loads((run_dir / "run.json").read_text())
    record.update(interrupted=True, stop_reason="Ctrl-C", finished=None)
    (run_dir / "run.json").write_text(json.dumps(record))
    text = write_report(run_dir).report.read_text()
    assert "**Interrupted**: Ctrl-C. Figures below cover what was done before the interrupt" in text
    record.update(stop_reason="terminated (SIGTERM); what was stored stays")  # it read "(Ctrl-C): terminated"
    (run_dir / "run.json").write_text(json.dumps(record))
    assert "**Interrupted**: terminated (SIGTERM); what was stored stays." in write_report(run_dir).report.read_text()
    assert "No kernel got faster in this run: nothing was stored." in text


def test_a_run_stopped_on_its_budget_names_what_it_did_not_reach(tmp_path):
    run_dir = s.write_run(tmp_path / "runs", tmp_path / "kernels", [s.rms_problem()])
    record = json.loads((run_dir / "run.json").read_text())
    record.update(stop_reason="run budget: 200 s spent", not_reached=["vit_mlp@longer", "rms_norm"])
    (run_dir / "run.json").write_text(json.dumps(record))
    text = write_report(run_dir).report.read_text()
    assert "Stopped: run budget: 200 s spent.\n" in text
    assert "Not reached: ` vit_mlp@longer, rms_norm `.\n" in text  # data from the run: a code span
    html = write_report(run_dir, fmt="html").report.read_text()
    assert "<p>Not reached: vit_mlp@longer, rms_norm.</p>" in html


def test_user_templates_override_the_bundled_ones(run, tmp_path, monkeypatch, capsys):
    run_dir, _ = run
    project = tmp_path / "project"
    (project / "templates").mkdir(parents=True)
    (project / "pyproject.toml").write_text("[project]\nname = 'x'\n")
    (project / "templates" / "report.md.j2").write_text(
        "run {{ run.run_id }}: {% for m in run.models %}{{ m.model }} {{ m.timing | ci }}; {% endfor %}\n")
    monkeypatch.chdir(project)
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out")]) == 0
    assert (tmp_path / "out" / "report.md").read_text() == \
        "run 20261201-120000: softmax_rows 1.151x [1.131, 1.171]; rms_norm -; "  # trim_blocks ate the newline
    assert capsys.readouterr().out.splitlines() == [f"wrote {tmp_path / 'out' / 'report.md'}",
                                                    f"wrote {tmp_path / 'out' / 'speedup.png'}"]
    # the HTML template is not overridden there: the bundled one is used
    assert main(["report", str(run_dir), "--out", str(tmp_path / "out"), "--format", "html"]) == 0
    assert (tmp_path / "out" / "report.html").read_text().startswith("<!DOCTYPE html>")
    # a broken template is one line naming the file and line
    (project / "templates" / "report.md.j2").write_text("line one\n{% for x in %}\n")
    assert main(["report", str(run_dir)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("kernelopt: error: ") and "report.md.j2:2: template syntax error" in err
    assert len(err.splitlines()) == 1


def test_report_of_a_folder_that_is_not_a_run_is_bad_input(tmp_path, capsys):
    assert main(["report", str(tmp_path)]) == 2
    assert capsys.readouterr().err.strip() == f"kernelopt: error: {tmp_path}: not a tuning run directory (no run.json)"
    with pytest.raises(UsageError, match="unknown report format 'pdf'"):
        render_report(build_view(*load_run(s.standard_run(tmp_path)[0])), "pdf")


def test_report_package_imports_no_renderer():
    """The gate imports pytest_kernelopt.report for its terminal table: jinja2, matplotlib and git stay out."""
    code = ("import sys, pytest_kernelopt.report, pytest_kernelopt.gitops; "
            "print(sorted(m for m in ('jinja2', 'matplotlib', 'git', 'torch') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


def _packages(root: Path) -> set[str]:
    return {".".join(p.parent.relative_to(root).parts) for p in (root / "pytest_kernelopt").rglob("__init__.py")}


def test_installed_wheel_renders_with_its_bundled_templates(tmp_path, run):
    """Build a wheel of this tree, install it into a folder, render a report with only that installation."""
    run_dir, _ = run
    src = tmp_path / "src"
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc", "_templates")
    shutil.copytree(ROOT / "pytest_kernelopt", src / "pytest_kernelopt", ignore=ignore)
    shutil.copytree(ROOT / "templates", src / "templates", ignore=ignore)
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, src / name)
    wheels = tmp_path / "wheels"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(wheels),
                    str(src)], check=True, capture_output=True, cwd=tmp_path)
    [wheel] = wheels.glob("pytest_kernelopt-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    assert {"pytest_kernelopt/_templates/report.md.j2", "pytest_kernelopt/_templates/report.html.j2"} <= names
    bundled = {f"pytest_kernelopt/_templates/{p.relative_to(src / 'templates').as_posix()}"
               for p in (src / "templates").rglob("*.j2")}
    assert bundled <= names  # every template, prompts included
    shipped = {n.rsplit("/", 1)[0].replace("/", ".") for n in names if n.endswith("/__init__.py")}
    assert _packages(src) <= shipped, "a package of the source tree is missing from pyproject's packages list"

    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--no-compile", "--target",
                    str(target), str(wheel)], check=True, capture_output=True, cwd=tmp_path)
    elsewhere = tmp_path / "elsewhere"  # no pyproject.toml, no templates/ above it
    elsewhere.mkdir()
    code = ("import sys, pytest_kernelopt, pytest_kernelopt.templates as t; from pytest_kernelopt.cli import main; "
            "print(pytest_kernelopt.__file__); print(t.bundled_dir()); "
            f"sys.exit(main(['report', {str(run_dir)!r}, '--out', 'out']))")
    env = {**os.environ, "PYTHONPATH": str(target)}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=elsewhere, env=env)
    assert out.returncode == 0, out.stderr
    module, templates = out.stdout.splitlines()[:2]
    assert Path(module).is_relative_to(target) and Path(templates) == target / "pytest_kernelopt" / "_templates"
    text = (elsewhere / "out" / "report.md").read_text()
    assert text.startswith("# kernelopt tuning run `20261201-120000`")
    assert "1.151x [1.131, 1.171]" in text and png_size(elsewhere / "out" / "speedup.png")[0] == 800


def test_paths_are_relative_to_the_repository(tmp_path):
    """A report names the kernel store and problem files as the repository does, never by the machine's paths."""
    repo = tmp_path / "runner" / "work"
    (repo / ".git").mkdir(parents=True)  # a git working tree's top
    kernels = repo / "kernels"
    source = s.variant(1024, 8)
    record = s.store_version(kernels, s.SOFTMAX, s.SOFTMAX_KERNEL, source, 1.184)
    problem = s.softmax_problem(s.softmax_outcome(source, record.version)).model_copy(
        update={"problem": str(repo / "models" / f"{s.SOFTMAX}.py"), "note": f"see {repo}/models/README"})
    run_dir = s.write_run(tmp_path / "runs", kernels, [problem])
    text = write_report(run_dir).report.read_text()
    assert "| kernel store | `kernels` |" in text and f"`models/{s.SOFTMAX}.py`" in text
    assert "see models/README" in text and str(tmp_path) not in text


def test_the_kernels_table_prints_every_kernel_name_whole_for_copying() -> None:
    """A user copies a kernel's name from `kernelopt kernels` into `--kernel`: Inductor's names run to 90
    characters, and the table once folded them across lines (found on a model indexing a table under a mask)."""
    from rich.console import Console

    from pytest_kernelopt.records import ArgInfo, CaptureSummary, ExternCallInfo, KernelInfo, LaunchConfig
    from pytest_kernelopt.report import kernels_table

    names = ["triton_per_fused__log_softmax__to_copy_add_mul_native_layer_norm_native_layer_norm_backward_0",
             "triton_poi_fused_mul_relu_1"]
    args = [ArgInfo(name=f"in_ptr{i}", kind="tensor", read=True, shape=[4096, 4096], dtype="bfloat16")
            for i in range(8)]
    summary = CaptureSummary(model="m", device="cpu", graphs=1, externs=[
        ExternCallInfo(name="extern_kernels_mm_with_a_long_name_0", graph=0, target="extern_kernels.mm")],
        kernels=[KernelInfo(name=n, function=n, graph=0, fingerprint="0123456789abcdef", args=args,
                            launch=LaunchConfig(), source="") for n in names])
    console = Console(width=160, record=True)
    console.print(kernels_table(summary))
    lines = console.export_text().splitlines()
    for name in [*names, "extern_kernels_mm_with_a_long_name_0", "0123456789abcdef"]:
        assert any(name in line for line in lines), name


def test_a_training_steps_long_kernel_names_leave_the_other_columns_whole(capsys) -> None:
    """A training step's backward kernel names run to 140 characters (found on a decoder layer with a tied
    head): at 160 columns the kind, graph, pass and fingerprint columns were cut to an ellipsis. The table
    now prints as wide as it must."""
    from pytest_kernelopt.records import ArgInfo, CaptureSummary, KernelInfo, LaunchConfig
    from pytest_kernelopt.report import kernels_table, print_table

    name = ("triton_per_fused__softmax_backward_data_bitwise_not_div_masked_fill_nll_loss_forward_slice_view_"
            "add_embedding_dense_backward_native_layer_norm_6__bwd")
    assert len(name) > 140
    args = [ArgInfo(name=f"in_ptr{i}", kind="tensor", read=True, shape=[4096, 4096], dtype="bfloat16") for i in range(4)]
    summary = CaptureSummary(model="m", device="cpu", graphs=2, externs=[], kernels=[
        KernelInfo(name=name, function=name, graph=1, fingerprint="0123456789abcdef", args=args, launch=LaunchConfig(),
                   source="", backward=True)])
    print_table(kernels_table(summary))
    text = capsys.readouterr().out
    assert "…" not in text
    for word in (name, "triton", "backward", "0123456789abcdef", "fingerprint", "arguments", "in_ptr3"):
        assert word in text, word


def test_a_stored_versions_figures_come_from_the_store_and_nothing_is_timed_off_a_gpu(run):
    """run.json is data: edited to claim 3.0x for the stored version, the report still shows the 1.184x its
    manifest's evidence records (what the gate re-verifies); a record of a CPU run shows no timing at all."""
    run_dir, kernels = run
    record, events = load_run(run_dir)
    stored = record.problems[0].kernels[0]
    stored.best_timing = s.timing(3.0)
    view = build_view(record, events, kernels)
    (kernel,) = view.models[0].kernels
    assert kernel.timing is not None and kernel.timing.speedup == 1.184
    stored.best_sha256 = "f" * 64  # bytes the store does not hold for that version: no figure
    (kernel,) = build_view(record, events, kernels).models[0].kernels
    assert kernel.timing is None
    record.environment = record.environment.model_copy(update={"device": "cpu", "gpu": None})
    view = build_view(record, events, kernels)
    assert view.models[0].timing is None
    assert all(k.timing is None and k.kernel_timing is None for m in view.models for k in m.kernels)
