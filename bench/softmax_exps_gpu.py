"""Is a wide-row softmax limited by its exponentials? A two-pass softmax that takes one exponential
per element in its first pass (a block's max, then the block's sum rescaled once) against one that
rescales per element as an online softmax does (two), both with the second pass read backwards
(L2) and eviction hints; against Inductor and a copy (``do_bench``, median of three interleaved
rounds). A measurement, not product code: on the H200 (2026-12-03) the one-exponential form was
no faster (docs/results-h200.md, eighth session).

    python bench/softmax_exps_gpu.py
    TRITON_INTERPRET=1 python bench/softmax_exps_gpu.py   # no GPU: the kernels' errors at small sizes
"""
import statistics

import torch
import triton
import triton.language as tl


@triton.jit
def softmax_rows(x_ptr, y_ptr, R, BLOCK: tl.constexpr, PER_ELEMENT: tl.constexpr, LOG: tl.constexpr):
    base = tl.program_id(0).to(tl.int64) * R
    lanes = tl.arange(0, BLOCK)
    if PER_ELEMENT:
        m = tl.full([BLOCK], float("-inf"), tl.float32)
        s = tl.zeros([BLOCK], tl.float32)
    else:
        m_row = tl.full([], float("-inf"), tl.float32)
        s_row = tl.zeros([], tl.float32)
    for start in range(0, R, BLOCK):
        idx = start + lanes
        x = tl.load(x_ptr + base + idx, mask=idx < R, other=float("-inf"), eviction_policy="evict_last").to(tl.float32)
        if PER_ELEMENT:
            m_new = tl.maximum(m, x)
            s = s * tl.exp(m - m_new) + tl.exp(x - m_new)
            s = tl.where(m_new == float("-inf"), 0.0, s)
            m = m_new
        else:
            m_new = tl.maximum(m_row, tl.max(x, 0))
            s_row = s_row * tl.exp(m_row - m_new) + tl.sum(tl.exp(x - m_new), 0)
            m_row = m_new
    if PER_ELEMENT:
        m_row = tl.max(m, 0)
        s_row = tl.sum(s * tl.exp(m - m_row), 0)
    blocks = tl.cdiv(R, BLOCK)
    for i in range(0, blocks):
        idx = (blocks - 1 - i) * BLOCK + lanes
        x = tl.load(x_ptr + base + idx, mask=idx < R, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if LOG:
            y = x - m_row - tl.log(s_row)
        else:
            y = tl.exp(x - m_row) / s_row
        tl.store(y_ptr + base + idx, y.to(y_ptr.dtype.element_ty), mask=idx < R, cache_modifier=".cs")


def launch(x, per_element, log, block, warps):
    y = torch.empty_like(x)
    softmax_rows[(x.shape[0],)](x, y, x.shape[1], BLOCK=block, PER_ELEMENT=per_element, LOG=log, num_warps=warps)
    return y


def main():
    cuda = torch.cuda.is_available()
    shapes = [((32768, 65536), False), ((4096, 262144), True)] if cuda else [((3, 1000), False), ((2, 3000), True)]
    device = "cuda" if cuda else "cpu"
    for shape, log in shapes:
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(shape, device=device) * 4
        fn = (lambda t: torch.log_softmax(t, -1)) if log else (lambda t: torch.softmax(t, -1))
        ref_rows = slice(0, 64)
        ref = fn(x[ref_rows].double())
        variants = {"copy": lambda: x.clone()}
        if cuda:
            variants["inductor default"] = (lambda f: lambda: f(x))(torch.compile(fn))
            variants["inductor max-autotune"] = (lambda f: lambda: f(x))(torch.compile(fn, mode="max-autotune-no-cudagraphs"))
        for per in (False, True):
            for block, warps in ((4096, 8), (8192, 16), (2048, 8)) if cuda else ((256, 4),):
                variants[f"{'online' if per else 'block-max'} b{block} w{warps}"] = (
                    lambda p, b, w: lambda: launch(x, p, log, b, w))(per, block, warps)
        errors = {}
        for name, f in variants.items():
            if name == "copy":
                continue
            out = f()
            errors[name] = (out[ref_rows].double() - ref).abs().max().item()
        if not cuda:
            print(shape, errors)
            continue
        times = {name: [] for name in variants}
        for _ in range(3):
            for name, f in variants.items():
                times[name].append(triton.testing.do_bench(f, warmup=5, rep=60))
        med = {k: statistics.median(v) for k, v in times.items()}
        for name in variants:
            print(f"{str(shape):>16} {'log' if log else 'sm':>3} {name:>24} {med[name] * 1e3:9.1f} us  of copy {med['copy'] / med[name]:.3f}"
                  f"  / max-autotune {med['inductor max-autotune'] / med[name]:.3f}  err {errors.get(name, 0):.1e}", flush=True)
        del x
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
