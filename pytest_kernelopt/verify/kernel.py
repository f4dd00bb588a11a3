"""Stage 2: the candidate against the compiler's kernel, on the model's real arguments.

On each seed the model runs with a checker in place of the kernel. At every launch
the checker runs the compiler's kernel and then the candidate on the very same
argument tensors (no copies of inputs, so this works when an argument is 8 GiB):

* arguments the kernel reads and writes are saved first and put back before each run;
* arguments it only writes are poisoned before each run (NaN, or the integer
  maximum) so unwritten elements show, and in a second pass pre-filled with random
  values from an unpredictable seed;
* what the compiler's kernel wrote is kept, the candidate's output judged against it
  element by element by the one numerics rule (:mod:`.numerics`):
  ``|candidate - compiler| <= atol + rtol * |compiler|`` with rtol by dtype and atol
  rtol times the median magnitude of the compiler's output (never its maximum);
  NaN/Inf only where the compiler's output has them; integers and bools exactly.
  A failure names the element (flat index and multi-index), its input draw, the
  expected and actual values and the allowance;
* arguments it only reads are checksummed before and compared after (small ones
  exactly): writing into an input is a failure;
* the compiler's results are left in place, so the rest of the model runs on them.

Each launch of each seed gets three checked passes, in a drawn order: two on copies of
the tensor arguments inside **guard bands** (:mod:`.guards`), one per canary kind (NaN
with a random payload, or random numbers), so a read of the padding reaches an output
in one pass at least and a store past the end of an output fails the stage; and one
**on the model's own tensors**, exactly as production calls the candidate (no copies,
no padding: the allocator's memory around its pointers), so a kernel that tells guard
bands apart (by what lies in front of its pointer, or its address) is judged on what
production would run. The unchecked runs before each seed's checked one run the
candidate on guarded copies too (:class:`.guards.GuardedKernel`), with written-only
outputs pre-filled the same two ways.

Before each seed's checked run the model runs 1-3 times (drawn) with the candidate
swapped in and nothing checked, so a candidate that counts its calls cannot know
which ones are checked (:meth:`Prepared.extra_runs`).

**Inputs.** The seeded runs use the session's seeds (drawn from the OS when the session
opens unless ``--seed`` was given; the model stage needs float64 references for them,
computed then). After them, **input draws** run through the same checker (one pass, outputs pre-filled
either way, drawn; one to half of the draws, drawn, on the model's own tensors, the others
on guarded copies): for each of :data:`.tensors.STRESS_VARIANTS`, the
inputs are drawn afresh under a seed drawn for this check (this stage compares with the
compiler's kernel at each launch and needs no reference computed in advance, so every
check sees new numbers) and every floating-point model input is turned in place into
that draw: tiny, mid-range (|x| in [10, 1000]), huge, per-element mixes of magnitudes
over 16 decades (float32) with exact zeros, one-signed, NaN/+-Inf at random places; rows
offset far from zero against their spread, constant rows, small integers (exact ties), a
few repeated values, subnormals (alone and mixed with normals), values near the dtype's
largest and smallest normal, rows sorted either way, zeros, and values on coarser grids (bfloat16, float16,
float8, fixed point: inputs that came from a narrower type). Integer inputs stay as drawn in those (a model
with no floating-point input gets them on its embedding tables: :meth:`.prepared.Prepared.stress_tables`); a model
with integer inputs (token ids, labels, indices) gets draws of its own for them (:data:`.tensors.INT_VARIANTS`:
one value, rows ending in a pad run, sorted rows, two values), each value one of that tensor's own draw, the
floating-point inputs as drawn; a candidate that fails one is held to it only where the compiler's kernel,
checked in its place, passes it (repeated indices can make a store's winner vary). The compiler's kernel sets the standard: where its output
is NaN/Inf the candidate's must be the same; where finite, within the rule above. A
draw on which the model raises without the candidate, or does not launch the kernel,
or where the compiler's kernel writes no finite number at all, is skipped and the
stage's detail says so. The draws' seeds are in the stage's detail.

**Incoming gradients.** A backward kernel of a training step (capture/training.py) reads mostly the
step's incoming gradients; for one, every stress variant runs once more in a draw of its own, the
inputs plain and the loss's gradient of each output turned into the variant (:class:`IncomingDraw`)
before the compiled backward runs from it.
"""

from __future__ import annotations

from typing import Any

from ..capture import launch_signature
from ..records import SeedErrors
from .guards import CANARIES, UNGUARDED, Bands, Guard, GuardedKernel
from .numerics import Judgement, NumericsFailure, NumericsRule, Tolerance, judge
from .prepared import Prepared, StageFailure
from .tensors import (EXACT_COPY_BYTES, INT_TEXT, INT_VARIANTS, STRESS_VARIANTS, checksum, chunks, is_integer, limits_of,
                      narrowest_float, poison, random_fill, restore, snapshot, stress, stress_inputs, stress_integers,
                      stress_text, unchanged)

__all__ = ["EXACT_COPY_BYTES", "FRESH", "KernelRows", "compare", "kernel_stage"]

