"""kernelopt's graph rewrites (``capture/graph_rewrites.py``): the pattern, the kernel, the compile setting.

Interpreter mode: the rewrite's Triton kernel runs in Triton's interpreter on the CPU.
"""

from __future__ import annotations

import copy
import inspect
import math
from types import SimpleNamespace

import pytest
import torch

from conftest import TESTS

SUFFIX = TESTS / "data" / "suffix_sums.py"  # not among tests/problems: the suite compiles each of those
VARIANT = "max-autotune-rewrites"


def _reference(x: torch.Tensor, dim: int, op: str) -> torch.Tensor:
    scan = torch.cumsum if op == "sum" else torch.cumprod
    return scan(x.double().flip(dim), dim).flip(dim)


@pytest.mark.parametrize("shape, dim, op, dtype, tolerance", [
    ((5, 70), 1, "sum", torch.float32, 1e-6),  # one block per row, a masked head
    ((3, 37, 5), 1, "sum", torch.float32, 1e-6),  # the middle axis: columns scanned side by side
    ((4, 9), 0, "prod", torch.float32, 1e-6),  # the first axis, a product
    ((2, 3, 5000), -1, "sum", torch.float16, 1e-3),  # two blocks per row, carried; half precision
    ((6, 50), 1, "sum", torch.float64, 1e-15),
])
def test_the_suffix_scan_kernel_matches_float64(interpreter, shape, dim, op, dtype, tolerance):
    from pytest_kernelopt.capture.graph_rewrites import launch_suffix_scan

    torch.manual_seed(0)
    x = (torch.rand(shape, dtype=torch.float64) + 0.5).to(dtype)
    ref = _reference(x, dim, op)
    y = launch_suffix_scan(x, dim, op)
    assert y.dtype == dtype and y.shape == x.shape
    assert ((y.double() - ref).abs().max() / ref.abs().max()).item() < tolerance
    # A launch configuration that splits each row into many blocks agrees too (the carry is right).
    small = launch_suffix_scan(x, dim, op, block_n=2, block_r=4 if x.shape[dim] <= 100 else 512, num_warps=1)
    assert ((small.double() - ref).abs().max() / ref.abs().max()).item() < tolerance


def _compiled(fn, x):
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture.graph_rewrites import rewrite_pass, rewrites_done

    torch._dynamo.reset()
    before = rewrites_done()
    with torch.no_grad(), inductor_config.patch(post_grad_custom_pre_pass=rewrite_pass(), fx_graph_cache=False):
        out = torch.compile(fn)(x)
    return out, rewrites_done() - before


@pytest.mark.parametrize("fn, rewritten", [
    (lambda x: torch.cumsum(x.flip(1), dim=1).flip(1), 1),
    (lambda x: torch.cumprod(x.flip(-1, 0), dim=-1).flip(0, 1) * 2 + 1, 1),  # other axes' flips cancel
    (lambda x: torch.cumsum(x.flip(0), dim=1).flip(0), 0),  # the scan's axis is not flipped: a forward scan
    (lambda x: torch.cumsum(x.flip(1), dim=1).flip(0, 1), 0),  # the flips differ
    (lambda x: torch.cumsum(x.flip(1), dim=1, dtype=torch.float64).flip(1), 0),  # another dtype
    (lambda x: torch.cumsum(x.flip(1).long(), dim=1).flip(1), 0),  # integers: left to Inductor
])
def test_the_pass_rewrites_a_scan_between_flips_of_its_axis_and_nothing_else(interpreter, fn, rewritten):
    torch.manual_seed(1)
    x = torch.rand(4, 33) + 0.5
    out, count = _compiled(fn, x)
    assert count == rewritten
    expected = fn(x)
    assert out.dtype == expected.dtype and torch.allclose(out.double(), expected.double(), rtol=1e-5, atol=1e-5)


def _judged_on_every_draw(verdict) -> None:
    """The setting passed the seeds and was judged on the input draws too. It may be rejected on numbers:
    in interpreter mode (2026-12-04) the suffix-scan kernel's error on a draw of sorted rows reached 4.3x
    the default compile's on one element of 1800 (the rule allows 4x), and once (2026-12-05) 1.02x the
    allowance on a seed (the seeds' weights are perturbed from the check's fresh entropy); on other checks
    it stayed within. Which happens is not the test's to pin; a rejection must be the model stage's, on
    numbers at a seed or a draw, never anything else."""
    import re

    if verdict.status == "correct":
        assert "input draw(s)" in verdict.stages[1].detail, verdict.stages[1].detail
    else:
        assert verdict.status == "rejected" and re.match(r"model: (draw '\w+'|seed \d+, output \d+)",
                                                         verdict.reason or ""), verdict.reason


def test_the_rewrite_setting_is_judged_like_any_compile_and_skipped_where_it_changes_nothing(interpreter):
    from pytest_kernelopt.capture.variants import MODEL_VARIANTS, VARIANTS, inductor_patches, needless
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    assert VARIANT in MODEL_VARIANTS and not VARIANTS[VARIANT].harvest
    patches = inductor_patches(VARIANT)
    assert patches["max_autotune"] and patches["fx_graph_cache"] is False
    assert "max_autotune_gemm_backends" not in patches  # GEMM/convolution templates raced as max-autotune does
    options = VerifyOptions(seeds=2, seed=5)
    with VerifySession(SUFFIX, interpreter, options) as session:  # tune's side: the default compile
        opened = session.open()
        assert len(opened.kernels) == 2  # Inductor: the scan (first flip fused), then a flipping copy
        assert needless(VARIANT, opened.kernels, opened.externs) is None
        verdict = session.verify_compile(VARIANT)
    _judged_on_every_draw(verdict)
    with VerifySession(SUFFIX, interpreter, options, variant=VARIANT) as session:  # the gate's side
        opened = session.open()
        assert opened.kernels == [] and [e.target for e in opened.externs] == ["torch.ops.kernelopt.suffix_scan.default"]
        _judged_on_every_draw(session.verify_compile(VARIANT))
    # A model without a scan, a group norm or a row softmax/norm is not compiled again for it.
    amax = SimpleNamespace(name="triton_red_fused_amax_0", source="tmp = tl.max(x, 1)")
    assert "no scan" in needless(VARIANT, [amax], [SimpleNamespace(target="extern_kernels.mm")])
    assert needless(VARIANT, [amax], [SimpleNamespace(target="aten.cumsum.default")]) is None
    # A softmax may be a wide-row one the pre-grad rewrite replaces.
    softmax = SimpleNamespace(name="triton_red_fused__softmax_0", source="tmp = tl.max(x, 1)\nout = tl.sum(tl.exp(x - tmp), 1)")
    assert needless(VARIANT, [softmax], []) is None
    # Inductor names a group norm's kernels after the operation: the pre-grad rewrite may change them.
    norm = SimpleNamespace(name="triton_red_fused_native_group_norm_0", source="tmp = triton_helpers.welford(x)")
    assert needless(VARIANT, [norm], []) is None
    # A training step's kernels: the rewrites decline where gradients are recorded (each trial was rejected as
    # rewriting nothing after a compile of 1-10 s on an H100).
    trained = SimpleNamespace(name=norm.name, source=norm.source, training=True)
    assert "a training step" in needless(VARIANT, [trained], [])


def test_the_library_gemm_rewrite_setting_compiles_no_template_and_is_skipped_where_it_would_repeat_another():
    """max-autotune-extern-rewrites: the rewrites with GEMMs left to the libraries (a compile of seconds, where the
    templates' take minutes); skipped on a model without extern calls (it would compile as max-autotune-rewrites)
    and on one without a pattern the rewrites change."""
    from pytest_kernelopt.agents.compile_choice import order
    from pytest_kernelopt.capture.variants import LIBRARY_GEMMS, MODEL_VARIANTS, VARIANTS, inductor_patches, needless

    name = "max-autotune-extern-rewrites"
    assert name in MODEL_VARIANTS and not VARIANTS[name].harvest and not VARIANTS[name].templates
    assert VARIANTS[VARIANT].templates
    patches = inductor_patches(name)
    assert patches["max_autotune"] and patches["fx_graph_cache"] is False
    assert {k: patches[k] for k in LIBRARY_GEMMS} == LIBRARY_GEMMS
    assert "post_grad_custom_pre_pass" in patches and "pre_grad_custom_pass" in patches
    softmax = SimpleNamespace(name="triton_per_fused__softmax_0", source="tmp = tl.max(x, 1)")
    bmm = SimpleNamespace(target="extern_kernels.bmm")
    assert needless(name, [softmax], [bmm]) is None  # attention written out: a softmax between two bmm calls
    assert "no extern" in needless(name, [softmax], [])
    pointwise = SimpleNamespace(name="triton_poi_fused_add_0", source="tmp = x + y")
    assert "no scan" in needless(name, [pointwise], [SimpleNamespace(target="extern_kernels.mm")])
    # Both rewrite settings run before max-autotune's templates; the library one first (seconds, not minutes).
    assert order([name, "max-autotune", VARIANT]) == [name, VARIANT, "max-autotune"]


