"""kernelopt candidate: `triton_red_fused_clamp_min_div_linalg_vector_norm_mul_scalar_tensor_sum_0` of model `cosine_loss`.

Dumped from the kernel Inductor generated (fingerprint 22c1343293bb3640).
Inductor compiled 2 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel)`, called as the compiled model calls
the kernel. It writes: in_out_ptr0. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def promote_to_tensor(x):
    return x + tl.zeros((1,), tl.int1)


@triton.jit
def is_floating(x):
    return promote_to_tensor(x).dtype.is_floating()


@triton.jit
def maximum(a, b):
    mask = a > b
    if is_floating(a):
        mask |= a != a
    return tl.where(mask, a, b)


@triton.jit
def triton_red_fused_clamp_min_div_linalg_vector_norm_mul_scalar_tensor_sum_0(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 16384
    r0_numel = 2048
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    _tmp3 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tmp0 * tmp0
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4 = _tmp3 + tmp2
        _tmp3 = tl.where(r0_mask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    _tmp8 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp6 = tmp5 * tmp5
        tmp7 = tl.broadcast_to(tmp6, [XBLOCK, R0_BLOCK])
        tmp9 = _tmp8 + tmp7
        _tmp8 = tl.where(r0_mask, tmp9, _tmp8)
    tmp8 = tl.sum(_tmp8, 1)[:, None]
    _tmp21 = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp10 = tl.load(in_ptr0 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp15 = tl.load(in_ptr1 + (r0_1 + 2048*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp11 = tl.sqrt_rn(tmp3)
        tmp12 = tl.full([1, 1], 9.99999993922529e-09, tl.float32)
        tmp13 = maximum(tmp11, tmp12)
        tmp14 = (tmp10 / tmp13)
        tmp16 = tl.sqrt_rn(tmp8)
        tmp17 = maximum(tmp16, tmp12)
        tmp18 = (tmp15 / tmp17)
        tmp19 = tmp14 * tmp18
        tmp20 = tl.broadcast_to(tmp19, [XBLOCK, R0_BLOCK])
        tmp22 = _tmp21 + tmp20
        _tmp21 = tl.where(r0_mask, tmp22, _tmp21)
    tmp21 = tl.sum(_tmp21, 1)[:, None]
    tl.store(in_out_ptr0 + (x0), tmp21, None)


def run(in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, *, stream=None):
    """Launch `triton_red_fused_clamp_min_div_linalg_vector_norm_mul_scalar_tensor_sum_0` with the configuration Inductor chose."""
    XBLOCK = 2
    R0_BLOCK = 1024
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_red_fused_clamp_min_div_linalg_vector_norm_mul_scalar_tensor_sum_0[grid](in_out_ptr0, in_ptr0, in_ptr1, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK, num_warps=16, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
