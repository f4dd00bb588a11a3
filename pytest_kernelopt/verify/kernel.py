"""Stage 2: the candidate against the compiler's kernel, on the model's real arguments.

On each seed the model runs with a checker in place of the kernel. At every launch
the checker runs the compiler's kernel and then the candidate on the very same
argument tensors (no copies of inputs, so this works when an argument is 8 GiB):

* arguments the kernel reads and writes are saved first and put back before each run;
* arguments it only writes are poisoned before each run (NaN, or the integer
  maximum) so unwritten elements show, and in a second pass pre-filled with random
  values from an unpredictable seed (a candidate cannot recognise the harness by
  its fill);
* what the compiler's kernel wrote is kept, the candidate's output compared with it
  in chunks: NaN/Inf positions must match; finite values within
  ``atol + rtol * |expected|`` (rtol by dtype, atol a tenth of rtol times the
  tensor's largest magnitude); integers and bools exactly;
* arguments it only reads are checksummed before and compared after (small ones
  exactly): writing into an input is a failure;
* the compiler's results are left in place, so the rest of the model runs on them.

The candidate itself runs on copies of its tensor arguments inside **guard bands**
(:mod:`.guards`): padding on both sides filled with a canary (NaN with a random
payload in the poisoned pass, ordinary random values in the pre-filled one) that must be
unchanged afterwards, so a store past the end of an output (into allocator slack, or
a counter kept there) fails the stage. Guarded only while the arguments' memory
totals at most ``guards.GUARD_BYTES`` (1 GiB; on a GPU also a quarter of the free
memory): else the written ones, else none, and the stage's detail says which. The
unchecked runs before each seed's checked one are guarded the same way
(:class:`.guards.GuardedKernel`), so such a store is caught before it can corrupt
the worker's own memory.

Before each seed's checked run the model runs 1-3 times (from ``os.urandom``) with
the candidate swapped in and nothing checked, so a candidate that counts its calls
cannot know which ones are checked (:meth:`Prepared.extra_runs`).

After the seeds, **stress variants** of the first seed's inputs run through the same
checker (one pass, outputs poisoned): every floating-point model input scaled by
1e4 and by 1e-4, made ``|x|`` and ``-|x|``, and with a random tenth of its elements
set to zero (:data:`.tensors.STRESS_VARIANTS`; integer inputs stay as drawn). The
compiler's kernel sets the standard: where its output is finite the candidate's
must be finite and within the usual tolerance (dtype rtol, atol from the largest
finite magnitude); where the compiler's is NaN/Inf (it overflowed too), the
element is not compared. A softmax without max-subtraction passes randn inputs and
fails here (Inf/Inf = NaN at 1e4 where the compiler's softmax is finite).
"""

from __future__ import annotations

import os
from typing import Any

from ..records import SeedErrors
from .guards import Bands, GuardedKernel
from .options import VerifyOptions
from .prepared import Prepared, StageFailure
from .tensors import (EXACT_COPY_BYTES, STRESS_VARIANTS, chunks, poison, random_fill, restore, snapshot, stress,
                      unchanged)

__all__ = ["EXACT_COPY_BYTES", "KernelRows", "compare", "kernel_stage"]


