"""Tuned kernels in production: pytest_kernelopt.compile, backend(), torch.compile(backend="kernelopt").

Kernels are committed with the store API directly (no cascade: the production
loader trusts the gate, not the files' numbers), then a freshly loaded copy of the
problem is compiled with the production backend in interpreter mode and compared
with the gate's view: the same problem captured by ``compile_problem`` with the
same file swapped in.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any, Callable

import pytest

from conftest import REPO, TESTS, add_to_last_store

ELEMENTWISE = TESTS / "problems" / "elementwise_chain.py"
MLP = TESTS / "problems" / "small_mlp_graph_break.py"  # two graphs

TWICE = '''"""The same pointwise op before and after a graph break: two graphs, one kernel name."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        y = torch.sin(x) * 2.0
        torch._dynamo.graph_break()
        return torch.sin(y) * 2.0


def get_inputs():
    return [torch.randn(4, 64)]


def get_init_inputs():
    return []
'''


# --- helpers ----------------------------------------------------------------------------

def commit(kernels: Path, model: str, info: Any, source: str, *, training: bool | None = None) -> Path:
    """Store ``source`` as the next active version of ``info``'s kernel; the version file. ``training``: the pass
    its evidence records (accept writes capture's ``info.training``; None: not recorded, as before 2026-12-05)."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

    # The record accept writes from a passing verdict: production runs nothing without one, and only at
    # the launches it records (here the one capture saw, as the kernel stage would have verified it).
    evidence = Evidence(status="correct", speed_measured=False, fingerprint=info.fingerprint, sha256=sha256_text(source),
                        launches=[verified_at(info)], training=training, environment=here())
    outcome = KernelStore(kernels).add_version(
        model=model, kernel=info.name, fingerprint=info.fingerprint, args=info.args,
        original_source=render_dump(info, model), source=source,
        evidence=evidence, provenance=Provenance(), environment=None,
    )
    assert outcome.stored and outcome.record is not None
    return kernels / model / info.name / outcome.record.file


def here() -> Any:
    """This process's environment (device, torch, triton), as accept records it: production runs a version only
    where its evidence records the environment it runs in."""
    from pytest_kernelopt.verify.pipeline import environment

    return environment("cpu")


def verified_at(info: Any) -> list[str]:
    """The launch capture recorded for ``info``, as capture.launch_signature writes it."""
    return [f"{a.dtype} {tuple(a.shape)} {tuple(a.stride)}" if a.kind == "tensor" else
            f"int {a.value}" if a.kind == "int" else a.kind for a in info.args]


def same_numbers(info: Any, model: str) -> str:
    """The compiler's kernel as a candidate, edited (``+ 0.0`` on its last store): another file, the same numbers."""
    from pytest_kernelopt.candidate import render_dump

    return add_to_last_store(render_dump(info, model), 0.0)


def marked(info: Any, model: str) -> str:
    """A version whose output shows that it ran: 1.0 added to what its last store writes."""
    from pytest_kernelopt.candidate import render_dump

    return add_to_last_store(render_dump(info, model), 1.0)


def fresh(path: Path) -> tuple[Any, Any]:
    """(problem, eager model) loaded afresh: new code objects, so Dynamo compiles them anew.

    Dynamo's automatic-dynamic state is keyed by file, line and function name, not by code object:
    a test earlier in the same process that compiled this problem at another batch size makes the
    next compile mark the batch dimension dynamic (another kernel, another fingerprint; seen in CI
    under pytest -n 2, 2026-12-02). Cleared here, as a fresh process would have it.
    """
    from torch._dynamo.pgo import reset_code_state

    from pytest_kernelopt.capture.problem import load_problem

    reset_code_state()

    problem = load_problem(path)
    return problem, problem.build_model("cpu")


def run(compiled: Any, *inputs: Any) -> tuple[Any, list[str]]:
    """(output, KerneloptWarning messages) of one call under no_grad, as the gate runs models."""
    import torch

    from pytest_kernelopt.store.production import KerneloptWarning

    with warnings.catch_warnings(record=True) as caught, torch.no_grad():
        warnings.simplefilter("always")
        out = compiled(*inputs)
    return out, [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]


def wrapper_globals(compiled: Any, *inputs: Any) -> tuple[Any, dict[str, Any], list[str]]:
    """(output, {kernel global: object} over every graph, warnings) of a first call that compiles."""
    from pytest_kernelopt.capture.compiled import _KERNEL_DEF, _record_wrapper_modules

    with _record_wrapper_modules() as loaded:
        out, messages = run(compiled, *inputs)
    found: dict[str, Any] = {}
    for module in loaded:
        if callable(getattr(module, "call", None)) and getattr(module, "__file__", None):
            for attr, _ in _KERNEL_DEF.findall(Path(module.__file__).read_text()):
                found[attr if attr not in found else f"{attr}__again"] = getattr(module, attr)
    return out, found, messages


def gate_output(compiled_models: Any, path: Path, files: dict[str, Path]) -> Any:
    """The output of the gate's model: the problem as captured, with ``files`` swapped in."""
    import torch

    from pytest_kernelopt.capture.swap import candidate_kernel, swapped

    gate = compiled_models.live(path)
    with swapped(gate, {name: candidate_kernel(file) for name, file in files.items()}), torch.no_grad():
        return gate(*gate.problem.make_inputs(0, "cpu"))


# --- using committed versions -----------------------------------------------------------

@pytest.mark.slow
@pytest.mark.parametrize("path", [ELEMENTWISE, MLP], ids=["one_graph", "graph_break"])
def test_compile_runs_every_committed_version_bit_for_bit_as_the_gate(path, compiled_models, tmp_path, capfd):
    import pytest_kernelopt
    from pytest_kernelopt.candidate import CandidateKernel
    from pytest_kernelopt.store.production import VerifiedLaunches

    captured = compiled_models.get(path)
    files = {name: commit(tmp_path / "kernels", path.stem, h.info, same_numbers(h.info, path.stem))
             for name, h in captured.kernels.items()}
    problem, model = fresh(path)
    # The model id defaults to the stem of the file defining the model's class.
    compiled = pytest_kernelopt.compile(model, tmp_path / "kernels")
    out, kernels, messages = wrapper_globals(compiled, *problem.make_inputs(0, "cpu"))

    assert messages == []
    assert set(kernels) == set(files)  # no repeated names here
    for name, obj in kernels.items():
        assert isinstance(obj, VerifiedLaunches) and isinstance(obj.committed, CandidateKernel), name
        assert obj.committed.label == str(files[name]), name
    import torch

    assert torch.equal(out, gate_output(compiled_models, path, files))
    # One start-up line per compiled graph says so, and status() answers the same.
    status = pytest_kernelopt.status(compiled)
    assert {k.name for k in status.committed} == set(files)
    assert len(status.lines()) == len({k.graph for k in status.kernels})  # one per graph, every kernel ours
    for line in status.lines():
        assert re.match(rf"kernelopt: {path.stem}( graph \d+)?: (\d+) of \2 Triton kernels? from ", line), line
        assert "compiler kernel" not in line
    printed = [line for line in capfd.readouterr().err.splitlines() if line.startswith("kernelopt: ")]
    assert printed == status.lines()


@pytest.mark.slow
def test_string_backend_runs_the_committed_bytes_and_leaves_other_compiles_alone(compiled_models, tmp_path):
    """A version whose numbers differ shows that the committed file, not the compiler's kernel, ran."""
    import torch

    captured = compiled_models.get(ELEMENTWISE)
    (name, handle), = captured.kernels.items()
    file = commit(tmp_path / "kernels", "elementwise_chain", handle.info, marked(handle.info, "elementwise_chain"))
    problem, model = fresh(ELEMENTWISE)
    inputs = problem.make_inputs(0, "cpu")
    compiled = torch.compile(model, backend="kernelopt",
                             options={"model": "elementwise_chain", "kernels_dir": str(tmp_path / "kernels")})
    out, messages = run(compiled, *inputs)
    plain, _ = run(torch.compile(fresh(ELEMENTWISE)[1]), *inputs)  # the same graph, Inductor's own backend

    assert messages == []
    assert torch.equal(out, gate_output(compiled_models, ELEMENTWISE, {name: file}))
    assert torch.allclose(out, plain + 1.0)  # the marked file ran; the plain compile did not pick it up
    again, _ = run(compiled, *inputs)
    assert torch.equal(again, out)


@pytest.mark.slow
def test_graph_breaks_name_repeated_kernels_by_graph_as_capture_does(compiled_models, tmp_path):
    import torch

    import pytest_kernelopt

    path = tmp_path / "twice.py"
    path.write_text(TWICE)
    captured = compiled_models.get(path)
    assert sorted(captured.kernels) == ["triton_poi_fused_mul_sin_0", "triton_poi_fused_mul_sin_0__g1"]
    second = captured.kernel("triton_poi_fused_mul_sin_0__g1").info
    file = commit(tmp_path / "kernels", "twice", second, marked(second, "twice"))
    problem, model = fresh(path)
    backend = pytest_kernelopt.backend("twice", tmp_path / "kernels")
    out, messages = run(torch.compile(model, backend=backend), *problem.make_inputs(0, "cpu"))

    assert messages == []
    assert [(k.name, k.graph, k.runs, k.version) for k in backend.kernels] == [
        ("triton_poi_fused_mul_sin_0", 0, "compiler", None),
        ("triton_poi_fused_mul_sin_0__g1", 1, "committed", 1),
    ]
    assert backend.kernels[1].file == file
    assert torch.equal(out, gate_output(compiled_models, path, {second.name: file}))
    assert backend.startup_seconds > 0
    # A second copy of the model (new code objects, as after torch._dynamo.reset()) keeps the graph numbers.
    problem, model = fresh(path)
    again, messages = run(torch.compile(model, backend=backend), *problem.make_inputs(0, "cpu"))
    assert messages == [] and torch.equal(again, out)
    assert [(k.name, k.runs) for k in backend.kernels[2:]] == [(k.name, k.runs) for k in backend.kernels[:2]]


# --- falling back to the compiler's kernel ----------------------------------------------

def _stale(file: Path) -> None:
    manifest = file.parent / "manifest.json"
    data = json.loads(manifest.read_text())
    data["fingerprint"] = "0" * 16  # as if accepted when the compiler generated another kernel
    for version in data["versions"]:
        version["fingerprint"] = "0" * 16
    manifest.write_text(json.dumps(data))


def _tampered(file: Path) -> None:
    file.write_text(file.read_text() + "# edited by hand\n")


def _missing(file: Path) -> None:
    file.unlink()


SPOILED: dict[str, tuple[Callable[[Path], None] | None, Callable[[str], str], list[str]]] = {
    # case: (what happens to the committed file, how the source is edited before commit, words of the warning)
    "stale": (_stale, lambda s: s, ["stale", "0000000000000000"]),
    "tampered": (_tampered, lambda s: s, ["sha256"]),
    "missing": (_missing, lambda s: s, ["missing"]),
    "static_check": (None, lambda s: "import os\n" + s, ["static check", "os"]),
    "load": (None, lambda s: s.replace("\nimport triton\n", "\nimport triton\nBAD = 1 // 0\n", 1),
             ["does not load", "ZeroDivisionError"]),
}


@pytest.mark.slow
@pytest.mark.parametrize("case", list(SPOILED))
def test_a_committed_file_that_cannot_be_used_falls_back_with_one_warning(case, compiled_models, tmp_path):
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.verify.static import check_candidate

    spoil, edit, words = SPOILED[case]
    captured = compiled_models.get(ELEMENTWISE)
    (name, handle), = captured.kernels.items()
    source = edit(marked(handle.info, "elementwise_chain"))
    if case == "load":  # the file is in the candidate language: only running it fails
        assert check_candidate(source, [a.name for a in handle.info.args]).ok
    file = commit(tmp_path / "kernels", "elementwise_chain", handle.info, source)
    if spoil is not None:
        spoil(file)
    problem, model = fresh(ELEMENTWISE)
    inputs = problem.make_inputs(0, "cpu")
    out, kernels, messages = wrapper_globals(pytest_kernelopt.compile(model, tmp_path / "kernels"), *inputs)

    assert len(messages) == 1, messages
    message = messages[0]
    for word in ["elementwise_chain", name, str(file), "the compiler's kernel is used", *words]:
        assert word in message, (word, message)
    line, = pytest_kernelopt.status("elementwise_chain").lines()  # the latest backend for that model id
    why = {"stale": "stale", "tampered": "edited file", "missing": "missing file", "static_check": "fails the static check",
           "load": "does not load"}[case]
    assert line.endswith(f"0 of 1 Triton kernel from {tmp_path / 'kernels'}/; 1 compiler kernel: {name} ({why})"), line
    assert hasattr(kernels[name], "triton_meta")  # Inductor's own kernel object
    with torch.no_grad():
        assert torch.equal(out, compiled_models.live(ELEMENTWISE)(*inputs))


@pytest.mark.slow
@pytest.mark.parametrize("dynamic", [False, None])
def test_another_input_shape_gets_the_compilers_kernels(dynamic, compiled_models, tmp_path):
    """A new shape recompiles, and the new kernel's fingerprint differs, so the compiler's runs. dynamic=False: a
    kernel of the new fixed sizes ("stale"). torch.compile's default (None): Dynamo recompiles with symbolic sizes,
    and the warning says so and how to get verified kernels there (it blamed an undeclared shape)."""
    import torch

    import pytest_kernelopt

    captured = compiled_models.get(ELEMENTWISE)
    (name, handle), = captured.kernels.items()
    file = commit(tmp_path / "kernels", "elementwise_chain", handle.info, marked(handle.info, "elementwise_chain"))
    problem, model = fresh(ELEMENTWISE)
    backend = pytest_kernelopt.backend("elementwise_chain", tmp_path / "kernels")
    compiled = torch.compile(model, backend=backend, dynamic=dynamic)
    tuned_shape = problem.make_inputs(0, "cpu")
    other_shape = [torch.randn(8, 64)]

    first, messages = run(compiled, *tuned_shape)
    assert messages == []
    out, messages = run(compiled, *other_shape)
    why = "stale" if dynamic is False else "dynamic shapes"
    assert len(messages) == 1 and f": {why}: " in messages[0] and str(file) in messages[0], messages
    assert ("dynamic=False" in messages[0]) == (dynamic is None)
    assert [k.why for k in backend.kernels] == [None, why]
    with torch.no_grad():
        assert torch.allclose(out, model(*other_shape), atol=1e-5)
    assert [(k.name, k.graph, k.runs) for k in backend.kernels] == [(name, 0, "committed"), (name, 0, "compiler")]
    again, messages = run(compiled, *tuned_shape)
    assert messages == []
    if dynamic is False:  # the tuned shape still runs the committed version (its graph is untouched)
        assert torch.equal(again, first)
    else:  # the graph of symbolic sizes serves the tuned shape too: the compiler's kernel, not the marked version
        with torch.no_grad():
            assert torch.allclose(again, model(*tuned_shape), atol=1e-5) and not torch.allclose(again, first)


@pytest.mark.slow
def test_no_kernels_for_the_model_is_one_warning(tmp_path):
    import torch

    import pytest_kernelopt

    problem, model = fresh(ELEMENTWISE)
    out, messages = run(pytest_kernelopt.compile(model, tmp_path / "kernels"), *problem.make_inputs(0, "cpu"))
    assert len(messages) == 1 and "no tuned kernels" in messages[0] and "elementwise_chain" in messages[0]
    with torch.no_grad():
        assert torch.allclose(out, model(*problem.make_inputs(0, "cpu")), atol=1e-5)


# --- the API ----------------------------------------------------------------------------

def test_interpret_is_reachable_from_the_package_as_the_readme_uses_it():
    """``import pytest_kernelopt`` then ``pytest_kernelopt.interpret.enable()`` (it was an AttributeError)."""
    code = ("import sys, pytest_kernelopt\n"
            "assert callable(pytest_kernelopt.interpret.enable)\n"
            "assert not pytest_kernelopt.interpret.is_enabled()\n"
            "assert 'torch' not in sys.modules and 'triton' not in sys.modules\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]


def test_status_of_something_else_is_one_clear_error():
    import pytest_kernelopt
    from pytest_kernelopt.errors import UsageError

    with pytest.raises(UsageError, match="pass what pytest_kernelopt.compile"):
        pytest_kernelopt.status(object())
    with pytest.raises(UsageError, match="no kernelopt backend for model 'never_compiled'"):
        pytest_kernelopt.status("never_compiled")


def test_string_backend_without_a_model_id_is_one_clear_error(interpreter):
    import torch

    with pytest.raises(Exception, match=r'options=\{"model"'):
        torch.compile(fresh(ELEMENTWISE)[1], backend="kernelopt")(torch.randn(4, 64))


def test_model_id_and_bad_arguments(tmp_path):
    import pytest_kernelopt
    from pytest_kernelopt.errors import StoreError, UsageError
    from pytest_kernelopt.store.production import model_id_of

    _, model = fresh(MLP)
    assert model_id_of(model) == "small_mlp_graph_break"
    with pytest.raises(UsageError, match="chooses the backend"):
        pytest_kernelopt.compile(model, tmp_path, backend="inductor")
    with pytest.raises(StoreError, match="model id"):
        pytest_kernelopt.backend("../elsewhere", tmp_path)


def test_kernels_dir_defaults_to_the_projects_setting(tmp_path, monkeypatch):
    import pytest_kernelopt

    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nkernels_dir = "tuned"\n')
    (tmp_path / "sub").mkdir()
    monkeypatch.chdir(tmp_path / "sub")
    assert pytest_kernelopt.backend("m").kernels_dir == (tmp_path / "tuned").resolve()
    assert pytest_kernelopt.backend("m", "here").kernels_dir == (tmp_path / "sub" / "here").resolve()


def test_the_backend_is_registered_through_the_entry_point():
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="torch_dynamo_backends") if e.name == "kernelopt"]
    from pytest_kernelopt.store.production import kernelopt_backend

    assert entry.load() is kernelopt_backend


@pytest.mark.slow
def test_production_imports_no_agents_git_or_verifier_worker(tmp_path):
    """In a process of its own: the loader pulls in neither the agent stack, git, nor the worker."""
    code = textwrap.dedent(f"""
        import sys
        import pytest_kernelopt
        assert "torch" not in sys.modules, "import pytest_kernelopt imported torch"
        from pytest_kernelopt.config import resolve_device
        resolve_device("cpu")
        import torch
        from pytest_kernelopt.capture.problem import load_problem
        problem = load_problem({str(ELEMENTWISE)!r})
        compiled = pytest_kernelopt.compile(problem.build_model("cpu"), {str(tmp_path / "kernels")!r})
        with torch.no_grad():
            compiled(*problem.make_inputs(0, "cpu"))
        heavy = ("anthropic", "git", "pytest_kernelopt.verify.worker", "pytest_kernelopt.verify.pipeline")
        print(sorted(m for m in heavy if m in sys.modules))
    """)
    out = subprocess.run([sys.executable, "-W", "ignore", "-c", code], cwd=REPO, capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "[]"


@pytest.mark.skipif(shutil.which("g++") is None and shutil.which("c++") is None,
                    reason="Inductor's C++ path needs a C++ compiler")
def test_committed_kernels_unused_because_inductor_wrote_cpp_is_one_warning(tmp_path):
    """Production on a CPU without interpreter mode: Inductor writes C++, nothing can be swapped; say so."""
    kernel = tmp_path / "kernels" / "elementwise_chain" / "triton_poi_fused_add_clamp_mul_sigmoid_tanh_0"
    kernel.mkdir(parents=True)
    (kernel / "manifest.json").write_text("{}")  # only its presence matters here
    code = textwrap.dedent(f"""
        import warnings
        import torch
        import pytest_kernelopt
        from pytest_kernelopt.capture.problem import load_problem
        problem = load_problem({str(ELEMENTWISE)!r})
        model = pytest_kernelopt.compile(problem.build_model("cpu"), {str(tmp_path / "kernels")!r})
        with warnings.catch_warnings(record=True) as seen, torch.no_grad():
            warnings.simplefilter("always")
            model(*problem.make_inputs(0, "cpu"))
        for w in seen:
            if issubclass(w.category, pytest_kernelopt.KerneloptWarning):
                print("WARNING", w.message)
        print("STATUS", pytest_kernelopt.status(model))
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    warned = [line for line in out.stdout.splitlines() if line.startswith("WARNING")]
    assert len(warned) == 1 and "Inductor generated C++ kernels" in warned[0] \
        and "pytest_kernelopt.interpret.enable()" in warned[0], out.stdout
    # status() said "nothing compiled yet (call the model once ...)" after the call.
    (status,) = [line for line in out.stdout.splitlines() if line.startswith("STATUS")]
    assert "1 graph compiled, with no Triton kernel" in status and "nothing compiled yet" not in status, status


@pytest.mark.slow
def test_the_readme_production_snippet_runs_as_written():
    """The production example (docs/store.md, once the README's), copied as a user would, runs from the repository's
    top folder."""
    page = (REPO / "docs" / "store.md").read_text()
    section = page[page.index("## Tuned kernels in production"):]
    code = re.search(r"```python\n(.*?)```", section, re.S).group(1)
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.startswith("kernelopt: softmax_rows: ")  # print(status(model))
    assert "kernelopt: softmax_rows: " in out.stderr  # the start-up line


def test_status_answers_for_the_registered_backend_form(tmp_path):
    """``torch.compile(model, backend="kernelopt", options={"model": ...})``, as docs/store.md shows it beside
    ``status``: status finds the backend of that options dict, the one the compile then uses."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.errors import UsageError
    from pytest_kernelopt.store import production

    options = {"model": "softmax_rows", "kernels_dir": str(tmp_path / "kernels"), "quiet": True}
    compiled = torch.compile(torch.nn.Linear(4, 4), backend="kernelopt", options=options)
    answer = pytest_kernelopt.status(compiled)
    assert answer.model == "softmax_rows" and answer.kernels == []
    assert "softmax_rows: nothing compiled yet" in str(answer)
    assert production._BY_OPTIONS[id(options)][1] is production._backend_of_options(options)
    with pytest.raises(UsageError, match='torch.compile\\(..., backend="kernelopt"\\)'):
        pytest_kernelopt.status(torch.compile(torch.nn.Linear(4, 4)))


# --- verified where it runs: the compile and the launches a version was verified at ----------------------

HALF = '''"""One softmax at a half dtype: Inductor writes the same kernel text for float16 and bfloat16."""
import torch

