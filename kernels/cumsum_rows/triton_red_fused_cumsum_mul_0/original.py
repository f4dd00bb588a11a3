"""kernelopt candidate: `triton_red_fused_cumsum_mul_0` of model `cumsum_rows`.

Dumped from the kernel Inductor generated (fingerprint 88aed0271330e2e3).
Inductor compiled 2 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_ptr0, out_ptr0, xnumel, r0_numel)`, called as the compiled model calls
the kernel. It writes: out_ptr0. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def select_one(x, mask, dim, keep_dims=False):
    idtype = tl.core.get_int_dtype(x.dtype.primitive_bitwidth, signed=False)
    ix = x.to(idtype, bitcast=True)
    iy = tl.sum(ix * mask, dim, keep_dims=keep_dims)
    return iy.to(x.dtype, bitcast=True)


@triton.jit
def _triton_helper_fn_add0(arg0_0, arg1_0):
    tmp0 = arg0_0 + arg1_0
    return tmp0


@triton.jit
def triton_red_fused_cumsum_mul_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xnumel = 4096
    r0_numel = 4096
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    rbase = r0_base
    x0 = xindex
    tmp5 = tl.full([XBLOCK, 1], float('nan'), tl.float32)
    for r0_offset in tl.range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        roffset = r0_offset
        rindex = r0_index
        r0_1 = r0_index
        tmp0 = tl.load(in_ptr0 + (r0_1 + 4096*x0), r0_mask, eviction_policy='evict_first', other=0.0)
        tmp1 = tl.full([1, 1], 0.5, tl.float32)
        tmp2 = tmp0 * tmp1
        tmp3 = tmp2.to(tl.float32)
        tmp4 = tl.broadcast_to(tmp3, [XBLOCK, R0_BLOCK])
        tmp6, = tl.associative_scan((tmp4,), 1, _triton_helper_fn_add0)
        tmp7 = select_one((tmp6), rbase == (RBLOCK - 1), dim=-1, keep_dims=True)
        tmp8 = tmp5 + tmp7
        tmp9 = tmp5 + tmp6
        tmp10 = tl.where(roffset > 0, tmp9, tmp6)
        tmp5 = tl.where(roffset > 0, tmp8, tmp7)
        tl.store(out_ptr0 + (r0_1 + 4096*x0), tmp10, r0_mask)


def run(in_ptr0, out_ptr0, xnumel, r0_numel, *, stream=None):
    """Launch `triton_red_fused_cumsum_mul_0` with the configuration Inductor chose."""
    XBLOCK = 1
    R0_BLOCK = 2048
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_red_fused_cumsum_mul_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK, num_warps=16, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
