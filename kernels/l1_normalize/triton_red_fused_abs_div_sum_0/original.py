"""kernelopt candidate: `triton_red_fused_abs_div_sum_0` of model `l1_normalize`.

Dumped from the kernel Inductor generated (fingerprint f177acdb8834e0a7).
Inductor compiled 2 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_ptr0, out_ptr1, xnumel, r0_numel)`, called as the compiled model calls
the kernel. It writes: out_ptr1. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def triton_red_fused_abs_div_sum_0(in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 8192
    r0_numel = 8192
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
        tmp0 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask, eviction_policy='evict_last', other=0.0)
        tmp1 = tl_math.abs(tmp0)
        tmp2 = tl.broadcast_to(tmp1, [XBLOCK, R0_BLOCK])
        tmp4 = _tmp3 + tmp2
        _tmp3 = tl.where(r0_mask, tmp4, _tmp3)
    tmp3 = tl.sum(_tmp3, 1)[:, None]
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp5 = tl.load(in_ptr0 + (r0_1 + 8192*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp6 = (tmp5 / tmp3)
        tl.store(out_ptr1 + (r0_1 + 8192*x0), tmp6, r0_mask)


def run(in_ptr0, out_ptr1, xnumel, r0_numel, *, stream=None):
    """Launch `triton_red_fused_abs_div_sum_0` with the configuration Inductor chose."""
    XBLOCK = 1
    R0_BLOCK = 8192
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_red_fused_abs_div_sum_0[grid](in_ptr0, out_ptr1, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK, num_warps=16, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
