"""``pytest -n N --kernelopt``: pytest-xdist workers, each pinned to a GPU of its own.

The controller (the process that starts the workers and never measures) counts the
workers and the visible GPUs when it configures, refuses more workers than GPUs on a
CUDA run, and, as it starts each worker (``pytest_configure_node``), hands it a GPU
through ``workerinput``. The worker sets ``CUDA_VISIBLE_DEVICES`` to that GPU when it
configures, before the gate resolves the device (the first time torch touches CUDA in
that process), and checks afterwards that it sees exactly one device. The verifier's
own worker processes inherit the variable (``verify.worker.worker_env`` keeps it), so
everything a worker compiles or times runs on its GPU, and no two workers time on one.

A problem's items must stay on one worker (they share one compiled problem and one
verification session): ``--dist load``, what ``-n`` picks by default, becomes
``loadfile`` under ``--kernelopt``; ``loadfile`` and ``loadscope`` are kept; modes that
split a file (``worksteal``, ``loadgroup``, ``each``) are refused.

On the CPU (interpreter mode) the same steps run and no GPU is handed out.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..errors import UsageError
from ..shard import CUDA_VISIBLE_DEVICES, GpuPool, check_workers, visible_gpus

GPU = "kernelopt_gpu"  # the workerinput key: the GPU a worker is pinned to, None for none
KEEPS_FILES_TOGETHER = ("loadfile", "loadscope")


def _xdist_workers(config: pytest.Config) -> int:
    """How many xdist workers this run will start (0: none, the tests run in this process)."""
    if config.getoption("dist", "no") == "no" or not config.getoption("tx", None) \
            or config.getoption("collectonly"):
        return 0
    from xdist.workermanage import parse_tx_spec_config

    return len(parse_tx_spec_config(config))  # "-n 4" and "--tx 2*popen --tx popen" alike


class GateWorkers:
    """The gate's side of pytest-xdist, in the controller and in each worker."""

    def __init__(self, config: pytest.Config):
        self.config = config
        workerinput = getattr(config, "workerinput", None)
        self.worker_id: str | None = workerinput["workerid"] if workerinput is not None else None
        self.gpu: str | None = None  # in a worker: its GPU
        self.pool: GpuPool | None = None  # in the controller of a CUDA run: the GPUs handed out
        self.count = 0  # in the controller: how many workers
        self.dist: str | None = None
        # In a worker whose pin came too late (CUDA had started): why its gate items fail.
        self.unpinned: str | None = None
        if workerinput is not None:
            self.gpu = workerinput.get(GPU)
            if self.gpu is not None:
                # Before anything in this process starts CUDA: CUDA reads the variable once.
                os.environ[CUDA_VISIBLE_DEVICES] = self.gpu
        else:
            self.count = _xdist_workers(config)

    def check(self, device: str) -> None:
        """After the device is resolved: the controller plans, a worker checks its pin took effect."""
        if self.worker_id is not None:
            if self.gpu is not None and device == "cuda":
                import torch

                seen = torch.cuda.device_count()
                if seen != 1:
                    # Not an error raised here: xdist would restart the worker again and again.
                    self.unpinned = (f"xdist worker {self.worker_id} sees {seen} GPUs, not only GPU {self.gpu}: CUDA "
                                     f"started in it before pytest-kernelopt could set {CUDA_VISIBLE_DEVICES} (a "
                                     f"conftest.py or plugin used CUDA at import); nothing is checked on it")
            return
        if not self.count:
            return
        dist = self.config.getoption("dist")
        if dist == "load":
            self.config.option.dist = dist = "loadfile"
        elif dist not in KEEPS_FILES_TOGETHER:
            raise UsageError(f"--dist {dist} would split a problem's items over several workers; "
                             f"use --dist loadfile (the default under --kernelopt) or loadscope")
        self.dist = dist
        if device == "cuda":
            gpus = visible_gpus()
            check_workers(self.count, gpus, what="xdist workers")
            self.pool = GpuPool(gpus)

    def configure_node(self, node: Any) -> None:
        """Controller, as it starts a worker (also one replacing a crashed worker): its GPU."""
        node.workerinput[GPU] = self.pool.assign(node.gateway.id) if self.pool else None

    def node_down(self, node: Any) -> None:
        if self.pool:
            self.pool.release(node.gateway.id)

    def header(self) -> list[str]:
        if not self.count:
            return []
        pinned = (f"one GPU each ({CUDA_VISIBLE_DEVICES}={','.join(self.pool.gpus[:self.count])})" if self.pool
                  else "no GPU pinning on the CPU")
        return [f"kernelopt: {self.count} xdist workers, --dist {self.dist} (a problem's items stay on one worker), "
                f"{pinned}"]


def auto_workers(config: pytest.Config) -> int | None:
    """``-n auto`` under ``--kernelopt`` on a CUDA run: one worker per visible GPU (None: xdist decides)."""
    from ..config import load_config, resolve_device

    if os.environ.get("PYTEST_XDIST_AUTO_NUM_WORKERS"):
        return None  # the user's explicit count wins (xdist reads it)
    try:
        device = resolve_device(config.getoption("kernelopt_device") or load_config(config.rootpath).device)
    except UsageError:
        return None  # the gate reports it, once, when it configures
    return len(visible_gpus()) if device == "cuda" else None
