"""kernelopt candidate: `triton_poi_fused_add_gelu_mul_0` of model `gelu_scale`.

Dumped from the kernel Inductor generated (fingerprint c507663c80144f1a).
Inductor compiled 2 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_ptr0, in_ptr1, out_ptr0, xnumel)`, called as the compiled model calls
the kernel. It writes: out_ptr0. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def triton_poi_fused_add_gelu_mul_0(in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK : tl.constexpr):
    xnumel = 67108864
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:]
    xmask = tl.full([XBLOCK], True, tl.int1)[:]
    x2 = xindex
    x0 = (xindex % 8192)
    tmp0 = tl.load(in_ptr0 + (x2), None)
    tmp1 = tl.load(in_ptr1 + (x0), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp3 = tl.full([1], 0.5, tl.float32)
    tmp4 = tmp2 * tmp3
    tmp5 = tl.full([1], 0.7071067811865476, tl.float32)
    tmp6 = tmp2 * tmp5
    tmp7 = libdevice.erf(tmp6)
    tmp8 = tl.full([1], 1.0, tl.float32)
    tmp9 = tmp7 + tmp8
    tmp10 = tmp4 * tmp9
    tmp11 = tl.full([1], 1.7, tl.float32)
    tmp12 = tmp10 * tmp11
    tl.store(out_ptr0 + (x2), tmp12, None)


def run(in_ptr0, in_ptr1, out_ptr0, xnumel, *, stream=None):
    """Launch `triton_poi_fused_add_gelu_mul_0` with the configuration Inductor chose."""
    XBLOCK = 1024
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_poi_fused_add_gelu_mul_0[grid](in_ptr0, in_ptr1, out_ptr0, xnumel, XBLOCK=XBLOCK, num_warps=4, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
