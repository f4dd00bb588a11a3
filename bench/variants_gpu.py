"""Inductor settings that change a kernel's structure, against default and max-autotune, per problem.

    KERNELOPT_SIZE=large python bench/variants_gpu.py PROBLEM.py ... [--rounds 5] [--json OUT]

For each problem, the model is compiled once per variant (fresh Dynamo state, no FX graph
cache) and every variant is timed side by side: ``triton.testing.do_bench`` (L2 flushed,
median) in interleaved rounds, median over rounds; every variant's output is compared with
default compile's. An exploration script for the search backend's harvest variants (which
settings are worth a compile per problem); the cascade judges what the tuner keeps.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import re
import statistics
import sys
import time
from pathlib import Path

import torch
import torch._dynamo
import torch._inductor.config as inductor_config
from torch._inductor.choices import InductorChoices
from torch._inductor.utils import run_and_get_code
from torch._inductor.virtualized import V

from pytest_kernelopt.agents.harvest import persistent_up_to  # the search's own handler
from pytest_kernelopt.capture.variants import inductor_patches


VARIANTS = {
    "default": (None, {}, None),
    "max-autotune": ("max-autotune-no-cudagraphs", {}, None),
    "persistent-8k": (None, {}, 8192),
    "persistent-16k": (None, {}, 16384),
    "persistent-8k+cd": (None, {"coordinate_descent_tuning": True}, 8192),
    "cooperative": (None, {"triton.cooperative_reductions": True}, None),
    # Inductor splits a row over several programs only when rows are too few to fill the GPU;
    # forced, each program of a row too wide for L2 would pass over a chunk small enough to be
    # read again from L2. H200, torch 2.11, 2026-12-03: big_log_softmax's forced cooperative kernel
    # failed at launch ("too many blocks in cooperative launch"): not usable at these sizes.
    "cooperative-forced": (None, {"triton.cooperative_reductions": True,
                                  "triton.force_cooperative_reductions": True}, None),
    "max-autotune+cooperative-forced": ("max-autotune-no-cudagraphs", {"triton.cooperative_reductions": True,
                                                                       "triton.force_cooperative_reductions": True},
                                        None),
    "max-autotune+persistent-8k": ("max-autotune-no-cudagraphs", {}, 8192),
    # max-autotune for Triton's own kernels only: GEMMs and convolutions stay library calls.
    "max-autotune-extern": ("max-autotune-no-cudagraphs", {"max_autotune_gemm_backends": "ATEN",
                                                           "max_autotune_conv_backends": "ATEN"}, None),
    "no-split": (None, {"split_reductions": False}, None),
    "tile-reductions": (None, {"triton.prefer_nd_tiling": True, "triton.tile_reductions": True}, None),
    "tensor-desc": ("max-autotune-no-cudagraphs", {"triton.use_tensor_descriptor": True}, None),
    "multi-kernel": (None, {"triton.multi_kernel": 1}, None),
}
# The catalogue's rewrite settings (their patches carry their mode's options).
VARIANTS["max-autotune-rewrites"] = (None, inductor_patches("max-autotune-rewrites"), None)
VARIANTS["max-autotune-extern-rewrites"] = (None, inductor_patches("max-autotune-extern-rewrites"), None)
# "NAME#2" compiles variant NAME again (a second, independent compile: its picks may differ).


def load(path: Path):
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    torch.manual_seed(0)
    model = mod.Model(*mod.get_init_inputs()).cuda().eval()
    torch.manual_seed(1)
    inputs = [x.cuda() if isinstance(x, torch.Tensor) else x for x in mod.get_inputs()]
    return model, inputs


def build(model, inputs, variant):
    """``model`` compiled as ``variant``, with a backend of its own.

    Dynamo keeps compiled code on the model's ``forward`` and reuses it for any ``torch.compile``
    whose backend compares equal: with ``torch.compile(model, mode=...)`` and the settings patched
    around the call, every variant of one mode ran the code of the last one built (found
    2026-12-03: max-autotune timed as max-autotune-rewrites on reverse_cumsum). Each variant now
    has a backend object of its own that applies its settings itself, so a recompile is faithful.
    """
    from torch._inductor import list_mode_options
    from torch._inductor.compile_fx import compile_fx

    mode, patches, persistent = VARIANTS[variant.split("#")[0]]
    options = {**(list_mode_options(mode) if mode else {}), **patches}

    def backend(gm, example_inputs):
        handler = persistent_up_to(persistent) if persistent else InductorChoices()
        V.set_choices_handler(handler)
        try:
            # No cache of any kind: a choices handler is not part of every cache key (torch 2.11), so a
            # cached graph of another variant would come back.
            with inductor_config.patch({"force_disable_caches": True, "fx_graph_cache": False}), \
                    torch._functorch.config.patch(enable_autograd_cache=False):
                return compile_fx(gm, example_inputs, config_patches=options or None)
        finally:
            V.set_choices_handler(InductorChoices())

    print(f"  {variant}: compiling", file=sys.stderr, flush=True)
    compiled = torch.compile(model, backend=backend)
    t0 = time.monotonic()
    with torch.no_grad():
        out, codes = run_and_get_code(compiled, *inputs)
    torch.cuda.synchronize()
    seconds = time.monotonic() - t0
    # Which kinds of Triton kernel the compile made (per: persistent reduction, red: looped, ...).
    kinds = sorted(set(re.findall(r"def (triton_[a-z]+)_", "\n".join(codes))))
    return compiled, out, seconds, kinds


def main() -> int:
    import triton.testing

    parser = argparse.ArgumentParser()
    parser.add_argument("problems", nargs="+", type=Path)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--json", type=Path)
    args = parser.parse_args()
    names = args.variants.split(",")
    results = []
    # Every variant's code stays in Dynamo's cache side by side (one entry per backend).
    torch._dynamo.config.cache_size_limit = max(torch._dynamo.config.cache_size_limit, 4 * len(names))
    torch._dynamo.config.accumulated_cache_size_limit = max(torch._dynamo.config.accumulated_cache_size_limit,
                                                            8 * len(names))
    for path in args.problems:
        torch._dynamo.reset()
        model, inputs = load(path)
        built, errors = {}, {}
        for v in names:
            try:
                built[v] = build(model, inputs, v)
            except Exception as exc:  # one variant failing leaves the others
                errors[v] = f"{type(exc).__name__}: {str(exc)[:200]}"
        if "default" not in built:
            print(f"{path.stem}: default failed: {errors.get('default')}", flush=True)
            continue
        ref = built["default"][1].float()
        times = {v: [] for v in built}
        with torch.no_grad():
            for _ in range(args.rounds):
                for v, (fn, *_) in built.items():
                    times[v].append(triton.testing.do_bench(lambda: fn(*inputs), warmup=10, rep=40))
        med = {v: statistics.median(t) for v, t in times.items()}
        row = {"problem": path.stem, "errors": errors, "variants": {}}
        for v, (fn, out, secs, kinds) in built.items():
            diff = (out.float() - ref).abs().max().item() / max(ref.abs().max().item(), 1e-30)
            row["variants"][v] = {"ms": med[v], "vs_default": med["default"] / med[v],
                                  "vs_max_autotune": (med["max-autotune"] / med[v]) if "max-autotune" in med else None,
                                  "rel_diff_vs_default": diff, "compile_s": secs, "kernels": kinds}
        results.append(row)
        print(path.stem, " ".join(f"{v}={med[v]*1e3:.1f}us({'/'.join(k[7:] for k in built[v][3])}, "
                                  f"compiled in {built[v][2]:.0f} s)" for v in med),
              errors or "", flush=True)
        del built
        torch.cuda.empty_cache()
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    print()
    print(f"{'problem':22s} " + " ".join(f"{v[:16]:>16s}" for v in names))
    for row in results:
        cells = []
        for v in names:
            r = row["variants"].get(v)
            cells.append(f"{r['vs_max_autotune']:>15.3f}x" if r and r["vs_max_autotune"] else f"{'-':>16s}")
        print(f"{row['problem']:22s} " + " ".join(cells))
    print("(each cell: max-autotune's time / the variant's; > 1 is faster than max-autotune)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
