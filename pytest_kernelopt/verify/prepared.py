"""The worker's prepared problem: compiled once, with what every check of every seed reuses.

Shared by the stages (:mod:`.kernel`, :mod:`.model`, :mod:`.speed`) and the stage
order (:mod:`.pipeline`), which is why it lives apart from both.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from ..records import SeedErrors

GIB = float(1 << 30)
MAX_EXTRA_RUNS = 3  # unchecked model runs before each checked one: 1 to this many, drawn


class StageFailure(Exception):
    """The candidate failed a stage; ``detail`` says where and how."""

    def __init__(self, detail: str, errors: list[SeedErrors] | None = None):
        super().__init__(detail)
        self.detail = detail
        self.errors = errors or []


class VerifierOutOfMemory(Exception):
    """The verifier's own bookkeeping does not fit on the device: never the candidate's fault."""


def out_of_memory(exc: BaseException, what: str) -> VerifierOutOfMemory:
    """torch's out-of-memory error in the verifier, in words: what this worker held, what the failed
    allocation asked, what was free on the device then and of how much, what other processes held,
    and the way out. Free memory and the total come from torch's message (the figures at the time of
    the failure), else from the driver now."""
    import torch

    text = str(exc)
    asked = _size_in(text, r"Tried to allocate {size}") or 0.0
    free = _size_in(text, r"of which {size} is free")
    total = _size_in(text, r"total capacity of {size}")
    this_process = _size_in(text, r"this process has {size} memory in use")  # CUDA's context included
    held = _size_in(text, r"Of the allocated memory {size} is allocated by PyTorch")
    reserved = 0.0
    if torch.cuda.is_available():
        held = held if held is not None else float(torch.cuda.memory_allocated())
        reserved = float(torch.cuda.memory_reserved())
        if free is None or total is None:
            try:
                now_free, now_total = torch.cuda.mem_get_info()
            except RuntimeError:  # the driver would not say: the total is still known
                now_free, now_total = None, torch.cuda.get_device_properties(0).total_memory
            free = free if free is not None else now_free
            total = total if total is not None else float(now_total)
    held = held or 0.0
    parts = [f"needed about {_gib(held + asked)} (this worker held {_gib(held)} and asked for {_gib(asked)} more)"]
    if total:
        parts.append(f"{_gib(free)} of the GPU's {_gib(total)} were free" if free is not None
                     else f"the GPU has {_gib(total)}")
        if free is not None:
            others = total - free - (this_process if this_process is not None else reserved)
            if others >= OTHERS_SHOWN:
                parts.append(f"other processes held about {_gib(others)} of it")
    return VerifierOutOfMemory(
        f"not enough GPU memory to verify at this size ({what}): {'; '.join(parts)}. Run the problem alone "
        "(`pytest --kernelopt <problem file>`) on a GPU nothing else uses, use a GPU with more memory, or make "
        "the problem's inputs smaller")


OTHERS_SHOWN = GIB  # memory held outside the worker is named from this much (CUDA's own context: ~0.5 GiB)
_UNITS = {"GiB": GIB, "MiB": float(1 << 20), "KiB": float(1 << 10), "bytes": 1.0}


def _size_in(text: str, pattern: str) -> float | None:
    """The size torch's message gives where ``pattern`` (with ``{size}`` for "1.50 GiB") matches, in bytes."""
    import re

    m = re.search(pattern.format(size=r"([\d.]+) (GiB|MiB|KiB|bytes)"), text)
    return float(m.group(1)) * _UNITS[m.group(2)] if m else None


def _gib(size: float | None) -> str:
    return "?" if size is None else f"{size / GIB:.1f} GiB"


