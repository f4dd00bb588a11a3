"""Each source rewrite rule on max-autotune's kernels, through the cascade, per problem: which rules win where.

    KERNELOPT_SIZE=large python bench/rules_gpu.py OUT PROBLEM.py ... [--rules a,b,a+b] [--kernels 2]

Per problem, one :class:`~pytest_kernelopt.verify.VerifySession` compiled under the
``max-autotune`` setting, so every ratio is against max-autotune's own kernel, in the model
(paired, interleaved CUDA-graph replays, 95% CI). For the largest ``--kernels`` kernels (by
the bytes of their arguments): the unedited dump (the A/A control), then each rule (and
each ``a+b`` combination, applied left to right) that changes the source. Rows go to
``OUT/rows.json``; a table is printed last.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path


def _say(text: str) -> None:
    print(text, file=sys.stderr, flush=True)


def main() -> int:
    from pytest_kernelopt.candidate.rewrites import REWRITES
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    parser = argparse.ArgumentParser()
    parser.add_argument("out", type=Path)
    parser.add_argument("problems", type=Path, nargs="+")
    parser.add_argument("--rules", default=",".join([*REWRITES, "reverse-pass+streaming-stores"]))
    parser.add_argument("--kernels", type=int, default=2)
    parser.add_argument("--variant", default="max-autotune")
    parser.add_argument("--device", default="cuda")
    args = parser.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    combos = [c.split("+") for c in args.rules.split(",")]
    rows = []
    for problem in args.problems:
        t0 = time.monotonic()
        try:
            with VerifySession(problem, args.device, VerifyOptions(), progress=_say,
                               variant=args.variant or None) as session:
                opened = session.open()

                def size(k):
                    return sum(math.prod(a.shape) for a in k.args if a.shape)
                for info in sorted(opened.kernels, key=size, reverse=True)[:args.kernels]:
                    original = render_dump(info, problem.stem)
                    texts = {"unedited": original}
                    for combo in combos:
                        text = original
                        for name in combo:
                            text = REWRITES[name](text)
                        if text != original and text not in texts.values():
                            texts["+".join(combo)] = text
                    for label, text in texts.items():
                        v = session.verify(info.name, source_of(text, f"{info.name}.py"))
                        t = v.model_timing
                        row = {"problem": problem.stem, "kernel": info.name, "rule": label, "status": v.status,
                               "reason": (v.reason or "")[:160], "speedup": t.speedup if t else None,
                               "ci": [t.ci_low, t.ci_high] if t else None}
                        rows.append(row)
                        _say(f"{problem.stem}/{info.name} {label}: {v.status} "
                             f"{'' if t is None else f'{t.speedup:.3f} [{t.ci_low:.3f}, {t.ci_high:.3f}]'} {v.reason or ''}")
        except Exception as exc:  # one problem failing leaves the others
            rows.append({"problem": problem.stem, "kernel": "-", "rule": "-", "status": "error",
                         "reason": f"{type(exc).__name__}: {str(exc)[:300]}", "speedup": None, "ci": None})
            _say(f"{problem.stem}: {type(exc).__name__}: {exc}")
        _say(f"{problem.stem}: {time.monotonic() - t0:.0f} s")
        (args.out / "rows.json").write_text(json.dumps(rows, indent=1))
    print(f"{'problem':18s} {'kernel':40s} {'rule':32s} {'status':9s} {'vs max-autotune':>16s}  95% CI")
    for r in rows:
        ci = f"[{r['ci'][0]:.3f}, {r['ci'][1]:.3f}]" if r["ci"] else r["reason"][:60]
        sp = f"{r['speedup']:.3f}" if r["speedup"] else "-"
        print(f"{r['problem'][:18]:18s} {r['kernel'][:40]:40s} {r['rule'][:32]:32s} {r['status']:9s} {sp:>16s}  {ci}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
