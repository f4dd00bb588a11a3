"""Interpreter mode: the libdevice table, its failures, and the vectorized reduce/scan shim.

Triton decides at ``@triton.jit`` time whether a function is interpreted, so the
kernels here are written to files and imported by the tests, after interpreter mode
is on, never at collection.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from pytest_kernelopt.interpret import supported_libdevice

PROBLEMS = Path(__file__).parent / "problems"
EXAMPLES = sorted(PROBLEMS.glob("*.py"))

pytestmark = pytest.mark.usefixtures("interpreter")


def import_file(path: Path):
    spec = importlib.util.spec_from_file_location(f"kernelopt_test_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


UNARY_KERNEL = """
import triton
import triton.language as tl
from triton.language.extra import libdevice


@triton.jit
def kernel(x_ptr, y_ptr, n, BLOCK: tl.constexpr):
    offs = tl.arange(0, BLOCK)
    mask = offs < n
    tl.store(y_ptr + offs, libdevice.{name}(tl.load(x_ptr + offs, mask, other=1.0)), mask)
"""


def apply_libdevice(name: str, x, folder: Path):
    """``libdevice.<name>`` applied to ``x`` by a one-line Triton kernel."""
    import torch

    path = folder / f"unary_{name}.py"
    path.write_text(UNARY_KERNEL.format(name=name))
    kernel = import_file(path).kernel
    y = torch.empty_like(x)
    kernel[(1,)](x, y, x.numel(), BLOCK=triton_block(x.numel()))
    return y


def triton_block(n: int) -> int:
    return 1 << (n - 1).bit_length()


# --- libdevice ---------------------------------------------------------------------------

@pytest.mark.slow
def test_libdevice_functions_of_the_examples_are_supported(compiled_models):
    from pytest_kernelopt.candidate import render_dump

    used: dict[str, set[str]] = {}  # libdevice name -> problems whose dumps call it
    for path in EXAMPLES:
        compiled = compiled_models.get(path)
        for handle in compiled.kernels.values():
            for name in re.findall(r"\blibdevice\.(\w+)", render_dump(handle.info, compiled.problem.id)):
                used.setdefault(name, set()).add(path.stem)

    assert {"exp", "rsqrt"} <= used.keys()  # softmax and RMSNorm need them: the scan works
    missing = {name: sorted(where) for name, where in used.items() if name not in supported_libdevice()}
    assert not missing


# libdevice functions with a torch function of the same name, and inputs inside their domain.
DOMAINS = {
    "exp": (-5, 5), "expm1": (-1, 1), "log": (0.1, 10), "log1p": (-0.5, 5), "sqrt": (0, 10), "rsqrt": (0.1, 10),
    "tanh": (-5, 5), "erf": (-3, 3), "erfinv": (-0.99, 0.99), "lgamma": (0.1, 10), "sin": (-5, 5), "atan": (-5, 5),
    "floor": (-5, 5),
}


@pytest.mark.parametrize("name", DOMAINS)
def test_libdevice_function_matches_torch(name, tmp_path):
    import torch

    x = torch.linspace(*DOMAINS[name], 101)

    got = apply_libdevice(name, x, tmp_path)

    torch.testing.assert_close(got, getattr(torch, name)(x), rtol=1e-5, atol=1e-5)


def test_libdevice_round_rounds_halves_away_from_zero(tmp_path):
    import torch

    x = torch.tensor([0.5, 1.5, 2.5, -0.5, -2.5, 0.25, -1.75])

    got = apply_libdevice("round", x, tmp_path)

    assert got.tolist() == [1.0, 2.0, 3.0, -1.0, -3.0, 0.0, -2.0]


def test_libdevice_lgamma_at_its_poles_is_infinite(tmp_path):
    import torch

    x = torch.tensor([0.0, -1.0, 2.5])

    got = apply_libdevice("lgamma", x, tmp_path)

    assert torch.equal(got, torch.lgamma(x))


@pytest.mark.parametrize("name", ["j0", "erfcx"])
def test_unsupported_libdevice_function_is_named(name, tmp_path):
    import torch

    assert name not in supported_libdevice()
    with pytest.raises(Exception, match=rf"libdevice\.{name}\b.*interpreter"):
        apply_libdevice(name, torch.rand(8), tmp_path)


# --- reductions and scans with a custom combine function --------------------------------

REDUCE_SCAN_KERNELS = """
import triton
import triton.language as tl


@triton.jit
def nan_max(a, b):
    return tl.where((a > b) | (a != a), a, b)


@triton.jit
def add(a, b):
    return a + b


@triton.jit
def arg_max(a, ia, b, ib):
    take_a = (a > b) | ((a == b) & (ia < ib))
    return tl.where(take_a, a, b), tl.where(take_a, ia, ib)