@pytest.mark.slow
def test_a_rewrite_setting_that_rewrites_nothing_is_rejected_without_timing(interpreter, monkeypatch):
    """A model whose scan is not between flips compiles as without the rewrites: said, not timed."""
    from pytest_kernelopt.capture import variants
    from pytest_kernelopt.verify import compile_check
    from pytest_kernelopt.verify.pipeline import open_problem
    from pytest_kernelopt.verify.prepared import StageFailure
    from pytest_kernelopt.verify.protocol import OpenRequest

    # The rewrites on the default compile (max-autotune's configuration races are minutes in the interpreter).
    monkeypatch.setitem(variants.VARIANTS, VARIANT, variants.CompileVariant(VARIANT, None, rewrites=True))
    prepared, _ = open_problem(OpenRequest(problem=str(TESTS / "problems" / "sum_reduce.py"), device=interpreter,
                                           seeds=[3]))
    with pytest.raises(StageFailure, match="found nothing to rewrite"):
        compile_check.compile_stage(prepared, VARIANT, error_factor=4.0, reduced_precision=False)


@pytest.mark.slow
def test_the_verdict_of_a_rewrite_setting_that_rewrites_nothing_says_so_in_the_words_tune_reads(interpreter,
                                                                                                 monkeypatch):
    """The compile step drops the other rewrite settings at a shape when a trial's reason, as agents read it, carries
    NOTHING_REWRITTEN: through the session, the worker and the verdict, the words arrive whole."""
    from pytest_kernelopt.agents.compile_choice import _trial
    from pytest_kernelopt.capture import variants
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    monkeypatch.setitem(variants.VARIANTS, VARIANT, variants.CompileVariant(VARIANT, None, rewrites=True))
    with VerifySession(TESTS / "problems" / "sum_reduce.py", interpreter, VerifyOptions(seeds=1, seed=3)) as session:
        session.open()
        verdict = session.verify_compile(VARIANT)
    trial = _trial(VARIANT, verdict, 1.0)
    assert trial.status == "rejected" and variants.NOTHING_REWRITTEN in trial.reason, trial.reason


@pytest.mark.parametrize("shape, groups, affine, offset, dtype", [
    ((2, 8, 5, 6), 4, True, 0.0, torch.float32),
    ((3, 6, 7), 3, False, 100.0, torch.float32),  # a large mean: Welford statistics, not sums of squares
    ((2, 4, 33, 33), 2, True, 1000.0, torch.float32),  # several blocks per group
    ((2, 6, 9, 9), 3, True, 10.0, torch.bfloat16),
    ((2, 4, 10, 10), 2, True, 5.0, torch.float64),
])
def test_the_group_norm_kernel_matches_float64(interpreter, shape, groups, affine, offset, dtype):
    """One pass (the group in registers) and two (blocks of 64 elements, with and without eviction
    hints): as close to float64 as eager torch in the same dtype (twice its error, plus a rounding)."""
    from pytest_kernelopt.capture.graph_rewrites import launch_group_norm

    torch.manual_seed(0)
    x = (torch.randn(shape, dtype=torch.float64) + offset).to(dtype)
    w, b = (torch.randn(shape[1], dtype=dtype), torch.randn(shape[1], dtype=dtype)) if affine else (None, None)
    ref = torch.nn.functional.group_norm(x.double(), groups, None if w is None else w.double(),
                                         None if b is None else b.double(), 1e-5)
    eager = (torch.nn.functional.group_norm(x, groups, w, b, 1e-5).double() - ref).abs().max().item()
    rounding = {torch.bfloat16: 2e-2, torch.float64: 1e-12}.get(dtype, 1e-6)
    for kwargs in ({}, {"block": 64, "num_warps": 2}, {"block": 64, "num_warps": 2, "evict": True}):
        y = launch_group_norm(x, groups, w, b, 1e-5, **kwargs)
        assert y.dtype == dtype and y.shape == x.shape
        assert (y.double() - ref).abs().max().item() <= 2 * eager + rounding, kwargs


def test_the_operator_runs_the_pattern_itself_where_triton_cannot_run(monkeypatch):
    """A model tuned on a GPU and run on a CPU without Triton's interpreter: the same values, from torch."""
    from pytest_kernelopt.capture.graph_rewrites import suffix_scan

    op = suffix_scan()
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    x = torch.rand(3, 40) + 0.5
    assert torch.equal(op(x, 1, "sum"), torch.cumsum(x.flip(1), 1).flip(1))
    assert torch.equal(op(x, 0, "prod"), torch.cumprod(x.flip(0), 0).flip(0))
    from pytest_kernelopt.capture.graph_rewrites import group_norm

    x, w = torch.randn(2, 6, 5), torch.randn(6)
    assert torch.equal(group_norm()(x, 3, w, None, 1e-5, "silu"),
                       torch.nn.functional.silu(torch.nn.functional.group_norm(x, 3, w, None, 1e-5)))
    from pytest_kernelopt.capture.graph_rewrites import cross_entropy_rows

    logits, target = torch.randn(4, 50, requires_grad=True), torch.tensor([3, -100, 49, 0])
    loss, _ = cross_entropy_rows()(logits, target, -100, 0.1)
    eager = torch.nn.functional.cross_entropy(logits, target, reduction="none", label_smoothing=0.1)
    assert torch.allclose(loss, eager, atol=1e-6)
    weights = torch.rand(4)
    assert torch.allclose(torch.autograd.grad((loss * weights).sum(), logits)[0],
                          torch.autograd.grad((eager * weights).sum(), logits)[0], atol=1e-6)


def _group_norm_model(groups=4, channels=8):
    torch.manual_seed(2)
    model = torch.nn.GroupNorm(groups, channels).eval()
    with torch.no_grad():
        model.weight.normal_()
        model.bias.normal_()
    return model


def test_the_group_norm_rewrite_replaces_the_call_in_a_compiled_model_and_matches(interpreter, monkeypatch):
    """The pre-grad pass puts the operator in place of ``F.group_norm``; the compiled model agrees with float64."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    calls = []
    launch = graph_rewrites.launch_group_norm
    monkeypatch.setattr(graph_rewrites, "launch_group_norm", lambda *a, **k: calls.append(1) or launch(*a, **k))
    model = _group_norm_model()
    x = torch.randn(2, 8, 5, 6) + 3
    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        out = torch.compile(model)(x * 2 + 1)
    assert calls and graph_rewrites.rewrites_done() == before + 1, "the pass left F.group_norm to Inductor"
    ref = model.double()((x * 2 + 1).double())
    assert (out.double() - ref).abs().max() < 1e-5


def test_the_group_norm_rewrite_leaves_what_its_kernel_does_not_serve(interpreter, monkeypatch):
    """A graph that records gradients (the operator has no backward), and fewer groups than the GPU's
    multiprocessors, keep Inductor's group norm."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    model = _group_norm_model()
    x = torch.randn(2, 8, 5, 6)

    def rewritten(grad: bool) -> int:
        torch._dynamo.reset()
        before = graph_rewrites.rewrites_done()
        with torch.set_grad_enabled(grad), inductor_config.patch(
                pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(), fx_graph_cache=False):
            torch.compile(model)(x)
        return graph_rewrites.rewrites_done() - before

    assert rewritten(grad=True) == 0
    monkeypatch.setattr(graph_rewrites, "_multiprocessors", lambda device: 132)  # 2 x 4 groups on an H200
    assert rewritten(grad=False) == 0
    monkeypatch.setattr(graph_rewrites, "_multiprocessors", lambda device: 8)
    assert rewritten(grad=False) == 1