# A plain draw beside the stress draws: get_inputs() under a seed drawn for this check, with
# weights perturbed from it (Prepared.inputs), unstressed. A kernel that recognises the
# session's inputs (or weights) gains nothing: this draw is new to every check.
FRESH = "fresh"


def compare(expected: Any, actual: Any, rtol: float | None, what: str, rule: NumericsRule | None = None,
            rows: tuple[Any, int] | None = None, slack: tuple[Any, int] | None = None) -> Judgement:
    """``actual`` against ``expected`` under the kernel stage's tolerance (:meth:`NumericsRule.kernel_tolerance`).

    ``rtol``: instead of the rule's for the dtype (None: the rule's); ``rows``: (each row's condition, the
    row's length) on the offset draw (:meth:`NumericsRule.row_tolerance`), instead of either; ``slack``:
    (each row's measured change under rounding of the inputs, the row's length: :func:`rounding_slack`),
    added to each row's absolute part. Raises StageFailure naming ``what`` and the offending element.
    """
    floating = expected.dtype.is_floating_point
    rule = rule or NumericsRule()
    if not floating:
        tol = Tolerance(0.0, 0.0)
    elif rows is not None:
        tol = rule.row_tolerance(expected, *rows)
    else:
        tol = rule.kernel_tolerance(expected, rtol)
        if slack is not None and slack[0].numel() * slack[1] == expected.numel():
            extra = slack[0].double()
            tol = Tolerance(tol.rtol, tol.atol + float(extra.max()),
                            f"{tol.origin}; each row's atol plus what the compiler's kernel moves by there when "
                            f"its inputs move by {SLACK_ULPS} ulps", row_atol=tol.atol + extra, row_length=slack[1])
    try:
        return judge(expected, actual, tol, what)
    except NumericsFailure as exc:
        raise StageFailure(str(exc)) from exc


# The offset draw, row by row (a red-team round of 2026-12-07: a LayerNorm 5% off only on rows lying far from
# zero against their spread passed, every row's allowance widened by the draw's largest shift). Where the
# compiler's kernel is shown to compute each row of an output from the same row of an input alone (a few of that
# input's rows changed, drawn: only those rows of the output change), each output row is widened by its own
# input row's condition (tensors.row_condition, times CONDITION_SAFETY: an honest other order of a LayerNorm's
# sums used at most 8% of the allowance so, on rows of 128 to 32,768), and by the largest condition of every
# other input; elsewhere, and for every output no input is shown row-local for, by the draw's largest, as before.
CONDITION_SAFETY = 1.0
PROBED_ROWS = 16  # rows of an input changed to show an output row-local to it, at most (half of them, fewer)