@triton.jit
def reductions(x_ptr, row_max_ptr, col_max_ptr, row_argmax_ptr, total_ptr, rows, COLS: tl.constexpr, BLOCK_R: tl.constexpr):
    r = tl.arange(0, BLOCK_R)[:, None]
    c = tl.arange(0, COLS)[None, :]
    valid = r < rows
    x = tl.load(x_ptr + r * COLS + c, valid, other=float("-inf"))
    row = tl.arange(0, BLOCK_R)
    tl.store(row_max_ptr + row, tl.reduce(x, 1, nan_max), row < rows)
    tl.store(col_max_ptr + c, tl.reduce(x, 0, nan_max, keep_dims=True))
    index = tl.broadcast_to(c, (BLOCK_R, COLS))
    _, where = tl.reduce((x, index), 1, arg_max)
    tl.store(row_argmax_ptr + row, where, row < rows)
    tl.store(total_ptr, tl.reduce(tl.where(valid, x, 0.0), None, add))


@triton.jit
def scans(x_ptr, along_rows_ptr, along_cols_ptr, rows, COLS: tl.constexpr, BLOCK_R: tl.constexpr):
    r = tl.arange(0, BLOCK_R)[:, None]
    c = tl.arange(0, COLS)[None, :]
    valid = r < rows
    x = tl.load(x_ptr + r * COLS + c, valid, other=0.0)
    tl.store(along_cols_ptr + r * COLS + c, tl.associative_scan(x, 1, add), valid)
    tl.store(along_rows_ptr + r * COLS + c, tl.associative_scan(x, 0, add), valid)
"""


@pytest.fixture(scope="module")
def reduce_scan(tmp_path_factory):
    """Kernels reducing and scanning a (rows x 16) block with custom combine functions."""
    path = tmp_path_factory.mktemp("kernels") / "reduce_scan.py"
    path.write_text(REDUCE_SCAN_KERNELS)
    return import_file(path)


ROWS, COLS, BLOCK_R = 7, 16, 8  # 7 rows: not a power of two


def sample(with_nan: bool):
    import torch

    x = torch.randn(ROWS, COLS, generator=torch.Generator().manual_seed(0))
    if with_nan:
        x[2, 5] = x[4, 0] = float("nan")
    return x


def test_custom_reductions_agree_with_torch(reduce_scan):
    import torch

    x = sample(with_nan=True)
    row_max, col_max, total = torch.empty(ROWS), torch.empty(COLS), torch.empty(1)
    row_argmax = torch.empty(ROWS, dtype=torch.int32)

    reduce_scan.reductions[(1,)](x, row_max, col_max, row_argmax, total, ROWS, COLS=COLS, BLOCK_R=BLOCK_R)

    torch.testing.assert_close(row_max, x.amax(1), equal_nan=True, rtol=0, atol=0)
    torch.testing.assert_close(col_max, x.amax(0), equal_nan=True, rtol=0, atol=0)
    clean = ~x.isnan().any(1)
    assert torch.equal(row_argmax[clean].long(), x.argmax(1)[clean])
    assert total.isnan().all()  # NaN reaches the sum through the tree


def test_custom_combine_runs_on_whole_arrays(reduce_scan, monkeypatch):
    """The shim calls a combine function once per tree level, not once per element."""
    import torch

    from pytest_kernelopt import interpret

    calls = []
    combine = interpret._combine
    monkeypatch.setattr(interpret, "_combine", lambda *a: calls.append(1) or combine(*a))
    x = sample(with_nan=False)

    reduce_scan.scans[(1,)](x, torch.empty_like(x), torch.empty_like(x), ROWS, COLS=COLS, BLOCK_R=BLOCK_R)

    assert len(calls) == 4 + 3  # log2(16) steps along the columns, log2(8) along the rows


def test_custom_sum_over_the_whole_block(reduce_scan):
    import torch

    x = sample(with_nan=False)
    out = [torch.empty(ROWS), torch.empty(COLS), torch.empty(ROWS, dtype=torch.int32), torch.empty(1)]

    reduce_scan.reductions[(1,)](x, *out, ROWS, COLS=COLS, BLOCK_R=BLOCK_R)

    torch.testing.assert_close(out[3], x.sum().reshape(1), rtol=1e-5, atol=1e-5)
    assert torch.equal(out[2].long(), x.argmax(1))


def test_custom_scans_agree_with_torch_cumsum(reduce_scan):
    import torch

    x = sample(with_nan=False)
    along_rows, along_cols = torch.full_like(x, 7.0), torch.full_like(x, 7.0)

    reduce_scan.scans[(1,)](x, along_rows, along_cols, ROWS, COLS=COLS, BLOCK_R=BLOCK_R)

    torch.testing.assert_close(along_cols, x.cumsum(1), rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(along_rows, x.cumsum(0), rtol=1e-5, atol=1e-5)


def test_a_convolution_model_compiles_under_max_autotune_in_interpreter_mode(interpreter):
    """Inductor's convolution templates do not compile for the CPU Triton backend (torch 2.13), and a
    stored max-autotune setting is compiled by the gate on a CPU: convolutions stay library calls."""
    from conftest import TESTS

    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem

    compiled = compile_problem(load_problem(TESTS / "data" / "conv_norms.py"), interpreter, variant="max-autotune")
    assert compiled.kernels and not any(name.startswith("triton_tem") for name in compiled.kernels)
    assert sum("convolution" in e.target for e in compiled.externs) == 2, [e.target for e in compiled.externs]


def test_interpreter_mode_starts_no_compile_worker_pool(interpreter):
    """The interpreter compiles nothing, so Inductor's pool of compile workers (a process importing torch, about 4
    CPU-s, started on any machine with two or more cores) would only cost: interpreter mode turns it off."""
    from torch._inductor import config
    from torch._inductor.async_compile import AsyncCompile

    assert config.compile_threads == 1
    assert not AsyncCompile.use_process_pool()


def test_the_interpreter_speed_ups_apply_only_on_the_triton_release_they_were_read_against(interpreter):
    import triton
    from triton.runtime import interpreter as triton_interpreter

    from pytest_kernelopt import interpret

    patched = getattr(triton_interpreter._patch_lang, "__module__", "") == interpret.__name__
    assert patched == triton.__version__.startswith(interpret.SPEEDUPS_CHECKED)
    assert interpret._speedups_checked() == patched


# --- atomics ---------------------------------------------------------------------------------

ATOMIC_KERNEL = """
import triton
import triton.language as tl


