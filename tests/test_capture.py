"""Capture: what ``compile_problem`` finds in Inductor's output, and kernel source analysis."""

from __future__ import annotations

import re
import textwrap
from pathlib import Path

import pytest

from pytest_kernelopt.capture import find_kernel_def, fingerprint, kernel_fingerprint, pointer_uses, written_args
from pytest_kernelopt.errors import CaptureError

PROBLEMS = Path(__file__).parent / "problems"
EXAMPLES = sorted(PROBLEMS.glob("*.py"))

examples = pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)

EXTERN_TARGETS = {
    "conv_relu_bias": {"extern_kernels.convolution"},
    "linear_gelu": {"extern_kernels.addmm"},
    "small_mlp_graph_break": {"extern_kernels.addmm"},
}
GRAPHS = {"small_mlp_graph_break": 2}
# Problems with integer index inputs: (position of the index tensor in get_inputs(), bound).
INDEX_INPUTS = {"gather_rows": (1, "VOCAB"), "cross_entropy": (1, "CLASSES")}


# --- compiled example problems ----------------------------------------------------------

@pytest.mark.slow
@examples
def test_graphs_kernels_and_extern_calls(path, compiled_models):
    summary = compiled_models.get(path).summary()

    assert summary.kernels, "no Triton kernel captured"
    assert summary.graphs == GRAPHS.get(path.stem, 1)
    assert {e.target for e in summary.externs} == EXTERN_TARGETS.get(path.stem, set())
    # Every graph is opened up: each contributes a kernel or an extern call.
    assert {k.graph for k in summary.kernels} | {e.graph for e in summary.externs} == set(range(summary.graphs))


@pytest.mark.slow
def test_graph_break_kernels_are_attributed_to_their_graph(compiled_models):
    summary = compiled_models.get(PROBLEMS / "small_mlp_graph_break.py").summary()

    # fc1 + relu + layer norm before the break; fc2 + silu, fc3 + tanh after it.
    assert [e.graph for e in summary.externs] == [0, 1, 1]
    assert {k.graph for k in summary.kernels} == {0, 1}


@pytest.mark.slow
@examples
def test_kernel_records(path, compiled_models):
    compiled = compiled_models.get(path)

    for name, handle in compiled.kernels.items():
        info = handle.info
        params = [a.arg for a in find_kernel_def(info.source, info.function).args.args]
        assert re.fullmatch(r"[0-9a-f]{16}", info.fingerprint), name
        assert info.fingerprint == kernel_fingerprint(handle.original, info.source, info.function), name
        assert info.fingerprint != fingerprint(info.source, info.function), name  # the text alone is not all
        assert [a.name for a in info.args] == params[: len(info.args)], name
        assert all(p in info.launch.kwargs for p in params[len(info.args):]), name  # the rest are constexprs
        assert info.written_args, f"{name} writes nothing"
        for arg in info.args:
            if arg.kind == "tensor":
                assert arg.dtype and arg.shape is not None and len(arg.stride) == len(arg.shape), (name, arg)
            else:
                assert arg.kind == "int" and isinstance(arg.value, int), (name, arg)
                assert not (arg.read or arg.written), (name, arg)
        assert all(a.kind == "tensor" for a in info.args if a.written), name
    # Every example ends in a Triton kernel: one of them writes a tensor of the output's shape.
    output = compiled(*compiled.problem.make_inputs(0))
    written = [a.shape for h in compiled.kernels.values() for a in h.info.args if a.written]
    assert list(output.shape) in written


@pytest.mark.slow
@pytest.mark.parametrize("problem", INDEX_INPUTS)
def test_index_arguments_record_their_value_range(problem, compiled_models):
    compiled = compiled_models.get(PROBLEMS / f"{problem}.py")
    position, bound = INDEX_INPUTS[problem]
    index = compiled.problem.make_inputs(0)[position]  # the seed compile_problem ran with

    args = [a for h in compiled.kernels.values() for a in h.info.args if a.dtype == "int64"]
    assert args, "no int64 tensor argument captured"
    for arg in args:
        assert 0 <= arg.min <= arg.max < getattr(compiled.problem.module, bound)
        assert (arg.min, arg.max) == (int(index.min()), int(index.max()))


@pytest.mark.slow
def test_fingerprints_agree_with_another_process(compiled_models, kernels_listing):
    path = PROBLEMS / "small_mlp_graph_break.py"
    listing = kernels_listing(path)
    assert listing.result.returncode == 0, listing.result.stderr

    elsewhere = {row["name"]: row["fingerprint"] for row in listing.rows if row["kind"] == "triton"}
    here = {name: h.info.fingerprint for name, h in compiled_models.get(path).kernels.items()}
    assert here == elsewhere


# --- fingerprint -------------------------------------------------------------------------

