"""Spreading models over CI runners (shards) and over the GPUs of one host.

Pure functions, no torch: the gate (``--kernelopt-shard``, ``pytest -n N``) and
``kernelopt tune`` (``--shard``, ``--workers``) ask the same questions here.

* **Shards.** ``K/N`` (1-based). A model belongs to shard ``shard_of(model_id, N)``,
  computed from a sha256 of its id alone, so adding or removing another model never
  moves it; only the new model's own shard is decided. The price: shards are not
  balanced exactly (ten models over three shards may split 5/3/2, or leave one empty).
* **GPUs.** One process per GPU, pinned with ``CUDA_VISIBLE_DEVICES`` before CUDA
  starts in it. The GPUs to hand out are the entries of an existing
  ``CUDA_VISIBLE_DEVICES`` (so ``CUDA_VISIBLE_DEVICES=2,3`` gives out 2 and 3), else
  ``0 .. device_count-1``. More workers than GPUs is refused.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Callable, Iterable, Mapping
from typing import NamedTuple

from .errors import UsageError

CUDA_VISIBLE_DEVICES = "CUDA_VISIBLE_DEVICES"


class Shard(NamedTuple):
    """Shard ``index`` of ``count`` (1-based), written ``index/count``."""

    # The fields shadow tuple's index() and count() methods: a shard is never searched as a tuple.
    index: int  # type: ignore[assignment]
    count: int  # type: ignore[assignment]

    def __str__(self) -> str:
        return f"{self.index}/{self.count}"


_SHARD = re.compile(r"\s*(\d+)\s*/\s*(\d+)\s*")


def parse_shard(text: str) -> Shard:
    """``"K/N"`` -> Shard(K, N), with 1 <= K <= N; anything else is a UsageError that starts with the text
    (callers put their option's name in front: ``--kernelopt-shard 0/2: ...``)."""
    match = _SHARD.fullmatch(str(text))
    if match is None:
        raise UsageError(f"{text!r}: expected K/N, e.g. 1/4 (shard K of N, counted from 1)")
    index, count = int(match[1]), int(match[2])
    if count < 1:
        raise UsageError(f"{text}: the number of shards N must be at least 1")
    if not 1 <= index <= count:
        raise UsageError(f"{text}: K must be from 1 to {count} (shards are counted from 1)")
    return Shard(index, count)


def shard_of(model_id: str, count: int) -> int:
    """The shard (1 to ``count``) that ``model_id`` belongs to: sha256 of the id, modulo ``count``.

    Depends on the id and ``count`` only, never on the other models, so it is the same on
    every runner and stays put when models are added or removed.
    """
    if count < 1:
        raise UsageError(f"the number of shards must be at least 1, not {count}")
    digest = hashlib.sha256(model_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count + 1


def select(models: Iterable[str], index: int, count: int) -> list[str]:
    """The models of shard ``index`` of ``count``, in their given order."""
    if not 1 <= index <= count:
        raise UsageError(f"shard {index}/{count}: K must be from 1 to {count}")
    return [m for m in models if shard_of(m, count) == index]


# --- GPUs ------------------------------------------------------------------------------

def _torch_device_count() -> int:
    import torch

    return torch.cuda.device_count()


def visible_gpus(count: Callable[[], int] | None = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The GPUs this process may hand out, as ``CUDA_VISIBLE_DEVICES`` entries.

    ``count`` says how many devices CUDA sees (default: ``torch.cuda.device_count()``,
    called only here). An existing ``CUDA_VISIBLE_DEVICES`` list is respected: its
    entries (indices, ``GPU-<uuid>`` or ``MIG-<uuid>``) are handed out as they are, the
    first ``count`` of them (CUDA ignores entries after an invalid one).
    """
    environ = os.environ if environ is None else environ
    seen = (count or _torch_device_count)()
    listed = environ.get(CUDA_VISIBLE_DEVICES)
    if listed is None:
        return [str(i) for i in range(seen)]
    return [entry.strip() for entry in listed.split(",") if entry.strip()][:seen]


_WORKER = re.compile(r"gw(\d+)")


def worker_number(worker_id: str) -> int:
    """``"gw3"`` -> 3 (pytest-xdist's worker ids)."""
    match = _WORKER.fullmatch(worker_id)
    if match is None:
        raise UsageError(f"{worker_id!r} is not a pytest-xdist worker id (gw0, gw1, ...)")
    return int(match[1])


def gpu_for_worker(worker_id: str, gpus: list[str]) -> str:
    """Worker ``gwK``'s GPU: the K-th entry of ``gpus``."""
    number = worker_number(worker_id)
    if number >= len(gpus):
        raise UsageError(f"worker {worker_id} has no GPU of its own: {_gpus_text(gpus)}")
    return gpus[number]


def _gpus_text(gpus: list[str]) -> str:
    listed = os.environ.get(CUDA_VISIBLE_DEVICES)
    where = f"{CUDA_VISIBLE_DEVICES}={listed}" if listed is not None else ",".join(gpus) or "none"
    return f"{len(gpus)} GPU{'s' if len(gpus) != 1 else ''} visible ({where})"


def check_workers(workers: int, gpus: list[str], what: str = "workers") -> None:
    """Refuse more worker processes than GPUs: two workers on one GPU would time each other."""
    if workers > len(gpus):
        raise UsageError(f"{workers} {what} but {_gpus_text(gpus)}: each worker needs a GPU of its own, "
                         f"so use at most {len(gpus)}")


class GpuPool:
    """Hands each worker its own GPU, and takes it back when the worker is gone.

    Worker ``gwK`` gets the K-th GPU. A worker that replaces a crashed one (xdist gives it
    a new id, e.g. gw2 of two) gets a GPU no live worker holds; none free is a UsageError.
    """

    def __init__(self, gpus: list[str]):
        self.gpus = list(gpus)
        self.held: dict[str, str] = {}  # worker id -> GPU

    def assign(self, worker_id: str) -> str:
        if worker_id in self.held:
            return self.held[worker_id]
        match = _WORKER.fullmatch(worker_id)  # ids given with --tx ...//id=NAME get any free GPU
        number = int(match[1]) if match else len(self.gpus)
        busy = set(self.held.values())
        preferred = [self.gpus[number]] if number < len(self.gpus) else []
        free = [g for g in preferred + self.gpus if g not in busy]
        if not free:
            raise UsageError(f"worker {worker_id} has no GPU of its own: all {_gpus_text(self.gpus)} are held by "
                             f"{', '.join(sorted(self.held))}")
        self.held[worker_id] = free[0]
        return free[0]

    def release(self, worker_id: str) -> None:
        self.held.pop(worker_id, None)
