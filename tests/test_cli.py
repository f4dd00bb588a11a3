"""The ``kernelopt`` command and its configuration (``[tool.kernelopt]``, ``--device``).

Command-line tests run the installed command in a subprocess, as a user would.
"""

from __future__ import annotations

import ast
import re
import shlex
import shutil
import textwrap
from pathlib import Path

import pytest

from pytest_kernelopt.config import load_config, resolve_device
from pytest_kernelopt.errors import UsageError

REPO = Path(__file__).resolve().parent.parent

PROBLEMS = Path(__file__).parent / "problems"


def cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def assert_one_error_line(result, *fragments: str) -> None:
    """Exit code 2 and a single ``kernelopt: error:`` line on stderr, no traceback."""
    lines = result.stderr.splitlines()
    assert result.returncode == 2, result.stderr
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("kernelopt: error: ")
    for fragment in fragments:
        assert fragment in lines[0]


# --- kernelopt kernels ------------------------------------------------------------------

@pytest.mark.slow
def test_kernels_table_lists_triton_kernels_and_extern_calls(kernelopt, compiled_models):
    path = PROBLEMS / "linear_gelu.py"
    result = kernelopt("kernels", path)

    assert result.returncode == 0, result.stderr
    for name in compiled_models.get(path).kernels:
        assert name in result.stdout
    assert re.search(r"addmm_0\W+extern\W", result.stdout)  # the row of the GEMM is an extern call
    assert "extern_kernels.addmm" in result.stdout
    assert result.stderr.startswith("settings: ")  # like every command
    assert "Dynamo broke" not in result.stderr


def test_a_graph_break_is_named_where_the_kernels_are_listed(compiled_models):
    """Code past a graph break is another graph or runs eagerly, unseen by Inductor: capture keeps Dynamo's reason
    (one line each) for `kernelopt kernels` to say; a model without a break has none."""
    breaks = compiled_models.get(PROBLEMS / "small_mlp_graph_break.py").graph_breaks
    assert len(breaks) == 1 and "torch._dynamo.graph_break()" in breaks[0] and "\n" not in breaks[0], breaks
    assert compiled_models.get(PROBLEMS / "softmax_rows.py").graph_breaks == []


def _tiny_problem(folder: Path, name: str, args: str, returns: str, inputs: str) -> Path:
    """A problem file ``folder/name.py`` whose ``forward(self, args)`` returns ``returns``, drawn as ``inputs``."""
    problem = folder / f"{name}.py"
    problem.write_text(f"import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, {args}):\n"
                       f"        return {returns}\n\n\ndef get_inputs():\n    return [{inputs}]\n"
                       "\n\ndef get_init_inputs():\n    return []\n")
    return problem


@pytest.mark.slow  # compiles the problem in a kernelopt process
def test_kernels_says_when_there_is_no_triton_kernel(kernelopt, tmp_path):
    problem = _tiny_problem(tmp_path, "plain_matmul", "a, b", "a @ b", "torch.randn(8, 8), torch.randn(8, 8)")
    result = kernelopt("kernels", problem)
    assert result.returncode == 0, result.stderr
    assert "plain_matmul: no Triton kernels: Inductor generated none; the model runs 1 extern call(s) " \
           "(extern_kernels.mm), which kernelopt leaves alone" in result.stderr


@pytest.mark.slow  # compiles the problem in a kernelopt process
def test_kernels_lists_a_model_that_draws_random_numbers_and_says_the_verifier_refuses_it(kernelopt, tmp_path):
    problem = _tiny_problem(tmp_path, "noisy", "x", "x + torch.rand_like(x)", "torch.randn(8, 8)")
    result = kernelopt("kernels", problem)
    assert result.returncode == 0, result.stderr
    assert "triton_" in result.stdout
    assert "warning: " in result.stderr and "the model draws random numbers when it runs (rand_like" in result.stderr
    assert "verify, accept, tune and bench refuse it" in result.stderr