HEAD = "import triton\nimport triton.language as tl\n"
COPY = """
@triton.jit
def kernel(in_ptr0, out_ptr0, n, BLOCK: tl.constexpr):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    tl.store(out_ptr0 + offs, tl.load(in_ptr0 + offs), offs < n)
"""


def renamed(source: str, old: str, new: str) -> str:
    return re.sub(rf"\b{old}\b", new, source)


def reformatted(source: str, name: str) -> str:
    """Comments and blank lines between the statements of ``name``, spacing around operators squeezed."""
    func = find_kernel_def(source, name)
    lines = source.splitlines()
    first, last = func.body[0].lineno - 1, func.end_lineno
    body = []
    for i, line in enumerate(lines[first:last]):
        squeezed = re.sub(r" ([*+]) ", r"\1", line)
        body += [f"    # step {i}: a comment", "", f"{squeezed}  # trailing comment"]
    return "\n".join([*lines[:first], *body, *lines[last:]])


@pytest.mark.slow
@examples
def test_fingerprint_ignores_name_comments_and_formatting(path, compiled_models, wrong_candidate):
    for name, handle in compiled_models.get(path).kernels.items():
        source, function = handle.info.source, handle.info.function
        original = fingerprint(source, function)

        assert fingerprint(renamed(source, function, "my_kernel"), "my_kernel") == original, name
        assert fingerprint(reformatted(source, function), function) == original, name
        assert fingerprint(wrong_candidate(source), function) != original, name


def half_problem(folder: Path, dtype: str) -> Path:
    """The same model at ``dtype``, as a problem file named ``half`` (one model id for both)."""
    from test_production import HALF

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "half.py"
    path.write_text(HALF.format(dtype=dtype))
    return path


@pytest.mark.slow
def test_the_fingerprint_tells_float16_from_bfloat16_where_the_text_does_not(interpreter, tmp_path):
    """Inductor writes one text for both half dtypes (torch 2.13): only the signature differs, and the fingerprint
    covers it, so a version verified on one compile is stale on the other."""
    from pytest_kernelopt.capture import compile_problem, compile_semantics
    from pytest_kernelopt.capture.problem import load_problem

    kernels = {}
    for dtype in ("float16", "bfloat16"):
        compiled = compile_problem(load_problem(half_problem(tmp_path / dtype, dtype)), "cpu")
        (handle,) = compiled.kernels.values()
        kernels[dtype] = handle
    f16, bf16 = kernels["float16"], kernels["bfloat16"]
    assert f16.info.name == bf16.info.name
    assert fingerprint(f16.info.source, f16.info.function) == fingerprint(bf16.info.source, bf16.info.function)
    assert f16.info.fingerprint != bf16.info.fingerprint
    signatures = [dict(compile_semantics(h.original)["signature"]) for h in (f16, bf16)]
    assert {v for v in signatures[0].values() if v.startswith("*")} == {"*fp16"}
    assert {v for v in signatures[1].values() if v.startswith("*")} == {"*bf16"}


def test_launch_signatures_read_back_as_production_compares_them(interpreter):
    import torch

    from pytest_kernelopt.capture import launch_key, launch_signature, signature_key

    args = [torch.zeros(4, 16, dtype=torch.float16), torch.zeros(16, 4).t(), torch.zeros(()), torch.zeros(3),
            64, 2.5, True, None]
    text = launch_signature(args)
    assert text == ["float16 (4, 16) (16, 1)", "float32 (4, 16) (1, 4)", "float32 () ()", "float32 (3,) (1,)",
                    "int 64", "float", "bool", "none"]
    assert signature_key(text) == launch_key(args) and hash(signature_key(text)) == hash(launch_key(args))
    for other in ([args[0].to(torch.bfloat16), *args[1:]], [torch.zeros(8, 16, dtype=torch.float16), *args[1:]],
                  [*args[:4], 65, *args[5:]], [args[0], args[1].contiguous(), *args[2:]]):
        assert launch_key(other) != signature_key(text)
    for bad in ("float16 (4, 16)", "__class__ (1,) (1,)", "int 1e9", "int", "tensor"):
        with pytest.raises(ValueError):
            signature_key([bad])


def test_fingerprint_ignores_decorators():
    plain = HEAD + COPY
    decorated = plain.replace("@triton.jit", "@triton.autotune(configs=[], key=['n'])\n@triton.jit")
    assert fingerprint(decorated, "kernel") == fingerprint(plain, "kernel")


def test_fingerprint_picks_the_named_function():
    source = HEAD + COPY + COPY.replace("def kernel", "def other").replace("+ offs", "+ 2 * offs")
    assert fingerprint(source, "kernel") != fingerprint(source, "other")
    assert fingerprint(source) == fingerprint(source, "other")  # no name: the last jit function
    with pytest.raises(CaptureError, match="missing"):
        fingerprint(source, "missing")


