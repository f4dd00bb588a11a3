"""Problem files: loading, seeded inputs and weights, and one clear error per defect."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

import forkserver

from pytest_kernelopt.errors import ProblemError
from pytest_kernelopt.capture.problem import load_problem

PROBLEMS = Path(__file__).parent / "problems"
EXAMPLES = sorted(PROBLEMS.glob("*.py"))
BENCH = sorted((Path(__file__).parent.parent / "bench" / "problems").glob("*.py"))
WEIGHTED = ["conv_relu_bias", "elementwise_chain", "gather_rows", "linear_gelu", "rms_norm", "small_mlp_graph_break"]

examples = pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)


def write_problem(folder: Path, source: str, name: str = "bad_problem") -> Path:
    path = folder / f"{name}.py"
    path.write_text(textwrap.dedent(source).lstrip())
    return path


def line_of(path: Path, text: str) -> int:
    """1-based number of the first line of ``path`` containing ``text``."""
    return next(i for i, line in enumerate(path.read_text().splitlines(), 1) if text in line)


def test_example_problems_are_found():
    assert len(EXAMPLES) >= 10  # every parametrized test here runs on each of them


# --- the example problems ---------------------------------------------------------------

@examples
def test_example_loads_and_runs_eagerly(path):
    import torch

    problem = load_problem(path)
    model = problem.build_model()
    inputs = problem.make_inputs(0)

    assert problem.id == path.stem
    assert isinstance(model, torch.nn.Module) and not model.training
    assert inputs and all(isinstance(x, torch.Tensor) for x in inputs)
    with torch.no_grad():
        assert isinstance(model(*inputs), torch.Tensor)


@pytest.mark.parametrize("path", BENCH, ids=lambda p: p.stem)
def test_bench_problem_runs_eagerly_at_its_small_size(path):
    """bench/problems' GPU-sized shapes run on the H200 only; the small ones must stay runnable here."""
    import torch

    problem = load_problem(path)
    model = problem.build_model()
    first, again = problem.make_inputs(0), problem.make_inputs(0)
    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert sum(x.numel() for x in first) < 1 << 16  # the default size is the interpreter's
    with torch.no_grad():
        out = model(*first)
    assert isinstance(out, torch.Tensor) and (not out.is_floating_point() or bool(torch.isfinite(out).all()))


def test_bench_problems_are_found():
    assert len(BENCH) >= 20


@examples
def test_inputs_depend_on_the_seed_only(path):
    import torch

    problem = load_problem(path)
    first = problem.make_inputs(0)
    torch.rand(1000)  # whatever ran before must not matter
    again = problem.make_inputs(0)
    other = problem.make_inputs(1)

    assert all(torch.equal(a, b) for a, b in zip(first, again, strict=True))
    assert any(not torch.equal(a, b) for a, b in zip(first, other, strict=True))


NUMPY_DRAWN = """
import random
import numpy as np
import torch
class Model(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.w = torch.nn.Parameter(torch.from_numpy(np.random.randn(8).astype("float32")))
    def forward(self, x, s):
        return x * self.w * s
def get_inputs():
    return [torch.from_numpy(np.random.randn(4, 8).astype("float32")), random.random()]
def get_init_inputs():
    return []
"""


def test_inputs_and_weights_drawn_with_numpy_or_random_depend_on_the_seed_only(tmp_path):
    """numpy's and Python's global generators are seeded with torch's (all 64 bits of a seed): a file that draws
    with np.random.randn or random.random gets the same inputs and weights under the same seed, whatever ran
    before; and two draws that differ are the problem's error (the verifier's check, which names the input)."""
    import random

    import numpy as np
    import torch

    from pytest_kernelopt.errors import ProblemError

    path = tmp_path / "numpy_drawn.py"
    path.write_text(NUMPY_DRAWN)
    problem = load_problem(path)
    big = 2 ** 63 - 25  # the verifier's seeds are 63-bit
    first = problem.make_inputs(big)
    np.random.rand(100), random.random()  # whatever ran before must not matter
    again, other = problem.make_inputs(big), problem.make_inputs(big - 2 ** 32)  # only the high bits differ
    assert torch.equal(first[0], again[0]) and first[1] == again[1]
    assert not torch.equal(first[0], other[0]) and first[1] != other[1]
    np.random.rand(100)
    assert torch.equal(problem.build_model().w, problem.build_model().w)

    problem.check_reproducible(big, [1, 2], [1, 2])
    with pytest.raises(ProblemError, match=r"get_inputs\(\) is not reproducible: two draws under seed 5 differ "
                                           r"\(input 1\)\..*np\.random\.default_rng\(\)"):
        problem.check_reproducible(5, [1, 2], [1, 3])


