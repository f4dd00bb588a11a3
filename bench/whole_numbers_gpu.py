"""An attack at full size on the GPU: each kernel's unedited dump, and a copy 1% off on small nonzero whole numbers.

    KERNELOPT_SIZE=large python bench/whole_numbers_gpu.py PROBLEM.py ...

Both go through one verification session per problem (as `kernelopt verify` does); prints one line each:
the dump must come out correct, the edit rejected (the 'ties' draw holds small integers).
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from test_trust_inputs import _edit_result  # noqa: E402

from pytest_kernelopt.candidate import render_dump  # noqa: E402
from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of  # noqa: E402

EDIT = "tl.where(({x} == tl.floor({x})) & ({x} != 0.0) & (tl.abs({x}) < 1048576.0), {v} * 1.01, {v})"

for problem in map(Path, sys.argv[1:]):
    with VerifySession(problem, "cuda", VerifyOptions(seeds=2)) as session:
        for info in session.open().kernels:
            dump = render_dump(info, problem.stem)
            for label, text in (("dump", dump), ("whole-number edit", _edit_result(dump, EDIT))):
                t0 = time.monotonic()
                v = session.verify(info.name, source_of(text, f"{label}.py"))
                print(f"{problem.stem}/{info.name} {label}: {v.status} in {time.monotonic() - t0:.2f} s "
                      f"{(v.reason or '')[:160]}", flush=True)
