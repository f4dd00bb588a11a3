"""The wide-row kernel (``graph_rewrites.launch_wide_rows``) against a copy and Inductor, per shape and configuration.

    cd bench && python wide_rows_gpu.py [--rounds 2] [--only softmax,...] [--json OUT.json]
        [--quick] [--shapes N] [--previous OLD_rewrite_kernels.py] [--held]

Per shape: ``x.clone()`` (the bytes the operation must move: the copy limit, this run),
the operation compiled by Inductor (default and max-autotune), and the kernel under
several launch configurations (CHUNK elements a program, warps, programs: one per chunk
of every row, or a persistent grid of 1 or 2 per multiprocessor); timed with
``rewrites_gpu.timed`` (interleaved rounds, medians), each output's worst error against
float64 relative to its largest magnitude. Chooses ``_wide_rows_launch``'s defaults.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
import time
from pathlib import Path

import torch
import triton

from pytest_kernelopt.capture import rewrite_kernels
from pytest_kernelopt.capture.graph_rewrites import _multiprocessors, _wide_rows_launch, _wide_rows_run, launch_wide_rows
from rewrites_gpu import timed

OPS = {
    "softmax": lambda x: torch.softmax(x, -1),
    "log_softmax": lambda x: torch.log_softmax(x, -1),
    "l1_normalize": lambda x: x / x.abs().sum(-1, keepdim=True),
    "l2_normalize": lambda x: x / torch.linalg.vector_norm(x, 2, -1, keepdim=True),
}
# The first sweep's shapes (--sweep: every configuration), then the defaults' check near the threshold.
SWEEP = [("softmax", (32768, 65536), torch.float32), ("l1_normalize", (32768, 65536), torch.float32),
          ("l2_normalize", (16384, 131072), torch.float32), ("log_softmax", (4096, 262144), torch.float32),
          ("softmax", (65536, 16384), torch.float32), ("softmax", (131072, 8192), torch.float32),
          ("softmax", (16384, 65536), torch.bfloat16), ("log_softmax", (256, 1048576), torch.float32)]
SHAPES = SWEEP[:4] + [("softmax", (65536, 32768), torch.float32), ("l2_normalize", (65536, 32768), torch.float32),
                      ("log_softmax", (65536, 32768), torch.bfloat16), ("l1_normalize", (16384, 131072), torch.float16),
                      ("softmax", (16384, 65536), torch.bfloat16), ("softmax", (131072, 24576), torch.float32)]
CONFIGS = [(4096, 4), (8192, 4), (8192, 8), (16384, 8)]


def previous_launch(path: str):
    """A launcher of ``path``'s ``wide_rows`` (a ``rewrite_kernels.py`` from before the spin bound:
    no SPIN) in its one-kernel form at the default launch."""
    spec = importlib.util.spec_from_file_location("previous_rewrite_kernels", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)

    def launch(x, kind):
        n = x.shape[-1]
        rows = x.numel() // n
        chunk, warps = _wide_rows_launch(n, _multiprocessors(x.device))
        k = triton.cdiv(n, chunk)
        y = torch.empty_like(x)
        m = torch.empty(rows * k, device=x.device, dtype=torch.float32)
        s = torch.empty_like(m)
        count = torch.zeros(rows, device=x.device, dtype=torch.int32)
        module.wide_rows[(rows * k,)](x, y, m, s, count, rows, n, k, 0.0, KIND=rewrite_kernels.ROW_KINDS.index(kind),
                                      PHASE=0, CHUNK=chunk, KP=triton.next_power_of_2(k), num_warps=warps)
        return y

    return launch


def held_seconds(fn, limit: float = 10.0) -> tuple[float | None, object]:
    """``fn``'s wall time while another stream holds the GPU (``gpu_held``), None past ``limit``
    seconds; and what it returned."""
    sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
    from gpu_hold import finished_within, gpu_held

    fn()
    torch.cuda.synchronize()
    with gpu_held(free=2):
        start = time.perf_counter()
        out = fn()
        done = finished_within(limit)
        took = time.perf_counter() - start
    return (took if done else None), out


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--json")
    parser.add_argument("--sweep", action="store_true", help="every configuration on the first sweep's shapes")
    parser.add_argument("--quick", action="store_true", help="the copy and the default launch only")
    parser.add_argument("--shapes", type=int, default=0, help="only the first N shapes (after --only)")
    parser.add_argument("--previous", help="an older rewrite_kernels.py, timed beside this one")
    parser.add_argument("--held", action="store_true", help="also each kernel while another stream holds the GPU")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    table = []
    shapes = [s for s in (SWEEP if args.sweep else SHAPES) if not args.only or s[0] in args.only.split(",")]
    shapes = shapes[:args.shapes or None]
    for kind, shape, dtype in shapes:
        if args.only and kind not in args.only.split(","):
            continue
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
        fn = OPS[kind]
        ref = fn(x.double())
        scale = ref.abs().max().item()
        variants = {"copy": lambda: x.clone()}
        for label, mode in (("inductor default", None), ("inductor max-autotune", "max-autotune-no-cudagraphs")):
            if not args.quick:
                compiled = torch.compile(fn, mode=mode)
                variants[label] = (lambda f: lambda: f(x))(compiled)
        n, rows = shape[-1], x.numel() // shape[-1]
        variants["wide default"] = lambda: launch_wide_rows(x, kind)
        if args.previous:
            previous = previous_launch(args.previous)
            variants["previous default"] = lambda: previous(x, kind)
        for chunk in (2048, 4096, 8192, 16384) if not args.quick else ():
            k = triton.cdiv(n, chunk)
            if k > sms:
                continue
            for warps in (4, 8, 16):
                if chunk // (warps * 32) > 64 or chunk // (warps * 32) < 4:
                    continue
                if not args.sweep and (chunk, warps) not in CONFIGS:
                    continue
                grids = {"all": rows * k, **{f"{occ}/SM": sms * occ // k * k for occ in (1, 2, 4)}}
                for label, programs in grids.items():
                    if programs and (args.sweep or label == "all"):
                        variants[f"wide c{chunk} w{warps} {label}"] = (
                            lambda c, w, p: lambda: launch_wide_rows(x, kind, chunk=c, num_warps=w, programs=p))(
                                chunk, warps, programs)
        print(f"== {kind} {tuple(shape)} {dtype}: {len(variants)} variants", flush=True)
        errors, times = timed(variants, ref, scale, args.rounds)
        fallbacks = sum(int(_wide_rows_run(x, kind)[1][-1]) for _ in range(20))
        print(f"  programs that stopped waiting in 20 default launches: {fallbacks} "
              f"of {20 * rows * triton.cdiv(n, _wide_rows_launch(n, sms)[0])}", flush=True)
        if args.held:
            runs = {"wide default": lambda: _wide_rows_run(x, kind)}
            if args.previous:
                runs["previous default"] = variants["previous default"]
            for name, run in runs.items():
                took, out = held_seconds(run)
                gave_up = f", {int(out[1][-1])} programs stopped waiting" if isinstance(out, tuple) else ""
                print(f"  {name} with the GPU held: " + ("did not finish within 10 s" if took is None
                                                          else f"{took * 1e3:.1f} ms") + gave_up, flush=True)
        copy = times["copy"]
        best_inductor = times.get("inductor max-autotune", copy)
        for name, t in sorted(times.items(), key=lambda kv: kv[1]):
            row = dict(kind=kind, shape=list(shape), dtype=str(dtype), variant=name, us=t, of_copy=copy / t,
                       vs_max_autotune=best_inductor / t, error=errors.get(name))
            table.append(row)
            err = "" if row["error"] is None else f"{row['error']:.2e}"
            print(f"  {name:28s} {t:10.1f} us  {copy / t:6.3f} of copy  {best_inductor / t:6.3f}x max-autotune  {err}",
                  flush=True)
        del x, ref, variants
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as f:
            json.dump(table, f, indent=1)
    print("\nbest per shape:")
    for kind, shape, dtype in shapes:
        rows = [r for r in table if r["kind"] == kind and r["shape"] == list(shape) and r["dtype"] == str(dtype)]
        wide = [r for r in rows if r["variant"].startswith("wide")]
        if wide:
            best = min(wide, key=lambda r: r["us"])
            ind = next((r for r in rows if r["variant"] == "inductor max-autotune"), None)
            if ind:
                print(f"{kind:13s} {str(tuple(shape)):18s} {str(dtype)[6:]:9s} max-autotune {ind['of_copy']:.3f} of copy; "
                      f"best {best['variant']} {best['of_copy']:.3f} of copy, {best['vs_max_autotune']:.3f}x")
            prev = next((r for r in rows if r["variant"] == "previous default"), None)
            if prev:
                new = next(r for r in rows if r["variant"] == "wide default")
                print(f"{kind:13s} {str(tuple(shape)):18s} {str(dtype)[6:]:9s} previous {prev['us']:.1f} us, "
                      f"now {new['us']:.1f} us: {prev['us'] / new['us']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