@pytest.mark.parametrize("name", WEIGHTED)
def test_weights_are_deterministic(name):
    import torch

    problem = load_problem(PROBLEMS / f"{name}.py")
    torch.manual_seed(123)
    first = problem.build_model().state_dict()
    torch.manual_seed(456)
    second = problem.build_model().state_dict()

    assert first, f"{name} has no weights"
    assert first.keys() == second.keys()
    assert all(torch.equal(first[k], second[k]) for k in first)


# --- defective problem files ------------------------------------------------------------

HEADER = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        return x + 1

def get_init_inputs():
    return []
"""

# name -> (source, what must go wrong, fragments of the message, a line the message names)
BAD_FILES = {
    "syntax_error": (
        """
        import torch

        class Model(torch.nn.Module):
            def forward(self, x)
                return x
        """,
        "load", ["syntax error"], "def forward(self, x)",
    ),
    "import_raises": (
        """
        import torch

        TABLE = {"a": 1}
        SIZE = TABLE["b"]
        """,
        "load", ["importing failed", "KeyError", "'b'"], 'SIZE = TABLE["b"]',
    ),
    "no_model": (
        """
        import torch

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return []
        """,
        "load", ["no `Model`"], None,
    ),
    "no_get_inputs": (HEADER, "load", ["no `get_inputs`"], None),
    "model_not_a_class": (
        """
        import torch

        Model = torch.nn.Linear(4, 4)

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return []
        """,
        "load", ["`Model` must be a class"], None,
    ),
    "inputs_not_a_list": (HEADER + "\ndef get_inputs():\n    return torch.randn(4)\n",
                          "inputs", ["get_inputs()", "list", "Tensor"], None),
    "inputs_hold_a_string": (HEADER + "\ndef get_inputs():\n    return [torch.randn(4), 'x']\n",
                             "inputs", ["get_inputs()", "item 1", "str", "not a tensor or a Python number"], None),
    "inputs_only_numbers": (HEADER + "\ndef get_inputs():\n    return [3, 0.5]\n",
                            "inputs", ["get_inputs()", "no tensor"], None),
    "inputs_empty": (HEADER + "\ndef get_inputs():\n    return []\n", "inputs",
                     ["get_inputs() returned an empty list", "at least one tensor"], None),
    "get_inputs_raises": (
        HEADER + "\ndef get_inputs():\n    return [torch.randn(4, -1)]\n",
        "inputs", ["get_inputs() failed", "RuntimeError"], "torch.randn(4, -1)",
    ),
    "init_raises": (
        """
        import torch

        class Model(torch.nn.Module):
            def __init__(self, size):
                super().__init__()
                raise ValueError(f"size {size} is not supported")

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return [7]
        """,
        "model", ["Model(*get_init_inputs()) failed", "ValueError", "size 7 is not supported"], "raise ValueError",
    ),
    "model_not_a_module": (
        """
        import torch

        class Model:
            def __call__(self, x):
                return x

        def get_inputs():
            return [torch.randn(4)]

        def get_init_inputs():
            return []
        """,
        "model", ["not a torch.nn.Module"], None,
    ),
}


@pytest.mark.parametrize("name", BAD_FILES)
def test_bad_file_gives_problem_error_naming_file_and_cause(name, tmp_path):
    source, stage, fragments, line = BAD_FILES[name]
    path = write_problem(tmp_path, source, name)

    with pytest.raises(ProblemError) as info:
        problem = load_problem(path)
        if stage == "inputs":
            problem.make_inputs(0)
        elif stage == "model":
            problem.build_model()
    message = str(info.value)

    assert message.startswith(f"{path}: ")
    assert info.value.path == str(path)
    for fragment in fragments:
        assert fragment in message
    if line is not None:
        assert f"line {line_of(path, line)}" in message


SCALAR = """
import torch