# --- which arguments a kernel reads and writes ------------------------------------------

def kernel_source(body: str, params: str) -> str:
    return HEAD + f"""
@triton.jit
def kernel({params}):
    offs = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    mask = offs < n
{textwrap.indent(textwrap.dedent(body).strip(), "    ")}
"""


IO = "in_ptr0, out_ptr0, n, BLOCK: tl.constexpr"
POINTER_USES = [
    pytest.param("tl.store(out_ptr0 + offs, tl.load(in_ptr0 + offs, mask), mask)", IO, {"in_ptr0"}, {"out_ptr0"}, id="copy"),
    pytest.param(
        "x = tl.load(in_out_ptr0 + offs, mask)\ntl.store(in_out_ptr0 + offs, x * 2, mask)",
        "in_out_ptr0, n, BLOCK: tl.constexpr", {"in_out_ptr0"}, {"in_out_ptr0"}, id="in_place",
    ),
    pytest.param(
        "src = in_ptr0 + offs\ndst = out_ptr0 + offs\nlast = dst + 1\ntl.store(last, tl.load(src, mask), mask)",
        IO, {"in_ptr0"}, {"out_ptr0"}, id="through_aliases",
    ),
    pytest.param(
        "idx = tl.load(in_ptr0 + offs, mask)\nrow = tl.load(in_ptr1 + idx * 4, mask)\ntl.store(out_ptr0 + offs, row, mask)",
        "in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr", {"in_ptr0", "in_ptr1"}, {"out_ptr0"}, id="indexed_load",
    ),
    pytest.param(  # Inductor's embedding backward: the index loaded from in_ptr0 addresses out_ptr0
        "tmp0 = tl.load(in_ptr0 + offs, mask)\ntmp1 = tl.where(tmp0 < 0, tmp0 + 100, tmp0)\n"
        "tl.atomic_add(out_ptr0 + (offs + 24 * tmp1), tl.load(in_ptr1 + offs, mask), mask, sem='relaxed')",
        "in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr", {"in_ptr0", "in_ptr1", "out_ptr0"}, {"out_ptr0"},
        id="indexed_atomic",
    ),
    pytest.param(
        "row = tl.load(in_ptr0 + offs, mask)\ntl.store(out_ptr0 + row * 4, tl.load(in_ptr1 + offs, mask), mask)",
        "in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr", {"in_ptr0", "in_ptr1"}, {"out_ptr0"},
        id="indexed_store",
    ),
    pytest.param(
        "tl.atomic_add(out_ptr0 + offs, tl.load(in_ptr0 + offs, mask), mask)", IO, {"in_ptr0", "out_ptr0"}, {"out_ptr0"},
        id="atomic_add",
    ),
    pytest.param(
        "dst = tl.make_block_ptr(out_ptr0, shape=(n,), strides=(1,), offsets=(0,), block_shape=(BLOCK,), order=(0,))\n"
        "tl.store(dst, tl.load(in_ptr0 + offs, mask))",
        IO, {"in_ptr0"}, {"out_ptr0"}, id="block_pointer",
    ),
    pytest.param(
        "tl.store(out_ptr0 + offs, tl.load(in_ptr0 + offs, mask), mask)",
        "in_ptr0, in_ptr1, out_ptr0, n, BLOCK: tl.constexpr", {"in_ptr0"}, {"out_ptr0"}, id="unused_pointer",
    ),
    pytest.param(
        "tl.store(offs + out_ptr0, tl.load(in_ptr0 + offs, mask), mask)", IO, {"in_ptr0"}, {"out_ptr0"},
        id="offset_first",
    ),
    pytest.param(
        "tl.store(pointer=out_ptr0 + offs, value=tl.load(in_ptr0 + offs, mask), mask=mask)", IO, {"in_ptr0"}, {"out_ptr0"},
        id="keyword_arguments",
    ),
]


@pytest.mark.parametrize("body, params, read, written", POINTER_USES)
def test_pointer_uses(body, params, read, written):
    source = kernel_source(body, params)

    assert pointer_uses(source, "kernel") == (read, written)
    assert written_args(source, "kernel") == written