@pytest.mark.slow
def test_kernels_json(kernels_listing):
    listing = kernels_listing(PROBLEMS / "small_mlp_graph_break.py")
    assert listing.result.returncode == 0, listing.result.stderr

    triton = [row for row in listing.rows if row["kind"] == "triton"]
    extern = [row for row in listing.rows if row["kind"] == "extern"]
    assert len(triton) == 3 and len(extern) == 3
    for row in triton:
        assert {"name", "kind", "fingerprint", "args", "graph", "launch"} <= row.keys()
        assert "source" not in row  # the listing stays short; --dump has the code
        assert re.fullmatch(r"[0-9a-f]{16}", row["fingerprint"])
        assert all({"name", "kind", "written", "shape", "dtype"} <= arg.keys() for arg in row["args"])
        assert any(arg["written"] for arg in row["args"])
    assert {row["target"] for row in extern} == {"extern_kernels.addmm"}
    assert sorted(row["graph"] for row in listing.rows) == [0, 0, 1, 1, 1, 1]


@pytest.mark.slow
def test_kernels_dump_writes_one_candidate_per_triton_kernel(kernels_listing, compiled_models):
    from pytest_kernelopt.candidate import render_dump

    path = PROBLEMS / "small_mlp_graph_break.py"
    listing = kernels_listing(path)
    assert listing.result.returncode == 0, listing.result.stderr
    compiled = compiled_models.get(path)

    assert sorted(p.name for p in listing.dump_dir.iterdir()) == sorted(f"{name}.py" for name in compiled.kernels)
    for name, handle in compiled.kernels.items():
        text = (listing.dump_dir / f"{name}.py").read_text()
        assert text == render_dump(handle.info, compiled.problem.id)
        entry = [f for f in ast.parse(text).body if isinstance(f, ast.FunctionDef) and f.name == "run"]
        assert [a.arg for a in entry[0].args.args] == [a.name for a in handle.info.args]


# --- user mistakes: exit code 2, one line ------------------------------------------------

BAD_FILES = {
    "syntax_error": "import torch\n\nclass Model(torch.nn.Module)\n    pass\n",
    "no_model": "import torch\n\ndef get_inputs():\n    return [torch.randn(4)]\n\ndef get_init_inputs():\n    return []\n",
    "import_raises": "import torch\n\nSIZE = int('four')\n",
    "init_raises": """
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                raise ValueError("no weights for you")

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return []
        """,
    "forward_raises": """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x):
                raise ValueError("forward is broken")

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return []
        """,
    "shape_mismatch": """
        import torch

        class Model(torch.nn.Module):
            def __init__(self):
                super().__init__()
                self.weight = torch.nn.Parameter(torch.randn(3, 5))

            def forward(self, x):
                return x @ self.weight

        def get_inputs():
            return [torch.randn(4, 4)]

        def get_init_inputs():
            return []
        """,
}
@pytest.mark.slow
@pytest.mark.parametrize("name", list(BAD_FILES))
def test_bad_problem_file_is_one_error_line(name, kernelopt, tmp_path):
    path = tmp_path / f"{name}.py"
    path.write_text(textwrap.dedent(BAD_FILES[name]).lstrip())

    assert_one_error_line(kernelopt("kernels", path), str(path))


def test_missing_problem_file(kernelopt, tmp_path):
    path = tmp_path / "missing.py"
    assert_one_error_line(kernelopt("kernels", path), str(path), "no such file")


def test_a_folder_is_not_a_problem_file(kernelopt, tmp_path):
    assert_one_error_line(kernelopt("kernels", tmp_path), str(tmp_path), "a folder, not a problem file")


def test_device_cuda_without_cuda(kernelopt):
    if cuda_available():
        pytest.skip("a CUDA device is present")
    assert_one_error_line(kernelopt("kernels", PROBLEMS / "linear_gelu.py", "--device", "cuda"), "cuda")


def test_device_comes_from_pyproject(kernelopt, tmp_path):
    if cuda_available():
        pytest.skip("a CUDA device is present")
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\ndevice = "cuda"\n')
    problem = tmp_path / "models" / "linear_gelu.py"
    problem.parent.mkdir()
    problem.write_text((PROBLEMS / "linear_gelu.py").read_text())
    # Settings come from the problem's project, wherever the command runs.
    assert_one_error_line(kernelopt("kernels", problem, cwd=REPO.parent), "cuda")


def test_invalid_pyproject_is_one_error_line(kernelopt, tmp_path):
    pyproject = tmp_path / "pyproject.toml"
    pyproject.write_text('[tool.kernelopt]\ndevice = "gpu"\n')
    problem = tmp_path / "linear_gelu.py"
    problem.write_text((PROBLEMS / "linear_gelu.py").read_text())
    assert_one_error_line(kernelopt("kernels", problem), str(pyproject), "device")


