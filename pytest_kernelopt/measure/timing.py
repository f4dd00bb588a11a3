"""GPU timing the way ``triton.testing.do_bench`` does it, but paired.

Two or more steps run interleaved, round-robin: in round ``i`` the order starts
at step ``i mod N`` (two steps: A B, then B A, ...; three: A B C, B C A, C A B),
so every step sees the same machine state and takes every position equally often.
Each repetition is preceded by an L2 flush (writing a buffer twice the L2's size)
outside the timed window and timed with CUDA events; warm-up runs are not timed.
Only event pairs are recorded inside the loop; one synchronize at the end reads
them all. :func:`interleaved_timings` returns the raw times (one list per step,
entry ``i`` of every list from round ``i``: paired samples); :func:`paired_timings`
is the two-step case as a speedup estimate.
"""

from __future__ import annotations

from typing import Callable, Sequence

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


def _l2_flush_buffer():
    import torch

    props = torch.cuda.get_device_properties(torch.cuda.current_device())
    size = max(int(getattr(props, "L2_cache_size", 0) or 0), 64 << 20) * 2
    return torch.empty(size, dtype=torch.int8, device="cuda")


def round_order(round_index: int, steps: int) -> list[int]:
    """The order in which the steps run in round ``round_index``: rotated by one each round."""
    return [(round_index + k) % steps for k in range(steps)]


def interleaved_timings(
    steps: Sequence[Step], *, min_rounds: int = 30, max_rounds: int = 400, target_seconds: float = 3.0,
    warmup: int = 5,
) -> list[list[float]]:
    """Interleaved timings (milliseconds) of ``steps``: one list per step, one entry per round.

    A step is ``(before, timed, after)``: ``before``/``after`` run outside the timed
    window (swapping a kernel in and out), ``timed`` is what the events bracket. The
    number of rounds is sized from one timed round so that the run takes about
    ``target_seconds``, within [``min_rounds``, ``max_rounds``].
    """
    import torch

    if not steps:
        raise ValueError("nothing to time")
    flush = _l2_flush_buffer()
    for _ in range(warmup):
        for before, timed, after in steps:
            before()
            timed()
            after()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for before, timed, after in steps:
        before()
        flush.zero_()
        timed()
        after()
    end.record()
    torch.cuda.synchronize()
    per_round_s = max(start.elapsed_time(end) / 1e3, 1e-6)
    rounds = int(min(max_rounds, max(min_rounds, target_seconds / per_round_s)))

    events = [[(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(rounds)]
              for _ in steps]
    for i in range(rounds):
        for which in round_order(i, len(steps)):
            before, timed, after = steps[which]
            before()
            flush.zero_()
            s, e = events[which][i]
            s.record()
            timed()
            e.record()
            after()
    torch.cuda.synchronize()
    return [[s.elapsed_time(e) for s, e in evs] for evs in events]


def paired_timings(
    baseline: Step, candidate: Step, *, min_pairs: int = 30, max_pairs: int = 400, target_seconds: float = 3.0,
    warmup: int = 5,
) -> SpeedEstimate:
    """Interleaved timings of two steps (A B, B A, ...); returns the paired speedup estimate."""
    times = interleaved_timings((baseline, candidate), min_rounds=min_pairs, max_rounds=max_pairs,
                                target_seconds=target_seconds, warmup=warmup)
    return speed_estimate(times[0], times[1])