@triton.jit
def kernel(out_ptr, idx_ptr, val_ptr, rows, X: tl.constexpr, R: tl.constexpr):
    x = tl.program_id(0) * X + tl.arange(0, X)[:, None]
    r = tl.arange(0, R)[None, :]
    xmask = x < rows
    i = tl.load(idx_ptr + x, xmask, other=0)
    v = tl.load(val_ptr + (r + R * x), xmask, other=0.0)
    tl.atomic_add(out_ptr + tl.broadcast_to(r + R * i, [X, R]), v, xmask, sem="relaxed")
"""


@pytest.mark.parametrize("block_rows", [1, 2, 4])
def test_an_atomic_add_with_a_broadcast_row_mask_adds_every_element(block_rows, tmp_path):
    """Inductor's embedding backward (an index_put with accumulation) fused with a LayerNorm backward adds rows
    with ``tl.atomic_add(ptr [XBLOCK, R], v, xmask [XBLOCK, 1])``. With XBLOCK=1 the interpreter's native atomic
    read the broadcast mask as contiguous memory and added only the first element of each row (triton 3.7.1):
    the whole embedding gradient of a training step came out wrong, the compiled baseline with it."""
    import torch

    path = tmp_path / "atomic.py"
    path.write_text(ATOMIC_KERNEL)
    kernel = import_file(path).kernel
    rows, width = 6, 8
    idx = torch.tensor([0, 2, 2, 1, 0, 3])  # repeated rows: they accumulate
    val = torch.randn(rows, width)
    out = torch.zeros(4, width)
    kernel[(triton_block(rows) // block_rows,)](out, idx, val, rows, X=block_rows, R=width)
    assert torch.allclose(out, torch.zeros(4, width).index_add_(0, idx, val), atol=1e-6)


def test_an_embedding_then_layer_norm_training_step_compiles_to_the_right_gradient():
    """The model-level form of the atomic bug above: Inductor's kernel that adds the LayerNorm backward into
    the embedding's rows. The compiled gradient once matched float64 nowhere (its error was its scale)."""
    import torch
    import torch.nn.functional as F

    def f(ids, w, lw, lb, hw):
        return (F.layer_norm(F.embedding(ids, w), (32,), lw, lb) @ hw.t()).pow(2).mean()

    gen = torch.Generator().manual_seed(0)
    ids = torch.randint(0, 96, (2, 16), generator=gen)
    params = [torch.randn(96, 32, generator=gen), torch.rand(32, generator=gen) + 0.5,
              torch.randn(32, generator=gen), torch.randn(96, 32, generator=gen)]
    with torch.enable_grad():  # whatever an earlier test in this worker left
        p64 = [p.double().requires_grad_() for p in params]
        ref = torch.autograd.grad(f(ids, *p64), p64[0])[0]
        torch._dynamo.reset()
        p32 = [p.clone().requires_grad_() for p in params]
        got = torch.autograd.grad(torch.compile(f)(ids, *p32), p32[0])[0]
    assert (got.double() - ref).abs().max() <= 1e-5 * ref.abs().max()
