"""Where the compiled model's GPU time goes, measured in the worker that holds it.

The Profiler role (:mod:`pytest_kernelopt.agents.profiler`) classifies kernels
from these figures; this module only measures: per Triton kernel the device time
and launches per model run (``torch.profiler``, CUDA activity), the model's total
device time, registers and spills of the launched configuration, and the device's
copy bandwidth (the memory roof every kernel is compared against:
:func:`~pytest_kernelopt.measure.roofline.copy_ceiling_gbps`). No candidate code runs here.
"""

from __future__ import annotations

import functools
from typing import Any

from ..measure.roofline import copy_ceiling_gbps, read_ceiling_gbps
from .prepared import Prepared
from .protocol import KernelTime, Profiled


def _launcher_figures(handle: Any) -> tuple[int | None, int | None]:
    launchers = getattr(handle.original, "launchers", None) or []
    if not launchers:
        return None, None
    regs, spills = getattr(launchers[0], "n_regs", None), getattr(launchers[0], "n_spills", None)
    return (int(regs) if isinstance(regs, int) else None), (int(spills) if isinstance(spills, int) else None)


def profile_model(prepared: Prepared, runs: int) -> Profiled:
    import torch

    compiled = prepared.compiled
    by_function: dict[str, list[str]] = {}
    figures: dict[str, KernelTime] = {}
    for name, handle in compiled.kernels.items():
        by_function.setdefault(handle.info.function, []).append(name)
        regs, spills = _launcher_figures(handle)
        figures[name] = KernelTime(registers=regs, spills=spills)
    if prepared.device != "cuda":
        return Profiled(measured=False, kernels=figures)

    from ..measure.device_time import device_times

    inputs = prepared.inputs(prepared.seeds[0])
    with torch.no_grad():
        times = device_times(functools.partial(compiled, *inputs), runs)
    total = 0.0
    for name, durations in times.items():
        total += sum(durations)
        names = by_function.get(name)
        if not names:
            continue
        for kernel in names:  # the same function in several graphs: split evenly
            k = figures[kernel]
            k.gpu_us += sum(durations) / len(names) / runs
            k.launches += len(durations)
    for k in figures.values():
        k.launches = max(1, round(k.launches / runs)) if k.gpu_us else 0
    del inputs
    from ..measure.roofline import flop_ceiling_tflops

    tflops = flop_ceiling_tflops(sorted(prepared.min_flops)) if prepared.min_flops else None
    try:
        read_gbps: float | None = read_ceiling_gbps()
    except Exception:  # noqa: BLE001 - the read ceiling refines the floor: without it, every byte at the copy's rate
        read_gbps = None
    return Profiled(measured=True, model_gpu_us=total / runs, kernels=figures, copy_gbps=copy_ceiling_gbps(),
                    read_gbps=read_gbps, flop_tflops=tflops)
