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
"""

from __future__ import annotations

import os
from typing import Any

from ..records import SeedErrors
from .options import VerifyOptions
from .prepared import Prepared, StageFailure
from .tensors import checksum, chunks, poison, random_fill

EXACT_COPY_BYTES = 16 << 20  # read-only arguments up to this size are compared exactly, larger by checksum


def compare(expected: Any, actual: Any, rtol: float, what: str) -> tuple[float, float]:
    """Check ``actual`` against ``expected`` in chunks; returns (max abs, max rel) error.

    Figures accumulate on the device and are read once at the end (a synchronisation
    per chunk cost seconds at 2^31 elements); only a failure walks the chunks again to
    name the first offending index. Raises StageFailure naming ``what``.
    """
    import torch

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
        # NaN/Inf must sit in the same places, Inf with the same sign.
        odd = (torch.isnan(e) != torch.isnan(a)) | (torch.isinf(e) != torch.isinf(a)) | (torch.isinf(e) & (e != a))
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
        def is_odd(e: Any, a: Any) -> Any:
            e, a = e.double(), a.double()
            return (torch.isnan(e) != torch.isnan(a)) | (torch.isinf(e) != torch.isinf(a)) | (torch.isinf(e) & (e != a))
        offset, i = _first(expected, actual, is_odd)
        exp_v, act_v = _flat_at(expected, offset + i), _flat_at(actual, offset + i)
        kind = "NaN" if (exp_v != exp_v) or (act_v != act_v) else "Inf"
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
    """Stands in for the kernel during one model run; checks the candidate at every launch."""

    def __init__(self, original: Any, candidate: Any, infos: list[Any], seed: int, options: VerifyOptions, device: str):
        self.original, self.candidate, self.infos = original, candidate, infos
        self.seed, self.options, self.device = seed, options, device
        self.launches = 0
        self.failure: StageFailure | None = None
        self.worst_abs = self.worst_rel = 0.0

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
        before = {i: (args[i].clone() if args[i].numel() * args[i].element_size() <= EXACT_COPY_BYTES
                      else checksum(args[i])) for i in read_only}
        fill_seed = int.from_bytes(os.urandom(8), "little") >> 1
        results: dict[int, Any] = {}
        try:
            for mode in ("poison", "random"):
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
                    try:
                        kernel.run(*args, stream=stream, **kwargs)
                        self._sync()
                    except torch.OutOfMemoryError:
                        raise
                    except Exception as exc:
                        text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
                        raise StageFailure(f"candidate raised on seed {self.seed}: {type(exc).__name__}: {text}") from exc
                    self._compare(args, results, written, read_only, before, mode)
        except StageFailure as failure:
            self.failure = failure
        # Leave the compiler's results in place for the rest of the model.
        for i in written:
            if i in results:
                args[i].copy_(results[i])
        for i in read_only:
            if not isinstance(before[i], tuple):
                args[i].copy_(before[i])
        return None

    def _label(self, i: int, mode: str) -> str:
        name = self.infos[i].name if i < len(self.infos) else f"argument {i}"
        return name + ("" if mode == "poison" else " (outputs pre-filled with random values)")

    def _compare(self, args: Any, results: dict[int, Any], written: list[int], read_only: list[int],
                 before: dict[int, Any], mode: str) -> None:
        import torch

        for i in written:
            rtol = self.options.kernel_rtol(str(args[i].dtype).removeprefix("torch."))
            a, r = compare(results[i], args[i], rtol, f"seed {self.seed}, written argument {self._label(i, mode)}")
            self.worst_abs, self.worst_rel = max(self.worst_abs, a), max(self.worst_rel, r)
        for i in read_only:
            ref = before[i]
            same = checksum(args[i]) == ref if isinstance(ref, tuple) else bool(torch.equal(ref, args[i]))
            if not same:
                raise StageFailure(f"seed {self.seed}, read-only argument {self._label(i, mode)}: changed (the "
                                   "candidate wrote into an argument the compiler kernel only reads)")


def kernel_stage(prepared: Prepared, name: str, candidate: Any, allow_reduced_precision: bool) -> list[SeedErrors]:
    """Every launch of kernel ``name`` on every seed, compiler's kernel vs candidate."""
    from ..swap import swapped

    compiled = prepared.compiled
    handle = compiled.kernel(name)
    options = VerifyOptions(allow_reduced_precision=allow_reduced_precision)
    rows = []
    for seed in prepared.seeds:
        checker = _Checker(handle.original, candidate, handle.info.args, seed, options, prepared.device)
        inputs = prepared.inputs(seed)
        with swapped(compiled, {name: checker}):
            compiled(*inputs)
        if checker.failure is not None:
            raise checker.failure
        prepared.check_inputs(seed, inputs)
        del inputs
        if not checker.launches:
            raise StageFailure(f"kernel {name} was not launched by the model on seed {seed}")
        rows.append(SeedErrors(seed=seed, kernel_max_abs=checker.worst_abs, kernel_max_rel=checker.worst_rel))
    return rows