DTYPE = torch.{dtype}


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.softmax(x * 2.0, dim=-1)


def get_inputs():
    return [torch.randn(4, 16).to(DTYPE)]


def get_init_inputs():
    return []
'''

DYNAMIC = '''"""A pointwise model whose batch dimension is dynamic: Inductor passes the size to its kernel."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.sin(x) * 2.0 + 1.0


def get_inputs():
    x = torch.randn(4, 64)
    torch._dynamo.mark_dynamic(x, 0)
    return [x]


def get_init_inputs():
    return []
'''


@pytest.mark.slow
def test_a_version_verified_on_float16_does_not_run_on_the_bfloat16_compile(interpreter, tmp_path):
    """Issue 40 class 5: the two compiles' kernels have one text; the version (marked: it adds 1.0, so its run
    shows) runs on the float16 compile it was stored for, and on the bfloat16 one the compiler's kernel runs."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem

    problems = {}
    for dtype in ("float16", "bfloat16"):
        (tmp_path / dtype).mkdir()
        (tmp_path / dtype / "half.py").write_text(HALF.format(dtype=dtype))
        problems[dtype] = load_problem(tmp_path / dtype / "half.py")
    captured = compile_problem(problems["float16"], "cpu")
    (name, handle), = captured.kernels.items()
    file = commit(tmp_path / "kernels", "half", handle.info, marked(handle.info, "half"))

    outs = {}
    for dtype, problem in problems.items():
        model = problem.build_model("cpu")
        compiled = pytest_kernelopt.compile(model, tmp_path / "kernels", model_id="half", quiet=True)
        (x,) = problem.make_inputs(0, "cpu")
        outs[dtype], messages = run(compiled, x)
        with torch.no_grad():
            expected = model(x)
        status = pytest_kernelopt.status(compiled)
        if dtype == "float16":  # the control: the version runs where it was verified, and shows it
            assert messages == [] and [k.runs for k in status.kernels] == ["committed"]
            assert torch.allclose(outs[dtype].float(), expected.float() + 1.0, atol=1e-2)
        else:
            assert [(k.runs, k.why) for k in status.kernels] == [("compiler", "stale")]
            assert len(messages) == 1 and name in messages[0] and str(file) in messages[0], messages
            assert "dtype" in messages[0]
            assert torch.isfinite(outs[dtype]).all()
            assert torch.allclose(outs[dtype].float(), expected.float(), atol=2e-2)  # not the marked version's


