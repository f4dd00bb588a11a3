"""Device time by kernel name, from ``torch.profiler``'s CUDA activity (numbers only)."""

from __future__ import annotations

from typing import Callable


def device_times(run: Callable[[], object], runs: int, warmup: int = 3) -> dict[str, list[float]]:
    """Every device activity of ``runs`` calls of ``run`` (after ``warmup`` untimed ones): name -> durations in us.

    Triton kernels appear under their ``@triton.jit`` function's name, vendor kernels and
    copies under theirs; sum a list and divide by ``runs`` for the time per call.
    """
    import torch

    for _ in range(warmup):
        run()
    torch.cuda.synchronize()
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(runs):
            run()
        torch.cuda.synchronize()
    times: dict[str, list[float]] = {}
    for event in prof.events():
        if event.device_type == torch.autograd.DeviceType.CUDA:
            times.setdefault(event.name, []).append(float(event.time_range.elapsed_us()))
    return times
