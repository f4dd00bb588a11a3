"""Production path vs the gate's swapped model, in one process (H200).

    KERNELOPT_SIZE=large python bench/production_gpu.py OUT KERNELS PROBLEM.py ...

Per problem with committed kernels: the gate's model (Inductor's compiled model with
every active, non-stale version swapped in, as ``pytest --kernelopt`` measures it)
and the production model (``pytest_kernelopt.compile``), on the same weights and
inputs. Prints whether their outputs are bitwise identical, and three paired,
interleaved CUDA-graph timings with L2 flushed: gate vs default compile, production
vs default compile, production vs gate (1.0 within its interval is the claim).
"""

from __future__ import annotations

import copy
import json
import sys
import time
from pathlib import Path


def main(out: Path, kernels: Path, problems: list[Path]) -> None:
    import torch

    import pytest_kernelopt
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.config import resolve_device
    from pytest_kernelopt.measure.timing import graphed, paired_timings
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.store import KernelStore
    from pytest_kernelopt.capture.swap import candidate_kernel, swapped

    device = resolve_device("cuda")
    store = KernelStore(kernels)
    rows = []
    for path in problems:
        problem = load_problem(path)
        compiled = compile_problem(problem, device)
        inputs = problem.make_inputs(1, device)
        replacements, stale = {}, []
        for name, handle in compiled.kernels.items():
            found = store.active_file(problem.id, name)
            if found is None:
                continue
            if found.manifest.fingerprint != handle.info.fingerprint:
                stale.append(name)
                continue
            replacements[name] = candidate_kernel(found.path, source=found.source)
        row: dict = {"problem": problem.id, "swapped": sorted(replacements), "stale": stale}
        if not replacements:
            rows.append(row)
            print(json.dumps(row), file=sys.stderr, flush=True)
            continue
        with torch.no_grad():
            default = graphed(lambda: None, lambda: compiled(*inputs), lambda: None)
            with swapped(compiled, replacements):
                gate_out = compiled(*inputs)
                gate = graphed(lambda: None, lambda: compiled(*inputs), lambda: None)
            t0 = time.monotonic()
            prod_model = pytest_kernelopt.compile(copy.deepcopy(compiled.model), kernels_dir=kernels,
                                                  model_id=problem.id)
            prod_out = prod_model(*inputs)
            torch.cuda.synchronize()
            row["production_compile_s"] = round(time.monotonic() - t0, 2)
            prod = graphed(lambda: None, lambda: prod_model(*inputs), lambda: None)
        row["outputs_identical"] = bool(torch.equal(gate_out, prod_out))
        for label, (a, b) in {"gate_vs_default": (default, gate), "production_vs_default": (default, prod),
                              "production_vs_gate": (gate, prod)}.items():
            est = paired_timings(a, b, target_seconds=1.5)
            row[label] = [round(est.speedup, 4), round(est.ci_low, 4), round(est.ci_high, 4)]
        rows.append(row)
        print(json.dumps(row), file=sys.stderr, flush=True)
        del compiled, prod_model, default, gate, prod
        torch._dynamo.reset()
        torch.cuda.empty_cache()
    (out / "production.json").write_text(json.dumps(rows, indent=1))
    print("\nproblem | swapped | outputs identical | gate vs default | production vs default | production vs gate")
    for r in rows:
        print(f"{r['problem']} | {len(r['swapped'])} | {r.get('outputs_identical')} | {r.get('gate_vs_default')} | "
              f"{r.get('production_vs_default')} | {r.get('production_vs_gate')}")


if __name__ == "__main__":
    out_dir, kernels_dir, *files = sys.argv[1:]
    Path(out_dir).mkdir(parents=True, exist_ok=True)
    main(Path(out_dir), Path(kernels_dir), [Path(p) for p in files])