@pytest.mark.parametrize("act, expected", [
    (lambda y: torch.nn.functional.silu(y), "silu"),
    (lambda y: torch.relu(y), "relu"),
    (lambda y: y.sigmoid(), "sigmoid"),
    (lambda y: torch.nn.functional.gelu(y), "gelu"),
    (lambda y: torch.nn.functional.gelu(y, approximate="tanh"), "none"),  # not folded: Inductor fuses it after
    (lambda y: torch.nn.functional.silu(y) + y, "none"),  # the norm has another user
])
def test_the_group_norm_rewrite_folds_the_activation_that_follows(interpreter, monkeypatch, act, expected):
    """An activation applied to the group norm alone runs in its kernel (else Inductor's normalising
    kernel would have fused it, and the rewrite would cost a pass); the model still matches float64."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    acts = []
    launch = graph_rewrites.launch_group_norm
    monkeypatch.setattr(graph_rewrites, "launch_group_norm", lambda *a, **k: acts.append(a[5]) or launch(*a, **k))
    norm = _group_norm_model()
    x = torch.randn(2, 8, 5, 6)
    torch._dynamo.reset()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        out = torch.compile(lambda t: act(norm(t)))(x)
    assert acts == [expected]
    ref = act(norm.double()(x.double()))
    assert (out.double() - ref).abs().max() < 1e-5


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "l1_normalize", "l2_normalize"])
@pytest.mark.parametrize("shape, chunk, dtype", [
    ((5, 300), 64, torch.float32),  # five chunks a row, the last one masked
    ((3, 2, 1000), 256, torch.bfloat16),  # rows over the leading axes, half precision
])
def test_the_wide_row_kernel_matches_float64(interpreter, kind, shape, chunk, dtype):
    """Each row split into chunks whose statistics are combined: within twice eager's error of float64;
    a row of -inf (softmax) or zeros (norms) gives NaN where eager does, a row half -inf keeps its -inf."""
    from pytest_kernelopt.capture.graph_rewrites import launch_wide_rows

    x = _wide_rows_input(shape, kind, dtype)
    _assert_rows_match(launch_wide_rows(x, kind, chunk=chunk, num_warps=1), x, kind)


def _wide_rows_input(shape: tuple, kind: str, dtype: torch.dtype) -> torch.Tensor:
    """Rows of 3 * randn, the first all -inf (softmax) or zeros (norms), the second half so."""
    torch.manual_seed(0)
    x = (torch.randn(shape) * 3).to(dtype)
    x[0] = float("-inf") if "softmax" in kind else 0
    x[1, ..., : shape[-1] // 2] = float("-inf") if "softmax" in kind else 0
    return x


def _assert_rows_match(y: torch.Tensor, x: torch.Tensor, kind: str) -> None:
    """``y`` against float64 element by element: eager's worst error twice, plus one rounding step of
    the output's dtype (the kernel's float32 value and eager's may round to neighbouring values);
    NaN where eager gives NaN (the first row), infinities equal."""
    from pytest_kernelopt.capture.graph_rewrites import _row_reference

    ref, eager = _row_reference(x.double(), kind), _row_reference(x, kind).double()
    assert y.dtype == x.dtype and y.shape == x.shape
    assert torch.equal(y.isnan(), eager.isnan()) and y[0].isnan().all()
    finite = ref.isfinite()
    assert torch.equal(y.double()[~finite & ~ref.isnan()], ref[~finite & ~ref.isnan()])
    allowed = 2 * (eager - ref)[finite].abs().max() + torch.finfo(x.dtype).eps * ref[finite].abs()
    assert ((y.double() - ref)[finite].abs() <= allowed).all()


@pytest.mark.parametrize("kind", ["softmax", "log_softmax", "l1_normalize", "l2_normalize"])
# (1, 10): two programs a chunk, each walking rows; 20: past the 16 polls after which the bound is shared.
@pytest.mark.parametrize("spin, programs", [(0, None), (1, 10), (20, None)])
def test_the_wide_row_kernel_that_stops_waiting_leaves_its_chunk_to_the_retry(interpreter, kind, spin, programs):
    """The one-kernel form, in which a program polls for its row's other programs at most ``spin``
    times: the interpreter runs programs one after another, so every program of a row but its last
    stops waiting (the kernel before the bound spun here forever) and ``wide_rows_retry`` writes
    their chunks. The same values as the two-launch form, bit for bit, within the float64 bound; the
    counters show each give-up, and a second launch starts from zeroed counters."""
    from pytest_kernelopt.capture.graph_rewrites import _wide_rows_run
    from pytest_kernelopt.capture.rewrite_kernels import GAVE_UP

    shape, chunk, k = (5, 300), 64, 5
    x = _wide_rows_input(shape, kind, torch.float32)
    two, none = _wide_rows_run(x, kind, chunk=chunk, num_warps=1, one_kernel=False)
    assert none is None
    for _ in range(2):
        y, count = _wide_rows_run(x, kind, chunk=chunk, num_warps=1, programs=programs, one_kernel=True, spin=spin)
        assert (count[:-1] % GAVE_UP).tolist() == [k] * shape[0]  # every program counted in once
        assert (count[:-1] // GAVE_UP).tolist() == [k - 1] * shape[0]  # all but each row's last gave up
        assert count[-1].item() == (k - 1) * shape[0]
        torch.testing.assert_close(y, two, rtol=0, atol=0, equal_nan=True)  # bit for bit
        _assert_rows_match(y, x, kind)


F = torch.nn.functional


@pytest.mark.parametrize("fn, rewritten", [
    (lambda x: torch.softmax(x, dim=-1), 1),
    (lambda x: F.log_softmax(x, 1), 1),
    (lambda x: x.softmax(-1) * 2, 1),
    (lambda x: x / torch.sum(torch.abs(x), dim=1, keepdim=True), 1),
    (lambda x: x / torch.linalg.vector_norm(x, ord=2, dim=1, keepdim=True), 1),
    (lambda x: x / x.norm(p=2, dim=-1, keepdim=True), 1),
    (lambda x: F.normalize(x, p=1, dim=-1), 1),
    (lambda x: torch.softmax(x, dim=0), 0),  # not the last axis
    (lambda x: x / x.abs().sum(-1, keepdim=True).squeeze(-1)[:, None], 0),  # the norm reshaped: not matched
    (lambda x: torch.softmax(x, -1, dtype=torch.float64), 0),  # another dtype
])
def test_the_wide_row_rewrite_replaces_the_pattern_and_matches(interpreter, monkeypatch, fn, rewritten):
    """The pre-grad pass replaces softmax / normalisations over the last axis of wide rows (the width
    lowered here to the test's rows) and leaves the rest; the compiled function agrees with float64."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "WIDE_ROW_BYTES", 256)
    monkeypatch.setattr(graph_rewrites, "_multiprocessors", lambda device: 8)
    x = torch.randn(6, 300)
    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        out = torch.compile(fn)(x)
    assert graph_rewrites.rewrites_done() - before == rewritten
    assert (out.double() - fn(x.double())).abs().max() < 1e-6


def test_the_wide_row_rewrite_leaves_narrow_rows_and_rows_in_too_many_chunks(interpreter, monkeypatch):
    """Rows under ``WIDE_ROW_BYTES``, and rows needing more programs than the GPU's multiprocessors, keep Inductor's kernel."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    def rewritten(x: torch.Tensor) -> int:
        torch._dynamo.reset()
        before = graph_rewrites.rewrites_done()
        with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                    fx_graph_cache=False):
            torch.compile(lambda t: torch.softmax(t, -1))(x)
        return graph_rewrites.rewrites_done() - before

    monkeypatch.setattr(graph_rewrites, "_multiprocessors", lambda device: 8)
    assert rewritten(torch.randn(2, 300)) == 0  # 1.2 KB rows
    monkeypatch.setattr(graph_rewrites, "WIDE_ROW_BYTES", 256)
    monkeypatch.setattr(graph_rewrites, "_multiprocessors", lambda device: 0)  # no GPU: one chunk is too many
    assert rewritten(torch.randn(2, 300)) == 0


def _cross_entropy64(x: torch.Tensor, target: torch.Tensor, ignore_index: int,
                     smoothing: float = 0.0) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row's loss (0 where ignored) and log-sum-exp, in float64 by torch."""
    x64 = x.double()
    loss = F.cross_entropy(x64, target.long(), ignore_index=ignore_index, reduction="none", label_smoothing=smoothing)
    return loss, torch.logsumexp(x64, 1)


@pytest.mark.parametrize("dtype, tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 1e-5), (torch.float16, 1e-5)])
@pytest.mark.parametrize("launch, smoothing", [({}, 0.0), ({"block": 64, "split": 3}, 0.15), ({"block": 128, "split": 7}, 0.0),
                                               ({"block": 512, "num_warps": 4}, 0.15)])
def test_the_cross_entropy_kernels_match_float64(interpreter, dtype, tolerance, launch, smoothing):
    """Loss, log-sum-exp and the logits' gradient, element by element: rows split over programs or not,
    an ignored row, large offsets, label smoothing; masked (-inf) logits without it (with it torch's loss is
    infinite there)."""
    from pytest_kernelopt.capture.graph_rewrites import launch_cross_entropy, launch_cross_entropy_grad

    torch.manual_seed(4)
    x = (torch.randn(7, 333) * 4 + torch.randn(7, 1) * 50).to(dtype)
    if not smoothing:
        x[3, ::5] = float("-inf")  # a masked vocabulary
    target = torch.randint(0, 333, (7,), dtype=torch.int32)
    target[3] = 1  # not masked
    target[5] = -7  # ignored
    loss, stats = launch_cross_entropy(x, target, -7, smoothing, **launch)
    ref_loss, ref_lse = _cross_entropy64(x, target, -7, smoothing)
    assert loss.dtype == stats.dtype == torch.float32 and stats.shape == (7, 2)
    assert (loss.double() - ref_loss).abs().max() <= tolerance * ref_lse.abs().max()
    assert (stats.double().sum(1) - ref_lse).abs().max() <= tolerance * ref_lse.abs().max()
    assert torch.equal(stats[:, 0], x.float().amax(1))
    assert loss[5] == 0
    grad = torch.rand(7) + 0.5
    x64 = x.double().requires_grad_()
    rows = F.cross_entropy(x64, target.long(), ignore_index=-7, reduction="none", label_smoothing=smoothing)
    (ref,) = torch.autograd.grad((rows * grad).sum(), x64)
    dx = launch_cross_entropy_grad(x, target, stats, grad, -7, smoothing, block=launch.get("block"))
    rounding = {torch.float32: 1e-6, torch.bfloat16: 8e-3, torch.float16: 1e-3}[dtype]
    assert dx.dtype == dtype and torch.isfinite(dx).all()
    assert (dx.double() - ref).abs().max() <= rounding * 2
    assert dx[5].eq(0).all()


def test_the_cross_entropy_kernel_says_nan_for_a_target_outside_the_row_and_reads_nothing_there(interpreter):
    from pytest_kernelopt.capture.graph_rewrites import _cross_entropy_reference, launch_cross_entropy

    x = torch.randn(3, 100)
    target = torch.tensor([5, 100, -3])  # the last two outside [0, 100), -100 ignored
    loss, _ = launch_cross_entropy(x, target, -100)
    assert torch.isfinite(loss[0]) and loss[1:].isnan().all()
    ref, _ = _cross_entropy_reference(x, target, -100)
    assert torch.equal(loss.isnan(), ref.isnan()) and (loss[0] - ref[0]).abs() < 1e-5


def _lm_head(vocab: int = 300, hidden: int = 16, dtype: torch.dtype = torch.float32) -> torch.nn.Module:
    torch.manual_seed(6)
    return torch.nn.Linear(hidden, vocab).to(dtype)


@pytest.mark.parametrize("reduction, smoothing", [("mean", 0.0), ("sum", 0.0), ("none", 0.0), ("mean", 0.1)])
@pytest.mark.parametrize("upcast", [False, True])
def test_the_cross_entropy_rewrite_replaces_the_loss_in_a_training_step_and_its_gradients_match(
        interpreter, monkeypatch, reduction, smoothing, upcast):
    """The pre-grad pass puts the operator in place of ``F.cross_entropy`` while gradients are recorded (a
    half-precision cast to float32 just before read through); the loss and every gradient (input and
    parameters) agree with float64 as closely as the default compile's."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "CROSS_ENTROPY_ROW_BYTES", 256)
    dtype = torch.bfloat16 if upcast else torch.float32
    head = _lm_head(dtype=dtype)
    h = torch.randn(6, 16, dtype=dtype)
    target = torch.randint(0, 300, (6,))
    target[2] = -100

    def step(model, x):
        logits = model(x)
        return F.cross_entropy(logits.float() if upcast else logits, target, reduction=reduction,
                               label_smoothing=smoothing)

    def grads(fn, model, x):
        x = x.detach().requires_grad_()
        out = fn(model, x)
        weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(1)).to(out.dtype)
        return [out, *torch.autograd.grad((out * weights).sum(), [x, *model.parameters()])]

    ref = grads(step, copy.deepcopy(head).double(), h.double())
    errors = {}
    for rewrite in (False, True):
        torch._dynamo.reset()
        before = graph_rewrites.rewrites_done()
        passes = {"pre_grad_custom_pass": graph_rewrites.pre_grad_rewrite_pass()} if rewrite else {}
        with inductor_config.patch(fx_graph_cache=False, **passes):
            got = grads(torch.compile(step), head, h)
        assert graph_rewrites.rewrites_done() - before == int(rewrite)
        errors[rewrite] = [(g.double() - r).abs().max().item() for g, r in zip(got, ref)]
        assert [g.dtype for g in got[1:]] == [dtype] * 3  # the input's and the parameters' gradients
    rounding = 1e-2 if upcast else 1e-5
    for default, rewritten in zip(errors[False], errors[True]):
        assert rewritten <= 2 * default + rounding, errors


@pytest.mark.parametrize("call, rewritten", [
    (lambda x, t: F.cross_entropy(x, t), 1),
    (lambda x, t: torch.nn.CrossEntropyLoss(ignore_index=0)(x, t), 1),
    (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.1), 1),
    (lambda x, t: F.cross_entropy(x, t, label_smoothing=0.2, ignore_index=5, reduction="sum"), 1),
    (lambda x, t: F.cross_entropy(x, t, weight=torch.ones(300, dtype=x.dtype)), 0),  # class weights: Inductor's
    (lambda x, t: F.cross_entropy(x[:, :200], t % 200), 0),  # a slice: not contiguous
    (lambda x, t: F.cross_entropy(x.view(2, 3, 300).transpose(1, 2), t.view(2, 3)), 0),  # classes on axis 1 of 3
    (lambda x, t: F.cross_entropy(x, F.one_hot(t, 300).to(x.dtype)), 0),  # probabilities as the target
])
def test_the_cross_entropy_rewrite_leaves_what_its_kernel_does_not_serve(interpreter, monkeypatch, call, rewritten):
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "CROSS_ENTROPY_ROW_BYTES", 256)
    x, t = torch.randn(6, 300), torch.randint(1, 300, (6,))
    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        out = torch.compile(call)(x, t)
    assert graph_rewrites.rewrites_done() - before == rewritten
    assert (out.double() - call(x.double(), t)).abs().max() < 1e-5


def test_the_cross_entropy_rewrite_leaves_narrow_rows_to_inductor(interpreter, monkeypatch):
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "CROSS_ENTROPY_ROW_BYTES", 2048)  # 1.2 KB rows: narrow, Inductor holds them
    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        torch.compile(F.cross_entropy)(torch.randn(6, 300), torch.randint(0, 300, (6,)))
    assert graph_rewrites.rewrites_done() == before


def test_a_training_step_tries_the_rewrites_only_where_it_has_a_cross_entropy():
    from pytest_kernelopt.capture.variants import needless

    norm = SimpleNamespace(name="triton_red_fused_native_layer_norm_0__bwd", source="", training=True)
    loss = SimpleNamespace(name="triton_red_fused__log_softmax_nll_loss_forward_0", source="", training=True)
    assert "a training step without a cross-entropy" in needless(VARIANT, [norm], [])
    assert needless(VARIANT, [norm, loss], []) is None
    assert needless(VARIANT, [SimpleNamespace(name=loss.name, source="")], []) is None  # inference too


@pytest.mark.parametrize("loss, read", [
    (lambda x, t: F.cross_entropy(x.float().view(-1, 300), t.view(-1)), torch.bfloat16),  # nanoGPT's, cast first
    (lambda x, t: F.cross_entropy(x.to(torch.float32).reshape(6, 300), t.reshape(6)), torch.bfloat16),
    (lambda x, t: F.cross_entropy(x.type(torch.float32).view(-1, 300), t.view(-1)), torch.bfloat16),
    (lambda x, t: F.cross_entropy(x.to(dtype=torch.float32, copy=False).view(-1, 300), t.view(-1)), torch.bfloat16),
    (lambda x, t: F.cross_entropy(x.view(-1, 300).float(), t.view(-1)), torch.bfloat16),
    (lambda x, t: F.cross_entropy(x.float().view(-1, 300), t.view(-1)) + x.float().sum(), torch.bfloat16),
    (lambda x, t: (lambda f: F.cross_entropy(f.view(-1, 300), t.view(-1)) + f.sum())(x.float()), torch.float32),
    # A causal language model's loss as libraries write it: the labels shifted (padded), the logits cast and viewed.
    (lambda x, t: F.cross_entropy(x.float().view(-1, 300), F.pad(t, (0, 1), value=-100)[..., 1:].contiguous().view(-1),
                                  ignore_index=-100, reduction="sum") / 5, torch.bfloat16),
])
def test_the_cross_entropy_rewrite_reads_half_precision_logits_through_their_cast(interpreter, monkeypatch, loss, read):
    """A cast of bf16 logits to float32, viewed to rows before the loss, is read through: the operator gets the bf16
    tensor (no float32 copy made), unless the cast has another user (then it reads the float32 tensor)."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "CROSS_ENTROPY_ROW_BYTES", 256)
    seen = []
    launch = graph_rewrites.launch_cross_entropy
    monkeypatch.setattr(graph_rewrites, "launch_cross_entropy", lambda x, *a, **k: seen.append(x.dtype) or launch(x, *a, **k))
    x = torch.randn(2, 3, 300).to(torch.bfloat16).requires_grad_()
    t = torch.randint(0, 300, (2, 3))
    torch._dynamo.reset()
    with inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(), fx_graph_cache=False):
        out = torch.compile(loss)(x, t)
        (grad,) = torch.autograd.grad(out, x)
    assert seen == [read]
    x64 = x.detach().double().requires_grad_()
    ref = loss(x64, t)
    (ref_grad,) = torch.autograd.grad(ref, x64)
    assert (out.double() - ref).abs() < 1e-4 and grad.dtype == torch.bfloat16
    assert (grad.double() - ref_grad).abs().max() < 1e-2


LM_LOSS = TESTS / "data" / "lm_loss_train.py"


@pytest.mark.slow
def test_a_training_step_s_cross_entropy_rewrite_is_judged_on_every_gradient_and_the_gate_compiles_it(
        interpreter, monkeypatch):
    """Tune's side (the default compile, then the setting judged on the whole step: outputs and every gradient
    against float64) and the gate's (the problem opened under the setting: the operator and its gradient
    operator are the step's extern calls, no Inductor cross-entropy kernel left)."""
    from pytest_kernelopt.capture import variants
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    # The rewrites on the default compile (max-autotune's configuration races are minutes in the interpreter).
    monkeypatch.setitem(variants.VARIANTS, VARIANT, variants.CompileVariant(VARIANT, None, rewrites=True))
    options = VerifyOptions(seeds=1, seed=5)
    with VerifySession(LM_LOSS, interpreter, options) as session:
        opened = session.open()
        assert any("nll_loss" in k.name for k in opened.kernels)
        assert variants.needless(VARIANT, opened.kernels, opened.externs) is None  # a training step, tried
        verdict = session.verify_compile(VARIANT)
    _judged_on_every_draw(verdict)
    assert "gradient" in verdict.stages[1].detail or verdict.status == "rejected", verdict.stages[1].detail
    with VerifySession(LM_LOSS, interpreter, options, variant=VARIANT) as session:
        opened = session.open()
    targets = {e.target for e in opened.externs}
    assert {"torch.ops.kernelopt.cross_entropy_rows.default",
            "torch.ops.kernelopt.cross_entropy_rows_grad.default"} <= targets, targets
    assert not any("nll_loss" in k.name for k in opened.kernels)


def test_the_cross_entropy_rewrite_serves_dynamic_row_counts_and_autocast_regions(interpreter, monkeypatch):
    """Compiled with dynamic shapes, one graph serves two batch shapes; under autocast (bf16 logits from a matmul,
    the loss in float32 as autocast computes it) the operator gets the bf16 logits. Both against float64."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    monkeypatch.setattr(graph_rewrites, "CROSS_ENTROPY_ROW_BYTES", 256)
    seen = []
    launch = graph_rewrites.launch_cross_entropy
    monkeypatch.setattr(graph_rewrites, "launch_cross_entropy",
                        lambda x, *a, **k: seen.append((tuple(x.shape), x.dtype)) or launch(x, *a, **k))

    def nano(logits, targets):
        return F.cross_entropy(logits.view(-1, logits.size(-1)), targets.view(-1), ignore_index=-1)

    def autocast(h, w, targets):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            return F.cross_entropy(h @ w, targets)

    torch._dynamo.reset()
    with inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(), fx_graph_cache=False):
        compiled = torch.compile(nano, dynamic=True)
        for batch, tokens in ((2, 5), (3, 7)):
            x = torch.randn(batch, tokens, 300, requires_grad=True)
            t = torch.randint(0, 300, (batch, tokens))
            out = compiled(x, t)
            (grad,) = torch.autograd.grad(out, x)
            x64 = x.detach().double().requires_grad_()
            ref = nano(x64, t)
            assert (out.double() - ref).abs() < 1e-5
            assert (grad.double() - torch.autograd.grad(ref, x64)[0]).abs().max() < 1e-6
        h, w, t = torch.randn(6, 16, requires_grad=True), torch.randn(16, 300), torch.randint(0, 300, (6,))
        out = torch.compile(autocast)(h, w, t)
    assert [shape for shape, _ in seen[:2]] == [(10, 300), (21, 300)]
    assert seen[2:] == [((6, 300), torch.bfloat16)] and out.dtype == torch.float32
    # Against the default compile: on the CPU its bf16 product differs from eager's (0.4%, with or without the
    # rewrite); the loss over the same bf16 logits agrees.
    torch._dynamo.reset()
    default = torch.compile(autocast)(h, w, t)
    assert (out - default).abs() <= 1e-5 * default.abs(), (out, default)


def _heads(seed: int, dtype: torch.dtype = torch.float32, b: int = 2, h: int = 3, t: int = 24, d: int = 8):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(b, h, t, d, generator=g).to(dtype) for _ in range(3)]


_CAUSAL = torch.tril(torch.ones(32, 32)).view(1, 1, 32, 32)
_NEG = torch.triu(torch.full((24, 24), float("-inf")), diagonal=1)


def _nanogpt(q, k, v):  # minGPT/nanoGPT's attention without flash: a sliced causal buffer, masked_fill
    t = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(k.size(-1)))
    att = att.masked_fill(_CAUSAL[:, :, :t, :t].to(q.device) == 0, float("-inf"))
    return F.dropout(F.softmax(att, dim=-1), 0.0, False) @ v


def _llama(q, k, v):  # Llama's reference code: an additive mask, the softmax in float32 cast back
    scores = torch.matmul(q, k.transpose(2, 3)) / math.sqrt(q.shape[-1])
    scores = scores + _NEG.to(q.dtype)
    return torch.matmul(F.softmax(scores.float(), dim=-1).type_as(q), v)


def _einsum(q, k, v):  # einsum products (labels of one's own), the mask filled, the softmax in float32 cast back
    scores = torch.einsum("znqc,znkc->znqk", q, k).masked_fill(_NEG.isinf(), float("-inf")) / 8.0
    return torch.einsum("znqk,znkc->znqc", torch.softmax(scores.float(), -1).to(q.dtype), v)


def _hugging_face_eager(q, k, v):  # transformers' eager attention: a sliced 4-D additive mask, a float32 softmax
    weights = torch.matmul(q, k.transpose(2, 3)) * q.shape[-1] ** -0.5
    weights = weights + _NEG.to(q.dtype)[None, None, :, : k.shape[-2]]
    weights = F.softmax(weights, dim=-1, dtype=torch.float32).to(q.dtype)
    return torch.matmul(F.dropout(weights, p=0.1, training=False), v)


@pytest.mark.parametrize("attention, dtype", [
    (_nanogpt, torch.float32),
    (_llama, torch.bfloat16),
    (_hugging_face_eager, torch.float16),
    (lambda q, k, v: torch.softmax(q @ k.transpose(-1, -2) / 4.0, -1) @ v, torch.float32),  # no mask
    (lambda q, k, v: (q.matmul(k.transpose(3, 2)).masked_fill(_NEG.isinf(), float("-inf")) * 0.3).softmax(-1) @ v,
     torch.float32),  # the mask filled before the scale
    (_einsum, torch.bfloat16),
    (lambda q, k, v: torch.bmm(torch.softmax(torch.bmm(q.flatten(0, 1), k.flatten(0, 1).transpose(1, 2)) * 0.125
                                             + _NEG.to(q.dtype), -1), v.flatten(0, 1)),
     torch.bfloat16),  # 3-D (batch x heads in one axis) through torch.bmm: older Hugging Face attention
    (lambda q, k, v: torch.softmax(q[0] @ k[0, :, 1:].transpose(-2, -1), -1) @ v[0, :, :-1], torch.float32),  # 3-D,
    # by matmul, fewer keys than queries
    (lambda q, k, v: torch.where(~_NEG.isinf(), q @ k.transpose(-2, -1) * 0.25, float("-inf")).softmax(-1) @ v,
     torch.float32),  # the mask as torch.where's condition (True: kept)
    (lambda q, k, v: torch.where(_NEG.isinf(), float("-inf"), q @ k.transpose(-2, -1)).softmax(-1) @ v,
     torch.bfloat16),  # True: filled
    (lambda q, k, v: torch.einsum("...qd, ...kd -> ...qk", q * 0.125, k).softmax(-1) @ v, torch.float32),  # timm-style
])
def test_attention_written_out_becomes_torchs_fused_attention_where_no_gradient_is_recorded(
        interpreter, attention, dtype):
    """nanoGPT's and Llama's attention written without SDPA (which Inductor's own attention patterns miss): the
    pre-grad pass puts ``F.scaled_dot_product_attention`` in its place; the output agrees with float64 as closely
    as the default compile's (closer: the scores are never rounded). Where gradients are recorded it declines
    (torch's fused backward is NaN on large-magnitude draws, graph_rewrites._attentions) and the step is as before."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    def run(fn, tensors, grad):
        tensors = [t.detach().requires_grad_(grad) for t in tensors]
        out = fn(*tensors)
        if not grad:
            return [out]
        weights = torch.randn(out.shape, dtype=torch.float64, generator=torch.Generator().manual_seed(2))
        return [out, *torch.autograd.grad((out * weights.to(out.dtype)).sum(), tensors)]

    tensors = _heads(3, dtype)
    for grad in (False, True):
        ref = run(attention, [t.double() for t in tensors], grad)
        errors = {}
        for rewrite in (False, True):
            torch._dynamo.reset()
            before = graph_rewrites.rewrites_done()
            passes = {"pre_grad_custom_pass": graph_rewrites.pre_grad_rewrite_pass()} if rewrite else {}
            with torch.set_grad_enabled(grad), inductor_config.patch(fx_graph_cache=False, **passes):
                got = run(torch.compile(attention), tensors, grad)
            assert graph_rewrites.rewrites_done() - before == int(rewrite and not grad)
            assert all(g.dtype == dtype and torch.isfinite(g).all() for g in got)
            errors[rewrite] = [(g.double() - r).abs().max().item() for g, r in zip(got, ref)]
        for default, rewritten in zip(errors[False], errors[True]):
            assert rewritten <= 2 * default + (1e-6 if dtype == torch.float32 else 1e-3), (grad, errors)


@pytest.mark.parametrize("attention", [
    lambda q, k, v: (lambda p: (p @ v, p))(torch.softmax(q @ k.transpose(-2, -1), -1)),  # the weights returned too
    lambda q, k, v: F.dropout(torch.softmax(q @ k.transpose(-2, -1), -1), 0.1, True) @ v,  # dropout that drops
    lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1) * -0.5, -1) @ v,  # a negative scale
    lambda q, k, v: torch.softmax((q @ k.transpose(-2, -1)).masked_fill(_NEG.isinf(), -1e4), -1) @ v,  # finite fill
    lambda q, k, v: torch.softmax((q @ k.transpose(-2, -1) + _NEG) * 0.5, -1) @ v,  # a mask added before the scale
    lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), 2) @ v,  # over the queries' axis
    lambda q, k, v: torch.softmax(q @ k.transpose(-2, -1), -1, dtype=torch.float64).float() @ v,  # another dtype
    lambda q, k, v: torch.softmax(q[None] @ k[None].transpose(-2, -1), -1) @ v[None],  # 5-D
    lambda q, k, v: torch.where(~_NEG.isinf(), q @ k.transpose(-2, -1), -1e4).softmax(-1) @ v,  # a finite value
    lambda q, k, v: torch.einsum("bhid,bhjd->bhji", q, k).softmax(-1) @ v,  # scores with the axes swapped
    # Broadcasts that make it no longer one query per output row (own attacks, 2026-12-07): an ellipsis that
    # broadcasts the queries' heads against the keys', a where-mask wider than the scores.
    lambda q, k, v: torch.einsum("...id,...jd->...ij", q[:, :1], k).softmax(-1) @ v,
    lambda q, k, v: torch.where(torch.ones(2, *q.shape[1:-1], k.shape[-2], dtype=torch.bool),
                                q[:1] @ k[:1].transpose(-2, -1), float("-inf")).softmax(-1) @ v,
    lambda q, k, v: torch.einsum("bhij,bhjd->bhid", torch.einsum("bhid,bhjd->bhij", q, k).softmax(2), v),  # queries' axis
    lambda q, k, v: (lambda s: torch.einsum("bhij,bhjd->bhid", s.softmax(-1), v) + s.sum())(
        torch.einsum("bhid,bhjd->bhij", q, k)),  # the scores used again
    lambda q, k, v: torch.einsum("bhij,bhjd->bhdi", torch.softmax(q @ k.transpose(-2, -1), -1), v),  # output swapped
])
def test_the_attention_rewrite_leaves_what_fused_attention_would_change(interpreter, attention):
    assert _rewritten_graph(attention, _heads(4), False)[0] == 0