def compare(expected: Any, actual: Any, rtol: float, what: str, nonfinite: str = "match") -> tuple[float, float]:
    """Check ``actual`` against ``expected`` in chunks; returns (max abs, max rel) error.

    ``nonfinite="match"``: NaN/Inf must sit in the same places (Inf with the same
    sign). ``"finite-only"`` (stress inputs): elements where ``expected`` is NaN/Inf
    are not compared; where it is finite, ``actual`` must be finite and close.

    Figures accumulate on the device and are read once at the end (a synchronisation
    per chunk cost seconds at 2^31 elements); only a failure walks the chunks again to
    name the first offending index. Raises StageFailure naming ``what``.
    """
    import torch

    if nonfinite not in ("match", "finite-only"):
        raise ValueError(f"nonfinite must be 'match' or 'finite-only', not {nonfinite!r}")

    def is_odd(e: Any, a: Any) -> Any:
        if nonfinite == "finite-only":
            return torch.isfinite(e) & ~torch.isfinite(a)
        return (torch.isnan(e) != torch.isnan(a)) | (torch.isinf(e) != torch.isinf(a)) | (torch.isinf(e) & (e != a))

    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        raise StageFailure(f"{what}: shape/dtype changed ({actual.dtype}{list(actual.shape)})")
    if not expected.dtype.is_floating_point:
        differ = None
        for e, a in chunks(expected, actual):
            n = (e != a).sum()
            differ = n if differ is None else differ + n
        if differ is not None and int(differ):
            offset, i = _first(expected, actual, lambda e, a: e != a)
            e_flat, a_flat = _flat_at(expected, offset + i), _flat_at(actual, offset + i)
            raise StageFailure(f"{what}: {int(differ)} element(s) differ, first at flat index {offset + i}: expected "
                               f"{e_flat}, got {a_flat}")
        return 0.0, 0.0
    # The largest finite magnitude sets atol.
    scale = torch.zeros((), dtype=torch.float64, device=expected.device)
    for (e,) in chunks(expected):
        e = e.double()
        scale = torch.maximum(scale, torch.where(torch.isfinite(e), e.abs(), 0.0).max())
    atol = rtol * 0.1 * max(float(scale), 1e-30)
    zero = torch.zeros((), dtype=torch.float64, device=expected.device)
    max_abs, max_rel, n_bad, n_odd = zero, zero, zero.long(), zero.long()
    checked = 0
    for e, a in chunks(expected, actual):
        e, a = e.double(), a.double()
        finite = torch.isfinite(e)
        odd = is_odd(e, a)
        err = torch.where(finite, (a - e).abs(), 0.0)
        err = torch.where(torch.isnan(err), float("inf"), err)  # a NaN where a finite value was expected
        magnitude = e.abs()
        n_bad = n_bad + ((err > atol + rtol * torch.where(finite, magnitude, 0.0)) & finite).sum()
        n_odd = n_odd + odd.sum()
        max_abs = torch.maximum(max_abs, err.max())
        max_rel = torch.maximum(max_rel, (err / torch.where(finite, magnitude + atol, 1.0)).max())
        checked += int(e.numel())
    bad, odd_count = int(n_bad), int(n_odd)
    max_abs_f, max_rel_f = float(max_abs), float(max_rel)
    if odd_count:
        offset, i = _first(expected, actual, lambda e, a: is_odd(e.double(), a.double()))
        exp_v, act_v = _flat_at(expected, offset + i), _flat_at(actual, offset + i)
        kind = "NaN" if (exp_v != exp_v) or (act_v != act_v) else "Inf"
        if nonfinite == "finite-only":
            raise StageFailure(f"{what}: {kind} at flat index {offset + i} where the compiler kernel's output is "
                               f"finite (expected {exp_v}, got {act_v}); {odd_count} such element(s)")
        raise StageFailure(f"{what}: {kind} at flat index {offset + i} in one output only (expected {exp_v}, got "
                           f"{act_v}); {odd_count} element(s) with NaN/Inf in different places")
    if bad:
        raise StageFailure(f"{what}: {bad} of {checked} element(s) differ beyond rtol={rtol:g}: "
                           f"max abs error {max_abs_f:.3g}, max rel error {max_rel_f:.3g}")
    return max_abs_f, max_rel_f


def _first(expected: Any, actual: Any, test: Any) -> tuple[int, int]:
    """(chunk offset, index in chunk) of the first element where ``test`` holds."""
    for offset, (e, a) in _offset_chunks(expected, actual):
        hit = test(e, a)
        if bool(hit.any()):
            return offset, int(hit.nonzero()[0, 0])
    return 0, 0


def _flat_at(t: Any, index: int) -> Any:
    for offset, (flat,) in _offset_chunks(t):
        if index < offset + flat.numel():
            return flat[index - offset].item()
    return None


def _offset_chunks(*tensors: Any) -> Any:
    offset = 0
    for parts in chunks(*tensors):
        yield offset, parts
        offset += parts[0].numel()


