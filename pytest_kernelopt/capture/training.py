"""Training problems: a problem file that declares a training step instead of an inference call.

A problem file is a training problem when it sets ``TRAINING = True`` at module level. Its
*step* is what capture compiles and the verifier judges::

    step(inputs) = (outputs..., gradient of every input that requires grad..., gradient of every parameter...)

* **inputs that require grad**: every floating-point tensor of ``get_inputs()``, or the indices
  listed in ``GRAD_INPUTS`` (a list of ints; ``[]``: none);
* **parameters**: every floating-point parameter of the model with ``requires_grad`` (in
  ``model.parameters()`` order; a parameter the loss does not reach gets a zero gradient);
* **loss**: the file's ``loss(outputs) -> Tensor`` (a scalar) if it defines one; otherwise the
  sum over every floating-point output of ``(output * w).sum()``, ``w`` drawn per input draw
  (:func:`cotangents`): each output's gradient is ``w``, of unit scale whatever the output's size
  (a mean would shrink gradients by the element count), and not the constant ones of a plain
  sum, so a backward kernel that ignores its incoming gradient computes wrong gradients. That loss
  is never computed: the backward starts from the weights as each output's incoming gradient, as a
  compiled region of a real training step gets its own from upstream (the same gradients; the eager
  loss and a per-step draw were most of a step's GPU time, and no training loop spends it).

The model keeps eval() semantics (Dropout off, BatchNorm on its running statistics): what
eval() computes is deterministic and has a float64 reference. ``TRAIN_MODE = True`` (dropout,
batch statistics, running-statistics updates) is refused with a ProblemError for now.

Gradients are computed with ``torch.autograd.grad`` each step: fresh tensors every run, never
accumulated into ``.grad``, so nothing a previous run left behind can stand in for them.

The compiled model is ``torch.compile(model)``, as production compiles it: the loss (if any) and the
gradient calls run eagerly around it, and AOTAutograd compiles a forward and a backward graph,
each with its own Inductor wrapper module. A backward graph's wrapper is recognised by its
inputs: AOTAutograd names the incoming gradients ``tangents_<n>`` (torch 2.11-2.15), which no
forward or inference graph has (:func:`is_backward_wrapper`); its kernels are named with
:data:`BACKWARD_SUFFIX`.
"""

from __future__ import annotations

import contextlib
import hashlib
import re
from pathlib import Path
from types import ModuleType
from typing import Any, Iterator

from ..errors import ProblemError

BACKWARD_SUFFIX = "__bwd"  # a backward graph's kernel: ``triton_poi_fused_..._0__bwd``
_WEIGHT_STEPS = 14 * 2 ** 20  # the default loss's weights (cotangents): magnitudes in [1/4, 2)
_CALL_ARGS = re.compile(r"^\s+(.+?)\s*=\s*args\s*$", re.M)


def is_training(problem: Any) -> bool:
    return getattr(getattr(problem, "module", None), "TRAINING", False) is True


def validate(path: Path, module: ModuleType) -> None:
    """ProblemError for a training declaration this version cannot honour."""
    training = getattr(module, "TRAINING", False)
    if not isinstance(training, bool):
        raise ProblemError(path, f"TRAINING must be True or False, not {training!r}")
    if not training:
        return
    if getattr(module, "TRAIN_MODE", False):
        raise ProblemError(path, "TRAIN_MODE = True (train(): dropout, batch statistics) is not supported yet; a "
                                 "training step runs the model with eval() semantics (remove TRAIN_MODE)")
    loss = getattr(module, "loss", None)
    if loss is not None and not callable(loss):
        raise ProblemError(path, "`loss` must be a function loss(outputs) -> Tensor")
    grad_inputs = getattr(module, "GRAD_INPUTS", None)
    if grad_inputs is not None and (not isinstance(grad_inputs, (list, tuple))
                                    or not all(type(i) is int for i in grad_inputs)):
        raise ProblemError(path, f"GRAD_INPUTS must be a list of input indices, not {grad_inputs!r}")


def grad_input_indices(problem: Any, inputs: Any) -> list[int]:
    """Indices of the inputs whose gradients the step returns."""
    import torch

    listed = getattr(problem.module, "GRAD_INPUTS", None)
    floating = [i for i, x in enumerate(inputs) if isinstance(x, torch.Tensor) and x.is_floating_point()]
    if listed is None:
        return floating
    bad = [i for i in listed if i not in floating]
    if bad:
        raise ProblemError(problem.path, f"GRAD_INPUTS names input {bad[0]}, which is not a floating-point tensor "
                                         f"(floating-point inputs: {floating})")
    return sorted(set(listed))


