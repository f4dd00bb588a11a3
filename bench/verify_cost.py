"""The verifier's cost per candidate, this tree against an older one, in one run.

    KERNELOPT_SIZE=large python bench/verify_cost.py OUT OLD_ROOT PROBLEM.py ...

``OLD_ROOT`` holds an older ``pytest_kernelopt`` package and its ``bench/verify_gpu.py``
(e.g. ``git archive <rev> pytest_kernelopt templates bench/verify_gpu.py | tar -x -C
OLD_ROOT``). For each problem, the two trees run ``bench/verify_gpu.py sessions`` one
after the other (old, then new, alternating which goes first from problem to problem), so
both see the same machine at about the same time. Each verifies every kernel's unedited
dump once and the largest kernel's dump ``FURTHER`` more times through one session. The
table gives, per problem, whether every dump came out correct (or accepted) in each tree
and the median wall time of the further candidates, and the ratio new/old.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _sessions(root: Path, out: Path, problem: Path) -> dict:
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get("PYTHONPATH")])])}
    log = out / "log.txt"
    with log.open("w") as f:
        subprocess.run([sys.executable, str(root / "bench" / "verify_gpu.py"), "sessions", str(out), str(problem)],
                       env=env, stdout=f, stderr=subprocess.STDOUT, cwd=out)
    try:
        return json.loads((out / "sessions.json").read_text())[0]
    except (OSError, json.JSONDecodeError, IndexError):
        return {"problem": problem.stem, "error": log.read_text()[-400:]}


def main(out: Path, old_root: Path, problems: list[Path]) -> None:
    rows = []
    for i, problem in enumerate(problems):
        trees = [("old", old_root), ("new", ROOT)]
        if i % 2:
            trees.reverse()
        got = {name: _sessions(root, out / name / problem.stem, problem.resolve()) for name, root in trees}
        rows.append((problem.stem, got))
        print(json.dumps({"problem": problem.stem, **got}), file=sys.stderr, flush=True)
    (out / "verify_cost.json").write_text(json.dumps(rows, indent=1))

    def ok(r: dict) -> str:
        if "error" in r:
            return "ERROR"
        return "yes" if all(s in ("correct", "accepted") for s in r["statuses"]) else "NO " + ",".join(r["statuses"])

    def median(r: dict) -> float | None:
        return statistics.median(r["further_s"]) if r.get("further_s") else None

    print(f"{'problem':<22} {'kernels':>7} {'old correct':<11} {'new correct':<11} {'old s/cand':>10} "
          f"{'new s/cand':>10} {'new/old':>7}  new kernel-stage s")
    ratios = []
    for name, got in rows:
        old, new = got["old"], got["new"]
        mo, mn = median(old), median(new)
        ratio = mn / mo if mo and mn else None
        if ratio:
            ratios.append(ratio)
        kernel_s = new.get("stages", {}).get("kernel", [None])[0]
        print(f"{name:<22} {new.get('kernels', '-'):>7} {ok(old):<11} {ok(new):<11} {mo or 0:>10.2f} {mn or 0:>10.2f} "
              f"{ratio or 0:>7.2f}  {kernel_s}")
    if ratios:
        geo = statistics.geometric_mean(ratios)
        print(f"geomean new/old wall per further candidate: {geo:.2f}x over {len(ratios)} problems")


if __name__ == "__main__":
    main(Path(sys.argv[1]).resolve(), Path(sys.argv[2]).resolve(), [Path(p) for p in sys.argv[3:]])