def test_config_option_names_the_settings_file(kernelopt, tmp_path):
    pyproject = tmp_path / "elsewhere.toml"
    pyproject.write_text('[tool.kernelopt]\ndevice = "gpu"\n')
    assert_one_error_line(kernelopt("kernels", PROBLEMS / "linear_gelu.py", "--config", pyproject), str(pyproject),
                          "device")


# --- [tool.kernelopt] --------------------------------------------------------------------

def write_project(root: Path, section: str) -> Path:
    pyproject = root / "pyproject.toml"
    pyproject.write_text(textwrap.dedent(section).lstrip())
    return pyproject


def test_config_read_from_pyproject(tmp_path):
    write_project(tmp_path, """
        [project]
        name = "demo"

        [tool.kernelopt]
        problems = ["models/*.py", "extra/special.py"]
        kernels_dir = "store/kernels"
        device = "cpu"
        """)
    for name in ["models/b.py", "models/a.py", "models/_helpers.py", "models/notes.txt", "extra/special.py"]:
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text("")
    (tmp_path / "models" / "deep").mkdir()

    config = load_config(tmp_path / "models" / "deep")  # found from below, paths relative to pyproject.toml

    assert config.device == "cpu"
    assert config.kernels_path == (tmp_path / "store" / "kernels").resolve()
    assert config.problem_files() == [(tmp_path / p).resolve() for p in ["models/a.py", "models/b.py", "extra/special.py"]]
    assert config.problem_files(["models/b.py", "models/*.py"]) == [
        (tmp_path / p).resolve() for p in ["models/b.py", "models/a.py"]
    ]


def test_config_defaults_without_a_section(tmp_path):
    write_project(tmp_path, '[project]\nname = "demo"\n')
    config = load_config(tmp_path)
    assert (config.device, config.problems, config.kernels_path) == ("auto", [], (tmp_path / "kernels").resolve())


@pytest.mark.parametrize(
    "section, names",
    [
        ('[tool.kernelopt]\nkernel_dir = "kernels"\n', "kernel_dir"),
        ('[tool.kernelopt]\ndevice = "gpu"\n', "device"),
        ('[tool.kernelopt]\nproblems = "models/*.py"\n', "problems"),
        ('[tool.kernelopt]\nkernels_dir = 3\n', "kernels_dir"),
        ("[tool.kernelopt\ndevice = 'cpu'\n", "TOML"),
        pytest.param('[tool.kernelopt]\nroot = "elsewhere"\n', "root"),
    ],
    ids=["unknown_key", "bad_device", "problems_not_a_list", "kernels_dir_not_a_string", "bad_toml", "root_key"],
)
def test_invalid_config_is_a_usage_error_naming_the_file(section, names, tmp_path):
    pyproject = write_project(tmp_path, section)
    with pytest.raises(UsageError) as info:
        load_config(tmp_path)
    assert str(pyproject) in str(info.value)
    assert names in str(info.value)


# --- resolve_device ----------------------------------------------------------------------

def test_auto_is_cpu_without_cuda(interpreter):
    from pytest_kernelopt import interpret

    if cuda_available():
        pytest.skip("a CUDA device is present")
    assert resolve_device("auto") == "cpu"
    assert interpret.is_enabled()


def test_cuda_without_cuda_is_a_usage_error(interpreter):
    if cuda_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(UsageError, match="cuda"):
        resolve_device("cuda")


def test_unknown_device_is_a_usage_error():
    with pytest.raises(UsageError, match="'gpu'"):
        resolve_device("gpu")


def test_accept_refuses_a_model_id_the_store_cannot_hold_before_verifying(kernelopt, tmp_path):
    problem = tmp_path / "my model.py"
    problem.write_text((PROBLEMS / "elementwise_chain.py").read_text())
    candidate = tmp_path / "c.py"
    candidate.write_text("x = 1\n")
    result = kernelopt("accept", problem, "--kernel", "k", "--candidate", candidate, "--kernels-dir", tmp_path / "k")
    assert_one_error_line(result, "model id 'my model' cannot name a folder in the kernel store")
    assert not (tmp_path / "k").exists()