def trained_parameters(model: Any) -> list[Any]:
    return [p for p in model.parameters() if p.requires_grad and p.is_floating_point()]


def cotangents(seed: int, outputs: list[Any]) -> list[Any]:
    """The default loss's weights for ``outputs`` under input seed ``seed`` (one tensor per output).

    Each weight is ``+-(k + 2^21) / 2^23`` for an integer ``k`` drawn in ``[0, 14 * 2^20)``: of either sign,
    magnitude in [1/4, 2), nonzero, of unit scale, with a 24-bit mantissa, so a backward kernel cannot
    round its incoming gradient to a coarse grid and still match (multiples of 1/8 would be learnable).
    Drawn as integers and divided by a power of two: the same values in float32 and float64 (the float64
    reference's mode turns float draws into float64 draws, another random stream; integers it leaves
    alone), exact in the float64 reference; a half-precision output gets their rounding to its dtype,
    the compiled baseline and a candidate alike."""
    import torch

    root = int.from_bytes(hashlib.sha256(f"kernelopt-cotangents:{seed}".encode()).digest()[:8], "little") >> 1
    weights = []
    for k, out in enumerate(outputs):
        gen = torch.Generator(device=out.device).manual_seed(root + k)
        steps = torch.randint(0, _WEIGHT_STEPS, out.shape, generator=gen, device=out.device)
        sign = torch.randint(0, 2, out.shape, generator=gen, device=out.device) * 2 - 1
        weights.append((sign * (steps + 2 ** 21)).to(torch.float32) / 2 ** 23)
    return weights


def loss_of(problem: Any, out: Any) -> Any:
    """The file's own ``loss(outputs)``, checked to be a one-element floating-point tensor; None when the file
    declares none (the default loss, whose gradients :func:`default_incoming` gives without computing it)."""
    import torch

    own = getattr(problem.module, "loss", None)
    if own is None:
        return None
    # An error inside it surfaces on capture's first (eager) step, with its line in the file.
    loss = own(out)
    if not isinstance(loss, torch.Tensor) or loss.numel() != 1 or not loss.is_floating_point():
        raise ProblemError(problem.path, "loss(outputs) must return a floating-point tensor of one element")
    return loss.reshape(())


_INCOMING_KEPT = 2  # (seed, outputs) entries a problem keeps: a draw's, in its dtype and in float64


def default_incoming(problem: Any, out: Any) -> tuple[list[Any], list[Any]]:
    """(outputs, incoming gradients) of the default loss, the weighted sum of every floating-point output
    (module docstring): each output's gradient is its weight (:func:`cotangents`) in the output's dtype,
    exactly what autograd gives through ``(output * w).sum()``. The backward starts from them directly, as a
    compiled region of a real training step gets its incoming gradient from upstream: no loss is computed
    and nothing is drawn per step (drawing and the eager loss were most of a step's GPU time). Drawn once per
    (input draw, output shapes); the same tensors serve every step of that draw, never written by the step
    (a kernel that wrote them would change its own later runs' gradients, which the checks compare)."""
    from .outputs import flatten

    floating = [t for t in flatten(out) if t.is_floating_point() and t.requires_grad]
    if not floating:
        raise ProblemError(problem.path, "the training step has no floating-point output that depends on a "
                                         "parameter or an input that requires grad (nothing to differentiate)")
    seed = getattr(problem, "draw_seed", 0)
    key = (seed, tuple((tuple(t.shape), t.dtype, str(t.device)) for t in floating))
    kept = getattr(problem, "incoming", {})  # insertion order: the least recently used first
    incoming = kept.pop(key, None)
    if incoming is None:
        incoming = [w.to(t.dtype) for w, t in zip(cotangents(seed, floating), floating)]
        while len(kept) >= _INCOMING_KEPT:
            kept.pop(next(iter(kept)))
    kept[key] = incoming
    return floating, incoming


