"""A GPU held by another stream, for the GPU tests and benchmarks of kernels whose programs wait on
each other (``test_gpu.py``, ``bench/wide_rows_gpu.py``). Imports torch and Triton: import it only
where CUDA is present."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator

import torch
import triton
import triton.language as tl


@triton.jit
def _hold(flag_ptr, sink_ptr, limit_ns, LIVE: tl.constexpr):
    """Each program polls ``flag_ptr`` until it is set, or ``limit_ns`` nanoseconds pass (its own
    bound), keeping LIVE values in registers (stored at the end, to ``sink_ptr``: live throughout)."""
    start = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    kept = tl.arange(0, LIVE)
    held = True
    while held:
        # A microsecond's sleep between polls: the holder should hold multiprocessors, not L2.
        now = tl.inline_asm_elementwise("nanosleep.u32 1000;\n\tmov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64,
                                        is_pure=False, pack=1)
        flag = tl.load(flag_ptr, volatile=True)
        kept = kept * 3 + flag
        held = (flag == 0) & (now - start < limit_ns)
    tl.store(sink_ptr + tl.arange(0, LIVE), kept)


# The holder's programs: 16 warps of 128 registers a thread (the cap; 128 values kept live, a few
# spilled): each takes a multiprocessor's 65536 registers, so one runs on each, and nothing else
# beside it.
_HOLD_WARPS, _HOLD_LIVE, _HOLD_REGISTERS = 16, 128 * 512, 128


@contextlib.contextmanager
def gpu_held(free: int, limit_s: float = 60.0) -> Iterator[None]:
    """Another stream's kernel holds all but ``free`` multiprocessors while the block runs: one
    program on each, of most of its registers (``_HOLD_LIVE``). Released on exit by a host-to-device
    copy (a copy engine: it needs no multiprocessor)."""
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    flag = torch.zeros(1, dtype=torch.int32, device="cuda")
    sink = torch.empty(_HOLD_LIVE, dtype=torch.int32, device="cuda")
    torch.cuda.synchronize()
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        held = _hold[(sms - free,)](flag, sink, int(limit_s * 1e9), LIVE=_HOLD_LIVE, num_warps=_HOLD_WARPS,
                                    maxnreg=_HOLD_REGISTERS)
    # Room beside it for no 4-warp program of over 64 registers a thread (a wide-row program has 200-255).
    assert held.n_regs * 32 * _HOLD_WARPS > 65536 - 4 * 32 * 64, f"the holder takes {held.n_regs} registers a thread"
    time.sleep(0.5)  # the holding programs resident before anything else is launched
    try:
        yield
    finally:
        release = torch.cuda.Stream()
        with torch.cuda.stream(release):
            flag.copy_(torch.ones(1, dtype=torch.int32).pin_memory(), non_blocking=True)
        torch.cuda.synchronize()


def finished_within(seconds: float) -> bool:
    """Whether the current stream's work so far finishes within ``seconds`` (polled: never blocks longer)."""
    done = torch.cuda.Event()
    done.record()
    deadline = time.monotonic() + seconds
    while not done.query():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.001)
    return True