def row_conditions(original: Any, args: Any, written: list[int], out_only: list[int], in_out: list[int],
                   saved: dict[int, Any], read_only: list[int], condition: float, seed: int, sync: Any,
                   stream: Any, kwargs: dict[str, Any]) -> dict[int, tuple[Any, int]]:
    """Per written floating-point argument shown row-local (above): (each of its rows' condition, clamped to
    [1, ``condition``], the row's length in elements). Runs the compiler's kernel (``original``) once, then
    once per input with rows; leaves the read-only arguments as they were (the caller resets the others)."""
    import torch

    from .tensors import _hash_uniform, row_condition, rows_of

    outputs = [i for i in written if args[i].dtype.is_floating_point and args[i].dim() >= 1 and args[i].numel() > 0]
    inputs = [i for i in (*read_only, *in_out) if args[i].dtype.is_floating_point and args[i].numel() > 0]
    if not outputs or not inputs:
        return {}
    state = {i: saved[i] if i in in_out else args[i] for i in inputs}

    def launch(probe: tuple[int, Any] | None = None) -> None:
        for i in in_out:
            args[i].copy_(saved[i])
        for i in out_only:
            poison(args[i])
        kept: list[Any] = []
        try:
            if probe is not None:
                _change_rows(args[probe[0]], probe[1], kept)
            original.run(*args, stream=stream, **kwargs)
            sync()
        finally:
            if probe is not None and probe[0] in read_only:
                _put_rows_back(args[probe[0]], kept)

    matches: dict[int, dict[int, int]] = {}  # input -> {output: the row length its rows map to}
    for i in inputs:
        rows = rows_of(state[i])
        if rows < 2:
            continue
        matched = {o: args[o].shape[-1] if rows == rows_of(args[o]) else 1 for o in outputs
                   if rows in (rows_of(args[o]), args[o].numel())}
        if matched:
            matches[i] = matched
    if not matches:
        return {}
    conds = {i: row_condition(state[i]) for i in inputs}
    local: dict[int, list[tuple[int, int]]] = {o: [] for o in outputs}  # output -> [(input, row length)]
    elementwise: dict[int, set[int]] = {o: set() for o in outputs}  # output -> inputs read a value a column
    try:
        launch()
        # Each output's rows as fingerprints, not a copy: an output can be as large as the GPU allows.
        base = {(o, length): _fingerprints(args[o], length) for m in matches.values() for o, length in m.items()}
        for k, (i, matched) in enumerate(matches.items()):
            rows = rows_of(state[i])
            index = torch.arange(rows, device=args[i].device)
            order = torch.argsort(_hash_uniform(index, seed + k))
            picked = torch.zeros(rows, dtype=torch.bool, device=args[i].device)
            picked[order[:max(1, min(PROBED_ROWS, rows // 2))]] = True
            launch((i, picked))
            for o, length in matched.items():
                changed = _fingerprints(args[o], length) != base[(o, length)]
                if not bool((changed & ~picked).any()):
                    local[o].append((i, length))
        # An input of one value a column (a weight, a bias) that each output column reads alone: a few of its
        # values changed, only those columns change. Its shift (the draw moves it too) feeds no reduction of
        # the row: it does not widen the rows (a second red-team round: a LayerNorm's weight and bias passed as
        # inputs widened every row again).
        for o, pairs in local.items():
            length = args[o].shape[-1]
            if not pairs or any(n != length for _, n in pairs):
                continue
            mine = {i for i, _ in pairs}
            for k, i in enumerate(i for i in read_only if i in conds and i not in mine):
                if args[i].numel() != length or not args[i].is_contiguous() or length < 2:
                    continue
                columns = torch.zeros(length, dtype=torch.bool, device=args[i].device)
                order = torch.argsort(_hash_uniform(torch.arange(length, device=args[i].device), seed + 97 + k))
                columns[order[:max(1, min(PROBED_ROWS, length // 2))]] = True
                launch()  # the outputs of the inputs as they are
                before = _fingerprints(args[o], length, by_column=True)
                flat = args[i].view(-1)
                where = columns.nonzero().flatten()
                kept = flat[where].clone()
                try:
                    flat[where] = kept * 1.5 + 1
                    launch()
                finally:
                    flat[where] = kept
                changed = _fingerprints(args[o], length, by_column=True) != before
                if not bool((changed & ~columns).any()):
                    elementwise[o].add(i)
    except torch.OutOfMemoryError:
        raise
    except Exception:  # noqa: BLE001 - the probe is the verifier's: failing, every row keeps the draw's largest
        return {}
    found: dict[int, tuple[Any, int]] = {}
    for o, pairs in local.items():
        if not pairs or len({length for _, length in pairs}) != 1:
            continue
        mine = {i for i, _ in pairs}
        floor = max((float(conds[i].max()) for i in inputs if i not in mine and i not in elementwise[o]),
                    default=1.0)
        per = torch.stack([conds[i] for i in sorted(mine)]).amax(dim=0).clamp(min=min(floor, condition))
        per = torch.nan_to_num(per * CONDITION_SAFETY, nan=condition, posinf=condition).clamp(1.0, condition)
        found[o] = (per, pairs[0][1])
    return found


# The constant draw, row by row (2026-12-07): a row of one value x has a mean that an honest sum in another
# order need not round back to x exactly (only a tree over a power of two of them, or Welford, does), and a
# LayerNorm multiplies x - mean by 1/sqrt(eps): sums of three strided parts were 2-8x the allowance there, on
# every LayerNorm over rows tried. On that draw each output row is also allowed what the compiler's own kernel
# moves by there when its floating-point inputs (float32 and float64) move by SLACK_ULPS units in the last place
# (signs drawn per element): how much rounding of its inputs the output amplifies, measured, not assumed.
SLACK_ULPS = 16


def rounding_slack(original: Any, args: Any, written: list[int], out_only: list[int], in_out: list[int],
                   saved: dict[int, Any], read_only: list[int], seed: int, sync: Any, stream: Any,
                   kwargs: dict[str, Any]) -> dict[int, tuple[Any, int]]:
    """Per written floating-point argument with a dimension: (each row's largest change of the compiler's output
    when its float32/float64 inputs move by SLACK_ULPS ulps, the row's length). Runs the compiler's kernel twice,
    the second time on perturbed copies (the arguments themselves are left as they were; the caller resets the
    written ones); empty where nothing can be perturbed or the probe fails (no slack: never a candidate's
    failure)."""
    import torch

    from .tensors import _hash_uniform, views

    outputs = [i for i in written if args[i].dtype.is_floating_point and args[i].dim() >= 1 and args[i].numel() > 0]
    moved = [i for i in (*read_only, *in_out) if args[i].dtype in (torch.float32, torch.float64)
             and args[i].numel() > 0]
    if not outputs or not moved:
        return {}

    def launch(inputs: Any) -> dict[int, Any]:
        for i in in_out:
            args[i].copy_(saved[i] if inputs is args else inputs[i])
        for i in out_only:
            poison(args[i])
        original.run(*[inputs[i] if i in read_only else a for i, a in enumerate(args)], stream=stream, **kwargs)
        sync()
        return {o: args[o].clone() for o in outputs}

    try:
        before = launch(args)
        perturbed = list(args)
        for k, i in enumerate(moved):
            copy = (saved[i] if i in in_out else args[i]).clone()
            done = 0
            for piece in views(copy):
                index = torch.arange(done, done + piece.numel(), device=piece.device).view(piece.shape)
                sign = torch.where(_hash_uniform(index, seed + k) < 0.5, -1.0, 1.0).to(piece.dtype)
                piece.mul_(1.0 + sign * (SLACK_ULPS * torch.finfo(piece.dtype).eps))
                done += piece.numel()
            perturbed[i] = copy
        after = launch(perturbed)
        del perturbed
    except torch.OutOfMemoryError:
        if torch.cuda.is_available():
            torch.cuda.empty_cache()
        return {}
    except Exception:  # noqa: BLE001 - the probe is the verifier's: failing, no slack (as before it)
        return {}
    found: dict[int, tuple[Any, int]] = {}
    for o in outputs:
        length = max(1, args[o].shape[-1])
        change = (after[o].double() - before[o].double()).abs()
        change = torch.where(torch.isfinite(change), change, 0.0).reshape(-1, length).amax(dim=1)
        found[o] = (change, length)
    return found


def _fingerprints(t: Any, length: int, by_column: bool = False) -> Any:
    """One int64 a row of ``length`` elements (row-major order), or ``by_column`` one a column of those rows:
    the sum of each element's bits times an odd number drawn from its position, wrapping; a row (column) whose
    bits change changes its fingerprint but by chance."""
    import torch

    from .tensors import chunks

    ints = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[t.element_size()]
    size = length if by_column else max(1, t.numel() // length)
    found = torch.zeros(size, dtype=torch.int64, device=t.device)
    offset = 0
    for (flat,) in chunks(t):
        index = torch.arange(offset, offset + flat.numel(), device=t.device)
        weight = (index * -7046029254386353131 + 6364136223846793005) | 1
        found.index_add_(0, index % length if by_column else index // length, flat.contiguous().view(ints).long() * weight)
        offset += flat.numel()
    return found


def _change_rows(t: Any, picked: Any, kept: list[Any]) -> None:
    """Change the ``picked`` rows of ``t`` in place (x -> 1.5 x + 1: no sign flip, permutation or square
    undoes it), appending to ``kept`` what :func:`_put_rows_back` needs before each block is changed."""
    from .tensors import _row_blocks

    for rows, first in _row_blocks(t):
        pick = picked[first:first + rows.shape[0]]
        if bool(pick.any()):
            where = pick.nonzero().flatten()
            kept.append((first, where, rows[where].clone()))
            rows[where] = rows[where] * 1.5 + 1


def _put_rows_back(t: Any, kept: list[Any]) -> None:
    from .tensors import _row_blocks

    blocks = {first: rows for rows, first in _row_blocks(t)}
    for first, where, values in kept:
        blocks[first][where] = values


def is_pointwise(info: Any) -> bool:
    """Whether the compiler's kernel computes each output element on its own (Inductor's
    ``triton_poi_`` kernels): no reduction, scan, dot or atomic in its source."""
    import re

    if not info.function.startswith("triton_poi_"):
        return False
    body = info.source
    return re.search(r"\btl\.(?:sum|max|min|reduce|argmax|argmin|associative_scan|cumsum|cumprod|dot|sort|"
                     r"xor_sum|reduce_or|atomic_\w+)\(|triton_helpers\.(?:max2|min2|welford\w*|prod|any)\(",
                     body) is None


def _any_finite(t: Any) -> bool:
    import torch

    if not t.dtype.is_floating_point:
        return True
    return any(bool(torch.isfinite(flat).any()) for (flat,) in chunks(t))


class _Checker:
    """Stands in for the kernel during one model run; checks the candidate at every launch.

    ``where`` names the run in messages ("seed 1", "draw 'mid' (seed 7...)"); ``passes``
    is how many passes each launch gets: 3 for the seeds (two on guarded copies, outputs
    poisoned in one and pre-filled with random values in the other, one NaN and one random
    canary, which gets which drawn; and one on the model's own tensors, as production runs
    the candidate, its fill drawn; in a drawn order), 1 for the draws (fill drawn; ``mode``
    a canary kind, or :data:`.guards.UNGUARDED`; None: a canary kind drawn). ``draw``: skip
    a launch where the compiler's kernel writes no finite number (nothing to hold the
    candidate to).
    """

    def __init__(self, original: Any, candidate: Any, infos: list[Any], where: str, rule: NumericsRule,
                 device: str, entropy: Any, passes: int = 3, draw: bool = False, mode: str | None = None,
                 condition: float = 1.0, incoming: IncomingDraw | None = None, sensitive: bool = False):
        self.original, self.candidate, self.infos = original, candidate, infos
        self.where, self.rule, self.device, self.entropy = where, rule, device, entropy
        self.passes, self.draw, self.mode = passes, draw, mode
        # An ill-conditioned draw (rows offset far from their spread) widens the allowance of a kernel
        # that is not pointwise: an honest reordering of a reduction differs from the compiler's order in
        # proportion to the offset, a wrong algorithm (a one-pass variance) with its square
        # (NumericsRule.shifted_rtol).
        self.condition = condition
        # A draw of a training step's incoming gradients conditions the backward's reductions the same way;
        # known once the backward starts (the draw is made then), so read at each comparison.
        self.incoming = incoming
        self.rows: dict[int, tuple[Any, int]] = {}  # per written argument: its rows' conditions (row_conditions)
        # The constant draw: each output row also allowed the compiler's own change under rounding (rounding_slack).
        self.sensitive = sensitive
        self.slack: dict[int, tuple[Any, int]] = {}
        self.launches = self.compared = self.unguarded = 0
        self.verified: set[tuple[str, ...]] = set()  # the launches compared, as capture.launch_signature writes them
        self.failure: StageFailure | None = None
        self.worst = Judgement()
        self.bands = Bands([self._name(i) for i in range(len(infos))], device, entropy)

    def _condition(self) -> float:
        return max(self.condition, self.incoming.condition if self.incoming is not None else 1.0)

    def _name(self, i: int) -> str:
        return self.infos[i].name if i < len(self.infos) else f"argument {i}"

    def _sync(self) -> None:
        if self.device == "cuda":
            import torch

            torch.cuda.synchronize()

    def _role(self, i: int) -> tuple[bool, bool]:
        info = self.infos[i] if i < len(self.infos) else None
        return (bool(info and info.starts_from_contents), bool(info and info.written))

    def _plan(self) -> list[tuple[str, str]]:
        """(output fill, canary kind or UNGUARDED) per pass.

        Seeds: poisoned and random outputs on guarded copies, one canary kind each, and one
        pass on the model's own tensors with a drawn fill; passes with one fill run together
        (the compiler's kernel then runs once per fill), poisoned first (an unwritten element
        shows as NaN first), the order within drawn. So every launch of every seed has an
        unguarded pass, at a place the candidate cannot predict.
        """
        fills = ("poison", "random")
        if self.passes == 1:
            return [(fills[self.entropy.below(2)], self.mode or CANARIES[self.entropy.below(len(CANARIES))])]
        passes = [*zip(fills, self.entropy.shuffled(list(CANARIES))), (fills[self.entropy.below(2)], UNGUARDED)]
        return sorted(self.entropy.shuffled(passes), key=lambda p: p[0] != "poison")  # stable: shuffled within

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
        fill_seed = self.entropy.seed()
        results: dict[int, Any] = {}
        made = None  # the output fill ``results`` was made with
        self.rows, self.slack = {}, {}
        try:
            if self._condition() > 1.0 and not self.rule.pointwise:
                self.rows = row_conditions(self.original, args, written, out_only, in_out, saved, read_only,
                                           self._condition(), self.entropy.seed(), self._sync, stream, kwargs)
            if self.sensitive and not self.rule.pointwise:
                self.slack = rounding_slack(self.original, args, written, out_only, in_out, saved, read_only,
                                            self.entropy.seed(), self._sync, stream, kwargs)
            for fill, canary in self._plan():
                for who, kernel in (("compiler", self.original), ("candidate", self.candidate)):
                    if who == "compiler" and fill == made:
                        continue  # the same starting state as the last pass: the same results
                    for i in in_out:
                        args[i].copy_(saved[i])
                    for k, i in enumerate(out_only):
                        poison(args[i]) if fill == "poison" else random_fill(args[i], fill_seed + k)
                    if who == "compiler":
                        kernel.run(*args, stream=stream, **kwargs)
                        self._sync()
                        results, made = {i: args[i].clone() for i in written}, fill
                        continue
                    if self.draw and not any(_any_finite(results[i]) for i in written):
                        break  # the compiler's kernel wrote no finite number: nothing to hold the candidate to
                    self._candidate(args, tensors, written, read_only, before, results, fill, canary, stream, kwargs)
                    self.verified.add(tuple(launch_signature(args)))
        except StageFailure as failure:
            self.failure = failure
        # Leave the compiler's results in place for the rest of the model.
        for i in written:
            if i in results:
                args[i].copy_(results[i])
        for i in read_only:
            restore(args[i], before[i])
        return None

    def _candidate(self, args: Any, tensors: list[int], written: list[int], read_only: list[int],
                   before: dict[int, Any], results: dict[int, Any], fill: str, canary: str, stream: Any,
                   kwargs: dict[str, Any]) -> None:
        """One checked run of the candidate: on guarded copies (the real tensors where none fit), or, for
        an UNGUARDED pass, on the model's own argument tensors exactly as production calls it."""
        import torch

        guards: list[Guard]
        if canary == UNGUARDED:
            ran_on, guards = list(args), []
            # Nothing pads these tensors: a store outside them may land in the verifier's copy of the
            # compiler's results (a neighbour in the allocator), which must not judge what it was written to.
            sums = {i: checksum(results[i]) for i in written}
        else:
            ran_on, guards = self.bands.wrap(args, tensors, written, canary)
        try:
            self.candidate.run(*ran_on, stream=stream, **kwargs)
            self._sync()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            text = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
            raise StageFailure(f"candidate raised on {self.where}: {type(exc).__name__}: {text}") from exc
        breach = self.bands.check(guards, self.where)
        if breach is not None:
            raise StageFailure(breach)
        if canary == UNGUARDED:
            if any(checksum(results[i]) != sums[i] for i in written):
                raise StageFailure(f"{self.where}, launch {self.launches}: the candidate, run on the model's own "
                                   "tensors, wrote into the verifier's memory (a store out of bounds)")
            self.unguarded += 1
        self._compare(ran_on, results, written, read_only, before, fill, canary)
        self.compared += 1

    def _label(self, i: int, fill: str, canary: str) -> str:
        where = "on the model's own tensors" if canary == UNGUARDED else "on guarded copies"
        return self._name(i) + (f" (outputs poisoned with NaN before the run, {where})" if fill == "poison"
                                else f" (outputs pre-filled with random values, {where})")

    def _compare(self, args: Any, results: dict[int, Any], written: list[int], read_only: list[int],
                 before: dict[int, Any], fill: str, canary: str) -> None:
        """``args``: what the candidate ran on (guarded copies or the real tensors)."""
        condition = self._condition()
        for i in written:
            rtol = None
            if condition > 1.0 and not self.rule.pointwise and results[i].dtype.is_floating_point:
                rtol = self.rule.shifted_rtol(results[i].dtype, condition)
            j = compare(results[i], args[i], rtol, f"{self.where}, launch {self.launches}, written argument "
                                             f"{self._label(i, fill, canary)}", self.rule, self.rows.get(i),
                        self.slack.get(i))
            w = self.worst
            w.worst_ratio, w.max_abs = max(w.worst_ratio, j.worst_ratio), max(w.max_abs, j.max_abs)
            w.max_rel = max(w.max_rel, j.max_rel)
        for i in read_only:
            if not unchanged(args[i], before[i]):
                raise StageFailure(f"{self.where}, read-only argument {self._name(i)}: changed (the "
                                   "candidate wrote into an argument the compiler kernel only reads)")


class KernelRows(list):
    """The kernel stage's rows (one :class:`SeedErrors` per seed), with what the draws did."""

    stress: list[str]  # draws that ran with the kernel launched and compared, "name (seed S)"
    skipped: list[str]  # "draw (why)": the model raised, or did not launch the kernel, on the compiler's side
    guards: list[str]  # what the guard bands covered (one phrase per distinct case)
    worst: float  # the worst element's error as a fraction of its allowance, over seeds and draws
    compared: int  # checked runs of the candidate, over seeds and draws
    unguarded: int  # ... of which on the model's own tensors (no guard bands, as in production)

    def __init__(self, rows: Any = ()) -> None:
        super().__init__(rows)
        self.stress, self.skipped, self.guards = [], [], []
        self.worst = 0.0
        self.compared = self.unguarded = 0
        self.verified: set[tuple[str, ...]] = set()

    def saw(self, checker: _Checker) -> None:
        self.guards += [note for note in checker.bands.notes if note not in self.guards]
        self.worst = max(self.worst, checker.worst.worst_ratio)
        self.compared += checker.compared
        self.unguarded += checker.unguarded
        self.verified |= checker.verified

    def launches(self) -> list[list[str]]:
        """The distinct launches the candidate was compared at, sorted: what production may run it at."""
        return [list(s) for s in sorted(self.verified)]

    def describe(self) -> str:
        """One phrase for the stage's detail: the draws that ran, what the guard bands covered."""
        text = f"{len(self.stress)} input draw(s)"
        if self.stress:
            text += f": {', '.join(self.stress)}"
        if self.skipped:
            text += f"; skipped: {'; '.join(self.skipped)}"
        if self.guards:
            text += f"; {'; '.join(self.guards)}"
        text += f"; {self.unguarded} of {self.compared} checked run(s) on the model's own tensors (no guard bands)"
        return text


def kernel_stage(prepared: Prepared, name: str, candidate: Any, allow_reduced_precision: bool) -> KernelRows:
    """Every launch of kernel ``name`` on every seed and input draw, compiler's kernel vs candidate."""
    from ..capture.swap import swapped

    compiled = prepared.compiled
    handle = compiled.kernel(name)
    rule = NumericsRule(reduced_precision=allow_reduced_precision, pointwise=is_pointwise(handle.info))
    entropy = prepared.entropy
    rows = KernelRows()
    integers = False  # whether the model has integer inputs: the integer draws then run too
    for seed in prepared.seeds:
        inputs = prepared.inputs(seed)
        integers = integers or any(is_integer(x) for x in inputs)
        unchecked = GuardedKernel(candidate, handle.info.args, f"seed {seed} (an unchecked run)", prepared.device,
                                  entropy)
        prepared.extra_runs({name: unchecked}, inputs, f"seed {seed}")
        if unchecked.failure is not None:
            raise StageFailure(unchecked.failure)
        checker = _Checker(handle.original, candidate, handle.info.args, f"seed {seed}", rule, prepared.device,
                           entropy)
        with swapped(compiled, {name: checker}):
            compiled(*inputs)
        if checker.failure is not None:
            raise checker.failure
        rows.saw(checker)
        prepared.check_inputs(seed, inputs)
        del inputs
        if not checker.launches:
            raise StageFailure(f"kernel {name} was not launched by the model on seed {seed}")
        w = checker.worst
        rows.append(SeedErrors(seed=seed, kernel_max_abs=w.max_abs, kernel_max_rel=w.max_rel,
                               kernel_ratio=w.worst_ratio))
    _draws(prepared, name, candidate, rule, rows, integers)
    return rows


def _draws(prepared: Prepared, name: str, candidate: Any, rule: NumericsRule, rows: KernelRows,
           integers: bool = False) -> None:
    """The input draws, one checked pass each (see the module's docstring); for a backward kernel, each
    stress variant once more on the step's incoming gradients (:class:`IncomingDraw`).

    Each draw's inputs are drawn under a seed of its own, fresh for this check, and
    transformed in place, so one draw's inputs are on the device at a time.
    """
    import torch

    from ..capture.swap import swapped
    from ..capture.training import incoming_drawn

    compiled, handle = prepared.compiled, prepared.compiled.kernel(name)
    entropy = prepared.entropy
    draws = [(FRESH, False), *((v, False) for v in STRESS_VARIANTS)]
    if integers:  # token ids, labels, indices: structured in draws of their own, floating-point inputs as drawn
        draws += [(v, False) for v in INT_VARIANTS]
    if getattr(handle.info, "backward", False):
        # What a backward kernel reads is mostly the incoming gradient: each variant on it too, in draws of
        # their own (inputs plain), since the backward is linear in it: a zero or NaN gradient drawn with the
        # same variant of the inputs would hide what that input draw checks.
        draws += [(v, True) for v in STRESS_VARIANTS]
    draws = entropy.shuffled(draws)  # no fixed order to count on either
    within = narrowest_float(handle.info.args)
    # A drawn share of the draws (one to half of them, which ones drawn) runs the candidate on
    # the model's own tensors, as production does; the others on guarded copies.
    unguarded = set(entropy.shuffled(draws)[:1 + entropy.below((len(draws) + 1) // 2)])
    for variant, on_gradients in draws:
        seed, transform = entropy.input_seed(), entropy.seed()
        inputs, condition, gradients = _drawn(prepared, seed, variant, transform, within, on_gradients)
        label = f"{variant} of the incoming gradients" if on_gradients else variant
        if inputs is None:
            if "every stress draw (no floating-point model input or embedding table)" not in rows.skipped:
                rows.skipped.append("every stress draw (no floating-point model input or embedding table)")
            continue
        if on_gradients:
            where = (f"draw {variant!r} of the incoming gradients (input seed {seed}, "
                     f"{_text(FRESH, inputs, within)}; the loss's gradient of each output "
                     f"{stress_text(variant, within or torch.float32)}, transform seed {transform})")
        else:
            where = (f"draw {variant!r} (input seed {seed}, {_text(variant, inputs, within)}, "
                     f"transform seed {transform})")
        if condition > 1.0 and not rule.pointwise:
            where += f", a reduction's allowance widened for shifts up to {condition:.3g}"
        checker = _Checker(handle.original, candidate, handle.info.args, where, rule, prepared.device, entropy,
                           passes=1, draw=True, mode=UNGUARDED if (variant, on_gradients) in unguarded else None,
                           condition=condition, incoming=gradients, sensitive=variant == "constant")
        raised = None
        try:
            with incoming_drawn(compiled.problem, gradients), swapped(compiled, {name: checker}):
                compiled(*inputs)
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            if checker.failure is not None:
                raise checker.failure from exc
            raised = type(exc).__name__  # not the exception: its frames hold the inputs
        del inputs
        if raised is not None:
            if not _raises_alone(prepared, seed, variant, transform, within, on_gradients):
                raise StageFailure(f"{where}: the model raised with the candidate checked in place, and not without "
                                   f"it ({raised})")
            # The model itself rejects these inputs: nothing to check the candidate on.
            rows.skipped.append(f"{label} (the model raises on it: {raised})")
            continue
        if checker.failure is not None:
            if variant in INT_VARIANTS and not _self_consistent(prepared, name, rule, seed, variant, transform, where):
                # Repeated indices can make the compiler's own kernel differ from itself (a store's winner): the
                # draw cannot judge the candidate, which is never blamed for it.
                rows.skipped.append(f"{label} (the compiler's kernel, checked against itself, differs on it)")
                continue
            raise checker.failure
        if not checker.launches:
            rows.skipped.append(f"{label} (the model did not launch the kernel)")
            continue
        if not checker.compared:
            rows.skipped.append(f"{label} (the compiler's kernel wrote no finite number)")
            continue
        rows.saw(checker)
        rows.stress.append(f"{label} (seed {seed})")


class IncomingDraw:
    """A stress draw of a training step's incoming gradients: called by the step (capture/training.py,
    :func:`..capture.training.incoming_drawn`) with the loss's gradient of each output, before the backward
    runs, it turns each in place into ``variant`` (:func:`.tensors.stress`, within ``within``'s limits),
    seeds ``seed``, ``seed + 1``, ... per output; ``condition``: the worst shift drawn (the ``offset`` draw)."""

    def __init__(self, variant: str, seed: int, within: Any = None):
        self.variant, self.seed, self.within = variant, seed, within
        self.condition = 1.0

    def __call__(self, gradients: list[Any]) -> None:
        seen: set[tuple[int, Any]] = set()
        for k, g in enumerate(gradients):
            if (g.data_ptr(), g.dtype) not in seen:
                seen.add((g.data_ptr(), g.dtype))
                self.condition = max(self.condition, stress(g, self.variant, self.seed + k, self.within))


def _self_consistent(prepared: Prepared, name: str, rule: NumericsRule, seed: int, variant: str, transform: int,
                     where: str) -> bool:
    """Whether the compiler's kernel, checked in place of a candidate on the same draw, passes: an integer draw a
    candidate failed on is held against it only then."""
    from ..capture.swap import swapped

    compiled, handle = prepared.compiled, prepared.compiled.kernel(name)
    inputs, _ = _stressed_inputs(prepared, seed, variant, transform)
    checker = _Checker(handle.original, handle.original, handle.info.args, where, rule, prepared.device,
                       prepared.entropy, passes=1, draw=True)
    try:
        with swapped(compiled, {name: checker}):
            compiled(*(inputs or []))
    except Exception:  # noqa: BLE001 - the compiler's kernel alone raising: it cannot judge either
        return False
    return checker.failure is None


def _text(variant: str, inputs: list[Any], within: Any = None) -> str:
    import torch

    if variant == FRESH:
        return "inputs as get_inputs() draws them, weights drawn for this draw"
    if variant in INT_TEXT:
        return INT_TEXT[variant]
    dtypes = sorted({x.dtype for x in inputs if isinstance(x, torch.Tensor) and x.dtype.is_floating_point}, key=str)
    if not dtypes:  # a model of token ids: its embedding tables were drawn (Prepared.stress_tables)
        return f"embedding tables {stress_text(variant, limits_of(within or torch.float32, within))}"
    texts = [stress_text(variant, limits_of(d, within)) for d in dtypes]
    if len(set(texts)) <= 1:
        return "floating-point inputs " + (texts[0] if texts else variant)
    return "floating-point inputs " + "; ".join(f"{str(d).replace('torch.', '')}: {t}" for d, t in zip(dtypes, texts))


def _stressed_inputs(prepared: Prepared, seed: int, variant: str, transform: int,
                     within: Any = None) -> tuple[list[Any] | None, float]:
    """The inputs drawn under ``seed`` and turned into ``variant`` (None: no floating-point input), and how
    much worse the draw conditions a row's reduction (:func:`.tensors.stress`; 1 for most draws)."""
    import torch

    inputs = prepared.inputs(seed)
    if variant == FRESH:
        return inputs, 1.0
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]  # Python numbers pass as they are
    if variant in INT_TEXT:
        done: set[tuple[int, Any]] = set()
        for k, x in enumerate(tensors):
            if is_integer(x) and (x.data_ptr(), x.dtype) not in done:
                done.add((x.data_ptr(), x.dtype))
                stress_integers(x, variant, transform + k)
        return (inputs if done else None), 1.0
    floating, condition = stress_inputs(inputs, variant, transform, within)
    if not floating:  # token ids only: the embedding tables are what the kernels read as floating-point input
        floating, condition = prepared.stress_tables(variant, transform, within)
    return (inputs if floating else None), condition


def _drawn(prepared: Prepared, seed: int, variant: str, transform: int, within: Any,
           on_gradients: bool) -> tuple[list[Any] | None, float, IncomingDraw | None]:
    """A draw's inputs and condition (:func:`_stressed_inputs`) and, for a draw of the incoming gradients,
    the inputs plain and the :class:`IncomingDraw` the step applies (seeded from ``transform``)."""
    if on_gradients:
        return prepared.inputs(seed), 1.0, IncomingDraw(variant, transform, within)
    inputs, condition = _stressed_inputs(prepared, seed, variant, transform, within)
    return inputs, condition, None


def _raises_alone(prepared: Prepared, seed: int, variant: str, transform: int, within: Any = None,
                  on_gradients: bool = False) -> bool:
    """Whether the compiled model, with the compiler's kernels only, raises on this draw."""
    import torch

    from ..capture.training import incoming_drawn

    inputs, _, gradients = _drawn(prepared, seed, variant, transform, within, on_gradients)
    try:
        with incoming_drawn(prepared.compiled.problem, gradients):
            prepared.compiled(*(inputs or []))
    except torch.OutOfMemoryError:
        raise
    except Exception:  # noqa: BLE001 - any error of the model's own
        return True
    return False