def test_capture_bypasses_inductors_remembered_pick_and_restores_it():
    """A machine that compiled the model before must still show every configuration Inductor builds."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from pytest_kernelopt.capture.compiled import fresh_races

    original = AutotuneCache.read_best
    with fresh_races():
        assert AutotuneCache.read_best(object.__new__(AutotuneCache), {}, ["a", "b"]) is None
    assert AutotuneCache.read_best is original
    with pytest.raises(RuntimeError), fresh_races():
        raise RuntimeError("a failed compile")
    assert AutotuneCache.read_best is original


def test_alternatives_come_fastest_first_in_inductors_own_race_and_the_race_is_restored(monkeypatch):
    """The search tries the compiler's other configurations nearest misses first (issue 23): on the H200 the
    slowest screened at 0.02-0.4x and spent small budgets before the closer ones."""
    from types import SimpleNamespace

    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    from pytest_kernelopt.capture.compiled import _alternatives, _recording_races

    def config(xblock: int, warps: int) -> SimpleNamespace:
        return SimpleNamespace(kwargs={"XBLOCK": xblock}, num_warps=warps, num_stages=1)

    kept, slow, near, unraced = config(128, 4), config(1024, 8), config(256, 4), config(64, 2)
    class Launcher:  # hashable, as Inductor's launchers are (the race's timings are keyed by them)
        def __init__(self, cfg: SimpleNamespace) -> None:
            self.config = cfg

    launchers = {Launcher(c): t for c, t in ((kept, 0.10), (slow, 4.2), (near, 0.11))}
    monkeypatch.setattr(CachingAutotuner, "benchmark_all_configs", lambda self, *a, **k: launchers)
    original = CachingAutotuner.benchmark_all_configs
    autotuner = SimpleNamespace(compile_results=[SimpleNamespace(config=c) for c in (kept, unraced, slow, near)])
    assert [p["XBLOCK"] for p in _alternatives(autotuner, kept)] == [64, 1024, 256]  # no race: Inductor's order
    with _recording_races():
        assert CachingAutotuner.benchmark_all_configs(autotuner) is launchers  # Inductor's result, unchanged
    assert CachingAutotuner.benchmark_all_configs is original
    assert [p["XBLOCK"] for p in _alternatives(autotuner, kept)] == [256, 1024, 64]  # raced fastest first, unraced last


def test_a_kernel_without_a_recorded_file_is_read_from_its_wrapper(tmp_path):
    """Inductor's GEMM/convolution template kernels carry no ``filename`` (max-autotune, torch 2.11):
    capture and production read their source where the wrapper hands it to ``async_compile.triton``."""
    from types import SimpleNamespace

    from pytest_kernelopt.capture import read_kernel_source
    from pytest_kernelopt.errors import KerneloptError

    kernel = tmp_path / "k.py"
    kernel.write_text("import triton\n")
    wrapper = tmp_path / "wrapper.py"
    wrapper.write_text("triton_tem_fused_0 = async_compile.triton('triton_tem_fused_0', '''\n"
                       "import triton\n@triton.jit\ndef triton_tem_fused_0(a):\n    pass\n''', device_str='cuda')\n")
    module = SimpleNamespace(__file__=str(wrapper))
    assert read_kernel_source(SimpleNamespace(filename=str(kernel)), module, "triton_tem_fused_0") == "import triton\n"
    source = read_kernel_source(SimpleNamespace(filename=None), module, "triton_tem_fused_0")
    assert source.startswith("\nimport triton\n@triton.jit\ndef triton_tem_fused_0(a):")
    with pytest.raises(KerneloptError, match="recorded no file"):
        read_kernel_source(SimpleNamespace(filename=None), module, "triton_tem_fused_1")


def test_random_draws_seen_only_where_something_is_drawn():
    """An attention or a dropout at probability 0 computes the same outputs at every run: not a draw, though
    torch tags the op ``nondeterministic_seeded`` (a GPT block's training step on an H100, torch 2.11, ran
    ``_scaled_dot_product_cudnn_attention`` with ``dropout_p=0`` and was refused as random)."""
    import torch
    import torch.nn.functional as F

    from pytest_kernelopt.capture.compiled import draws_random, draws_seen

    aten = torch.ops.aten
    q = torch.randn(1, 2, 4, 8)
    assert not draws_random(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q, 0.0), {})
    assert draws_random(aten._scaled_dot_product_flash_attention_for_cpu.default, (q, q, q, 0.1), {})
    assert not draws_random(aten._scaled_dot_product_cudnn_attention.default, (q, q, q, None, True),
                            {"dropout_p": 0.0})
    assert draws_random(aten._scaled_dot_product_cudnn_attention.default, (q, q, q, None, True, 0.5), {})
    assert not draws_random(aten.native_dropout.default, (q, 0.5, False), {})
    assert draws_random(aten.native_dropout.default, (q, 0.5, True), {})
    assert draws_random(aten.bernoulli.p, (q, 0.5), {})
    assert draws_random(aten.rand_like.default, (q,), {})

    class Attend(torch.nn.Module):
        def __init__(self, p: float):
            super().__init__()
            self.p = p

        def forward(self, x):
            return F.scaled_dot_product_attention(x, x, x, dropout_p=self.p) + F.dropout(x, self.p, training=self.p > 0)

    for p in (0.0, 0.25):  # with gradients recorded, as in a training step
        drawn: list[str] = []
        draws_seen(drawn)(Attend(p), [q.requires_grad_()])
        assert (not drawn) == (p == 0), (p, drawn)