def _rewritten_graph(fn, tensors, grad: bool):
    """(how many rewrites the pre-grad pass made, the output, Dynamo's graph after the pass) of ``fn`` compiled and
    run on copies of ``tensors``, gradients recorded for them or not."""
    import torch._inductor.config as inductor_config
    from torch._inductor.compile_fx import compile_fx

    from pytest_kernelopt.capture import graph_rewrites

    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return compile_fx(gm, example_inputs)

    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.set_grad_enabled(grad), inductor_config.patch(
            fx_graph_cache=False, pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass()):
        out = torch.compile(fn, backend=backend)(*(t.clone().requires_grad_(grad) for t in tensors))
    return graph_rewrites.rewrites_done() - before, out, graphs[0].graph


def test_a_model_with_attention_written_out_tries_the_rewrites_but_not_its_training_step():
    from pytest_kernelopt.capture.variants import needless

    softmax = SimpleNamespace(name="triton_per_fused__softmax_eq_masked_fill_mul_view_3", source="")
    bmm = SimpleNamespace(target="extern_kernels.bmm")
    assert needless(VARIANT, [softmax], [bmm]) is None  # a persistent softmax: tried for its attention
    assert "no attention written out" in needless(VARIANT, [softmax], [])  # no batched products: no attention
    step = SimpleNamespace(name=softmax.name, source="", training=True)
    assert "a training step without a cross-entropy" in needless(VARIANT, [step], [bmm])


