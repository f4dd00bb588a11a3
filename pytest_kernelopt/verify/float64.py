"""The float64 reference: the eager model run in float64 *throughout*, whatever dtypes its code names.

``model.double()`` and float64 inputs are not enough for a model written for half precision: a
forward that casts explicitly (``x.to(torch.bfloat16)``, ``h.float()``, ``softmax(..., dtype=
torch.float32)``, ``torch.zeros(..., dtype=torch.float16)``) would round the reference there, so
the "float64" judge would carry the very rounding it is meant to measure (on a bf16 RMSNorm whose
forward says ``.float()`` and ``.to(torch.bfloat16)``, the compiled baseline was 1.3 bf16 ulps off
such a reference, torch 2.13 CPU). While the reference runs, :class:`Float64Mode` turns every
floating-point dtype a torch function is asked for into float64, and ``.float()``, ``.half()`` and
``.bfloat16()`` into ``.double()``. ``Tensor.view(dtype)`` (a reinterpretation of bits, not a cast)
is left alone. A forward that cannot run so (one that checks a dtype, or calls an op that exists
for one dtype only, e.g. an fp8 matrix product) runs again with its own casts kept, and the
verdict's ``reference_note`` says so; one that cannot run in float64 at all is judged against its
fp32 eager run (``reference: "eager"``).

``torch.autocast`` regions need nothing: autocast only casts floating-point tensors other than
float64 (its eligibility test excludes float64 on every device; seen on torch 2.13, CPU), so under
this mode a region a model runs in bf16 is computed in float64 in the reference.
"""

from __future__ import annotations

import copy
from typing import Any

import torch  # imported only where a reference is built (model.py imports this module lazily)
from torch.overrides import TorchFunctionMode

_NARROWING = frozenset({torch.Tensor.float, torch.Tensor.half, torch.Tensor.bfloat16})


def _wide(value: Any) -> Any:
    """float64 for a floating-point dtype (float16, bfloat16, float32, the float8 kinds); else as given."""
    if isinstance(value, torch.dtype) and value.is_floating_point and value != torch.float64:
        return torch.float64
    return value


class Float64Mode(TorchFunctionMode):
    """Every floating-point dtype asked of a torch function becomes float64 (see the module's docstring)."""

    def __torch_function__(self, func: Any, types: Any, args: tuple = (), kwargs: dict | None = None) -> Any:
        kwargs = kwargs or {}
        if func in _NARROWING:
            return args[0].to(torch.float64, **{k: v for k, v in kwargs.items() if k == "memory_format"})
        if func is not torch.Tensor.view:  # view(dtype) reinterprets bits: not a cast
            args = tuple(_wide(a) for a in args)
            kwargs = {k: _wide(v) for k, v in kwargs.items()}
        return func(*args, **kwargs)


def float64_outputs(model: Any, inputs: list[Any], device: str, notes: list[str] | None = None,
                    problem: Any = None) -> list[Any]:
    """The model in float64 on ``device``, under :class:`Float64Mode`; raises whatever goes wrong.

    Takes the caller's list and empties it, so the inputs are freed while the float64 model
    runs (at 2^31 elements that is 8 GiB less at the session's peak). Floating-point inputs and
    every floating-point parameter, buffer and tensor a module keeps as a plain attribute (bf16 or fp16
    ones a model cast in ``__init__`` included) become float64; integer ones stay as they are. Where the forward raises under
    :class:`Float64Mode`, it runs again without it, and a line saying so is added to ``notes``.
    A training problem runs its step (outputs, then gradients: ``capture.training.run_eager``).
    """
    from ..capture.training import run_eager

    from ..capture.problem import plain_tensors

    model64 = copy.deepcopy(model).to(device).double()
    for module, name, value in plain_tensors(model64):  # tensors kept as plain attributes (an LSTM's ``h0``) too
        module.__dict__[name] = value.to(device=device, dtype=torch.float64)
    args = [(x.to(device).double() if x.is_floating_point() else x.to(device)) if isinstance(x, torch.Tensor) else x
            for x in inputs]
    inputs.clear()
    try:
        with Float64Mode():
            out = run_eager(model64, problem, args)
    except torch.OutOfMemoryError:
        raise
    except Exception as exc:  # noqa: BLE001 - the forward needs one of its casts: keep them, and say so
        out = run_eager(model64, problem, args)
        if notes is not None:
            text = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
            notes.append(f"float64 with the forward's own casts kept (in float64 throughout it raised "
                         f"{type(exc).__name__}: {text})")
    del model64, args
    return out
