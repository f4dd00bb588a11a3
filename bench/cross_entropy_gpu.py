"""The cross-entropy rewrite (``graph_rewrites.cross_entropy_rows``) against Inductor, per shape, loss and training step.

    python bench/cross_entropy_gpu.py [--rounds 3] [--quick] [--json OUT.json] [--sweep]

Per shape (rows x classes, the logits' dtype, cast to float32 first or not) and mode:

* ``loss``: ``F.cross_entropy(logits, target)`` with no gradient (the forward; its floor reads the logits once);
* ``step``: the loss and its gradient over the logits (``torch.autograd.grad``; the floor reads the logits
  once and writes their gradient once: ``x.clone()``'s traffic).

Each compiled three ways: Inductor's default, ``max-autotune-no-cudagraphs``, and the default with
kernelopt's pre-grad rewrites (every width rewritten here: ``CROSS_ENTROPY_ROW_BYTES`` set to 0, so the
table says where the rewrite starts to pay). Each compiled variant's loss and gradient are compared with float64
(printed: its worst error over the default compile's; the verifier allows 4x); times are medians of interleaved
``do_bench`` rounds (L2 flushed), the floor from a timed ``x.clone()`` in the same rounds. ``--sweep`` adds
the operator's launch configurations on the widest shapes.
"""

from __future__ import annotations

import argparse
import itertools
import json
import statistics
import sys
import types
from pathlib import Path

import torch
import torch._inductor.config as inductor_config
import torch.nn.functional as F
import triton

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from pytest_kernelopt.capture import graph_rewrites  # noqa: E402

SHAPES = [  # rows, classes, dtype, cast to float32 first
    (4096, 32768, torch.float32, False),
    (8192, 32000, torch.bfloat16, True),
    (8192, 50304, torch.bfloat16, True),
    (8192, 128256, torch.bfloat16, True),
    (8192, 128256, torch.bfloat16, False),
    (256, 128256, torch.bfloat16, True),
    (32768, 8192, torch.bfloat16, True),
    (16384, 16384, torch.float32, False),
]
QUICK = [SHAPES[0], SHAPES[3], SHAPES[5]]
DEVICE = "cuda"
_COMPILES = itertools.count()


def loss_fn(cast: bool):
    def fn(x, t):
        return F.cross_entropy(x.float() if cast else x, t)
    return fn


def compiled(fn, mode, rewrite, first_call):
    """``fn`` compiled (its first call, under the rewrite's pass where asked), and how many rewrites it made.

    A code object of its own for each compile, and no ``torch._dynamo.reset()`` between them: a reset
    drops every compiled function's code, and the next call would compile it again without the pass."""
    fn = types.FunctionType(fn.__code__.replace(co_name=f"{fn.__name__}_{next(_COMPILES)}"), fn.__globals__,
                            closure=fn.__closure__)
    patches = {"pre_grad_custom_pass": graph_rewrites.pre_grad_rewrite_pass()} if rewrite else {}
    with inductor_config.patch(fx_graph_cache=False, **patches):
        before = graph_rewrites.rewrites_done()
        c = torch.compile(fn, mode=mode)
        first_call(c)
        return c, graph_rewrites.rewrites_done() - before