NAIVE_ATTENTION = TESTS / "data" / "naive_attention.py"


def _setting_judged_then_opened(problem, interpreter, monkeypatch, seed: int):
    """The rewrite setting (as a default-mode variant: max-autotune is minutes long in the interpreter) checked on
    ``problem`` against float64 in a session under the defaults, where ``needless`` must try it, judged on every
    draw; then the problem opened under the setting as the gate opens it. (the default compile's and the setting's
    opened problem)"""
    from pytest_kernelopt.capture import variants
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    monkeypatch.setitem(variants.VARIANTS, VARIANT, variants.CompileVariant(VARIANT, None, rewrites=True))
    options = VerifyOptions(seeds=1, seed=seed)
    with VerifySession(problem, interpreter, options) as session:
        default = session.open()
        assert variants.needless(VARIANT, default.kernels, default.externs) is None
        verdict = session.verify_compile(VARIANT)
    _judged_on_every_draw(verdict)
    with VerifySession(problem, interpreter, options, variant=VARIANT) as session:
        return default, session.open()


def test_the_attention_rewrite_is_judged_on_every_draw_and_the_gate_compiles_it(interpreter, monkeypatch):
    """The setting judged on the whole model against float64 (the seeds and every input draw), and the problem
    opened under it runs torch's fused attention, no Inductor softmax kernel left."""
    default, opened = _setting_judged_then_opened(NAIVE_ATTENTION, interpreter, monkeypatch, seed=5)
    assert any("softmax" in k.name for k in default.kernels)
    targets = {e.target for e in opened.externs}
    assert any("attention" in t for t in targets), targets
    assert not any("softmax" in k.name for k in opened.kernels), [k.name for k in opened.kernels]