@pytest.mark.slow
def test_a_version_runs_only_at_the_launches_the_verifier_checked(interpreter, tmp_path):
    """Issue 40 class 2 in production: a dynamic-shape kernel's version that launches one program (right for the
    verified batch of 4 only) passes the cascade there, and accept records that launch. Production runs it at
    batch 4; at batch 8 (same kernel, same fingerprint) the compiler's kernel runs, said once, and every row is
    written."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.store import KernelStore, accept_verdict
    from pytest_kernelopt.store.production import VerifiedLaunches
    from pytest_kernelopt.verify import VerifySession, source_of
    from pytest_kernelopt.verify.options import VerifyOptions

    path = tmp_path / "dyn_rows.py"
    path.write_text(DYNAMIC)
    with VerifySession(path, interpreter, VerifyOptions(seeds=1, timeout=300)) as session:
        (name,) = session.kernels
        info = session.kernel_info(name)
        grid = "grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)"
        assert grid in render_dump(info, "dyn_rows") and info.launch.kwargs == {"XBLOCK": 256}
        source = render_dump(info, "dyn_rows").replace(grid, "grid = (1, 1, 1)")  # 256 elements: batch 4 only
        verdict = session.verify(name, source_of(source, "one_program.py"))
    assert verdict.status == "correct", verdict.reason
    assert verdict.launches == [["float32 (4, 64) (64, 1)", "float32 (4, 64) (64, 1)", "int 256"]]
    store = KernelStore(tmp_path / "kernels")
    outcome = accept_verdict(store, "dyn_rows", name, source, verdict)
    assert outcome.stored and outcome.record is not None and outcome.record.evidence.launches == verdict.launches

    problem = load_problem(path)
    model = problem.build_model("cpu")
    compiled = pytest_kernelopt.compile(model, tmp_path / "kernels", quiet=True)
    (x4,) = problem.make_inputs(0, "cpu")
    out4, kernels, messages = wrapper_globals(compiled, x4)
    assert messages == [] and [k.runs for k in pytest_kernelopt.status(compiled).kernels] == ["committed"]
    (guard,) = kernels.values()
    assert isinstance(guard, VerifiedLaunches) and guard.runs == {"committed": 1, "compiler": 0}
    x8 = torch.randn(8, 64)
    torch._dynamo.mark_dynamic(x8, 0)
    out8, messages = run(compiled, x8)
    assert len(messages) == 1, messages
    assert f"dyn_rows/{name}" in messages[0] and "float32 (8, 64) (64, 1), float32 (8, 64) (64, 1), int 512" in \
        messages[0] and "compiler's kernel runs" in messages[0]
    again, messages = run(compiled, x8)
    assert messages == [] and guard.runs == {"committed": 1, "compiler": 2}  # said once; no recompile
    with torch.no_grad():
        assert torch.allclose(out4, model(x4), atol=1e-5)
        assert torch.allclose(out8, model(x8), atol=1e-5) and torch.equal(again, out8)  # every row written


@pytest.mark.slow
def test_a_compile_setting_applies_only_to_the_graph_inputs_it_was_verified_at(interpreter, tmp_path):
    """Issue 40 class 7 in production: the compile check records each graph's inputs, tune stores them in model.json,
    and production compiles a graph under the setting only at those; at another shape the defaults compile it,
    said once. A model.json that records none applies nowhere."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.agents.compile_choice import CompileOutcome, record
    from pytest_kernelopt.capture import launch_signature
    from pytest_kernelopt.store import KernelStore
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    softmax, looped = TESTS / "problems" / "softmax_rows.py", "looped-reductions"  # triton_red_ instead of _per_
    with VerifySession(softmax, interpreter, VerifyOptions(seeds=1)) as session:
        verdict = session.verify_compile(looped)
    assert verdict.status == "correct", verdict.reason
    problem, model = fresh(softmax)
    (x,) = problem.make_inputs(0, "cpu")
    assert verdict.launches == [launch_signature([x])]  # the graph's inputs: the model has no weights
    store = KernelStore(tmp_path / "kernels")
    record(store, "softmax_rows", CompileOutcome(chosen=looped), verdict)
    assert store.model_record("softmax_rows").compile.graphs == verdict.launches

    backend = pytest_kernelopt.backend("softmax_rows", tmp_path / "kernels", quiet=True)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    out, found, messages = wrapper_globals(compiled, x)
    assert messages == [] and [n.startswith("triton_red_") for n in found] == [True]
    other = torch.randn(x.shape[0] + 3, x.shape[1])
    out, found, messages = wrapper_globals(compiled, other)
    assert [n.startswith("triton_per_") for n in found] == [True]  # the default compile
    assert len(messages) == 1 and "compile 'looped-reductions' was not verified at this graph's inputs" in \
        messages[0] and launch_signature([other])[0] in messages[0], messages
    with torch.no_grad():
        assert torch.allclose(out, model(other), atol=1e-5)
    _, _, messages = wrapper_globals(compiled, torch.randn(x.shape[0] + 5, x.shape[1]))
    assert len(messages) == 1  # another unverified shape: said for it too (its inputs differ)
    assert backend.settings_applied == [looped, None, None]  # what bench's note says the speed comes from
    # A training step's graph at the verified inputs (grad mode, an input that requires grad): verified in inference
    # only (model.json's compile.training), so the defaults compile it, said once.
    assert store.model_record("softmax_rows").compile.training is False
    from pytest_kernelopt.store.production import KerneloptWarning

    with warnings.catch_warnings(record=True) as caught:  # grad mode on: run() is no_grad
        warnings.simplefilter("always")
        torch.compile(fresh(softmax)[1], backend=backend, dynamic=False)(x.clone().requires_grad_()).sum().backward()
    messages = [str(w.message) for w in caught if issubclass(w.category, KerneloptWarning)]
    assert len(messages) == 1 and "was verified in inference, and this graph is a training step" in messages[0]
    assert backend.settings_applied[-1] is None

    data = json.loads((tmp_path / "kernels" / "softmax_rows" / "model.json").read_text())
    elsewhere = json.loads(json.dumps(data))  # checked under another torch (so a gate here would compile nothing)
    elsewhere["compile"]["environment"]["torch"] = "2.0.0"
    (tmp_path / "kernels" / "softmax_rows" / "model.json").write_text(json.dumps(elsewhere))
    problem, model = fresh(softmax)
    out, found, messages = wrapper_globals(pytest_kernelopt.compile(model, tmp_path / "kernels", quiet=True), x)
    assert [n.startswith("triton_per_") for n in found] == [True]
    assert len(messages) == 1 and "is not verified here" in messages[0] and "torch 2.0.0" in messages[0], messages
    data["compile"]["graphs"] = None  # a model.json written before graphs were recorded
    (tmp_path / "kernels" / "softmax_rows" / "model.json").write_text(json.dumps(data))
    problem, model = fresh(softmax)
    out, found, messages = wrapper_globals(pytest_kernelopt.compile(model, tmp_path / "kernels", quiet=True), x)
    assert [n.startswith("triton_per_") for n in found] == [True]
    assert len(messages) == 1 and "records no graph inputs it was verified at" in messages[0], messages


