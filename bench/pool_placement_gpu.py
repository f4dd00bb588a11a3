"""Whether a 2-D pooling kernel's time depends on where its tensors lie: in one process, the same
compiled code timed on 12 fresh copies of the input, each behind a pad of random size
(``triton.testing.do_bench``, L2 flushed, median of two).

    python bench/pool_placement_gpu.py

H200, 2026-12-03: every timing within 50.4-51.6 us, the copy within 67.4-68.6 us
(docs/results-h200.md, eighth session).
"""

from __future__ import annotations

import statistics

import torch
import triton


def avg_relu(t):
    return torch.relu(torch.nn.functional.avg_pool2d(t, 3, 2, 1))


def max_pool(t):
    return torch.nn.functional.max_pool2d(t, 3, 2, 1)


def main() -> int:
    torch.manual_seed(0)
    fns = {"avg+relu default": torch.compile(avg_relu), "max default": torch.compile(max_pool),
           "avg+relu max-autotune": torch.compile(avg_relu, mode="max-autotune-no-cudagraphs")}
    base = torch.randn(32, 64, 128, 128, device="cuda")
    for fn in fns.values():
        fn(base)
    kept = []  # every pad and copy stays allocated, so each copy lies somewhere new
    for trial in range(12):
        pad_bytes = int(torch.randint(0, 2**24, ()).item()) * 4 + 4 * 2**20 * (trial % 3)
        pad = torch.empty(pad_bytes, dtype=torch.uint8, device="cuda")
        x = base.clone()
        kept.append((pad, x))
        times = {"copy": statistics.median(triton.testing.do_bench(lambda: x.clone(), warmup=10, rep=40)
                                           for _ in range(2))}
        for name, fn in fns.items():
            times[name] = statistics.median(triton.testing.do_bench(lambda: fn(x), warmup=10, rep=40)
                                            for _ in range(2))
        where = x.data_ptr() % 2**30 // 2**20
        print(trial, f"input at +{where} MiB", " ".join(f"{k}={v * 1e3:.1f}us" for k, v in times.items()), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