def _repeat_kv(x, r):  # Hugging Face's repeat_kv
    b, h, t, d = x.shape
    return x[:, :, None, :, :].expand(b, h, r, t, d).reshape(b, h * r, t, d)


def _grouped(seed: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(2, h, 12, 8, generator=g).to(dtype) for h in (8, 2, 2)]


@pytest.mark.parametrize("attention", [
    lambda q, k, v: F.scaled_dot_product_attention(q, k.repeat_interleave(4, dim=1), v.repeat_interleave(4, dim=1),
                                                   is_causal=True),  # the Llama block's form
    lambda q, k, v: F.scaled_dot_product_attention(q, _repeat_kv(k, 4), _repeat_kv(v, 4), None, 0.0, True),
    lambda q, k, v: F.scaled_dot_product_attention(q, k.unsqueeze(2).expand(2, 2, 4, 12, 8).flatten(1, 2),
                                                   torch.repeat_interleave(v, 4, dim=-3), scale=0.3),
    lambda q, k, v: torch.softmax(q @ k.repeat_interleave(4, 1).transpose(-2, -1) * 0.35, -1)
    @ _repeat_kv(v, 4),  # written out: made fused attention first, then grouped
])
def test_key_value_heads_repeated_for_fused_attention_are_passed_grouped_where_no_gradient_is_recorded(
        interpreter, attention):
    """Grouped-query attention written with a repeat of the key/value heads: the pre-grad pass calls fused attention
    on the unrepeated heads with ``enable_gqa=True`` (no repeat left), and the output agrees with float64 as the
    default compile's does. Where gradients are recorded it declines."""
    tensors = _grouped(5)
    ref = attention(*(t.double() for t in tensors))
    for grad in (False, True):
        done, out, graph = _rewritten_graph(attention, tensors, grad)
        assert done >= 1 if not grad else done == 0
        assert (out.double() - ref).abs().max() < 1e-5
        if not grad:
            calls = [n for n in graph.nodes if n.target is F.scaled_dot_product_attention]
            assert len(calls) == 1 and calls[0].kwargs["enable_gqa"] is True
            assert not any(n.target in ("repeat_interleave", "expand", torch.repeat_interleave) for n in graph.nodes)


