"""The graph rewrites' kernels against a copy and Inductor, per shape and launch configuration.

    python bench/rewrites_gpu.py [--only scans|group-norms] [--json OUT.json]

Per shape: ``x.clone()`` (the same bytes moved: the copy limit, measured in this run),
the operation compiled by Inductor (default and max-autotune; ``flip(cumsum(flip(x)))``, or
``nn.GroupNorm``, alone or followed by SiLU), and the rewrite's kernel (``graph_rewrites.launch_suffix_scan``
or ``launch_group_norm``) under several launch configurations; each timed with
``triton.testing.do_bench`` (L2 flushed, median), interleaved over rounds, median over
rounds; each output's worst error against float64, relative to the output's largest
magnitude. Chooses ``graph_rewrites``' launch defaults; the cascade judges a model.
"""

from __future__ import annotations

import argparse
import json
import statistics

import torch
import triton

from pytest_kernelopt.capture.graph_rewrites import _blocks, _group_norm_launch, launch_group_norm, launch_suffix_scan

SHAPES = [((8192, 16384), 1, torch.float32), ((4096, 4096), 0, torch.float32), ((64, 2048, 256), 1, torch.float32),
          ((256, 262144), 1, torch.float32), ((32768, 1024), 1, torch.bfloat16), ((2048, 32768), 1, torch.float16)]


def reverse_cumsum(x, d):
    return torch.cumsum(x.flip(d), d).flip(d)


# (shape, groups, dtype, activation): groups of 131072, 16384 (one pass), 40960 and 8192 elements.
GROUP_NORMS = [((32, 64, 128, 128), 8, torch.float32, "none"), ((16, 128, 64, 64), 32, torch.float32, "none"),
               ((32, 64, 128, 128), 8, torch.bfloat16, "none"), ((8, 320, 64, 64), 32, torch.float32, "silu"),
               ((64, 256, 32, 32), 32, torch.bfloat16, "silu")]


def timed(variants, ref, scale, rounds):
    """Each variant's output error against ``ref`` (relative to ``scale``) and its median time, interleaved."""
    errors = {}
    for name, fn in list(variants.items()):
        try:
            out = fn()
        except Exception as exc:  # a configuration Triton cannot compile: said, not timed
            print(f"{name}: {type(exc).__name__}: {str(exc)[:200]}", flush=True)
            del variants[name]
            continue
        errors[name] = None if name == "copy" else (out.double() - ref).abs().max().item() / scale
    times = {name: [] for name in variants}
    for _ in range(rounds):
        for name, fn in variants.items():
            times[name].append(triton.testing.do_bench(fn, warmup=10, rep=40) * 1e3)
    return errors, {name: statistics.median(t) for name, t in times.items()}


