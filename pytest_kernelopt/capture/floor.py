"""A problem's floor: what one call, or one training step, must spend at the least.

The model's two floors are :mod:`..measure.roofline`'s (bytes moved, FLOPs of its products); this
module says what they count for a problem, so ``kernelopt bench`` and the gate's model item count
the same:

* **an inference call**: its tensor inputs, parameters and buffers read once, its outputs written
  once; the FLOPs of its forward;
* **a training step** (capture/training.py): the same, its outputs including every gradient it
  returns, plus the incoming gradients its backward reads, where the step gave them in full (the
  default loss's weights, one per differentiable output; a file's own loss is computed eagerly and
  its gradient may be an expanded scalar, so none is counted then); the FLOPs of its forward and of
  its backward to the inputs and parameters it differentiates.

Each is a lower bound: a floor that counted a byte no implementation must move would read as more
than 100% of the limit.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Any

from .training import grad_input_indices, is_training


@dataclass(frozen=True)
class Floor:
    bytes: int  # read and written, the writes included
    written: int  # the part of ``bytes`` that is written: the outputs (and gradients), once
    flops: dict[str, int] | None  # by rate (measure/roofline.py: min_flops); None: not countable

    def writing(self, written: int) -> Floor:
        """This floor with ``written`` bytes of outputs more, written once."""
        return replace(self, bytes=self.bytes + written, written=self.written + written)


def call_floor(problem: Any, model: Any, inputs: list[Any], written: int) -> Floor:
    """The floor of one call of ``problem`` (a step's, for a training problem) on ``inputs``, whose outputs take
    ``written`` bytes. Call it right after the model ran on these inputs in its own dtypes: a training step
    records the incoming gradients it started from (``problem.incoming_bytes``), and a float64 reference's
    step would record wider ones."""
    from ..measure.roofline import min_bytes, min_flops

    training = is_training(problem)
    incoming = int(getattr(problem, "incoming_bytes", 0)) if training else 0
    read = min_bytes(model, inputs, []) + incoming
    flops = min_flops(model, inputs, grad_input_indices(problem, inputs) if training else None)
    return Floor(bytes=read + written, written=written, flops=flops)
