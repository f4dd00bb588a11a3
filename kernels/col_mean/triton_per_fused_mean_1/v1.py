"""kernelopt candidate: `triton_per_fused_mean_1` of model `col_mean`.

Dumped from the kernel Inductor generated (fingerprint a446da62ee5748e1).
Inductor compiled 4 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_out_ptr0, in_ptr0, xnumel, r0_numel)`, called as the compiled model calls
the kernel. It writes: in_out_ptr0. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def triton_per_fused_mean_1(in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr):
    xnumel = 4096
    r0_numel = 32
    R0_BLOCK: tl.constexpr = 32
    rnumel = r0_numel
    RBLOCK: tl.constexpr = R0_BLOCK
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = tl.full([XBLOCK], True, tl.int1)[:, None]
    r0_index = tl.arange(0, R0_BLOCK)[None, :]
    r0_offset = 0
    r0_mask = tl.full([R0_BLOCK], True, tl.int1)[None, :]
    roffset = r0_offset
    rindex = r0_index
    r0_1 = r0_index
    x0 = xindex
    tmp0 = tl.load(in_ptr0 + (x0 + 4096*r0_1), None)
    tmp1 = tl.broadcast_to(tmp0, [XBLOCK, R0_BLOCK])
    tmp3 = tl.sum(tmp1, 1)[:, None].to(tl.float32)
    tmp4 = tl.full([1, 1], 16384.0, tl.float32)
    tmp5 = (tmp3 / tmp4)
    tl.debug_barrier()
    tl.store(in_out_ptr0 + (x0), tmp5, None)


def run(in_out_ptr0, in_ptr0, xnumel, r0_numel, *, stream=None):
    """Launch `triton_per_fused_mean_1` with the configuration Inductor chose."""
    XBLOCK = 16
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_per_fused_mean_1[grid](in_out_ptr0, in_ptr0, xnumel, r0_numel, XBLOCK=XBLOCK, num_warps=2, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