class _Checker:
    """Stands in for the kernel during one model run; checks the candidate at every launch.

    ``where`` names the run in messages ("seed 1", "seed 1, stress variant 'x1e4'");
    ``modes`` are the passes per launch (written-only outputs poisoned, then
    pre-filled with random values); ``nonfinite`` is :func:`compare`'s rule.
    """

    def __init__(self, original: Any, candidate: Any, infos: list[Any], where: str, options: VerifyOptions,
                 device: str, modes: tuple[str, ...] = ("poison", "random"), nonfinite: str = "match"):
        self.original, self.candidate, self.infos = original, candidate, infos
        self.where, self.options, self.device = where, options, device
        self.modes, self.nonfinite = modes, nonfinite
        self.launches = 0
        self.failure: StageFailure | None = None
        self.worst_abs = self.worst_rel = 0.0
        self.bands = Bands([self._name(i) for i in range(len(infos))], device)

    def _name(self, i: int) -> str:
        return self.infos[i].name if i < len(self.infos) else f"argument {i}"

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _role(self, i: int) -> tuple[bool, bool]:
        info = self.infos[i] if i < len(self.infos) else None
        return (bool(info and info.read), bool(info and info.written))

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        import torch

        self.launches += 1
        if self.failure is not None:  # already failed: let the model finish with the compiler's kernel
            return self.original.run(*args, stream=stream, **kwargs)
        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        written = [i for i in tensors if self._role(i)[1]]
        out_only = [i for i in written if not self._role(i)[0]]
        in_out = [i for i in written if self._role(i)[0]]
        read_only = [i for i in tensors if not self._role(i)[1]]
        saved = {i: args[i].clone() for i in in_out}
        before = {i: snapshot(args[i]) for i in read_only}
        fill_seed = int.from_bytes(os.urandom(8), "little") >> 1
        results: dict[int, Any] = {}
        try:
            for mode in self.modes:
                results = {}
                for who, kernel in (("compiler", self.original), ("candidate", self.candidate)):
                    for i in in_out:
                        args[i].copy_(saved[i])
                    for k, i in enumerate(out_only):
                        poison(args[i]) if mode == "poison" else random_fill(args[i], fill_seed + k)
                    if who == "compiler":
                        kernel.run(*args, stream=stream, **kwargs)
                        self._sync()
                        results = {i: args[i].clone() for i in written}
                        continue
                    # The candidate runs on guarded copies (the real tensors where none fit).
                    ran_on, guards = self.bands.wrap(args, tensors, written, "nan" if mode == "poison" else "random")
                    try:
                        kernel.run(*ran_on, stream=stream, **kwargs)
                        self._sync()
                    except torch.OutOfMemoryError:
                        raise
                    except Exception as exc:
                        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                        raise StageFailure(f"candidate raised on {self.where}: {type(exc).__name__}: {text}") from exc
                    breach = self.bands.check(guards, self.where)
                    if breach is not None:
                        raise StageFailure(breach)
                    self._compare(ran_on, results, written, read_only, before, mode)
        except StageFailure as failure:
            self.failure = failure
        # Leave the compiler's results in place for the rest of the model.
        for i in written:
            if i in results:
                args[i].copy_(results[i])
        for i in read_only:
            restore(args[i], before[i])
        return None

    def _label(self, i: int, mode: str) -> str:
        return self._name(i) + ("" if mode == "poison" else " (outputs pre-filled with random values)")

    def _compare(self, args: Any, results: dict[int, Any], written: list[int], read_only: list[int],
                 before: dict[int, Any], mode: str) -> None:
        """``args``: what the candidate ran on (guarded copies or the real tensors)."""
        for i in written:
            rtol = self.options.kernel_rtol(str(args[i].dtype).removeprefix("torch."))
            a, r = compare(results[i], args[i], rtol, f"{self.where}, written argument {self._label(i, mode)}",
                           self.nonfinite)
            self.worst_abs, self.worst_rel = max(self.worst_abs, a), max(self.worst_rel, r)
        for i in read_only:
            if not unchanged(args[i], before[i]):
                raise StageFailure(f"{self.where}, read-only argument {self._label(i, mode)}: changed (the "
                                   "candidate wrote into an argument the compiler kernel only reads)")


class KernelRows(list):
    """The kernel stage's rows (one :class:`SeedErrors` per seed), with what the stress passes did."""

    stress_seed: int | None = None
    stress: list[str]  # variants that ran with the kernel launched
    skipped: list[str]  # "variant (why)": the model raised, or did not launch the kernel, on the compiler's side
    guards: list[str]  # what the guard bands covered (one phrase per distinct case)

    def __init__(self, rows: Any = ()) -> None:
        super().__init__(rows)
        self.stress, self.skipped, self.guards = [], [], []

    def saw(self, checker: _Checker) -> None:
        self.guards += [note for note in checker.bands.notes if note not in self.guards]

    def describe(self) -> str:
        """One phrase for the stage's detail: how many stress variants ran, what the guard bands covered."""
        if self.stress_seed is None:
            text = "no stress variants (no floating-point model inputs)"
        else:
            variants = ", ".join(self.stress) or "none"
            text = f"{len(self.stress)} stress variant(s) of seed {self.stress_seed} ({variants})"
        if self.skipped:
            text += f", skipped: {'; '.join(self.skipped)}"
        if self.guards:
            text += f"; {'; '.join(self.guards)}"
        return text


