"""The size cap on a candidate file, checked wherever a candidate is read or loaded.

Standard library only: the static stage's child (``python -S``), the production loader and
the tuner's reviewer import it without the verifier's heavy parts.
"""

from __future__ import annotations

# The largest candidate file. Inductor's kernels are a few KiB (the largest dump of the
# example and benchmark problems: 5 KiB); the static stage costs about 6 s per MiB on one slow core.
CANDIDATE_BYTES = 512 << 10


def size_problem(text: str, label: str) -> str | None:
    """Why ``text`` is too large to be a candidate (one line: the file, its size, the cap), or None."""
    size = len(text.encode("utf-8", "surrogatepass"))
    return oversized(label, size) if size > CANDIDATE_BYTES else None


def oversized(label: str, size: int) -> str:
    return (f"{label}: candidate is {human_bytes(size)}, over the {human_bytes(CANDIDATE_BYTES)} limit on a "
            "candidate file (compiler kernels are a few KiB); not parsed")


def human_bytes(n: int) -> str:
    return f"{n / (1 << 20):.1f} MiB ({n} bytes)" if n >= 1 << 20 else f"{n / 1024:.0f} KiB ({n} bytes)"

# The kernel stage's relative tolerance by dtype: the one numerics rule (numerics.py) reads it,
# and the offset input draw (tensors.offset_decades) is sized from it. float16 and bfloat16: one
# ulp (their eps, 2^-10 and 2^-7). Inductor computes a half-precision kernel in float32 and rounds
# each output once, so an honest rewrite (another order, other float32 math functions) moves a
# rounded result by at most one ulp, which is at most eps x |result|; two (1.6e-2, as before
# 2026-12-04) let a bf16 kernel that scaled its output by 1.01 pass.
KERNEL_RTOL = {"float64": 1e-9, "float32": 1e-4, "float16": 2.0**-10, "bfloat16": 2.0**-7}

# The offset input draw (rows shifted by c times their spread, tensors.offset_decades): an honest
# reordering of a row's reduction differs from the compiler's order by about c x eps x a growth
# factor of the row length, so the kernel stage widens a reduction's rtol to OFFSET_GROWTH x eps x c
# on that draw (eps of the precision it is computed in: float32 for the 16-bit dtypes); and shifts
# no further than where that allowance reaches OFFSET_CEILING of the output, so a wrong algorithm
# whose answer is off by all of it (a one-pass variance that cancels to 0) is still outside.
# Measured: a LayerNorm summed in blocks on rows of 32768 was 0.5 x eps x c off the compiler's
# order; when the rtol was widened to 1e-4 x c (840 x eps x c, before 2026-12-05) a one-pass
# variance passed 8% of the checks of a 16 x 32 problem, its rounding cancelling to 0.
OFFSET_GROWTH = 64.0
OFFSET_CEILING = 0.25
