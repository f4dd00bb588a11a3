"""A compile setting's launch configurations, read after its race and launched again by a fresh compile.

    KERNELOPT_SIZE=large python bench/launch_configs_gpu.py PROBLEM.py [VARIANT] [--device cuda|cpu]

What tune's second compile of a setting, and every later compile of a stored one, do
(``pytest_kernelopt/capture/launch_configs.py``): compile PROBLEM under VARIANT (default max-autotune), read the
point each Triton kernel launched (after its race and coordinate descent), drop Inductor's in-memory kernel
modules, compile again with those points, and say how many were fixed, which were refused and why, and whether
the second compile launched what the first picked. The last line is JSON. On a CPU (``--device cpu``) it runs in
interpreter mode, where the points are the kernels' first configurations (nothing races).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("problem", type=Path)
    parser.add_argument("variant", nargs="?", default="max-autotune")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args(argv)

    from pytest_kernelopt.config import resolve_device

    device = resolve_device(args.device)  # "cpu": interpreter mode, before torch's compile imports Triton

    from torch._inductor.codecache import PyCodeCache

    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.compiled import autotuner_fingerprint
    from pytest_kernelopt.capture.launch_configs import point_of, picked
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(args.problem)
    started = time.monotonic()
    first = compile_problem(problem, device, variant=args.variant)
    handles = list(first.kernels.values())
    points = picked([h.original for h in handles], autotuner_fingerprint)
    own = {h.info.fingerprint: [point_of(r.config) for r in getattr(h.original, "compile_results", None) or []]
           for h in handles}
    outside = sorted(fp for fp, point in points.items() if own.get(fp) and point not in own[fp])
    first_s = time.monotonic() - started
    print(f"{args.variant}: {len(handles)} kernel(s), {len(points)} launch point(s) read, {len(outside)} outside "
          f"the configurations Inductor compiled (coordinate descent's); {first_s:.1f} s", flush=True)

    PyCodeCache.cache_clear()  # else the second compile reuses the first's loaded kernels, raced or fixed
    started = time.monotonic()
    second = compile_problem(problem, device, variant=args.variant, launch_configs=points)
    again = picked([h.original for h in second.kernels.values()], autotuner_fingerprint)
    differs = {fp: {"recorded": points[fp], "launched": again.get(fp)} for fp in points if again.get(fp) != points[fp]}
    fresh = all(a.original is not b.original for a, b in zip(handles, second.kernels.values()))
    print(f"compiled again with them: fixed {second.launches_fixed}, refused {len(second.launches_refused)}; "
          f"{time.monotonic() - started:.1f} s" + ("" if fresh else " (the first compile's kernel objects again)"),
          flush=True)
    for why in second.launches_refused:
        print(f"  refused: {why}", flush=True)
    print(json.dumps({"problem": str(args.problem), "variant": args.variant, "kernels": len(handles),
                      "points": len(points), "outside_compiled": len(outside), "fixed": second.launches_fixed,
                      "refused": second.launches_refused, "differs": differs, "fresh": fresh}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