def kernel_stage(prepared: Prepared, name: str, candidate: Any, allow_reduced_precision: bool) -> KernelRows:
    """Every launch of kernel ``name`` on every seed and stress variant, compiler's kernel vs candidate."""
    from ..swap import swapped

    compiled = prepared.compiled
    handle = compiled.kernel(name)
    options = VerifyOptions(allow_reduced_precision=allow_reduced_precision)
    rows = KernelRows()
    for seed in prepared.seeds:
        inputs = prepared.inputs(seed)
        unchecked = GuardedKernel(candidate, handle.info.args, f"seed {seed} (an unchecked run)", prepared.device)
        prepared.extra_runs({name: unchecked}, inputs, f"seed {seed}")
        if unchecked.failure is not None:
            raise StageFailure(unchecked.failure)
        checker = _Checker(handle.original, candidate, handle.info.args, f"seed {seed}", options, prepared.device)
        with swapped(compiled, {name: checker}):
            compiled(*inputs)
        if checker.failure is not None:
            raise checker.failure
        rows.saw(checker)
        prepared.check_inputs(seed, inputs)
        del inputs
        if not checker.launches:
            raise StageFailure(f"kernel {name} was not launched by the model on seed {seed}")
        rows.append(SeedErrors(seed=seed, kernel_max_abs=checker.worst_abs, kernel_max_rel=checker.worst_rel))
    _stress(prepared, name, candidate, options, rows)
    return rows


def _stress(prepared: Prepared, name: str, candidate: Any, options: VerifyOptions, rows: KernelRows) -> None:
    """The stress variants of the first seed's inputs, one checked pass each (see the module's docstring).

    Inputs are drawn again for each variant and transformed in place, so one seed's
    inputs are on the device at a time. One pass (poisoned outputs) per launch: the
    seeded runs already pre-filled outputs with random values.
    """
    import torch

    from ..swap import swapped

    compiled, handle = prepared.compiled, prepared.compiled.kernel(name)
    seed = prepared.seeds[0]
    for variant in STRESS_VARIANTS:
        zero_seed = int.from_bytes(os.urandom(8), "little") >> 1
        inputs = _stressed_inputs(prepared, seed, variant, zero_seed)
        if inputs is None:
            return
        rows.stress_seed = seed
        where = f"seed {seed}, stress variant {variant!r} (floating-point inputs {_STRESS_TEXT[variant]})"
        checker = _Checker(handle.original, candidate, handle.info.args, where, options, prepared.device,
                           modes=("poison",), nonfinite="finite-only")
        raised = None
        try:
            with swapped(compiled, {name: checker}):
                compiled(*inputs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if checker.failure is not None:
                raise checker.failure from exc
            raised = type(exc).__name__  # not the exception: its frames hold the inputs
        del inputs
        if raised is not None:
            if not _raises_alone(prepared, seed, variant, zero_seed):
                raise StageFailure(f"{where}: the model raised with the candidate checked in place, and not without "
                                   f"it ({raised})")
            # The model itself rejects these inputs: nothing to check the candidate on.
            rows.skipped.append(f"{variant} (the model raises on it: {raised})")
            continue
        if checker.failure is not None:
            raise checker.failure
        if not checker.launches:
            rows.skipped.append(f"{variant} (the model did not launch the kernel)")
            continue
        rows.saw(checker)
        rows.stress.append(variant)


def _stressed_inputs(prepared: Prepared, seed: int, variant: str, zero_seed: int) -> list[Any] | None:
    """The seed's inputs drawn afresh and turned into ``variant`` (None: no floating-point input)."""
    import torch

    inputs = prepared.inputs(seed)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]  # Python numbers pass as they are
    if not any(x.dtype.is_floating_point for x in tensors):
        return None
    seen: set[tuple[int, Any]] = set()
    for x in tensors:
        key = (x.data_ptr(), x.dtype)
        if key not in seen:  # one tensor passed twice is transformed once
            seen.add(key)
            stress(x, variant, zero_seed)
    return inputs


def _raises_alone(prepared: Prepared, seed: int, variant: str, zero_seed: int) -> bool:
    """Whether the compiled model, with the compiler's kernels only, raises on this stress variant."""
    import torch

    inputs = _stressed_inputs(prepared, seed, variant, zero_seed)
    try:
        prepared.compiled(*(inputs or []))
    except torch.OutOfMemoryError:
        raise
    except Exception:  # noqa: BLE001 - any error of the model's own
        return True
    return False


_STRESS_TEXT = {"x1e4": "times 1e4", "x1e-4": "times 1e-4", "abs": "made |x|", "-abs": "made -|x|",
                "zeros": "with a random tenth of elements set to zero"}
