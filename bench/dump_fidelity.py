"""Is an unedited dump the launch Inductor runs? Compile options, bits and speed, per kernel (GPU).

    KERNELOPT_SIZE=large python bench/dump_fidelity.py PROBLEM.py ...

For each Triton kernel: how many configurations Inductor compiled and which one it
kept after its run-time autotuning; the compile options and binary metadata of
Inductor's kernel against the dump's (only the fields that differ are printed);
whether the dump's outputs equal the compiler kernel's bit for bit on the model's
real arguments; and the two timed alone, paired and L2-flushed.
"""

from __future__ import annotations

import sys
from pathlib import Path

FIELDS = ("num_warps", "num_stages", "num_ctas", "debug", "sanitize_overflow", "enable_fp_fusion", "launch_pdl",
          "launch_cooperative_grid", "maxnreg", "shared", "enable_reflect_ftz", "arch", "backend_name")


def _meta(kernel) -> dict:
    m = getattr(kernel, "metadata", None)
    out = {}
    for f in FIELDS:
        if m is not None and hasattr(m, f):
            out[f] = getattr(m, f)
    out["n_regs"] = getattr(kernel, "n_regs", None)
    return out


def main(paths: list[Path]) -> None:
    import torch

    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.measure.timing import paired_timings
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.capture.swap import candidate_kernel
    from pytest_kernelopt.verify.speed import first_launch

    device = resolve_device("cuda")
    rows = []
    for path in paths:
        compiled = compile_problem(load_problem(path), device)
        inputs = compiled.problem.make_inputs(1, device)
        for name, handle in compiled.kernels.items():
            tuner = handle.original
            results = getattr(tuner, "compile_results", []) or []
            chosen = tuner.launchers[0]
            ours = None
            for r in results:
                if getattr(r, "config", None) is chosen.config:
                    ours = r
            ind_meta = _meta(ours.kernel) if ours is not None else {}
            ind_meta["n_regs"] = getattr(chosen, "n_regs", None)
            src = render_dump(handle.info, compiled.problem.id)
            cand = candidate_kernel(f"/tmp/{name}.py", source=src)
            args = first_launch(compiled, name, inputs)
            outs = []
            torch.set_grad_enabled(False)
            for k in (tuner, cand):
                a = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
                k.run(*a, stream=torch.cuda.current_stream().cuda_stream)
                torch.cuda.synchronize()
                outs.append(a)
            same = all(torch.equal(x, y) for x, y in zip(*outs) if isinstance(x, torch.Tensor))
            rel = max((float(((x.double() - y.double()).abs() / (x.double().abs() + 1e-30)).nan_to_num(0).max())
                       for x, y in zip(*outs) if isinstance(x, torch.Tensor) and x.is_floating_point()), default=0.0)
            fn = getattr(cand.module, handle.info.function)
            cache = fn.device_caches[torch.cuda.current_device()][0]
            dump_kernel = next(iter(cache.values()), None)
            dump_meta = _meta(dump_kernel)
            diff = {k: (ind_meta.get(k), dump_meta.get(k)) for k in set(ind_meta) | set(dump_meta)
                    if ind_meta.get(k) != dump_meta.get(k)}
            s = torch.cuda.current_stream
            a_args = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
            b_args = [x.clone() if isinstance(x, torch.Tensor) else x for x in args]
            est = paired_timings((lambda: None, lambda: tuner.run(*a_args, stream=s().cuda_stream), lambda: None),
                                 (lambda: None, lambda: cand.run(*b_args, stream=s().cuda_stream), lambda: None),
                                 target_seconds=1.0)
            rows.append((path.stem, name, len(tuner.configs or []), len(results), str(chosen.config), same, rel,
                         f"{est.speedup:.3f} [{est.ci_low:.3f},{est.ci_high:.3f}] {est.baseline_ms*1e3:.1f}us", diff))
            print(rows[-1], flush=True)
        del compiled
        torch.cuda.empty_cache()
    print("\nproblem | kernel | configs | compiled | kept | bit-equal | max rel diff | dump speedup vs compiler | differing meta")
    for r in rows:
        print(" | ".join(map(str, r)))


if __name__ == "__main__":
    main([Path(p) for p in sys.argv[1:]])