def step(fn: Any, model: Any, problem: Any, inputs: Any) -> tuple[Any, ...]:
    """One training step of ``fn`` (the compiled or the eager model; ``model`` holds its parameters):
    ``(outputs..., input gradients..., parameter gradients...)``, every tensor fresh."""
    import torch

    from .outputs import flatten

    inputs = list(inputs)
    wanted = grad_input_indices(problem, inputs)
    xs = [x.detach().requires_grad_(True) if i in wanted else x for i, x in enumerate(inputs)]
    params = trained_parameters(model)
    with torch.enable_grad():
        out = fn(*xs)
        wrt = [xs[i] for i in wanted] + params
        draw = getattr(problem, "incoming_draw", None)
        loss = loss_of(problem, out)
        problem.incoming_bytes = 0
        if loss is None:
            outputs, incoming = default_incoming(problem, out)
            problem.incoming_bytes = sum(g.numel() * g.element_size() for g in incoming)
            if draw is not None:  # turned in place: copies, the drawn weights serve the other steps
                incoming = [g.clone() for g in incoming]
                draw(incoming)
            grads = torch.autograd.grad(outputs, wrt, grad_outputs=incoming, allow_unused=True,
                                        materialize_grads=True)
        elif draw is None:
            grads = torch.autograd.grad(loss, wrt, allow_unused=True, materialize_grads=True)
        else:
            grads = _backward_from_drawn(loss, out, wrt, draw)
    return (*(t.detach() for t in flatten(out)), *grads)


def _backward_from_drawn(loss: Any, out: Any, wrt: list[Any], draw: Any) -> tuple[Any, ...]:
    """The step's gradients with each output's incoming gradient (what the file's own loss gives, computed
    eagerly) turned in place by ``draw`` first, then the compiled backward run from those (``grad_outputs``)."""
    import torch

    from .outputs import flatten

    outputs = [t for t in flatten(out) if t.is_floating_point() and t.requires_grad]
    # Copies: the loss's gradient may be an expanded (stride 0) view or shared between outputs.
    incoming = [g.clone() for g in torch.autograd.grad(loss, outputs, retain_graph=True, allow_unused=True,
                                                        materialize_grads=True)]
    draw(incoming)
    return torch.autograd.grad(outputs, wrt, grad_outputs=incoming, allow_unused=True, materialize_grads=True)


@contextlib.contextmanager
def incoming_drawn(problem: Any, draw: Any) -> Iterator[None]:
    """Within the block, a training step of ``problem`` runs its backward from incoming gradients that
    ``draw(gradients)`` turned, in place, into a draw (None: the loss's own, as outside the block)."""
    before = getattr(problem, "incoming_draw", None)
    problem.incoming_draw = draw
    try:
        yield
    finally:
        problem.incoming_draw = before


def run_eager(model: Any, problem: Any, args: list[Any]) -> list[Any]:
    """The eager ``model``'s outputs, flattened; a training problem's: its step's, gradients included (:func:`step`)."""
    import torch

    from .outputs import flatten

    if is_training(problem):
        return list(step(model, model, problem, args))
    with torch.no_grad():
        return flatten(model(*args))


def output_names(problem: Any, model: Any, inputs: Any, count: int) -> list[str]:
    """How a verdict names each of the ``count`` flattened results of a run: ``output <k>``; in a training
    step's, then ``gradient of input <i>`` and ``gradient of parameter <name>``."""
    if not is_training(problem):
        return [f"output {k}" for k in range(count)]
    wanted = grad_input_indices(problem, inputs)
    params = [name for name, p in model.named_parameters() if p.requires_grad and p.is_floating_point()]
    outputs = count - len(wanted) - len(params)
    return ([f"output {k}" for k in range(outputs)] + [f"gradient of input {i}" for i in wanted]
            + [f"gradient of parameter {name}" for name in params])


def is_backward_wrapper(source: str) -> bool:
    """Whether an Inductor wrapper module's source is a backward graph's: its ``call`` unpacks an
    incoming gradient (``tangents_<n>``, AOTAutograd's name for it)."""
    return any(re.search(r"\btangents_\d+\b", m) for m in _CALL_ARGS.findall(source))


def kernel_base_name(attr: str, backward: bool) -> str:
    """A kernel's name before a graph suffix: the wrapper's global, with :data:`BACKWARD_SUFFIX` in a backward graph."""
    return attr + BACKWARD_SUFFIX if backward else attr


@contextlib.contextmanager
def backward_compiled_with_forward() -> Iterator[None]:
    """AOTAutograd compiles a graph's backward right after its forward, not on the first backward
    call (torch._functorch.config.force_non_lazy_backward_lowering, torch 2.11-2.15): its wrapper
    module loads inside the block that compiles, and graphs are numbered forward, backward, next
    forward, ... in capture and production alike."""
    try:
        from torch._functorch import config
    except ImportError:  # another torch: the backward compiles lazily, as before
        yield
        return
    if not hasattr(config, "force_non_lazy_backward_lowering"):
        yield
        return
    with config.patch(force_non_lazy_backward_lowering=True):
        yield