class Model(torch.nn.Module):
    def forward(self, a, s, flip):
        return (-a if flip else a) * s


def get_inputs():
    return [torch.randn(16, 24), 2.5, True]


def get_init_inputs():
    return []
"""


def test_python_numbers_in_get_inputs_pass_as_they_are(tmp_path):
    import torch

    problem = load_problem(write_problem(tmp_path, SCALAR, "scalar_mul"))
    a, s, flip = problem.make_inputs(3)
    assert isinstance(a, torch.Tensor) and s == 2.5 and flip is True
    assert torch.equal(problem.make_inputs(3)[0], a)


@pytest.mark.slow
def test_a_problem_with_number_inputs_goes_through_the_cascade(tmp_path):
    """The compiler's kernel is correct; one that ignores the scale input is rejected."""
    import json
    import sys

    path = write_problem(tmp_path, SCALAR, "scalar_mul")
    cli = [sys.executable, "-m", "pytest_kernelopt.cli"]
    dumped = forkserver.run([*cli, "kernels", str(path), "--device", "cpu", "--dump", str(tmp_path / "d"), "--json"],
                            timeout=600)
    assert dumped.returncode == 0, dumped.stderr[-2000:]
    [kernel] = [k for k in json.loads(dumped.stdout) if k["kind"] == "triton"]
    good = tmp_path / "d" / f"{kernel['name']}.py"
    text = good.read_text()
    bad = tmp_path / "ignores_scale.py"
    bad.write_text(text.replace("2.5", "2.0"))  # torch.compile specialised the number into the kernel
    assert bad.read_text() != text
    proc = forkserver.run([*cli, "verify", str(path), "--kernel", kernel["name"], "--candidate", str(good), str(bad),
                           "--device", "cpu", "--seeds", "1", "--json"], timeout=900)
    verdicts = json.loads(proc.stdout)
    assert [v["status"] for v in verdicts] == ["correct", "rejected"], proc.stderr[-2000:]


def test_missing_file(tmp_path):
    path = tmp_path / "missing.py"
    with pytest.raises(ProblemError, match="no such file") as info:
        load_problem(path)
    assert str(path) in str(info.value)


def test_not_a_python_file(tmp_path):
    path = tmp_path / "model.txt"
    path.write_text(HEADER)
    with pytest.raises(ProblemError, match=r"\.py file") as info:
        load_problem(path)
    assert str(path) in str(info.value)


def test_exit_at_import_is_a_problem_error(tmp_path):
    path = write_problem(tmp_path, "import sys\n\nsys.exit(3)\n")
    with pytest.raises(ProblemError, match="SystemExit"):
        load_problem(path)


def test_failed_import_can_be_fixed_and_reloaded(tmp_path):
    path = write_problem(tmp_path, HEADER + "\nBROKEN = 1 / 0\n")
    with pytest.raises(ProblemError, match="ZeroDivisionError"):
        load_problem(path)
    write_problem(tmp_path, HEADER + "\ndef get_inputs():\n    return [torch.randn(4)]\n")
    assert load_problem(path).make_inputs(0)[0].shape == (4,)


# --- models that load but do not compile or run -----------------------------------------

FORWARD_RAISES = """
import torch

class Model(torch.nn.Module):
    def forward(self, x):
        y = x * 2
        raise ValueError("forward is broken")

def get_inputs():
    return [torch.randn(4)]

def get_init_inputs():
    return []
"""

SHAPE_MISMATCH = """
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
"""


@pytest.mark.slow
def test_forward_raising_gives_problem_error(tmp_path, interpreter):
    from pytest_kernelopt.capture import compile_problem

    path = write_problem(tmp_path, FORWARD_RAISES)
    with pytest.raises(ProblemError) as info:
        compile_problem(load_problem(path), interpreter)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "ValueError" in message and "forward is broken" in message


@pytest.mark.slow
def test_shape_mismatch_names_the_file_and_the_cause(tmp_path, interpreter):
    from pytest_kernelopt.capture import compile_problem

    path = write_problem(tmp_path, SHAPE_MISMATCH)
    with pytest.raises(ProblemError) as info:
        compile_problem(load_problem(path), interpreter)
    message = str(info.value)
    assert message.startswith(f"{path}: ")
    assert "eager mode" in message and f"line {line_of(path, 'x @ self.weight')}" in message