def test_the_start_up_line_names_kernels_with_a_reason_and_counts_those_with_nothing_committed(tmp_path):
    """A training step's graph has 16 kernels; naming each "(nothing committed)" filled the start-up line."""
    from pytest_kernelopt.store.production import NOTHING_COMMITTED, ProductionKernel, status_line

    def kernel(name, runs="compiler", why=NOTHING_COMMITTED, version=None):
        return ProductionKernel(name=name, graph=1, fingerprint=None, runs=runs, why=why, version=version)

    store = tmp_path / "kernels"
    bare = [kernel(f"triton_poi_fused_{i}") for i in range(16)]
    assert status_line("m", store, 1, bare).endswith("0 of 16 Triton kernels from " + f"{store}/; "
                                                     "16 compiler kernels (nothing committed)")
    mixed = [kernel("triton_per_fused_0", "committed", None, 2), kernel("triton_poi_fused_1", why="stale"), *bare[:3]]
    assert status_line("m", store, None, mixed) == (
        f"kernelopt: m: 1 of 5 Triton kernels from {store}/ (triton_per_fused_0 v2); 4 compiler kernels: "
        "triton_poi_fused_1 (stale), 3 with nothing committed")


@pytest.mark.slow
def test_each_declared_shape_s_compile_setting_applies_at_that_shape_s_graph_inputs(interpreter, tmp_path):
    """A problem with SHAPES stores a setting per shape (model.json's compile_at): production finds the one whose
    graphs a compiled graph's inputs are among; at inputs no shape's setting was verified at, the defaults."""
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.agents.compile_choice import CompileOutcome, record
    from pytest_kernelopt.capture import launch_signature
    from pytest_kernelopt.store import KernelStore
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    softmax, looped = TESTS / "problems" / "softmax_rows.py", "looped-reductions"  # triton_red_ instead of _per_
    with VerifySession(softmax, interpreter, VerifyOptions(seeds=1)) as session:
        verdict = session.verify_compile(looped)
    problem, model = fresh(softmax)
    (x,) = problem.make_inputs(0, "cpu")
    wider = torch.randn(x.shape[0] + 3, x.shape[1])
    store = KernelStore(tmp_path / "kernels")
    record(store, "softmax_rows", CompileOutcome(chosen=looped), verdict, shape="small")
    other = verdict.model_copy(update={"launches": [launch_signature([wider])]})
    record(store, "softmax_rows", CompileOutcome(chosen=looped), other, shape="wide")
    saved = store.model_record("softmax_rows")
    assert saved.compile is None and saved.compile_at["wide"].graphs == [launch_signature([wider])]
    assert store.compile_variant("softmax_rows", "small") == looped and store.compile_variant("softmax_rows") is None

    backend = pytest_kernelopt.backend("softmax_rows", tmp_path / "kernels", quiet=True)
    compiled = torch.compile(model, backend=backend, dynamic=False)
    for inputs in (x, wider):
        out, found, messages = wrapper_globals(compiled, inputs)
        assert messages == [] and [n.startswith("triton_red_") for n in found] == [True]
    out, found, messages = wrapper_globals(compiled, torch.randn(x.shape[0] + 5, x.shape[1]))
    assert [n.startswith("triton_per_") for n in found] == [True]  # no shape's setting: the defaults, said once
    assert len(messages) == 1 and f"compile '{looped}' was not verified at this graph's inputs" in messages[0]
    assert backend.settings_applied == [looped, looped, None]
    # A pull request's entry production cannot parse (capture never writes it): said, not used, never a crash.
    data = json.loads((tmp_path / "kernels" / "softmax_rows" / "model.json").read_text())
    data["compile_at"]["odd"] = {**data["compile_at"]["wide"], "graphs": [["rm -rf / ; not a signature"]]}
    (tmp_path / "kernels" / "softmax_rows" / "model.json").write_text(json.dumps(data))
    problem, model = fresh(softmax)
    out, found, messages = wrapper_globals(pytest_kernelopt.compile(model, tmp_path / "kernels", quiet=True),
                                           torch.randn(x.shape[0] + 7, x.shape[1]))
    assert [n.startswith("triton_per_") for n in found] == [True]
    assert any("compile.graphs holds an entry that is no graph's inputs" in m for m in messages), messages