@dataclass
class Prepared:
    """A problem compiled once in the worker, with what checks of every seed reuse.

    Inputs are not kept: they are drawn again for each use (on a GPU that takes
    milliseconds, even at 8 GiB), so only one seed's inputs are ever on the device
    and a candidate that writes into them cannot affect the next check. Their
    checksums, taken when the session opened, show whether a run wrote into them.
    """

    compiled: Any
    device: str
    seeds: list[int]
    references: dict[int, Any]  # seed -> model.SeedReference
    # FLOPs per call of the model's matrix products and convolutions, by dtype (measure/roofline.py).
    min_flops: dict[str, int] | None = None
    variant: str | None = None  # the compile settings ``compiled`` was compiled under (capture/variants.py)
    integrity: dict[int, Any] = field(default_factory=dict)  # seed -> checksums of the inputs as drawn
    weights: Any = None  # checksums of the model's parameters and buffers
    # The base revision as production ran it (verify/base.py), by (problem file, kernels dir):
    # (CompiledBase, or None when it failed; records.BaseRun).
    base: dict[Any, Any] = field(default_factory=dict)
    others: dict[str | None, Any] = field(default_factory=dict)  # the model compiled under other settings
    # Checksums of the judge itself (reference outputs, baseline masks); a candidate can
    # write anywhere its pointers reach, and must never reach the verdict that way.
    reference_sums: Any = None
    corrupted: bool = False  # the verifier's own memory changed: this worker must not judge again
    # Every random choice of the current check (fills, canaries, paddings, draws, run counts):
    # replaced at the start of each check (:meth:`begin_check`) from a root the parent draws
    # from the OS per check, so nothing of one check tells the next (see tensors.Entropy).
    entropy: Any = None
    # Whose weights are in the model now: None, the problem's own (the first seed's); else the
    # seed they were perturbed from (:meth:`use_weights`).
    weight_seed: int | None = None
    weights_written: bool = False  # a run changed the weights before they were switched
    # A stress draw turned the embedding tables (:meth:`stress_tables`): the next :meth:`use_weights` puts them back.
    tables_stressed: bool = False
    # The model stage's runs on inputs lying far from zero against their spread: seed -> its draw, one of
    # each of tensors.OFFSET_VARIANTS (:func:`offset_runs`; empty: none). Their inputs are drawn by
    # :meth:`inputs` like a seed's, then shifted; the kernel stage's seeds do not include them.
    offsets: dict[int, str] = field(default_factory=dict)
    offsets_note: str | None = None  # why there are none, where the session dropped them (verify/model.py)
    _originals: list[Any] | None = field(default=None, repr=False)  # host copies of the problem's own weights

    def __post_init__(self) -> None:
        if self.entropy is None:
            from .tensors import Entropy

            self.entropy = Entropy.from_os()
        model = getattr(self.compiled, "model", None)
        if model is not None and self._originals is None:
            # On the host, taken before any candidate runs: the device holds one set of weights.
            # Pinned on a GPU, so that putting them back is a fast copy (a few per check).
            pin = self.device == "cuda"
            self._originals = [_host_copy(t, pin) for t in _weights(model)]

    def begin_check(self, root: int) -> None:
        """Every random choice of the check about to run derives from ``root`` (fresh from the parent)."""
        from .tensors import Entropy

        self.entropy = Entropy(root)
        # A training step's incoming gradients, drawn once per seed and reused by its steps (capture/training.py:
        # default_incoming), are drawn again for every check: a candidate that wrote into them changes its own
        # check's gradients, never a later candidate's.
        getattr(getattr(self.compiled, "problem", None), "incoming", {}).clear()

    def seal_references(self) -> None:
        self.reference_sums = _reference_sums(self.references)

    def references_intact(self) -> bool:
        """False (and the worker marked corrupted) when anything wrote into the references."""
        if self.reference_sums is not None and _reference_sums(self.references) != self.reference_sums:
            self.corrupted = True
        return not self.corrupted

    @property
    def model_seeds(self) -> list[int]:
        """The seeds the model stage judges: the session's, then the offset runs'."""
        return [*self.seeds, *self.offsets]

    def inputs(self, seed: int) -> list[Any]:
        """The model's inputs drawn under ``seed``, with that seed's weights put in place; for the offset
        runs' seeds, shifted by their draw (within the limits of the narrowest floating dtype the compiled
        kernels take, as the kernel stage's draws are)."""
        self.use_weights(seed)
        inputs = self.compiled.problem.make_inputs(seed, self.device)
        if seed in self.offsets:
            from .tensors import stress_inputs

            stress_inputs(inputs, self.offsets[seed], seed, self.within())
        return inputs

    def within(self) -> Any:
        """The narrowest floating dtype the compiled kernels take: the offset runs' draws keep to its limits."""
        from .tensors import narrowest_float

        return narrowest_float([a for h in self.compiled.kernels.values() for a in h.info.args])

    def use_weights(self, seed: int) -> None:
        """Put ``seed``'s weights in the model: the problem's own for the session's first seed,
        else the problem's own perturbed from ``seed`` (:func:`..capture.problem.perturb_weights`).

        What production varies, the verifier varies: a kernel with a weight folded in as a
        constant is exact on one set of weights only. The model's weights are switched in
        place (no second copy on the device), from the host copy of the problem's own; a
        run that wrote into them before the switch is remembered (:attr:`weights_written`).
        """
        wanted = None if seed == self.seeds[0] else seed
        if (wanted == self.weight_seed and not self.tables_stressed) or self._originals is None:
            return
        model = self.compiled.model
        if self.weights is not None and weight_sums(model) != self.weights:
            self.weights_written = True
        self._put_weights(wanted)

    def _put_weights(self, seed: int | None) -> None:
        from ..capture.problem import perturb_weights

        model = self.compiled.model
        with _no_grad():
            for mine, original in zip(_weights(model), self._originals or []):
                mine.copy_(original, non_blocking=False)
            if seed is not None:
                perturb_weights(model, seed)
        self.weight_seed, self.tables_stressed = seed, False
        if self.weights is not None:
            self.weights = weight_sums(model)

    def stress_tables(self, variant: str, transform: int, within: Any = None) -> tuple[bool, float]:
        """For a model whose inputs hold no floating-point tensor (token ids): turn its embedding tables
        (``nn.Embedding`` and ``nn.EmbeddingBag`` weights, what its kernels read as floating-point input) into a draw
        of ``variant``, as :func:`.tensors.stress_inputs` turns inputs. Returns (whether there was one, the
        condition). The weights' checksums are taken again, so a candidate's write is still told from the draw,
        and the next :meth:`use_weights` puts the seed's weights back (no second copy on the device)."""
        import torch

        from .tensors import stress_inputs

        model = getattr(self.compiled, "model", None)
        if model is None or self._originals is None:  # nothing to put them back from: left as they are
            return False, 1.0
        tables = [m.weight for m in model.modules() if isinstance(m, (torch.nn.Embedding, torch.nn.EmbeddingBag))
                  and m.weight.dtype.is_floating_point and m.weight.numel() > 0]
        if not tables:
            return False, 1.0
        with _no_grad():
            floating, condition = stress_inputs([t.data for t in tables], variant, transform, within)
        self.tables_stressed = True
        if self.weights is not None:
            self.weights = weight_sums(model)
        return floating, condition

    def extra_run_count(self) -> int:
        """How many unchecked runs precede a checked one: 1 to MAX_EXTRA_RUNS, unpredictable."""
        return 1 + self.entropy.below(MAX_EXTRA_RUNS)

    def extra_runs(self, candidates: dict[str, Any], inputs: list[Any], where: str) -> int:
        """Run the model with ``candidates`` swapped in a random number of times; outputs discarded.

        Defence in depth against hidden state (the static stage already forbids
        most): a candidate that counts its calls cannot tell which run is checked,
        so "right for the first N calls, wrong afterwards" cannot be aimed at the
        number of calls a verification makes. Returns the number of runs.
        """
        import torch

        from ..capture.swap import swapped

        runs = self.extra_run_count()
        try:
            with swapped(self.compiled, candidates):
                for _ in range(runs):
                    self.compiled(*inputs)
            if self.device == "cuda":
                torch.cuda.synchronize()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise StageFailure(f"{where}: the model raised with the candidate (an unchecked run): "
                               f"{type(exc).__name__}: {text}") from exc
        return runs

    def check_inputs(self, seed: int, inputs: list[Any]) -> None:
        """Raise StageFailure when a run wrote into the model's inputs (which it may only read)."""
        from .tensors import input_checksums

        if input_checksums(inputs) != self.integrity[seed]:
            raise StageFailure(f"seed {seed}: the model's inputs changed during the run (the candidate wrote into "
                               "memory it may only read)")

    def restore_weights_if_changed(self) -> bool:
        """Whether something wrote into the model's weights since they were put in place (for the
        seed now in use, or one used earlier in the stage); if so, they are put back."""
        if self.weights is None:
            return False
        written, self.weights_written = self.weights_written, False
        if not written and weight_sums(self.compiled.model) == self.weights:
            return False
        if self._originals is not None:
            self._put_weights(self.weight_seed)
            return True
        fresh = self.compiled.problem.build_model(self.device)
        with _no_grad():
            for mine, theirs in zip(_weights(self.compiled.model), _weights(fresh)):
                mine.copy_(theirs)
        return True


