"""The structural rewrite rules (``candidate/rewrites.py``): what each changes, what it leaves, and that
the rewritten kernel computes the same values (interpreter mode)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from pytest_kernelopt.agents.planner import STRATEGIES
from pytest_kernelopt.agents.reviewer import review
from pytest_kernelopt.candidate.rewrites import REWRITES, reverse_second_passes, streaming_stores
from pytest_kernelopt.records import ArgInfo, KernelInfo, LaunchConfig

# Inductor's looped two-pass reduction (torch 2.11's spelling): x / sum(|x|) over rows.
TWO_PASS = '''"""kernelopt candidate: `triton_red_fused_abs_div_sum_0` of model `m`."""
import triton
import triton.language as tl
from triton.language import math as tl_math


@triton.jit
def triton_red_fused_abs_div_sum_0(in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    x0 = xindex
    _tmp3 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl_math.abs(tmp0)
        tmp4 = _tmp3 + tmp1
        _tmp3 = tl.where(r0_mask & xmask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr0 + (r0_1 + r0_numel*x0), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        tmp6 = (tmp5 / tmp3)
        tl.store(out_ptr1 + (r0_1 + r0_numel*x0), tmp6, r0_mask & xmask)


def run(in_ptr0, out_ptr1, xnumel, r0_numel, *, stream=None):
    """Launch."""
    XBLOCK = 2
    R0_BLOCK = 16
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_red_fused_abs_div_sum_0[grid](in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK, num_warps=4, num_stages=1)
'''

_LOOP = "    for r0_offset in tl.range" + TWO_PASS.split("    for r0_offset in tl.range")[2].split("\n\n\n")[0] + "\n"
THREE_PASS = TWO_PASS.replace("\n\n\ndef run", "\n" + _LOOP.rstrip("\n") + "\n\n\ndef run")  # a third pass, as the second


def _info(rows: int = 5, cols: int = 70) -> KernelInfo:
    name = "triton_red_fused_abs_div_sum_0"
    return KernelInfo(
        name=name, function=name, graph=0, fingerprint="f" * 16, source=TWO_PASS, launch=LaunchConfig(),
        args=[ArgInfo(name="in_ptr0", kind="tensor", read=True, shape=[rows, cols], dtype="float32"),
              ArgInfo(name="out_ptr1", kind="tensor", written=True, shape=[rows, cols], dtype="float32"),
              ArgInfo(name="xnumel", kind="int", value=rows), ArgInfo(name="r0_numel", kind="int", value=cols)])


def _run(text: str, tmp_path: Path, x):
    import torch

    path = tmp_path / f"cand_{abs(hash(text))}.py"
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    out = torch.full_like(x, float("nan"))
    module.run(x, out, x.shape[0], x.shape[1])
    return out


def test_reverse_pass_walks_the_second_pass_from_the_last_chunk():
    out = reverse_second_passes(TWO_PASS)
    first, second = out.split("    for r0_offset in tl.range")[1:]
    assert "r0_offset_last - r0_offset" not in first  # the reducing pass runs forwards, as before
    assert first.endswith("    r0_offset_last = ((r0_numel - 1) // R0_BLOCK) * R0_BLOCK\n")  # just before the loop
    assert "r0_index = (r0_offset_last - r0_offset) + r0_base" in second
    assert "roffset = (r0_offset_last - r0_offset)" in second
    assert out.split("def run")[1] == TWO_PASS.split("def run")[1]  # host code untouched
    assert reverse_second_passes(out) == out  # applied once; a second application changes nothing


def test_reverse_pass_alternates_directions_and_leaves_one_pass_kernels_alone():
    out = reverse_second_passes(THREE_PASS)
    loops = out.split("    for r0_offset in tl.range")[1:]
    assert len(loops) == 3
    assert ["r0_offset_last - r0_offset" in loop.split("\n\n\n")[0] for loop in loops] == [False, True, False]
    one_pass = TWO_PASS.split("    tmp3 = tl.sum")[0] + "\n\n\ndef run" + TWO_PASS.split("\n\n\ndef run")[1]
    assert reverse_second_passes(one_pass) == one_pass
    rebinds = TWO_PASS.replace("        roffset = r0_offset\n        r0_1 = r0_index\n        tmp5",
                               "        r0_offset = r0_offset + 0\n        r0_1 = r0_index\n        tmp5")
    assert reverse_second_passes(rebinds) == rebinds  # not Inductor's loop: left alone
    assert reverse_second_passes("def broken(:\n") == "def broken(:\n"


def test_streaming_stores_marks_only_unhinted_device_stores():
    out = streaming_stores(TWO_PASS)
    assert "tl.store(out_ptr1 + (r0_1 + r0_numel*x0), tmp6, r0_mask & xmask, eviction_policy='evict_first')" in out
    assert out.count("eviction_policy='evict_first'") == TWO_PASS.count("eviction_policy='evict_first'") + 1
    assert streaming_stores(out) == out
    hinted = TWO_PASS.replace("tmp6, r0_mask & xmask)", "tmp6, r0_mask & xmask, cache_modifier='.cs')")
    assert streaming_stores(hinted) == hinted
    # A kernel that reads each element once (here: the second pass alone) is left as it is.
    one_pass = TWO_PASS.split("    _tmp3 = tl.full")[0] + "    tmp3 = 1.0\n" + \
        "    for r0_offset in tl.range" + TWO_PASS.split("    for r0_offset in tl.range")[2]
    assert "tl.store(" in one_pass and streaming_stores(one_pass) == one_pass


@pytest.mark.filterwarnings("ignore:invalid value encountered in divide")  # masked rows divide 0 by 0
@pytest.mark.parametrize("rule", ["reverse-pass", "streaming-stores", "reverse-pass+streaming-stores"])
def test_rewritten_kernels_pass_review_and_compute_the_same_rows(rule, interpreter, tmp_path):
    import torch

    text = TWO_PASS
    for name in rule.split("+"):
        text = REWRITES[name](text)
    assert text != TWO_PASS
    info = _info()
    verdict = review(text, info, TWO_PASS, set())
    assert verdict.ok, verdict.reason
    x = torch.randn(5, 70)  # 70 columns: five chunks of 16, the last one masked
    expected = x / x.abs().sum(1, keepdim=True)
    torch.testing.assert_close(_run(TWO_PASS, tmp_path, x), expected)
    torch.testing.assert_close(_run(text, tmp_path, x), expected)


def test_memory_bound_kernels_get_the_l2_rules_first_on_the_compilers_kernel():
    """On the H200 the harvest's candidates spent a 10 s and a 40 s budget before the rules' turn (nothing
    stored); the rules measured to win on the compiler's own kernel now come before it."""
    from pytest_kernelopt.agents.search import SearchCoder
    from pytest_kernelopt.agents.harvest import Harvested, HarvestResult
    from pytest_kernelopt.runs.records import CoderContext

    assert STRATEGIES["memory"] == ["rewrite:reverse-pass", "rewrite:streaming-stores", "harvest:forms", "harvest", "rewrite:eviction",
                                    "rewrite:approx-div", "launch"]
    assert "rewrite:reverse-pass" not in STRATEGIES["compute"]
    coder = SearchCoder()
    coder._device = "cuda"
    coder.harvested = HarvestResult(kernels=[Harvested(
        variant="max-autotune", name="triton_red_fused_abs_div_sum_0", graph=0, fingerprint="f" * 16,
        args=["in_ptr0", "out_ptr1", "xnumel", "r0_numel"], written=["out_ptr1"],
        source=TWO_PASS.replace("XBLOCK = 2", "XBLOCK = 4"))])
    ctx = CoderContext(model="m", device="cuda", kernel=_info(), original=TWO_PASS, best=TWO_PASS, attempts=[],
                       strategies=STRATEGIES["memory"])
    assert [p.origin for p in coder.propose(ctx)] == ["rewrite:reverse-pass"]
    ctx.best = reverse_second_passes(TWO_PASS)  # accepted: the next rule composes on it
    second = coder.propose(ctx)
    assert [p.origin for p in second] == ["rewrite:streaming-stores"]
    assert second[0].source == streaming_stores(reverse_second_passes(TWO_PASS))
    assert [p.origin for p in coder.propose(ctx)] == ["harvest:max-autotune"]


def test_a_composed_rewrite_is_stored_as_a_replayable_recipe():
    from pytest_kernelopt.candidate.launch_space import with_point
    from pytest_kernelopt.store.recipe import derive_recipe

    source = with_point(streaming_stores(reverse_second_passes(TWO_PASS)), {"R0_BLOCK": 32})
    recipe = derive_recipe(TWO_PASS, source)
    assert recipe.kind == "rewrite"
    assert sorted(s.rule for s in recipe.rewrites) == ["reverse-pass", "streaming-stores"]
    assert recipe.launch["R0_BLOCK"] == 32