@pytest.mark.parametrize("attention", [
    lambda q, k, v: F.scaled_dot_product_attention(q, k.repeat(1, 4, 1, 1), v.repeat(1, 4, 1, 1)),  # tiled, not
    # interleaved: head j reads head j % 2
    lambda q, k, v: F.scaled_dot_product_attention(q, _repeat_kv(k, 4), v.repeat_interleave(4, dim=1),
                                                   attn_mask=torch.ones(12, 12, dtype=torch.bool)),  # a mask
    lambda q, k, v: (lambda kk: F.scaled_dot_product_attention(q, kk, _repeat_kv(v, 4)) + kk.sum())(
        _repeat_kv(k, 4)),  # the repeated keys used again
    lambda q, k, v: F.scaled_dot_product_attention(q, k.repeat_interleave(4, dim=2)[:, :, ::4].repeat(1, 4, 1, 1),
                                                   _repeat_kv(v, 4)),  # a repeat over the tokens
    lambda q, k, v: F.scaled_dot_product_attention(q, k[:, None].expand(2, 4, 2, 12, 8).reshape(2, 8, 12, 8),
                                                   _repeat_kv(v, 4)),  # the axis inserted before the heads: tiled
])
def test_the_grouped_query_rewrite_leaves_what_grouping_would_change(interpreter, attention):
    tensors = _grouped(6)
    done, out, _ = _rewritten_graph(attention, tensors, False)
    assert done == 0
    ref = attention(*(t.double() for t in tensors))
    assert (out.double() - ref).abs().max() < 1e-5 * max(1.0, ref.abs().max().item())


def test_a_model_with_repeated_key_value_heads_tries_the_rewrites():
    from pytest_kernelopt.capture.variants import needless

    repeat = SimpleNamespace(name="triton_poi_fused__scaled_dot_product_flash_attention_clone_expand_unsqueeze_0",
                             source="")
    sdpa = SimpleNamespace(target="torch.ops.aten._scaled_dot_product_flash_attention.default")
    assert needless(VARIANT, [repeat], [sdpa]) is None
    assert "no key/value heads repeated" in needless(VARIANT, [repeat], [])
    other = SimpleNamespace(name="triton_poi_fused_add_mul_0", source="")
    assert "no key/value heads repeated" in needless(VARIANT, [other], [sdpa])



def test_the_grouped_query_rewrite_is_judged_on_every_draw_and_the_gate_compiles_it(interpreter, monkeypatch):
    """The setting judged on the whole model against float64 (the seeds and every input draw); the problem opened
    under it calls fused attention with no repeat of the key/value heads left."""
    default, opened = _setting_judged_then_opened(TESTS / "data" / "grouped_attention.py", interpreter, monkeypatch,
                                                  seed=7)
    assert any("expand" in k.name and "clone" in k.name for k in default.kernels), [k.name for k in default.kernels]
    assert not any("expand" in k.name for k in opened.kernels), [k.name for k in opened.kernels]
    assert any("scaled_dot_product" in e.target for e in opened.externs)


_RELU_LAYER = torch.nn.Sequential(torch.nn.Linear(16, 24), torch.nn.ReLU())


def _mlp(seed: int, dtype: torch.dtype = torch.float32):
    g = torch.Generator().manual_seed(seed)
    return [torch.randn(*shape, generator=g).to(dtype) for shape in ((2, 6, 16), (24, 16), (24,))]


@pytest.mark.parametrize("mlp", [
    lambda x, w, b: F.relu(F.linear(x, w, b)),
    lambda x, w, b: torch.relu(F.linear(x, w, b)) * 2.0,
    lambda x, w, b: F.linear(x, w, b).relu(),
    lambda x, w, b: F.relu(F.linear(x.transpose(0, 1), w, b), inplace=True),  # rows not contiguous
    lambda x, w, b: _RELU_LAYER(x),  # nn.Linear then nn.ReLU, as a model writes them
])
def test_a_linear_layers_relu_goes_into_the_gemms_epilogue_where_no_gradient_is_recorded(interpreter, mlp):
    """``relu(linear(x, w, b))`` becomes ``torch._addmm_activation`` (cuBLASLt's bias and activation epilogue on a
    GPU): no linear or ReLU call left, the output as float64's. Where gradients are recorded it declines."""
    tensors = _mlp(3)
    for grad in (False, True):
        done, out, graph = _rewritten_graph(mlp, tensors, grad)
        assert done == (0 if grad else 1)
        layer = _RELU_LAYER[0]
        x, w, b = (t.detach().double() for t in tensors)
        ref = (mlp(x, w, b) if "_RELU_LAYER" not in inspect.getsource(mlp)
               else F.relu(F.linear(x, layer.weight.detach().double(), layer.bias.detach().double())))
        assert (out.double() - ref).abs().max() < 1e-5
        if not grad:
            targets = [n.target for n in graph.nodes]
            assert torch._addmm_activation in targets and F.linear not in targets and F.relu not in targets


@pytest.mark.parametrize("mlp", [
    lambda x, w, b: F.gelu(F.linear(x, w, b)),  # the exact GELU: never (the epilogue's is the tanh form)
    lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="tanh"),  # the tanh GELU: on a GPU only
    lambda x, w, b: F.relu(F.linear(x, w)),  # no bias
    lambda x, w, b: (lambda y: F.relu(y) + y)(F.linear(x, w, b)),  # the GEMM's output read again
    lambda x, w, b: F.relu(F.linear(x[0, 0], w, b)),  # one row: a vector, no matrix product to fuse into
    lambda x, w, b: F.silu(F.linear(x, w, b)),  # another activation
])
def test_the_gemm_activation_rewrite_leaves_what_the_epilogue_would_change(interpreter, mlp):
    tensors = _mlp(4)
    done, out, _ = _rewritten_graph(mlp, tensors, False)
    assert done == 0
    ref = mlp(*(t.double() for t in tensors))
    assert (out.double() - ref).abs().max() < 1e-3