def _no_grad() -> Any:
    import torch

    return torch.no_grad()


def _host_copy(t: Any, pin: bool) -> Any:
    host = t.detach().to("cpu", copy=True)
    try:
        return host.pin_memory() if pin else host
    except RuntimeError:  # pinned memory refused (limits): pageable works, only slower
        return host


def _weights(model: Any) -> list[Any]:
    """What the verifier varies as weights: parameters, buffers and tensors kept as plain attributes."""
    from ..capture.problem import tensor_attributes

    return [*model.parameters(), *model.buffers(), *tensor_attributes(model)]


def weight_sums(model: Any) -> list[Any]:
    from .tensors import checksum

    return [checksum(t) for t in _weights(model)]


def _reference_sums(references: dict[int, Any]) -> list[Any]:
    from .tensors import checksum

    sums = []
    for seed in sorted(references):
        for out in references[seed].outputs:
            for t in (out.exact, out.ref_hi, out.nonfinite, out.slices, out.growth and out.growth[0]):
                sums.append(None if t is None else checksum(t))
    return sums


def offset_runs(seeds: list[int]) -> dict[int, str]:
    """The model stage's offset runs for a session of ``seeds``: one per draw of
    :data:`.tensors.OFFSET_VARIANTS` (rows, samples, channels, columns or a whole tensor far from zero against
    their spread), each with
    a seed of its own (none of theirs), derived from the seeds: a session's root reproduces them
    (``kernelopt verify --seed``) and nothing outside the session can tell them."""
    import random

    from .tensors import OFFSET_VARIANTS

    draw = random.Random(f"offset runs {sorted(seeds)}")
    runs: dict[int, str] = {}
    for variant in OFFSET_VARIANTS:
        seed = draw.getrandbits(31)
        while seed in seeds or seed in runs:
            seed = draw.getrandbits(31)
        runs[seed] = variant
    return runs