def group_norms(rounds):
    rows = []
    for shape, groups, dtype, act in GROUP_NORMS:
        torch._dynamo.reset()
        torch.manual_seed(0)
        x = torch.randn(shape, device="cuda", dtype=dtype) * 2 + 0.5
        norm = torch.nn.GroupNorm(groups, shape[1]).cuda().to(dtype)
        activation = torch.nn.SiLU() if act == "silu" else torch.nn.Identity()
        model = torch.nn.Sequential(norm, activation)
        with torch.no_grad():
            norm.weight.normal_()
            norm.bias.normal_()
            ref = activation(torch.nn.functional.group_norm(x.double(), groups, norm.weight.double(),
                                                            norm.bias.double(), norm.eps))
        scale = ref.abs().max().item()
        variants = {"copy": lambda: x.clone()}
        for label, mode in (("inductor default", None), ("inductor max-autotune", "max-autotune-no-cudagraphs")):
            compiled = torch.compile(model, mode=mode)
            variants[label] = (lambda f: lambda: f(x))(compiled)
        group = shape[1] // groups * x[0, 0].numel()
        default = _group_norm_launch(group, x.element_size())
        configs = {default}
        if default[0] >= group:  # one pass: the block holds the group
            configs |= {(default[0], w, False) for w in (8, 16, 32)} | {(4096, 16, False), (4096, 16, True)}
        else:
            configs |= {(b, w, e) for b, w in ((4096, 16), (8192, 16), (8192, 32), (16384, 16), (16384, 32))
                        for e in (False, True)}
        for block, warps, evict in sorted(configs):
            name = f"rewrite b{block} w{warps}{' evict' if evict else ''}" + (
                " (default)" if (block, warps, evict) == default else "")
            variants[name] = (lambda b, w, e: lambda: launch_group_norm(
                x, groups, norm.weight, norm.bias, norm.eps, act, block=b, num_warps=w, evict=e))(block, warps, evict)
        with torch.no_grad():
            errors, med = timed(variants, ref, scale, rounds)
        for name in med:
            rows.append({"shape": list(shape), "groups": groups, "dtype": str(dtype), "act": act, "variant": name,
                         "us": med[name], "of_copy": med["copy"] / med[name],
                         "vs_max_autotune": med["inductor max-autotune"] / med[name], "error": errors.get(name)})
        del x, ref
        torch.cuda.empty_cache()
    return rows


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--json")
    parser.add_argument("--only", choices=("scans", "group-norms"))
    args = parser.parse_args()
    rows = []
    for shape, d, dtype in (SHAPES if args.only != "group-norms" else []):
        torch._dynamo.reset()
        x = torch.randn(shape, device="cuda", dtype=dtype)
        ref = reverse_cumsum(x.double(), d)
        scale = ref.abs().max().item()
        outer = 1
        for s in shape[:d]:
            outer *= s
        inner = x.numel() // outer // shape[d]
        bn0, br0, w0 = _blocks(outer, shape[d], inner, x.element_size())
        variants = {"copy": lambda: x.clone()}
        variants["inductor default"] = (lambda f: lambda: f(x, d))(torch.compile(reverse_cumsum))
        variants["inductor max-autotune"] = (lambda f: lambda: f(x, d))(
            torch.compile(reverse_cumsum, mode="max-autotune-no-cudagraphs"))
        configs = {(bn0, br0, w0)}
        if inner == 1:
            configs |= {(1, br, 4) for br in (1024, 2048, 4096, 8192, 16384) if br <= triton.next_power_of_2(shape[d])}
        else:
            configs |= {(bn, br, 4) for bn in (16, 32, 64) for br in (64, 128, 256) if bn <= inner}
        for bn, br, w in sorted(configs):
            name = f"rewrite n{bn} r{br} w{w}" + (" (default)" if (bn, br, w) == (bn0, br0, w0) else "")
            variants[name] = (lambda bn, br, w: lambda: launch_suffix_scan(x, d, "sum", block_n=bn, block_r=br,
                                                                        num_warps=w))(bn, br, w)
        errors, med = timed(variants, ref, scale, args.rounds)
        for name in med:
            rows.append({"shape": list(shape), "dim": d, "dtype": str(dtype), "variant": name, "us": med[name],
                         "of_copy": med["copy"] / med[name], "vs_max_autotune": med["inductor max-autotune"] / med[name],
                         "error": errors[name]})
        del x, ref
        torch.cuda.empty_cache()
    if args.only != "scans":
        rows += group_norms(args.rounds)
    if args.json:
        with open(args.json, "w") as f:
            json.dump(rows, f, indent=1)
    print(f"{'shape':>22} {'dtype':>15} {'variant':>34} {'us':>9} {'of copy':>8} {'/ max-at':>8} {'error':>9}")
    for r in rows:
        err = "" if r["error"] is None else f"{r['error']:.1e}"
        where = f" d{r['dim']}" if "dim" in r else f" g{r['groups']}{' silu' if r['act'] == 'silu' else ''}"
        print(f"{str(tuple(r['shape'])) + where:>22} {r['dtype']:>15} {r['variant']:>34} {r['us']:9.1f} "
              f"{r['of_copy']:8.3f} {r['vs_max_autotune']:8.3f} {err:>9}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
