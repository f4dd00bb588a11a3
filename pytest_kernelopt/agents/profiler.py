"""The Profiler role: where the model's GPU time goes, and what bounds each kernel.

Figures come from the verification session's worker (``torch.profiler`` device
times, the launched configuration's registers and spills, a copy-bandwidth ceiling
measured once per run on this device) and, where ``ncu`` runs, from Nsight Compute
counters read with ``--clock-control none`` in a child process before the session
opens. Each kernel gets a bottleneck class:

* ``launch``: under :data:`LAUNCH_US` per launch; the fixed cost of a launch dominates.
* ``compute``: Nsight Compute's SM throughput is the higher roof and above 60%.
* ``memory``: DRAM throughput (counters) or achieved bandwidth against the copy
  ceiling (estimate) at :data:`MEMORY_PCT` or more.
* ``occupancy``: neither roof reached: latency, occupancy or parallelism limit it.
* ``unknown``: interpreter mode, nothing timed (shares are then shares of bytes moved).

The profile also says what swapping kernels can give the model at most (:func:`swap_bound`): every
Triton kernel at its memory limit, the rest of the model's GPU time (GEMMs, attention, anything
Inductor does not generate) as it is.
"""

from __future__ import annotations

import csv
import io
import json
import re
import shutil
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

from ..measure.roofline import memory_seconds
from ..records import KernelInfo
from ..runs.records import Bottleneck, KernelProfile, ModelProfile

LAUNCH_US = 6.0
MEMORY_PCT = 50.0
COMPUTE_PCT = 60.0
NVTX_RANGE = "kernelopt-profile"
LAUNCH_FLAG = "--launch-configs="  # the ncu child's argument: a JSON file of the setting's launch configurations
# A roofline estimate up to this percent is read as "at the limit": the inputs of a kernel in a model
# run are often still in L2 from the kernel before (seen at 102-113% on the H100, 2026-12-05). Beyond
# it the estimate says nothing: an indexed read counts the whole tensor, or the inputs fit in L2 (a bf16
# residual add of 16 MB read at 130%, the same run), and the kernel counts as all headroom.
OVERCOUNT_PCT = 125.0
# What is read of ncu's CSV (its head names the columns, so more is refused, not cut): one model
# run's launches times the metrics, far below this.
NCU_CSV_BYTES = 64 << 20

_ITEMSIZE = {"float64": 8, "int64": 8, "complex64": 8, "float32": 4, "int32": 4, "uint32": 4, "float16": 2,
             "bfloat16": 2, "int16": 2, "uint16": 2, "int8": 1, "uint8": 1, "bool": 1, "float8_e4m3fn": 1,
             "float8_e5m2": 1}

NCU_METRICS = {
    "gpu__time_duration.sum": "time_ns",
    "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
    "sm__throughput.avg.pct_of_peak_sustained_elapsed": "sm_pct",
    "sm__warps_active.avg.pct_of_peak_sustained_active": "occupancy_pct",
    "launch__registers_per_thread": "registers",
}


def bytes_moved(info: KernelInfo) -> int:
    """Bytes one launch reads and writes, from its tensor arguments (each read and each write once)."""
    return sum(_moved(info))


def _moved(info: KernelInfo) -> tuple[int, int]:
    """(bytes read, bytes written) by one launch, from its tensor arguments."""
    read = written = 0
    for a in info.args:
        if a.kind != "tensor" or a.shape is None:
            continue
        n = 1
        for d in a.shape:
            n *= d
        n *= _ITEMSIZE.get((a.dtype or "float32").replace("torch.", ""), 4)
        read += n * int(a.read)
        written += n * int(a.written)
    return read, written


def classify(per_launch_us: float | None, roofline_pct: float | None, counters: dict[str, float]) -> Bottleneck:
    if per_launch_us is None:
        return "unknown"
    if per_launch_us < LAUNCH_US:
        return "launch"
    sm, dram = counters.get("sm_pct"), counters.get("dram_pct")
    if sm is not None and dram is not None:
        if sm >= COMPUTE_PCT and sm > dram:
            return "compute"
        return "memory" if dram >= MEMORY_PCT else "occupancy"
    if roofline_pct is not None and roofline_pct >= MEMORY_PCT:
        return "memory"
    return "occupancy"