def test_accept_of_bytes_already_stored_answers_without_verifying(kernelopt, tmp_path):
    """The sha256 is known before the cascade: the same verified bytes again are answered at once."""
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

    source = "# a version accepted earlier\n"
    fingerprint = "0123456789abcdef"
    store = KernelStore(tmp_path / "kernels")
    store.add_version(model="elementwise_chain", kernel="k", fingerprint=fingerprint, args=[],
                      original_source="# original\n", source=source, provenance=Provenance(), environment=None,
                      evidence=Evidence(status="correct", speed_measured=False, fingerprint=fingerprint,
                                        sha256=sha256_text(source), launches=[["int 1"]]))
    candidate = tmp_path / "again.py"
    candidate.write_text(source)
    result = kernelopt("accept", PROBLEMS / "elementwise_chain.py", "--kernel", "k", "--candidate", candidate,
                       "--kernels-dir", tmp_path / "kernels")
    assert result.returncode == 0, result.stderr
    assert result.stdout.startswith("already stored as v1 (active)") and "not verified again" in result.stdout
    assert "verifying" not in result.stderr  # no session was opened (it is not a kernel of the problem at all)
    assert [v.version for v in store.manifest("elementwise_chain", "k").versions] == [1]


def test_the_quick_start_names_files_that_exist():
    """Every file the README's Quick start commands name is in the repository (it named models/softmax.py)."""
    readme = (REPO / "README.md").read_text()
    section = readme[readme.index("## Quick start"):readme.index("## Adopt it in your own repository")]
    named = [word for block in re.findall(r"```(?:sh)?\n(.*?)```", section, re.S) for word in block.split()
             if word.endswith(".py")]
    assert named and all((REPO / word).is_file() for word in named), named


def test_the_demo_table_is_not_cut_at_80_columns():
    import io

    from rich.console import Console
    from rich.table import Table

    from pytest_kernelopt.measure.text import print_whole

    out = io.StringIO()
    table = Table(title="kernelopt demo")
    for col in ("problem", "graphs", "triton", "extern", "dump verified", "0.1% error", "seconds"):
        table.add_column(col, no_wrap=True)
    table.add_row("small_mlp_graph_break", "2", "3", "3", "correct", "rejected at kernel", "25")
    print_whole(table, Console(file=out, width=80))
    assert "small_mlp_graph_break" in out.getvalue() and "rejected at kernel" in out.getvalue()


def test_a_table_wider_than_the_terminal_prints_a_row_a_paragraph_and_a_log_prints_it_whole(monkeypatch):
    """kernelopt tune's final table (eleven columns, kernel names of 50-140 characters) printed wider than an
    ordinary terminal broke every line in the middle; on a terminal it now prints each row as its first cell
    and then each other cell on a line, ``column: value`` (the name whole, one line to copy). A log (not a terminal) keeps the table."""
    import io

    from rich.console import Console
    from rich.table import Table

    from pytest_kernelopt.measure import text

    table = Table(title="kernelopt tune (search)")
    for col in ("model", "kernel", "share", "outcome by stage", "stored"):
        table.add_column(col, no_wrap=col != "outcome by stage")
    name = "triton_per_fused__to_copy_add_native_layer_norm_native_layer_norm_backward_5"
    table.add_row("vocab_cross_entropy@t4096", name, "41.0%", "3 rejected, 1 accepted", "v2")
    table.add_row("vocab_cross_entropy@t4096", "triton_red_fused_div_ne_sum_0", "0.4%", "skipped: below 2%", "-")
    out = io.StringIO()
    import rich.console

    with monkeypatch.context() as patched:  # a terminal 60 columns wide
        patched.setattr(text.sys.stdout, "isatty", lambda: True, raising=False)
        patched.setattr(rich.console, "Console", lambda **kw: Console(file=out, width=60, **kw))
        text.print_whole(table)
    lines = out.getvalue().splitlines()
    assert lines[:6] == ["kernelopt tune (search)", "vocab_cross_entropy@t4096", f"  kernel: {name}", "  share: 41.0%",
                         "  outcome by stage: 3 rejected, 1 accepted", "  stored: v2"], lines
    assert lines[6:] == ["vocab_cross_entropy@t4096", "  kernel: triton_red_fused_div_ne_sum_0", "  share: 0.4%",
                         "  outcome by stage: skipped: below 2%"], lines  # an empty cell ("-") left out
    log = io.StringIO()
    text.print_whole(table, Console(file=log, width=60))  # a console given (a log): the table, widened
    assert "┃ model" in log.getvalue() and name in log.getvalue()


