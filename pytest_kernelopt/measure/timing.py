"""GPU timing the way ``triton.testing.do_bench`` does it, but paired.

Baseline and candidate run interleaved (A B, then B A, ...) so both see the same
machine state; each repetition is preceded by an L2 flush (writing a buffer twice
the L2's size) outside the timed window and timed with CUDA events; warm-up runs
are not timed. Only event pairs are recorded inside the loop; one synchronize at
the end reads them all.
"""

from __future__ import annotations

from typing import Callable

from .stats import SpeedEstimate, speed_estimate

Step = tuple[Callable[[], None], Callable[[], object], Callable[[], None]]  # (before, timed, after)


def graphed(prepare: Callable[[], None], fn: Callable[[], object], cleanup: Callable[[], None]) -> Step | None:
    """A step that replays ``fn`` captured as a CUDA graph (None when it cannot be captured).

    Replays time what the GPU does for the whole model: host-side launch cost,
    which on the H200 machine was 8-13 us per kernel for Inductor's launcher and
    more for a candidate's (torch 2.11, triton 3.6), drops out, so small
    launch-bound models are judged on their kernels.
    """
    import torch

    try:
        prepare()
        try:
            side = torch.cuda.Stream()
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                for _ in range(2):
                    fn()
            torch.cuda.current_stream().wait_stream(side)
            graph = torch.cuda.CUDAGraph()
            with torch.cuda.graph(graph):
                fn()
        finally:
            cleanup()
        torch.cuda.synchronize()
    except Exception:
        torch.cuda.synchronize()
        return None
    return (lambda: None, graph.replay, lambda: None)


def _l2_flush_buffer():  # type: ignore[no-untyped-def]
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    size = max(int(getattr(props, "L2_cache_size", 0) or 0), 64 << 20) * 2
    return torch.empty(size, dtype=torch.int8, device="cuda")


def paired_timings(
    baseline: Step, candidate: Step, *, min_pairs: int = 30, max_pairs: int = 400, target_seconds: float = 3.0,
    warmup: int = 5,
) -> SpeedEstimate:
    """Interleaved timings of two steps; returns the paired speedup estimate.

    A step is ``(before, timed, after)``: ``before``/``after`` run outside the timed
    window (swapping a kernel in and out), ``timed`` is what the events bracket.
    """
    import torch

    flush = _l2_flush_buffer()
    steps = (baseline, candidate)
    for _ in range(warmup):
        for before, timed, after in steps:
            before()
            timed()
            after()
    torch.cuda.synchronize()
    # Size the run from one timed pair so that it takes about ``target_seconds``.
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for before, timed, after in steps:
        before()
        flush.zero_()
        timed()
        after()
    end.record()
    torch.cuda.synchronize()
    per_pair_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    pairs = int(min(max_pairs, max(min_pairs, target_seconds / per_pair_s)))

    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(pairs)] for _ in steps]
    for i in range(pairs):
        order = (0, 1) if i % 2 == 0 else (1, 0)
        for which in order:
            before, timed, after = steps[which]
            before()
            flush.zero_()
            s, e = events[which][i]
            s.record()
            timed()
            e.record()
            after()
    torch.cuda.synchronize()
    times = [[s.elapsed_time(e) for s, e in evs] for evs in events]
    return speed_estimate(times[0], times[1])
