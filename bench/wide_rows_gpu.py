"""The wide-row kernel (``graph_rewrites.launch_wide_rows``) against a copy and Inductor, per shape and configuration.

    cd bench && python wide_rows_gpu.py [--rounds 2] [--only softmax,...] [--json OUT.json]

Per shape: ``x.clone()`` (the bytes the operation must move: the copy limit, this run),
the operation compiled by Inductor (default and max-autotune), and the kernel under
several launch configurations (CHUNK elements a program, warps, programs: one per chunk
of every row, or a persistent grid of 1 or 2 per multiprocessor); timed with
``rewrites_gpu.timed`` (interleaved rounds, medians), each output's worst error against
float64 relative to its largest magnitude. Chooses ``_wide_rows_launch``'s defaults.
"""

from __future__ import annotations

import argparse
import json

import torch
import triton

from pytest_kernelopt.capture.graph_rewrites import launch_wide_rows
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


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--only", default="")
    parser.add_argument("--json")
    parser.add_argument("--sweep", action="store_true", help="every configuration on the first sweep's shapes")
    args = parser.parse_args()
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    table = []
    shapes = SWEEP if args.sweep else SHAPES
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
            compiled = torch.compile(fn, mode=mode)
            variants[label] = (lambda f: lambda: f(x))(compiled)
        n, rows = shape[-1], x.numel() // shape[-1]
        variants["wide default"] = lambda: launch_wide_rows(x, kind)
        for chunk in (2048, 4096, 8192, 16384):
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
        copy = times["copy"]
        best_inductor = times["inductor max-autotune"]
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
            ind = next(r for r in rows if r["variant"] == "inductor max-autotune")
            print(f"{kind:13s} {str(tuple(shape)):18s} {str(dtype)[6:]:9s} max-autotune {ind['of_copy']:.3f} of copy; "
                  f"best {best['variant']} {best['of_copy']:.3f} of copy, {best['vs_max_autotune']:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