def test_the_tanh_gelu_of_a_linear_layer_is_matched_and_rewritten_on_a_gpu_only():
    """On a CPU ``torch._addmm_activation``'s GELU is the exact one: the match is made (``_gemm_activation``), the
    rewrite declines for the device."""
    from pytest_kernelopt.capture import graph_rewrites

    def mlp(x, w, b):
        return F.gelu(F.linear(x, w, b), approximate="tanh")

    graph = torch.fx.symbolic_trace(mlp).graph
    (linear,) = [n for n in graph.nodes if n.target is F.linear]
    gemm, act, is_gelu = graph_rewrites._gemm_activation(linear)
    assert gemm is linear and [n.target for n in act] == [F.gelu] and is_gelu
    exact = torch.fx.symbolic_trace(lambda x, w, b: F.gelu(F.linear(x, w, b), approximate="none")).graph
    assert graph_rewrites._gemm_activation(next(n for n in exact.nodes if n.target is F.linear)) is None


def _conv1d(x, w, b):
    """Hugging Face's ``Conv1D`` (GPT-2's linear layers): the weight stored [in, out], the GEMM on rows, viewed back."""
    return torch.addmm(b, x.view(-1, x.size(-1)), w).view(*x.shape[:-1], w.shape[-1])


def _gelu_new(x):  # Hugging Face's ``gelu_new`` (GPT-2's activation), written out
    return 0.5 * x * (1.0 + torch.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * torch.pow(x, 3.0))))


@pytest.mark.parametrize("form", [
    lambda x, w, b: _gelu_new(F.linear(x, w, b)),
    lambda x, w, b: _gelu_new(_conv1d(x, w.t(), b)),
    lambda x, w, b: F.gelu(_conv1d(x, w.t(), b), approximate="tanh"),
    lambda x, w, b: (lambda y: y * 0.5 * (1 + (y * 0.7978845608028654 * (1 + 0.044715 * y * y)).tanh()))(
        F.linear(x, w, b)),  # another arrangement of the same GELU
    lambda x, w, b: torch.relu(_conv1d(x, w.t(), b)),
    lambda x, w, b: torch.relu(torch.addmm(b, x.view(-1, x.size(-1)), w.t())),  # no view back
])
def test_the_gemm_activation_rewrite_matches_hugging_faces_forms(form):
    """GPT-2 as Hugging Face writes it: ``Conv1D`` (``addmm`` on rows, viewed back) and ``gelu_new`` written out
    (in any arrangement: the written-out steps are evaluated in float64 against the tanh GELU)."""
    from pytest_kernelopt.capture import graph_rewrites

    x, w, b = _mlp(6)
    graph = _dynamo_graph(form, x, w, b)
    found = [graph_rewrites._gemm_activation(n) for n in graph.nodes]
    (match,) = [m for m in found if m]
    assert match[0].target in (F.linear, torch.addmm) and match[2] == ("relu" not in inspect.getsource(form))


@pytest.mark.parametrize("form", [
    lambda x, w, b: (lambda y: 0.5 * y * (1.0 + torch.erf(y / math.sqrt(2.0))))(F.linear(x, w, b)),  # exact GELU
    lambda x, w, b: (lambda y: 0.5 * y * (1.0 + torch.tanh(0.8 * (y + 0.044715 * y ** 3))))(F.linear(x, w, b)),
    lambda x, w, b: (lambda y: _gelu_new(y) + y)(F.linear(x, w, b)),  # the GEMM's output read again
    lambda x, w, b: (lambda y: (_gelu_new(y), 0.5 * y))(F.linear(x, w, b)),  # a step read outside
    lambda x, w, b: _gelu_new(torch.addmm(b, x.view(-1, x.size(-1)), w.t(), beta=0.5).view(*x.shape[:-1], -1)),
    lambda x, w, b: _gelu_new(_conv1d(x, w.t(), b) * 2.0),
])
def test_the_written_out_gelu_is_matched_only_where_it_is_the_tanh_gelu_of_the_gemm_alone(form):
    from pytest_kernelopt.capture import graph_rewrites

    x, w, b = _mlp(7)
    graph = _dynamo_graph(form, x, w, b)
    assert not any(graph_rewrites._gemm_activation(n) for n in graph.nodes)


def _dynamo_graph(fn, *tensors):
    """Dynamo's graph of ``fn`` on ``tensors`` (before any pass), not compiled."""
    graphs: list = []

    def backend(gm, example_inputs):
        graphs.append(gm)
        return gm

    torch._dynamo.reset()
    torch.compile(fn, backend=backend)(*tensors)
    return graphs[0].graph


def test_hugging_faces_gpt2_mlp_is_rewritten_and_stays_correct(interpreter):
    """``Conv1D`` then ReLU rewritten on a CPU (its GELU only on a GPU), the view back kept, float64's output."""
    tensors = _mlp(8)

    def mlp(x, w, b):
        return torch.relu(_conv1d(x, w.t(), b)) * 3.0

    done, out, graph = _rewritten_graph(mlp, tensors, False)
    targets = [n.target for n in graph.nodes]
    assert done == 1 and torch._addmm_activation in targets and torch.addmm not in targets
    ref = mlp(*(t.double() for t in tensors))
    assert out.shape == ref.shape and (out.double() - ref).abs().max() < 1e-5


def test_a_model_with_a_relu_or_gelu_beside_a_library_gemm_tries_the_rewrites():
    from pytest_kernelopt.capture.variants import needless

    gelu = SimpleNamespace(name="triton_poi_fused_gelu_view_2", source="")
    mm = SimpleNamespace(target="extern_kernels.addmm")
    assert needless(VARIANT, [gelu], [mm]) is None
    assert "no ReLU or GELU kernel beside a library GEMM" in needless(VARIANT, [gelu], [])
    written = SimpleNamespace(name="triton_poi_fused_add_mul_pow_tanh_view_2", source="")  # gelu_new, written out
    assert needless(VARIANT, [written], [mm]) is None
    other = SimpleNamespace(name="triton_poi_fused_add_mul_0", source="")
    assert "no ReLU or GELU kernel" in needless(VARIANT, [other], [mm])
    # A convnet's ReLU, fused with its batch norm, beside its classifier's addmm: no linear layer's activation.
    folded = SimpleNamespace(name="triton_poi_fused__native_batch_norm_legit_no_training_relu_3", source="")
    assert "no ReLU or GELU kernel" in needless(VARIANT, [folded], [mm])


def test_the_gemm_activation_rewrite_is_judged_on_every_draw_and_the_gate_compiles_it(interpreter, monkeypatch):
    """The setting judged on the whole model against float64 (the seeds and every input draw); the problem opened
    under it runs the GEMM with its ReLU as one library call, no ReLU kernel left."""
    default, opened = _setting_judged_then_opened(TESTS / "data" / "linear_relu.py", interpreter, monkeypatch, seed=9)
    assert any("relu" in k.name for k in default.kernels), [k.name for k in default.kernels]
    assert not any("relu" in k.name for k in opened.kernels), [k.name for k in opened.kernels]
    assert any("addmm_activation" in e.target for e in opened.externs), [e.target for e in opened.externs]


def test_the_gemm_activation_rewrite_leaves_symbolic_sizes(interpreter):
    """A dynamic-shape compile's sizes are symbols: the rewrite's reshapes would fix them, so it declines."""
    import torch._inductor.config as inductor_config

    from pytest_kernelopt.capture import graph_rewrites

    def mlp(x, w, b):
        return F.relu(F.linear(x, w, b))

    tensors = _mlp(5)
    torch._dynamo.reset()
    before = graph_rewrites.rewrites_done()
    with torch.no_grad(), inductor_config.patch(pre_grad_custom_pass=graph_rewrites.pre_grad_rewrite_pass(),
                                                fx_graph_cache=False):
        compiled = torch.compile(mlp, dynamic=True)
        outs = [compiled(x, *tensors[1:]) for x in (tensors[0], tensors[0][:, :3], tensors[0][:1])]
    assert graph_rewrites.rewrites_done() == before
    for x, out in zip((tensors[0], tensors[0][:, :3], tensors[0][:1]), outs):
        assert out.shape == (*x.shape[:-1], 24) and torch.allclose(out, mlp(x, *tensors[1:]), atol=1e-5)