def test_a_rejection_names_the_seed_that_reproduces_it():
    """Inputs are drawn from the OS: the verdict line says how to run the same inputs again."""
    from types import SimpleNamespace

    from pytest_kernelopt.cli import verdict_lines

    verdict = SimpleNamespace(stages=[], reference="float64", status="rejected", reason="kernel: off", seed=424242)
    assert verdict_lines(verdict)[-1] == ("verdict: rejected (kernel: off) [inputs from seed 424242: reproduce with "
                                          "--seed 424242]")
    verdict.status, verdict.reason = "correct", None
    assert verdict_lines(verdict)[-1] == "verdict: correct"


def test_accept_prints_a_rejection_reason_once(tmp_path, capsys):
    """The FAIL stage's line carries the reason; the verdict line and "not stored" point at it, not repeat it."""
    import argparse

    from pytest_kernelopt.cli import _accept
    from pytest_kernelopt.records import StageResult, Verdict

    detail = "seed 7, launch 1, written argument out_ptr0: 999 of 1024 element(s) outside the allowance"
    verdict = Verdict.model_construct(
        status="rejected", reason=f"kernel: {detail}", seed=None, reference="float64",
        stages=[StageResult(name="static", passed=True, detail="parses", seconds=0.0),
                StageResult(name="kernel", passed=False, detail=detail, seconds=0.6)])
    args = argparse.Namespace(kernels_dir=tmp_path, allow_no_gain=False, proposed_by="me", json=False, kernel="k")
    assert _accept(args, None, "m", verdict) == 1
    out = capsys.readouterr().out
    assert out.count("outside the allowance") == 1, out
    assert out.splitlines()[-2:] == ["verdict: rejected at kernel (the FAIL line above)", "not stored"]


# --- misspelt options and options that do nothing ---------------------------------------------

def _main_error(capsys, *argv: str) -> str:
    """``kernelopt ARGV`` in this process: exit 2 with one error line, which is returned."""
    from pytest_kernelopt.cli import main

    with pytest.raises(SystemExit) as exit_:
        main(list(argv))
    assert exit_.value.code == 2
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelopt: error: "), lines
    return lines[0]


@pytest.mark.parametrize("argv, nearest, help_of", [
    (["tune", "x.py", "--open-prs"], "did you mean --open-pr?", "kernelopt tune --help"),
    (["verify", "x.py", "--kernel", "k", "--candidate", "c.py", "--sedes", "2"], "did you mean --seeds?",
     "kernelopt verify --help"),
    (["merge", "s.json", "--jsno", "out.json"], "did you mean --json?", "kernelopt merge --help"),
    (["tun", "x.py"], "did you mean 'tune'?", "kernelopt --help"),
    (["report", "run", "--format", "htm"], "did you mean 'html'?", "kernelopt report --help"),
])
def test_a_misspelt_option_or_command_gets_the_nearest_one_and_its_commands_help(capsys, argv, nearest, help_of):
    line = _main_error(capsys, *argv)
    assert nearest in line and f"(see `{help_of}`)" in line


def test_an_unknown_option_far_from_every_real_one_gets_no_guess(capsys):
    line = _main_error(capsys, "kernels", "x.py", "--zzzzzzzz")
    assert "unrecognized arguments: --zzzzzzzz" in line and "did you mean" not in line
    assert "(see `kernelopt kernels --help`)" in line


@pytest.mark.parametrize("option", [["--base", "main"], ["--remote", "upstream"]])
def test_base_or_remote_without_open_pr_is_an_error_before_any_work(tmp_path, monkeypatch, option):
    """``tune --base B`` without ``--open-pr`` would push nothing: said at once, before the problem is even read."""
    from pytest_kernelopt.cli import main

    monkeypatch.chdir(tmp_path)
    with pytest.raises(UsageError, match="--base and --remote apply to --open-pr only"):
        from pytest_kernelopt.cli import build_parser, cmd_tune

        cmd_tune(build_parser().parse_args(["tune", "missing.py", *option]))
    assert main(["tune", "missing.py", *option]) == 2
    assert not (tmp_path / ".kernelopt").exists()


