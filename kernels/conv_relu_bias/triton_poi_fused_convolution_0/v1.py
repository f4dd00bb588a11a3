"""kernelopt candidate: `triton_poi_fused_convolution_0` of model `conv_relu_bias`.

Dumped from the kernel Inductor generated (fingerprint 6986afed4e1dfa5d).
Entry point: `run(in_ptr0, out_ptr0, ynumel, xnumel)`, called as the compiled model calls
the kernel. It writes: out_ptr0. Edit the kernel, the grid or the launch
options; keep the entry point's arguments.
"""
import triton
import triton.language as tl
from triton.language import math as tl_math
from triton.language.extra import libdevice


@triton.jit
def triton_poi_fused_convolution_0(in_ptr0, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 2048
    xnumel = 4096
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x2 = xindex
    y3 = yindex
    y0 = (yindex % 64)
    y1 = yindex // 64
    tmp0 = tl.load(in_ptr0 + (x2 + 4096*y3), None)
    tl.store(out_ptr0 + (y0 + 64*x2 + 262144*y1), tmp0, None)


def run(in_ptr0, out_ptr0, ynumel, xnumel, *, stream=None):
    """Launch `triton_poi_fused_convolution_0` with the configuration Inductor chose."""
    XBLOCK = 64
    YBLOCK = 32
    grid = (triton.cdiv(xnumel, XBLOCK), triton.cdiv(ynumel, YBLOCK), 1)
    triton_poi_fused_convolution_0[grid](in_ptr0, out_ptr0, ynumel, xnumel, XBLOCK=XBLOCK, YBLOCK=YBLOCK, num_warps=8, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