def build_profile(model: str, device: str, kernels: list[KernelInfo], profiled: Any,
                  counters: dict[str, dict[str, float]] | None, ncu_note: str = "") -> ModelProfile:
    """Combine the session's measurements (and Nsight Compute counters) into a ModelProfile."""
    rows: list[KernelProfile] = []
    # Nsight Compute's rows name a kernel by its Triton function, which kernels of two graphs may share (the
    # capture tells them apart with ``__g<graph>``): such a name's counters would mix both, so neither gets them.
    functions = Counter(k.function for k in kernels)
    split = {k.name: _moved(k) for k in kernels}
    moved = {name: sum(rw) for name, rw in split.items()}
    if profiled.measured and profiled.model_gpu_us:
        total = profiled.model_gpu_us
        triton_us = sum(t.gpu_us for t in profiled.kernels.values())
        for k in kernels:
            t = profiled.kernels.get(k.name)
            gpu_us = t.gpu_us if t else 0.0
            launches = t.launches if t and t.launches else 1
            per_launch = gpu_us / launches if gpu_us else None
            achieved = moved[k.name] / (per_launch * 1e-6) / 1e9 if per_launch else None
            # Percent of the memory floor (measure/roofline.py: reads at the read ceiling, writes at the
            # rest of a copy's cost) this launch reaches.
            roof = (100.0 * memory_seconds(moved[k.name], profiled.copy_gbps, split[k.name][1],
                                           profiled.read_gbps) / (per_launch * 1e-6)
                    if per_launch and profiled.copy_gbps else None)
            shared = counters is not None and functions[k.function] > 1
            c = {} if shared else (counters or {}).get(k.function, {})
            source = "ncu" if c else "roofline"
            notes = ([f"Nsight Compute not used: {functions[k.function]} kernels of several graphs are named "
                      f"{k.function}, its counters cannot be told apart"] if shared
                     else [] if c else [ncu_note] if ncu_note else [])
            if roof is not None and roof > OVERCOUNT_PCT:
                # Argument sizes overstate what a launch reads when it indexes into a tensor.
                notes.append("bytes moved overestimated (indexed reads, or inputs that fit in L2): the estimate says "
                             "nothing of the distance left")
            elif roof is not None and roof > 100.0:
                notes.append("above the estimated limit (inputs still in L2 from the kernel before): read as at it")
            rows.append(KernelProfile(
                kernel=k.name, source=source, bottleneck=classify(per_launch, roof, c), share=gpu_us / total,
                gpu_us=round(gpu_us, 3), launches=launches, bytes_moved=moved[k.name],
                achieved_gbps=None if achieved is None else round(achieved, 1),
                roofline_pct=None if roof is None else round(roof, 1),
                dram_pct=c.get("dram_pct"), sm_pct=c.get("sm_pct"), occupancy_pct=c.get("occupancy_pct"),
                registers=int(c["registers"]) if "registers" in c else (t.registers if t else None),
                spills=t.spills if t else None,
                note="; ".join(notes),
            ))
        profile = ModelProfile(model=model, device=device, copy_ceiling_gbps=profiled.copy_gbps,
                               read_ceiling_gbps=profiled.read_gbps,
                               model_gpu_us=round(total, 3), triton_share=triton_us / total if total else None)
    else:
        all_bytes = sum(moved.values()) or 1
        for k in kernels:
            t = profiled.kernels.get(k.name)
            rows.append(KernelProfile(
                kernel=k.name, source="bytes", bottleneck="unknown", share=moved[k.name] / all_bytes,
                bytes_moved=moved[k.name], registers=t.registers if t else None, spills=t.spills if t else None,
                note=ncu_note or "no timing; share is the kernel's share of bytes moved"))
        profile = ModelProfile(model=model, device=device)
    profile.kernels = sorted(rows, key=lambda r: r.share, reverse=True)
    profile.swap_bound = swap_bound(profile)
    return profile


def swap_bound(profile: ModelProfile) -> float | None:
    """How much faster the model runs at most when every Triton kernel reaches its memory limit.

    Amdahl over the profile: 1 / (1 - the sum over kernels of share x (1 - percent of the limit)). A
    kernel counts as :func:`limit_reading` reads its estimate: with no reading (none, or one above
    :data:`OVERCOUNT_PCT`: the byte count is off), with all of its time. An upper bound as far as the byte
    counts hold (a compute-bound kernel counts with its distance to the memory limit, more than it
    has). None without timing (interpreter mode) or kernels.
    """
    if not profile.kernels or any(k.source == "bytes" for k in profile.kernels):
        return None
    left = 0.0
    for k in profile.kernels:
        pct = limit_reading(k.roofline_pct)
        left += k.share * (1.0 - pct / 100.0 if pct is not None else 1.0)
    return round(1.0 / (1.0 - left), 4) if left < 1.0 else None


def limit_reading(pct: float | None) -> float | None:
    """What a kernel's roofline estimate says of its distance to the memory limit: the estimate up to 100%,
    at the limit (100%) up to :data:`OVERCOUNT_PCT`, nothing beyond it or without one (None)."""
    if pct is None or pct > OVERCOUNT_PCT:
        return None
    return min(pct, 100.0)