def test_merge_writes_the_gate_report(tmp_path, monkeypatch, capsys):
    """``kernelopt merge --report``: the merged gate's Markdown (what gate-matrix.yml puts on the summary page)."""
    from pytest_kernelopt.cli import main
    from pytest_kernelopt.runs import gate_result as results

    env = results.ResultEnvironment(device="cpu", torch="2.13.0", triton="3.7.1", python="3.11.7")
    settings = results.GateSettings(seeds=1, timeout=600.0, max_slowdown=0.01, strict=True)
    items = [results.ItemResult(nodeid="problems/rms_norm.py::model", problem="problems/rms_norm.py", model="rms_norm",
                                item="model", outcome="failed", message="wrong numbers", kernels=0,
                                committed=0, stale=0, baseline=0)]
    results.write(results.gate_result(shard=None, problems=["rms_norm"], environment=env, settings=settings,
                                      items=items), tmp_path / "s.json")
    monkeypatch.chdir(tmp_path)
    assert main(["merge", "s.json", "--report", "gate.md"]) == 1  # an item failed
    report = (tmp_path / "gate.md").read_text()
    assert "rms_norm" in report and "wrong numbers" in report


# --- what a newcomer reads ------------------------------------------------------------------

@pytest.mark.parametrize("correct", [0, 2])
def test_a_cpu_tune_ends_saying_that_accept_stores(correct, tmp_path, monkeypatch, capsys):
    """On a CPU tune keeps nothing (no speed to compare): its last line says so and names the command that
    stores a correct candidate there, and the folder of the candidates judged correct only where there are some
    (a problem that failed to open has none)."""
    import pytest_kernelopt.agents as agents
    from pytest_kernelopt.runs.records import Attempt, KernelOutcome, ProblemOutcome, RunRecord
    from pytest_kernelopt.cli import main

    shutil.copy(PROBLEMS / "softmax_rows.py", tmp_path / "softmax_rows.py")
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\ndevice = "cpu"\n')
    history = [Attempt(kernel="k", origin=f"o{i}", sha256="0" * 64, status=status, file=f"candidates/{i}.py")
               for i, status in enumerate(["rejected"] + ["correct"] * correct)]

    def tune(problems, options, **kwargs):  # the search itself is tested elsewhere: its record, here
        return RunRecord(run_id="r1", started="now", agent="search", kernels_dir="kernels", problems=[
            ProblemOutcome(model="softmax_rows", problem=str(problems[0]), device="cpu", speed_measured=False,
                           kernels=[KernelOutcome(kernel="k", fingerprint="f", history=history)])])

    monkeypatch.setattr(agents, "tune", tune)
    monkeypatch.chdir(tmp_path)
    assert main(["tune", "softmax_rows.py", "--device", "cpu"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last.startswith("nothing stored: interpreter mode measures no speed")
    command = re.search(r"`(kernelopt accept [^`]*)`", last)[1].split()
    from pytest_kernelopt.cli import build_parser

    assert build_parser().parse_args(command[1:]).command == "accept"  # the command it names exists
    folder = str(tmp_path / ".kernelopt" / "runs" / "r1" / "candidates")
    assert (f"one of the {correct} judged correct in {folder}" in last) == bool(correct), last
    assert (folder in last) == bool(correct), last


def test_a_cpu_tune_whose_every_problem_failed_ends_without_the_accept_hint(tmp_path, monkeypatch, capsys):
    """The problem's own error is what such a run says; "nothing stored ... kernelopt accept" would send the
    user to store a candidate of a problem that cannot be opened."""
    import pytest_kernelopt.agents as agents
    from pytest_kernelopt.runs.records import ProblemOutcome, RunRecord
    from pytest_kernelopt.cli import main

    shutil.copy(PROBLEMS / "softmax_rows.py", tmp_path / "softmax_rows.py")
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\ndevice = "cpu"\n')

    def tune(problems, options, **kwargs):
        return RunRecord(run_id="r1", started="now", agent="search", kernels_dir="kernels", problems=[
            ProblemOutcome(model="softmax_rows", problem=str(problems[0]), device="cpu", speed_measured=False,
                           error="softmax_rows.py: the model draws random numbers when it runs")])

    monkeypatch.setattr(agents, "tune", tune)
    monkeypatch.chdir(tmp_path)
    main(["tune", "softmax_rows.py", "--device", "cpu"])
    out = capsys.readouterr().out
    assert "the model draws random numbers" in out and "nothing stored" not in out, out


def test_a_stale_kernel_names_the_command_that_carries_it_over():
    from pytest_kernelopt.gate.failure import GateFailure, stale

    with pytest.raises(GateFailure, match="`kernelopt refresh` replays its recipe"):
        stale("stale: kernels/m/k replaces compiler kernel a, but the compiler now generates b", strict=True)


def test_configured_patterns_that_match_nothing_are_named(tmp_path, monkeypatch, capsys):
    """Not "none configured": which pattern matched nothing, in refresh and in the gate."""
    from pytest_kernelopt.cli import main
    from pytest_kernelopt.config import load_config
    from pytest_kernelopt.gate.problems import find_problems

    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["models/*.py", "level1/*.py"]\n')
    monkeypatch.chdir(tmp_path)
    assert main(["refresh"]) == 2
    err = capsys.readouterr().err
    assert "'models/*.py', 'level1/*.py' matched nothing" in err and "none configured" not in err
    with pytest.raises(UsageError, match=r"'models/\*\.py', 'level1/\*\.py' matched nothing"):
        find_problems(None, load_config(tmp_path), tmp_path)
    (tmp_path / "models").mkdir()
    (tmp_path / "models" / "m.py").write_text("x = 1\n")
    assert load_config(tmp_path).unmatched() == ["level1/*.py"]


def test_a_broken_record_is_named_in_words_not_by_its_class(tmp_path):
    from pytest_kernelopt.errors import StoreError
    from pytest_kernelopt.store import KernelStore

    (tmp_path / "m").mkdir()
    (tmp_path / "m" / "model.json").write_text('{"model": 3}')
    with pytest.raises(StoreError) as error:
        KernelStore(tmp_path).model_record("m")
    assert "model.json: invalid model record" in str(error.value) and "ModelRecord" not in str(error.value)


def test_the_demo_ends_with_commands_that_exist():
    from pytest_kernelopt.cli import build_parser
    from pytest_kernelopt.demo import next_steps

    dump = REPO / "out" / "demo" / "softmax_rows" / "triton_per_fused_0.py"
    lines = next_steps(PROBLEMS / "softmax_rows.py", "triton_per_fused_0", dump)
    assert lines[0].startswith("next:")
    commands = [shlex.split(line, comments=True) for line in lines[1:]]
    assert [c[1] for c in commands] == ["verify", "tune"]
    for command in commands:
        args = build_parser().parse_args(command[1:])
        assert Path(args.problems[0] if command[1] == "tune" else args.problem).is_file() or \
            (REPO / (args.problems[0] if command[1] == "tune" else args.problem)).is_file()


def test_the_demo_without_its_problems_says_where_they_are(tmp_path, monkeypatch, capsys):
    """Run from a wheel install (no tests/problems beside the package), the demo fails and says why, not "0 problems"."""
    from pytest_kernelopt import demo

    monkeypatch.setattr(demo, "repository_root", lambda: tmp_path)
    assert demo.main([]) == 2
    err = capsys.readouterr().err
    assert "no problem files" in err and "make demo" in err and "pytest_kernelopt.demo path/to/problem.py" in err


def test_refresh_goes_on_past_a_problem_file_that_fails_to_import(tmp_path, monkeypatch, capsys):
    """One broken file: the others are still refreshed, the broken one is named, and the exit is 2 at the end."""
    from pytest_kernelopt.cli import main

    (tmp_path / "pyproject.toml").write_text("[tool.kernelopt]\n")
    shutil.copy(PROBLEMS / "softmax_rows.py", tmp_path / "good.py")
    (tmp_path / "broken.py").write_text("raise RuntimeError('no such weights')\n")
    monkeypatch.chdir(tmp_path)
    assert main(["refresh", "broken.py", "good.py", "--device", "cpu", "--json"]) == 2
    captured = capsys.readouterr()
    record = __import__("json").loads(captured.out)
    by_model = {p["model"]: p for p in record["problems"]}
    assert "no such weights" in by_model["broken"]["error"]
    assert by_model["good"]["error"] is None  # looked at: nothing in the store to refresh
    assert "good: no active kernel versions" in captured.err
    assert re.search(r"kernelopt: error: .*broken\.py: importing failed.*the other problems are", captured.err)
    assert captured.err.strip().splitlines()[-1] == f"kernelopt: error: 1 problem(s) not refreshed: {tmp_path / 'broken.py'}"


def test_only_a_tune_command_line_imports_the_agent_backends():
    """Tune's backend flags import every backend's module (and the agents under them): other commands,
    quick ones such as ``kernelopt merge`` in CI, do without them."""
    import subprocess
    import sys

    code = ("import sys\nfrom pytest_kernelopt.cli import main\n"
            "for argv in (['merge', '--help'], ['tune', '--help']):\n"
            "    try:\n        main(argv)\n    except SystemExit:\n        pass\n"
            "    print('imported:', 'pytest_kernelopt.agents.claude' in sys.modules)\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert [line for line in out.splitlines() if line.startswith("imported:")] == ["imported: False", "imported: True"]


def test_verify_starts_its_worker_ahead_and_closes_it_when_the_problem_fails(tmp_path, monkeypatch, capsys):
    """`verify` and `accept` start the session's worker before loading the problem (its torch import overlaps the
    parent's: 17.5 s -> 14.4-15.5 s for one candidate on the 2-core machine); a problem that fails to load is one
    error line, and the worker started for it is killed and its folder removed."""
    import tempfile

    from pytest_kernelopt.cli import main
    from pytest_kernelopt.verify.worker import WorkerProcess

    started = []
    real_init = WorkerProcess.__init__

    def init(self, *args, **kwargs):
        real_init(self, *args, **kwargs)
        started.append(self.folder)

    monkeypatch.setattr(WorkerProcess, "__init__", init)
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))  # where a worker's kernelopt-worker-* folder goes
    candidate = tmp_path / "c.py"
    candidate.write_text("x = 1\n")
    assert main(["verify", str(tmp_path / "missing.py"), "--kernel", "k", "--candidate", str(candidate)]) == 2
    assert "missing.py: no such file" in capsys.readouterr().err
    assert len(started) == 1 and started[0].parent == scratch and list(scratch.iterdir()) == []


def test_a_session_opens_on_the_worker_started_ahead_and_closes_a_dead_one(monkeypatch):
    """A worker started ahead (by `verify`, or by the gate for its next problem) is the session's if it still runs
    in the isolation workers get now; a dead one, or one started before the sandbox was turned off, is closed."""
    from pytest_kernelopt.verify import VerifySession, sandbox

    class Spare:
        def __init__(self, alive: bool, isolation=None):
            self.alive, self.closed = alive, 0
            self.sandbox = isolation or sandbox.isolation()

        def close(self) -> None:
            self.closed += 1

    started: list[str] = []
    monkeypatch.setattr("pytest_kernelopt.verify.worker.WorkerProcess", lambda: started.append("new") or Spare(True))

    class Used(Exception):
        pass

    def send(self, *args):
        raise Used

    monkeypatch.setattr(Spare, "send", send, raising=False)
    for alive, isolation in ((True, None), (False, None), (True, sandbox.Isolation((), (), "turned off"))):
        started.clear()
        spare = Spare(alive, isolation)
        usable = alive and isolation is None
        session = VerifySession("p.py", "cpu", worker=spare)
        session._checker = Spare(True)  # the static checker's process, started on first open otherwise
        with pytest.raises(Used):
            session._open_worker()
        assert (session._worker is spare) == usable and started == ([] if usable else ["new"])
        assert spare.closed == (0 if usable else 1)  # a usable one is the session's worker now, closed with it


def test_a_worker_started_ahead_without_namespaces_warns_only_when_its_session_opens(tmp_path, monkeypatch, capsys):
    """Where namespaces are unavailable, starting a worker warns (never silently); started ahead of a problem
    that fails to load, it would have put that warning before the one error line."""
    import warnings

    from pytest_kernelopt.cli import main
    from pytest_kernelopt.verify import sandbox

    monkeypatch.chdir(tmp_path)  # no project: the default kernel store, empty
    monkeypatch.setattr(sandbox, "_probed", {"probed": sandbox.Isolation((), (), "switched off for the test")})
    monkeypatch.setattr(sandbox, "_warned", [])
    candidate = tmp_path / "c.py"
    candidate.write_text("x = 1\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert main(["verify", str(tmp_path / "missing.py"), "--kernel", "k", "--candidate", str(candidate)]) == 2
    assert caught == [] and capsys.readouterr().err.count("\n") == 1

    class Opened(Exception):
        pass

    def session(*args, **kwargs):
        raise Opened

    monkeypatch.setattr("pytest_kernelopt.verify.VerifySession", session)
    monkeypatch.setattr(sandbox, "_warned", [])
    with warnings.catch_warnings(record=True) as caught, pytest.raises(Opened):
        warnings.simplefilter("always")
        main(["verify", str(PROBLEMS / "elementwise_chain.py"), "--kernel", "k", "--candidate", str(candidate)])
    assert [w.category for w in caught] == [sandbox.SandboxWarning]
    assert "without Linux namespaces (switched off for the test)" in str(caught[0].message)