def run_shape(rows, classes, dtype, cast, rounds, sweep):
    torch.manual_seed(0)
    x = (torch.randn(rows, classes, device=DEVICE) * 2).to(dtype)
    t = torch.randint(0, classes, (rows,), device=DEVICE)
    t[::17] = -100  # padding
    fn = loss_fn(cast)
    x64 = x.double().requires_grad_()
    ref_loss = F.cross_entropy(x64, t)
    (ref_grad,) = torch.autograd.grad(ref_loss, x64)
    ref_loss = ref_loss.detach()
    del x64
    results = []
    for mode in ("loss", "step"):
        xg = x.detach().requires_grad_(mode == "step")

        def call(c, xg=xg, mode=mode):
            if mode == "loss":
                with torch.no_grad():
                    return c(xg, t), None
            out = c(xg, t)
            return out, torch.autograd.grad(out, xg)[0]

        variants = {"floor": (lambda: x.clone())}
        errors, rewritten = {}, {}
        for name, m, rw in (("default", None, False), ("max-autotune", "max-autotune-no-cudagraphs", False),
                            ("rewrite", None, True)):
            try:
                c, n = compiled(fn, m, rw, call)
            except Exception as exc:  # said, not timed
                print(f"{name}: {type(exc).__name__}: {str(exc)[:300]}", flush=True)
                continue
            rewritten[name] = n
            loss, grad = call(c)
            e_loss = (loss.double() - ref_loss).abs().item()
            e_grad = (grad.double() - ref_grad).abs().max().item() if grad is not None else 0.0
            errors[name] = (e_loss, e_grad)
            variants[name] = (lambda c=c: call(c))
        configs = [(b, w) for b in (2048, 4096, 8192) for w in (4, 8, 16)] if sweep and mode == "step" \
            and classes * x.element_size() >= 128 * 1024 else [(None, None)]
        for block, warps in configs:
            if mode == "loss":
                variants["op"] = (lambda: graph_rewrites.launch_cross_entropy(x, t, -100))
            else:
                def op(block=block, warps=warps):
                    loss, stats = graph_rewrites.launch_cross_entropy(x, t, -100, block=block, num_warps=warps)
                    g = torch.full_like(loss, 1.0 / rows)
                    return graph_rewrites.launch_cross_entropy_grad(x, t, stats, g, -100, block=block,
                                                                    num_warps=warps)
                variants["op" if block is None else f"op b{block} w{warps}"] = op
        times = {name: [] for name in variants}
        for _ in range(rounds):
            for name, f in variants.items():
                times[name].append(triton.testing.do_bench(f, warmup=5, rep=30) * 1e3)
        med = {name: statistics.median(v) for name, v in times.items()}
        floor_us = med["floor"] / 2 if mode == "loss" else med["floor"]
        base = errors.get("default")
        for name in variants:
            if name == "floor":
                continue
            err = errors.get(name)
            ratio_err = None
            if err and base:
                ratio_err = max(e / b if b else (0.0 if e == 0 else float("inf")) for e, b in zip(err, base))
            row = dict(rows=rows, classes=classes, dtype=str(dtype).replace("torch.", ""), cast=cast, mode=mode,
                       variant=name, us=med[name], vs_default=med.get("default", float("nan")) / med[name],
                       vs_max_autotune=med.get("max-autotune", float("nan")) / med[name],
                       pct_floor=100 * floor_us / med[name], rewritten=rewritten.get(name), error=err,
                       error_over_default=ratio_err, row_kb=classes * x.element_size() / 1024)
            results.append(row)
            print(json.dumps(row), flush=True)
    return results


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sweep", action="store_true")
    parser.add_argument("--json")
    args = parser.parse_args()
    graph_rewrites.CROSS_ENTROPY_ROW_BYTES = 0
    torch._dynamo.config.cache_size_limit = 64
    results = []
    for shape in QUICK if args.quick else SHAPES:
        try:
            results += run_shape(*shape, args.rounds, args.sweep)
        except torch.cuda.OutOfMemoryError as exc:
            print(f"{shape}: out of memory: {exc}", flush=True)
        if DEVICE == "cuda":
            torch.cuda.empty_cache()
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=1))
    print(f"{'rows x classes dtype cast':34} {'mode':5} {'variant':16} {'us':>9} {'/def':>6} {'/max':>6} "
          f"{'%floor':>6} {'rw':>3} {'err/def':>8}")
    for r in results:
        shape = f"{r['rows']} x {r['classes']} {r['dtype']}{' ->fp32' if r['cast'] else ''}"
        e = r["error_over_default"]
        print(f"{shape:34} {r['mode']:5} {r['variant']:16} {r['us']:9.1f} {r['vs_default']:6.3f} "
              f"{r['vs_max_autotune']:6.3f} {r['pct_floor']:6.1f} {str(r['rewritten'] or '-'):>3} "
              f"{'-' if e is None else f'{e:8.2f}'}")


if __name__ == "__main__":
    main()
