"""Whether another process is already using the GPU that timings will run on.

Paired, interleaved timing cancels drift, not a neighbour's steady load, and a neighbour moves
the ratios themselves: on an H100 (2026-12-05) tune's compile step measured max-autotune at
1.083x over the default compile on a cross-entropy training step while three other tunes shared
the GPU, and 1.011x alone; LayerNorm's step 1.114x and 1.010x. Decisions made from such timings
are stored. So ``kernelopt tune`` and ``kernelopt bench`` look before they put work on the GPU
(``nvidia-smi``: the visible device's utilization, a few samples, and its memory in use) and say
what they saw, in the terminal and in their JSON. They run all the same: a shared GPU is
sometimes all there is, and the interval of each ratio is still reported.

Only what runs *before* kernelopt starts is seen: a neighbour that starts later is not. Without
``nvidia-smi`` (or on a CPU) nothing is said.
"""

from __future__ import annotations

import os
import subprocess
import time
from typing import Any, Callable

from pydantic import BaseModel, ConfigDict

QUERY = "index,uuid,utilization.gpu,memory.used,memory.total"
SAMPLES = 3  # nvidia-smi's utilization is the share of its last sample period (1/6 s to 1 s) with a kernel running
SAMPLE_INTERVAL_S = 0.25
BUSY_UTILIZATION = 10  # percent, the median sample: an idle GPU reads 0
TIMEOUT_S = 10.0


class GpuLoad(BaseModel):
    """The visible GPU as ``nvidia-smi`` saw it: utilization per sample (percent), memory in use and in all (MiB)."""

    model_config = ConfigDict(extra="forbid")

    gpu: str  # nvidia-smi's index and UUID
    utilization: list[int]
    memory_used_mib: int
    memory_total_mib: int

    @property
    def busy(self) -> bool:
        return sorted(self.utilization)[len(self.utilization) // 2] >= BUSY_UTILIZATION

    def warning(self) -> str:
        return (f"GPU {self.gpu} is in use by another process before kernelopt starts (utilization "
                f"{', '.join(f'{u}%' for u in self.utilization)}; {self.memory_used_mib} of {self.memory_total_mib} "
                f"MiB in use): timings share it, and ratios measured beside a neighbour differ from those measured "
                f"alone (docs/cli.md, 'A shared GPU')")


def visible() -> str | None:
    """The first device ``CUDA_VISIBLE_DEVICES`` lets this process see, as nvidia-smi names it (an index or a
    UUID prefix); "0" when it is not set; None when it hides every device."""
    value = os.environ.get("CUDA_VISIBLE_DEVICES")
    if value is None:
        return "0"
    first = value.split(",")[0].strip()
    return None if first in ("", "-1") or first.startswith("MIG-") else first


def _row(output: str, device: str) -> list[str] | None:
    for line in output.splitlines():
        fields = [f.strip() for f in line.split(",")]
        if len(fields) == 5 and (fields[0] == device or (device.startswith("GPU-") and fields[1].startswith(device))):
            return fields
    return None


def sample(run: Callable[..., Any] = subprocess.run, sleep: Callable[[float], None] = time.sleep) -> GpuLoad | None:
    """The visible GPU's load over SAMPLES readings (None: no nvidia-smi, no such device, or an unreadable answer)."""
    device = visible()
    if device is None:
        return None
    utilization: list[int] = []
    fields: list[str] | None = None
    for i in range(SAMPLES):
        if i:
            sleep(SAMPLE_INTERVAL_S)
        try:
            done = run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                       capture_output=True, text=True, timeout=TIMEOUT_S)
        except (OSError, subprocess.SubprocessError):  # no nvidia-smi (FileNotFoundError), or it hung
            return None
        fields = _row(done.stdout or "", device) if done.returncode == 0 else None
        if fields is None or not fields[2].isdigit():
            return None
        utilization.append(int(fields[2]))
    assert fields is not None
    try:
        used, total = int(fields[3]), int(fields[4])
    except ValueError:
        return None
    return GpuLoad(gpu=f"{fields[0]} ({fields[1]})", utilization=utilization, memory_used_mib=used,
                   memory_total_mib=total)


def neighbour_warning(device: str) -> str | None:
    """What to say before timing on ``device`` (a resolved device: cuda or cpu) when another process is using it."""
    if device != "cuda":
        return None
    load = sample()
    return load.warning() if load is not None and load.busy else None
