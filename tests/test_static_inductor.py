"""Every kernel Inductor generates must pass the static check, unedited.

The candidate language is an allowlist: a construct Inductor emits that the lists
forget would reject the compiler's own kernels. So this compiles every example problem
(tests/problems) and the varied extra ones (tests/problems_extra: reductions over each
axis, arg-reductions, scans, pooling, norms, softmax, losses, math chains, special
functions, activations, moments, indexing and scatter, layout copies, masks and bools,
integer ops, fp16/bf16, sorting and bucketize, interpolation, random numbers) in
interpreter mode, dumps each kernel in candidate format and checks it; and checks
Inductor's whole helper library as dumps inline it.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from pytest_kernelopt.verify.static import check_candidate

pytestmark = pytest.mark.slow

TESTS = Path(__file__).parent
PROBLEMS = sorted([*TESTS.glob("problems/*.py"), *TESTS.glob("problems_extra/*.py")])


@pytest.mark.parametrize("path", PROBLEMS, ids=[f"{p.parent.name}/{p.stem}" for p in PROBLEMS])
def test_every_inductor_kernel_passes(path: Path, compiled_models):
    from pytest_kernelopt.candidate import render_dump

    compiled = compiled_models.get(path)
    assert compiled.kernels, f"{path.name}: Inductor generated no Triton kernel"
    rejected = {}
    for name, kernel in compiled.kernels.items():
        info = kernel.info
        report = check_candidate(render_dump(info, path.stem), entry_args=[a.name for a in info.args])
        if not report.ok:
            rejected[name] = report.problems
    assert not rejected, rejected


def test_inductor_helper_library_passes(interpreter: str):
    """All of ``triton_helpers`` as a dump inlines it (welford, sort, scans, random, bucketize, ...)."""
    import torch._inductor.runtime.triton_helpers as helpers

    from pytest_kernelopt.candidate.format import _helpers_source

    names = {n for n in dir(helpers) if getattr(getattr(helpers, n), "fn", None) is not None}
    assert len(names) > 30, sorted(names)  # the library is there (46 functions in torch 2.13)
    source = "\n\n".join([
        "import triton\nimport triton.language as tl\nfrom triton.language import math as tl_math\n"
        "from triton.language.extra import libdevice",
        *_helpers_source(names),
        "def run(in_ptr0, xnumel, *, stream=None):\n    pass\n",
    ])
    report = check_candidate(source, ["in_ptr0", "xnumel"])
    assert report.ok, report.problems


def test_allowlists_name_what_triton_has(interpreter: str):
    """Every allowlisted member exists in the installed triton (a misspelt entry would allow nothing)."""
    import math

    import triton
    import triton.language as tl
    from triton.language.extra import libdevice

    from pytest_kernelopt.verify import static

    missing = [f"tl.{n}" for n in static.TL_FUNCTIONS | static.TL_DTYPES | static.TL_TYPES | static.TL_CONSTANTS
               | set(static.TL_ENUMS) if not hasattr(tl, n)]
    missing += [f"tl.core.{n}" for n in static.TL_CORE_CALLS if not hasattr(tl.core, n)]
    missing += [f"tl.math.{n}" for n in static.TL_MATH_FUNCTIONS if not hasattr(tl.math, n)]
    missing += [f"libdevice.{n}" for n in static.LIBDEVICE_FUNCTIONS if not hasattr(libdevice, n)]
    missing += [f"math.{n}" for n in static.MATH_FUNCTIONS | static.MATH_CONSTANTS if not hasattr(math, n)]
    missing += [f"triton.{n}" for n in static.TRITON_HOST_FUNCTIONS | {static.TRITON_DECORATOR} if not hasattr(triton, n)]
    # Attributes of the values device code holds: tensors (dtype/shape/numel are set per
    # instance), dtypes, pointer types, tensor descriptors (.load/.store).
    holders = [tl.tensor, tl.float32, tl.int32, tl.pointer_type(tl.float32), tl.tensor_descriptor]
    missing += [f"<value>.{n}" for n in static.DEVICE_VALUE_ATTRS
                if not any(hasattr(h, n) for h in holders) and n not in {"dtype", "shape", "numel"}]
    assert not missing, missing