# --- Nsight Compute ---------------------------------------------------------------------

def ncu_available() -> str | None:
    return shutil.which("ncu")


def ncu_counters(problem: Path, timeout: float, variant: str | None = None, shape: str | None = None,
                 launch_configs: dict[str, dict[str, int]] | None = None
                 ) -> tuple[dict[str, dict[str, float]] | None, str]:
    """Per Triton function name, Nsight Compute counters of one model run (None and why, where ncu fails).

    The child compiles and warms the model up (at ``shape``, a declared shape of a problem with SHAPES; None:
    its first; under ``variant`` launching ``launch_configs``, the setting's recorded ones, as the search's
    session does), then runs it once inside an NVTX range; only launches in that range are profiled
    (autotuning's benchmark launches are not).
    """
    ncu = ncu_available()
    if ncu is None:
        return None, "Nsight Compute (ncu) not found: roofline estimate from measured time and bytes moved"
    from ..child import child_env, run_child, scrubbed_env, shape_flag

    with tempfile.TemporaryDirectory(prefix="kernelopt-ncu-") as tmp:
        fixed: list[str] = []
        if launch_configs:
            (Path(tmp) / "launch_configs.json").write_text(json.dumps(launch_configs))
            fixed = [f"{LAUNCH_FLAG}{Path(tmp) / 'launch_configs.json'}"]
        cmd = [ncu, "--clock-control", "none", "--nvtx", "--nvtx-include", f"{NVTX_RANGE}/", "--csv",
               "--metrics", ",".join(NCU_METRICS), sys.executable, "-m", "pytest_kernelopt.agents.profiler",
               str(problem), *shape_flag(shape), *fixed, *([variant] if variant else [])]
        try:
            done = run_child(cmd, env=child_env(scrubbed_env()), cwd=tmp, timeout=timeout, lines=1,
                             keep=NCU_CSV_BYTES, separate_stdout=True)
        except OSError as exc:
            return None, f"Nsight Compute could not start ({exc}): roofline estimate instead"
    if done.timed_out:
        return None, f"Nsight Compute timed out after {timeout:g} s: roofline estimate instead"
    assert done.stdout is not None
    if done.stdout.dropped:
        return None, (f"Nsight Compute wrote more than the {NCU_CSV_BYTES:,} bytes of counters read "
                      f"({done.stdout.dropped:,} more): roofline estimate instead")
    counters = parse_ncu_csv(done.stdout.text)
    if not counters:
        tail = done.output_tail or done.stdout.last_lines(1) or f"exit {done.returncode}"
        return None, f"Nsight Compute read no counters ({tail[:200]}): roofline estimate instead"
    return counters, ""


def parse_ncu_csv(text: str) -> dict[str, dict[str, float]]:
    """``ncu --csv`` (one row per kernel launch and metric) -> {kernel name: {field: median value}}."""
    start = text.find('"ID"')
    if start < 0:
        return {}
    values: dict[str, dict[str, list[float]]] = {}
    for row in csv.DictReader(io.StringIO(text[start:])):
        field = NCU_METRICS.get(row.get("Metric Name", ""))
        name = (row.get("Kernel Name") or "").split("(")[0].strip()
        if field is None or not name:
            continue
        try:
            value = float(re.sub(r"[,\s]", "", row.get("Metric Value", "")))
        except ValueError:
            continue
        values.setdefault(name, {}).setdefault(field, []).append(value)
    out: dict[str, dict[str, float]] = {}
    for name, fields in values.items():
        out[name] = {f: sorted(v)[len(v) // 2] for f, v in fields.items()}
    return out


def _ncu_target(problem_path: str, *rest: str) -> int:
    """The child Nsight Compute profiles: compile, warm up, one run inside the NVTX range (``rest``:
    ``[--shape=NAME] [--launch-configs=FILE] [VARIANT]``)."""
    import warnings

    import torch

    from ..capture import compile_problem
    from ..config import resolve_device
    from ..capture.problem import load_problem

    warnings.filterwarnings("ignore")
    from ..child import pop_shape

    args = list(rest)
    shape = pop_shape(args)
    fixed = json.loads(Path(args.pop(0).removeprefix(LAUNCH_FLAG)).read_text()) if (
        args and args[0].startswith(LAUNCH_FLAG)) else None
    variant = args[0] if args else None
    device = resolve_device("cuda")
    problem = load_problem(Path(problem_path), shape=shape)
    compiled = compile_problem(problem, device, variant=variant, launch_configs=fixed)
    inputs = problem.make_inputs(1, device)
    with torch.no_grad():
        for _ in range(3):
            compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(NVTX_RANGE)
        compiled(*inputs)
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


if __name__ == "__main__":
    sys.exit(_ncu_target(*sys.argv[1:4]))
