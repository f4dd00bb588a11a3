"""kernelopt candidate: `triton_poi_fused_add_convolution_mul_relu_2` of model `conv_relu_bias`.

Dumped from the kernel Inductor generated (fingerprint a66c95170db2e463).
Inductor compiled 6 launch configurations, benchmarked them on the first run and
launched the one below; this dump reproduces that launch.
Entry point: `run(in_ptr0, in_ptr1, in_ptr2, out_ptr0, ynumel, xnumel)`, called as the compiled model calls
the kernel. It writes: out_ptr0. Edit the kernel, the grid or the launch
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
def triton_poi_fused_add_convolution_mul_relu_2(in_ptr0, in_ptr1, in_ptr2, out_ptr0, ynumel, xnumel, YBLOCK : tl.constexpr, XBLOCK : tl.constexpr):
    ynumel = 4096
    xnumel = 4096
    yoffset = tl.program_id(1) * YBLOCK
    yindex = yoffset + tl.arange(0, YBLOCK)[:, None]
    ymask = tl.full([YBLOCK], True, tl.int1)[:, None]
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[None, :]
    xmask = tl.full([XBLOCK], True, tl.int1)[None, :]
    x2 = xindex
    y0 = (yindex % 128)
    y1 = yindex // 128
    y3 = yindex
    tmp0 = tl.load(in_ptr0 + (y0 + 128*x2 + 524288*y1), None)
    tmp1 = tl.load(in_ptr1 + (y0), None, eviction_policy='evict_last')
    tmp3 = tl.load(in_ptr2 + (y0), None, eviction_policy='evict_last')
    tmp2 = tmp0 + tmp1
    tmp4 = tmp2 + tmp3
    tmp5 = tl.full([1, 1], 0, tl.int32)
    tmp6 = maximum(tmp5, tmp4)
    tmp7 = tl.full([1, 1], 1.5, tl.float32)
    tmp8 = tmp6 * tmp7
    tl.store(out_ptr0 + (x2 + 4096*y3), tmp8, None)


def run(in_ptr0, in_ptr1, in_ptr2, out_ptr0, ynumel, xnumel, *, stream=None):
    """Launch `triton_poi_fused_add_convolution_mul_relu_2` with the configuration Inductor chose."""
    XBLOCK = 128
    YBLOCK = 64
    grid = (triton.cdiv(xnumel, XBLOCK), triton.cdiv(ynumel, YBLOCK), 1)
    triton_poi_fused_add_convolution_mul_relu_2[grid](in_ptr0, in_ptr1, in_ptr2, out_ptr0, ynumel, xnumel, XBLOCK=XBLOCK, YBLOCK=YBLOCK, num_warps=4, num_stages=1, debug=True, sanitize_overflow=False, enable_fp_fusion=True)
