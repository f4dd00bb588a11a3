"""Tensor bookkeeping that works at full size: chunked walks, checksums, fills.

A verifier that upcasts an 8 GiB fp32 tensor to float64, or compares two with
``(a - b).abs()``, needs 16-32 GiB of scratch on top of the model. Everything here
walks tensors in views of at most ``CHUNK`` elements, so the scratch stays at a
few hundred MiB whatever the size.
"""

from __future__ import annotations

import hashlib
import math
import os
import random
from typing import Any, Iterator

CHUNK = 1 << 25  # elements per step at most: 256 MiB of float64 scratch per temporary
MIN_CHUNK = 1 << 20  # ... and at least, unless the tensor is smaller
EXACT_COPY_BYTES = 16 << 20  # tensors a check may only read: copied up to this size, checksummed above


def chunk_size(numel: int) -> int:
    """About a sixteenth of the tensor, between MIN_CHUNK and CHUNK elements.

    The scratch of a comparison (several float64 temporaries of one chunk) then stays
    well under the tensor's own size: 2.8 GiB of scratch for a 128 MiB tensor compared
    in one piece was 7x the model's peak memory on the H200.
    """
    return max(1, min(CHUNK, max(MIN_CHUNK, numel // 16)))


def chunks(*tensors: Any, limit: int | None = None) -> Iterator[tuple[Any, ...]]:
    """Matching flat views (or flat copies of strided pieces) of same-shaped tensors."""
    first = tensors[0]
    limit = limit or chunk_size(first.numel())
    if first.numel() == 0:
        return
    if all(t.is_contiguous() for t in tensors):
        flats = [t.reshape(-1) for t in tensors]
        n = flats[0].numel()
        for start in range(0, n, limit):
            yield tuple(f[start:start + limit] for f in flats)
        return
    if first.dim() <= 1 or first.numel() <= limit:
        yield tuple(t.reshape(-1) for t in tensors)  # one small strided piece: a copy
        return
    rows = max(1, limit // max(1, first[0].numel()))
    for start in range(0, first.shape[0], rows):
        pieces = [t[start:start + rows] for t in tensors]
        if pieces[0][0].numel() > limit:
            for row in range(pieces[0].shape[0]):
                yield from chunks(*(p[row] for p in pieces), limit=limit)
        else:
            yield tuple(p.reshape(-1) for p in pieces)


def views(t: Any, limit: int | None = None) -> Iterator[Any]:
    """Pieces of ``t`` that are views (never copies), so an in-place operation on them changes ``t``.

    Contiguous tensors in flat slices of at most ``limit`` elements; strided ones in
    blocks of rows (a single row split further when it alone is too large).
    """
    limit = limit or chunk_size(t.numel())
    if t.numel() == 0:
        return
    if t.is_contiguous():
        flat = t.view(-1)
        for start in range(0, flat.numel(), limit):
            yield flat[start:start + limit]
        return
    if t.dim() <= 1 or t.numel() <= limit:
        yield t
        return
    rows = max(1, limit // max(1, t[0].numel()))
    for start in range(0, t.shape[0], rows):
        piece = t[start:start + rows]
        if piece[0].numel() > limit:
            for row in range(piece.shape[0]):
                yield from views(piece[row], limit)
        else:
            yield piece


def _int_view(flat: Any) -> Any:
    import torch

    raw = flat.contiguous().view(torch.uint8)
    if raw.numel() % 4 == 0:
        return raw.view(torch.int32)
    return raw


# Random per process: a candidate cannot know the weights to forge a matching checksum.
_WEIGHTS = [int.from_bytes(os.urandom(7), "little") | 1 for _ in range(64)]


def input_checksums(inputs: list[Any]) -> list[Any]:
    """:func:`checksum` of each tensor input; a Python number stands for itself."""
    import torch

    return [checksum(x) if isinstance(x, torch.Tensor) else (type(x).__name__, x) for x in inputs]


def checksum(t: Any) -> tuple[int, int, int]:
    """Three 64-bit sums over the tensor's bytes: plain, squared, and weighted per chunk.

    Used to notice that something wrote into a tensor it should only read, without
    holding a copy of it (model inputs can be 8 GiB). Not cryptographic: the chunk
    weights are random per process, so a change that keeps all three sums is not
    something a candidate can aim for.
    """
    import torch

    acc = None
    for i, (flat,) in enumerate(chunks(t.detach())):
        x = _int_view(flat).to(torch.int64)
        plain = x.sum()
        part = torch.stack([plain, (x * x).sum(), plain * _WEIGHTS[i % len(_WEIGHTS)] + i])
        acc = part if acc is None else acc + part
    if acc is None:
        return 0, 0, 0
    s1, s2, s3 = (int(v) for v in acc.tolist())
    mask = (1 << 64) - 1
    return s1 & mask, s2 & mask, s3 & mask


def snapshot(t: Any) -> Any:
    """What :func:`unchanged` needs to tell whether ``t`` was written: a copy up to
    ``EXACT_COPY_BYTES``, the checksums of a larger tensor (no second 8 GiB copy)."""
    if t.numel() * t.element_size() <= EXACT_COPY_BYTES:
        return t.detach().clone()
    return checksum(t)


def unchanged(t: Any, snap: Any) -> bool:
    """Whether ``t`` still holds what :func:`snapshot` saw, bit for bit (NaN included)."""
    import torch

    if isinstance(snap, tuple):
        return checksum(t) == snap
    # Bytes, not values: torch.equal says a tensor holding a NaN differs from itself.
    return bool(torch.equal(_bytes(snap), _bytes(t)))


def _bytes(t: Any) -> Any:
    import torch

    return t.detach().contiguous().reshape(-1).view(torch.uint8)


def same_bits(a: Any, b: Any) -> bool:
    """Whether two tensors of one shape and dtype hold the same bytes, compared in chunks."""
    import torch

    return all(torch.equal(_bytes(x), _bytes(y)) for x, y in chunks(a.detach(), b.detach()))


def restore(t: Any, snap: Any) -> None:
    """Put back what :func:`snapshot` copied (a checksum cannot be put back)."""
    if not isinstance(snap, tuple):
        t.copy_(snap)


class Entropy:
    """Every random choice of one session's checks: fills, canaries, paddings, draws, run counts.

    One stream per worker, derived from the session's input seeds (:meth:`from_seeds`):
    those come from the OS (``secrets``) unless ``--seed`` gave a root, so without it
    nothing here can be predicted by a candidate, and with it a run is reproduced.
    """

    def __init__(self, root: int):
        self._draw = random.Random(root)

    @classmethod
    def from_seeds(cls, seeds: list[int]) -> Entropy:
        digest = hashlib.sha256(("kernelopt:" + ",".join(map(str, seeds))).encode()).digest()
        return cls(int.from_bytes(digest[:8], "little"))

    @classmethod
    def from_os(cls) -> Entropy:
        return cls(int.from_bytes(os.urandom(8), "little"))

    def seed(self) -> int:
        """A 63-bit seed (fills, masks, guard paddings)."""
        return self._draw.getrandbits(63)

    def input_seed(self) -> int:
        """A seed for the model's inputs (``torch.manual_seed``), 31 bits like the session's."""
        return self._draw.getrandbits(31)

    def below(self, n: int) -> int:
        return self._draw.randrange(n)

    def shuffled(self, items: list[Any]) -> list[Any]:
        items = list(items)
        self._draw.shuffle(items)
        return items


# Input draws of the kernel stage, beside the model's own (``get_inputs``) draws: each is a
# fresh draw of the inputs under an unpredictable seed, its floating-point tensors then
# turned, in place, into one of these. The first six vary magnitudes and special values;
# the rest give the inputs structure that independent continuous draws never have
# (a large mean against the spread, exact ties, subnormals, the dtype's limits, order).
# What each does is in ``stress`` and, in words, :func:`stress_text`.
STRESS_VARIANTS = ("tiny", "mid", "huge", "mixed", "signed", "special",
                   "offset", "offset_samples", "offset_features", "offset_columns", "offset_whole", "offset_moderate",
                   "constant", "ties", "repeated", "subnormal",
                   "subnormal_mixed", "near_max", "near_tiny", "sorted", "reversed", "zeros", "rounded", "coarse", "padded",
                   "special_rows")
STRESS_TEXT = {
    "tiny": "scaled by 10^-k, k drawn in [1, {k}]",
    "mid": "|x| drawn log-uniformly in [10, 1000] per element, signs kept",
    "huge": "scaled by 10^k, k drawn in [1, {k}]",
    "mixed": "each element scaled by 10^e, e drawn in [-{k}, {k}] per element, an eighth of them zero",
    "signed": "made one-signed (|x| or -|x|, drawn)",
    "special": "NaN, +Inf and -Inf at random places (about one element in 4096, four in a small tensor, "
               "one of each at least)",
    "offset": "each row (along the last dimension) shifted by c = +-10^d times the mean magnitude, sign and d in "
              "[0, {offset}] drawn per row (a large mean against the spread)",
    "offset_samples": "each index along dimension 0 (a sample) shifted by c = +-10^d times the mean magnitude, sign and "
                      "d in [0, {offset}] drawn per index, the same along every other dimension (a group norm's "
                      "groups, a norm over several trailing dimensions, far from zero against their spread)",
    "offset_features": "each index along dimension 1 (a channel, a feature; of a vector: each element) shifted by "
                       "c = +-10^d times the mean magnitude, sign and d in [0, {offset}] drawn per index, the same "
                       "along every other dimension (a batch norm's channels far from zero against their spread)",
    "offset_columns": "each index along the last dimension (a column) shifted by c = +-10^d times the mean magnitude, "
                      "sign and d in [0, {offset}] drawn per index, the same along every other dimension (a reduction "
                      "over the leading dimensions: columns far from zero against their spread)",
    "offset_whole": "every element shifted by one c = +-10^d times the mean magnitude, sign and d in [0, {offset}] "
                    "drawn (every reduction, of any dimensions, far from zero against its spread)",
    "offset_moderate": "every element shifted by one moderate c = +-10^d times the mean magnitude, sign and d in "
                       "[{moderate}] drawn (every reduction a few to a few hundred spreads from zero, whatever the "
                       "layout)",
    "constant": "half of the rows (drawn per row) made constant along the last dimension (one value each)",
    "ties": "small integers, |x| <= m with m drawn in [1, 4] (many exact ties)",
    "repeated": "2 to 4 distinct values, drawn (repeated values)",
    "subnormal": "subnormal (|x| log-uniform in [{subnormal}, {tiny}), signs kept)",
    "subnormal_mixed": "half of them (drawn per element) subnormal, the rest as drawn",
    "near_max": "near the largest value a sum of them all keeps finite (|x| in [M/10, M], M = min(the dtype's "
                "max {max}, float32's (float64's) max / number of elements), signs kept)",
    "near_tiny": "near the dtype's smallest normal (|x| in [{tiny}, {tiny10}], signs kept)",
    "sorted": "sorted ascending along the last dimension",
    "reversed": "sorted descending along the last dimension",
    "zeros": "zeros (+0 or -0 per element, drawn)",
    "rounded": "every value rounded to bfloat16 (where that is as precise as the input: to float8 e4m3), as inputs "
               "cast up from a narrower type are",
    "coarse": "rounded to coarser number grids, one per contiguous part in drawn order: each narrower floating "
              "format of bfloat16, float16, float8 e4m3 and e5m2, and multiples of 2^-n, n drawn in [0, 8] (inputs "
              "that came from a narrower type, or were quantised)",
}
# Input draws of the kernel stage for models with integer inputs (token ids, labels, indices), which the draws
# above leave as drawn: each turns every integer (not bool) input, in place, into a structure with values only
# from that tensor's own draw (an index stays in range, a label stays a label): :func:`stress_integers`.
INT_VARIANTS = ("int_constant", "int_padded", "int_sorted", "int_few")
INT_TEXT = {
    "int_constant": "integer inputs made constant in three contiguous parts, in drawn order: their smallest value, "
                    "their largest and a drawn one of their values",
    "int_padded": "integer inputs' rows (along the last dimension) ending in a run of one value (a pad id: their "
                  "smallest, largest or a drawn one of their values, drawn per row), from a drawn position",
    "int_sorted": "integer inputs sorted along the last dimension",
    "int_few": "integer inputs made of two of their values (of their smallest, largest and a drawn one), drawn per "
               "element",
}
STRESS_TEXT.update({
    "padded": "rows (along the last dimension) zero-padded: half of them (drawn per row, the first not) zero "
              "from a position drawn per row on (short and long pads), the others zero throughout (a padded batch, "
              "masked rows)",
    "special_rows": "a quarter of the rows (drawn per row, one at least) holding a run of NaN, +Inf or -Inf "
                    "(drawn per row) from a position drawn per row on",
})
# The ``coarse`` draw's formats: those less precise than the input's limits are used.
COARSE_FORMATS = ("bfloat16", "float16", "float8_e4m3fn", "float8_e5m2")
STRESS_ZERO_FRACTION = 0.125
# The draws that shift values far from zero against their spread (rows, channels, columns): the kernel stage
# widens a reduction's allowance by their condition; the model stage runs each (prepared.offset_runs).
OFFSET_VARIANTS = ("offset", "offset_samples", "offset_features", "offset_columns", "offset_whole", "offset_moderate")
# offset_moderate's decades: one shift for all, where a one-pass variance guarded to be exact at large shifts is
# off (a red-team round of 2026-12-07: a reshape, a cat or a permute of the sample or channel axis, or a batch of
# one, left the other draws no moderately shifted group to show it on), clipped to the dtype's reach.
MODERATE_DECADES = (0.7, 2.5)
# The offset draw: the band below the top shift (decades) that half of the rows are drawn in.
NEAR_TOP = 0.5
GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0  # the offset draws' Weyl sequence step (_shifts)
# The offset draws scale each tensor by 10^s before shifting it, s drawn in [-OFFSET_SPREAD, OFFSET_SPREAD]
# (less where the dtype's range is short: offset_spread). 1 until a LayerNorm 2% off only on rows both shifted
# and spread wider than 12 (a transformer's residual stream) passed 3 of 3 (2026-12-07).
OFFSET_SPREAD = 2.0
SPECIAL_FRACTION = 1.0 / 4096


def decades(dtype: Any) -> float:
    """K above: how many decades a draw may scale a dtype by (8 for float32, 2.1 for float16).

    Half the decades to the dtype's largest (and smallest normal) value, so that a
    product of two scaled values stays finite.
    """
    import math

    import torch

    info = torch.finfo(dtype)
    return max(1.0, min(8.0, 0.5 * math.log10(info.max), -0.5 * math.log10(info.tiny)))


def offset_decades(dtype: Any) -> float:
    """How far (decades) the ``offset`` draw may shift values against their magnitude (D).

    As far as the dtype keeps about one digit of the spread (float16 2, bfloat16 1.1; 1.5 digits
    until a red-team round of 2026-12-07 got a float16 LayerNorm wrong only beyond 40 spreads through), and
    no further than where a reduction's widened allowance (``NumericsRule.shifted_rtol``,
    OFFSET_GROWTH x eps x c) reaches OFFSET_CEILING of the output (float32 4.5, float64
    13.2; see verify/limits.py). A one-pass variance is off by about c^2 x eps, rounded to
    multiples of eps x c^2 (so 0 or far off) at the top: outside the allowance there, as
    it is wherever c is well above OFFSET_GROWTH.
    """
    import math

    import torch

    from .limits import OFFSET_CEILING, OFFSET_GROWTH

    compute = torch.float64 if dtype == torch.float64 else torch.float32
    detects = math.log10(OFFSET_CEILING / (OFFSET_GROWTH * torch.finfo(compute).eps))
    return max(1.0, min(-math.log10(torch.finfo(dtype).eps) - 1.0, detects))


def limits_of(dtype: Any, within: Any = None) -> Any:
    """The dtype whose limits a draw of an input of ``dtype`` respects: ``within`` where it is a
    floating dtype less precise than ``dtype`` (an fp32 input a model computes on in float16 or
    bfloat16, in an autocast region: values beyond float16's range are Inf there, and float32's
    subnormals zero, so such draws would check nothing), else ``dtype`` itself."""
    import torch

    if within is None or not within.is_floating_point or not dtype.is_floating_point:
        return dtype
    return within if torch.finfo(within).eps > torch.finfo(dtype).eps else dtype


def near_max(t: Any, within: Any = None) -> float:
    """M of the ``near_max`` draw: the dtype's largest value, or less, so that a sum of every element,
    in any order, stays finite where it is accumulated (float32, float64 for float64): an honest
    reordering of a reduction must not overflow where the compiler's order did not.
    ``within``: see :func:`limits_of`."""
    import torch

    info = torch.finfo(limits_of(t.dtype, within))
    accumulated = torch.finfo(torch.float64 if t.dtype == torch.float64 else torch.float32).max
    return min(info.max, accumulated / max(1, t.numel()))


def stress_text(variant: str, dtype: Any) -> str:
    """What ``variant`` does to an input of ``dtype``, in words with its numbers."""
    import torch

    info = torch.finfo(dtype)
    low, high = _moderate(offset_decades(dtype))
    return STRESS_TEXT[variant].format(k=f"{decades(dtype):.3g}", offset=f"{offset_decades(dtype):.3g}",
                                       moderate=f"{low:.3g}, {high:.3g}",
                                       subnormal=f"{info.tiny * info.eps:.3g}", tiny=f"{info.tiny:.3g}",
                                       tiny10=f"{10 * info.tiny:.3g}", max=f"{info.max:.3g}")


def stress(t: Any, variant: str, seed: int, within: Any = None) -> float:
    """Turn a drawn floating-point input into a draw of ``variant`` (:data:`STRESS_VARIANTS`), in place.

    Returns how much worse the draw conditions a reduction: 1, but for the offset draws
    (:data:`OFFSET_VARIANTS`) the largest shift against the values' magnitude (the kernel stage scales
    its allowance by it, see :func:`offset_decades`).

    Every choice (exponents, signs, positions, offsets) comes from ``seed``. Integer and
    bool tensors (indices, labels, masks: a tiny range would change what they mean) are
    left as drawn. No copy of ``t`` is made: the ops are in place, random numbers drawn per
    piece of at most ``CHUNK`` elements, on its device; a sort holds one block of rows.
    Magnitudes are computed in float64 and rounded once to the dtype, so every floating
    dtype (float16 and bfloat16 included) gets its own subnormals and limits; with ``within``
    (the narrowest dtype of the kernel being checked), those of that dtype where it is less
    precise (:func:`limits_of`).
    """
    import torch

    if variant not in STRESS_TEXT:
        raise ValueError(f"unknown stress variant {variant!r}")
    if not t.dtype.is_floating_point or t.numel() == 0:
        return 1.0
    limits = limits_of(t.dtype, within)
    k_max = decades(limits)
    info = torch.finfo(limits)
    scalar = random.Random(seed)
    gen = torch.Generator(device=t.device).manual_seed(seed)

    def rand(piece: Any) -> Any:
        return torch.rand(piece.shape, generator=gen, device=t.device)

    def magnitudes(piece: Any, low: float, high: float) -> Any:
        """|x| log-uniform in [low, high] per element, in float64 (rounded by the caller's copy)."""
        u = rand(piece).double()
        return torch.pow(10.0, u * (math.log10(high) - math.log10(low))) * low

    def signed(piece: Any, magnitude: Any) -> Any:
        return torch.where(piece < 0, -magnitude, magnitude)

    with torch.no_grad():
        if variant in ("tiny", "huge"):
            k = scalar.uniform(1.0, k_max)
            t.mul_(10.0 ** (-k if variant == "tiny" else k))
        elif variant == "signed":
            t.abs_()
            if scalar.random() < 0.5:
                t.neg_()
        elif variant in OFFSET_VARIANTS:
            if t.dim() == 0:
                return 1.0  # a scalar is left as drawn
            shifts = scalar.getrandbits(62)  # first: offset_conditions draws it again
            # The spread drawn too (one factor a tensor): a kernel wrong only where values are both far from
            # zero and spread wider than randn's passed when every offset draw kept a spread of 1.
            reach = offset_spread(limits)
            spread, top = 10.0 ** scalar.uniform(-reach, reach), float(info.max) / 4
            for piece in views(t):
                piece.mul_(spread).clamp_(-top, top)
            if variant == "offset":
                return _offset_rows(t, shifts, offset_decades(limits), limits)
            return _offset_along(t, variant, shifts, offset_decades(limits), limits)
        elif variant == "constant":
            # Half the rows, not all: with every output equal the rule's absolute part (rtol x the median
            # |expected|) would vanish, and an honest reordering of a row's mean (x - mean is then a
            # rounding error times 1/sqrt(eps) in a LayerNorm) would be held to the smallest normal.
            for rows, first in _row_blocks(t):
                index = torch.arange(first, first + rows.shape[0], device=t.device)
                pick = (_hash_uniform(index, seed) < 0.5) | (index == 0)  # the first row always: one at least
                rows[:, 1:].copy_(torch.where(pick[:, None], rows[:, :1], rows[:, 1:]))
        elif variant in ("sorted", "reversed"):
            _sort_rows(t, descending=variant == "reversed")
        elif variant in ("padded", "special_rows"):
            for rows, first in _row_blocks(t):
                index = torch.arange(first, first + rows.shape[0], device=t.device)
                length = rows.shape[1]
                # Where each row's run starts, drawn per row over the whole row (short and long runs alike; the
                # first row's in its last quarter: a short one at least once).
                at = _hash_uniform(index, seed + 2)
                at = torch.where(index == 0, 0.75 + 0.25 * at, at)
                tail = torch.arange(length, device=t.device)[None, :] >= (at * length).long().clamp(max=length - 1)[:, None]
                u = _hash_uniform(index, seed)
                if variant == "padded":  # the first row padded at its tail: both kinds at least once
                    whole = (u < 0.5) & (index != 0)
                    rows.masked_fill_(whole[:, None] | tail, 0.0)
                else:
                    hit = (u < 0.25) | (index == 0)
                    kind = torch.floor(_hash_uniform(index, seed + 1) * 3.0)
                    value = torch.where(kind == 0, float("nan"), torch.where(kind == 1, float("inf"), float("-inf")))
                    rows.copy_(torch.where(hit[:, None] & tail, value[:, None].to(rows.dtype), rows))
        elif variant == "rounded":
            grid = torch.bfloat16 if torch.finfo(limits).eps < torch.finfo(torch.bfloat16).eps else torch.float8_e4m3fn
            if torch.finfo(grid).eps > torch.finfo(limits).eps:
                top = min(torch.finfo(grid).max, torch.finfo(t.dtype).max)
                for piece in views(t):
                    piece.copy_(piece.clamp(-top, top).to(grid))
        elif variant == "coarse":
            _coarse(t, limits, scalar)
        elif variant == "zeros":
            t.zero_()
            for piece in views(t):
                piece.masked_fill_(rand(piece) < 0.5, -0.0)
        else:
            fraction = min(0.125, max(SPECIAL_FRACTION, 4.0 / max(1, t.numel())))
            ties, table = scalar.randint(1, 4), [scalar.gauss(0.0, 1.0) for _ in range(scalar.randint(2, 4))]
            for piece in views(t):
                if variant == "mid":
                    magnitude = torch.pow(10.0, 1.0 + 2.0 * rand(piece))
                    piece.copy_(torch.where(piece < 0, -magnitude, magnitude))
                elif variant == "mixed":
                    piece.mul_(torch.pow(10.0, (2.0 * rand(piece) - 1.0) * k_max))
                    piece.masked_fill_(rand(piece) < STRESS_ZERO_FRACTION, 0.0)
                elif variant == "ties":
                    piece.copy_(torch.floor(rand(piece) * (2 * ties + 1)) - ties)
                elif variant == "repeated":
                    index = torch.floor(rand(piece) * len(table)).long().clamp_(max=len(table) - 1)
                    piece.copy_(torch.tensor(table, dtype=torch.float64, device=t.device)[index])
                elif variant in ("subnormal", "subnormal_mixed"):
                    # [smallest subnormal, smallest normal): tiny * eps is the smallest subnormal of IEEE formats.
                    low, high = info.tiny * info.eps, info.tiny * (1.0 - info.eps)
                    small = signed(piece, magnitudes(piece, low, high).clamp_(low, high)).to(t.dtype)
                    if variant == "subnormal":
                        piece.copy_(small)
                    else:
                        piece.copy_(torch.where(rand(piece) < 0.5, small, piece))
                elif variant == "near_max":
                    top = near_max(t, within)
                    piece.copy_(signed(piece, magnitudes(piece, top / 10.0, top).clamp_(max=top)))
                elif variant == "near_tiny":
                    piece.copy_(signed(piece, magnitudes(piece, info.tiny, 10.0 * info.tiny).clamp_(min=info.tiny)))
                else:  # special
                    hit = rand(piece) < fraction
                    kind = torch.floor(rand(piece) * 3.0)
                    value = torch.where(kind == 0, float("nan"), torch.where(kind == 1, float("inf"), float("-inf")))
                    piece.copy_(torch.where(hit, value.to(piece.dtype), piece))
            if variant == "special" and t.is_contiguous():  # one of each at least, wherever they fall
                for special in (float("nan"), float("inf"), float("-inf")):
                    t.view(-1)[scalar.randrange(t.numel())] = special
    return 1.0


def narrowest_float(args: list[Any]) -> Any:
    """The least precise floating-point dtype among a kernel's tensor arguments (None: none): the
    stress draws keep to its limits (:func:`limits_of`)."""
    import torch

    found = [getattr(torch, str(a.dtype).removeprefix("torch."), None) for a in args if a.kind == "tensor" and a.dtype]
    floats = [d for d in found if isinstance(d, torch.dtype) and d.is_floating_point]
    return max(floats, key=lambda d: torch.finfo(d).eps, default=None)


def stress_inputs(inputs: list[Any], variant: str, transform: int, within: Any = None) -> tuple[bool, float]:
    """Turn every floating-point tensor of ``inputs`` into a draw of ``variant`` (:func:`stress`, the k-th
    tensor under ``transform + k``; one tensor passed twice is turned once); Python numbers and integer
    tensors pass as they are. Returns (whether any tensor was floating-point, the largest condition)."""
    import torch

    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    if not any(x.dtype.is_floating_point for x in tensors):
        return False, 1.0
    seen: set[tuple[int, Any]] = set()
    condition = 1.0
    for k, x in enumerate(tensors):
        key = (x.data_ptr(), x.dtype)
        if key not in seen:
            seen.add(key)
            condition = max(condition, stress(x, variant, transform + k, within))
    return True, condition


def is_integer(t: Any) -> bool:
    """An integer tensor the integer draws turn (bool masks are left as drawn)."""
    import torch

    return isinstance(t, torch.Tensor) and not t.dtype.is_floating_point and not t.dtype.is_complex \
        and t.dtype != torch.bool and t.numel() > 0


def stress_integers(t: Any, variant: str, seed: int) -> None:
    """Turn a drawn integer input into a draw of ``variant`` (:data:`INT_VARIANTS`), in place, with values only
    from ``t``'s own (so indices stay in range and labels stay labels); every choice from ``seed``."""
    import torch

    if variant not in INT_TEXT:
        raise ValueError(f"unknown integer draw {variant!r}")
    if not is_integer(t):
        return
    scalar = random.Random(seed)
    flat = t.reshape(-1)
    # The values used: the tensor's smallest and largest (pad ids, ignore labels sit there) and one drawn of its own.
    values = [t.min(), t.max(), flat[scalar.randrange(flat.numel())].clone()]
    scalar.shuffle(values)
    gen = torch.Generator(device=t.device).manual_seed(seed)
    with torch.no_grad():
        if variant == "int_constant":  # contiguous parts, one value each (one part for a strided tensor)
            if t.is_contiguous():
                size = -(-flat.numel() // len(values))
                for i, v in enumerate(values):
                    flat[i * size:(i + 1) * size] = v
            else:
                t.copy_(values[0].expand_as(t))
        elif variant == "int_padded":  # each row's pad one of the values, drawn per row
            rows = t.reshape(-1, t.shape[-1]) if t.dim() > 1 else t.reshape(1, -1)
            start = int(rows.shape[1] * scalar.uniform(0.25, 0.75))
            pick = torch.randint(len(values), (rows.shape[0], 1), generator=gen, device=t.device)
            pads = torch.stack(values).to(t.device)[pick]
            tail = pads.expand(-1, rows.shape[1] - start)
            if rows.data_ptr() == t.data_ptr() and rows.is_contiguous() and t.is_contiguous():
                rows[:, start:] = tail
            else:
                t.copy_(torch.cat([rows[:, :start], tail], dim=1).view(t.shape))
        elif variant == "int_sorted":
            if t.dim():
                t.copy_(torch.sort(t, dim=-1).values)
        else:  # int_few
            t.copy_(torch.where(torch.rand(t.shape, generator=gen, device=t.device) < 0.5, values[0], values[1]))


def _coarse(t: Any, limits: Any, scalar: random.Random) -> None:
    """The ``coarse`` draw, in place: ``t``'s flat elements in contiguous parts (one for a tensor not contiguous),
    each rounded to one grid: a floating format less precise than ``limits`` (:data:`COARSE_FORMATS`, values
    clamped to its range first) or multiples of 2^-n; which part gets which grid drawn."""
    import torch

    eps = torch.finfo(limits).eps
    grids: list[Any] = [g for name in COARSE_FORMATS
                        if isinstance(g := getattr(torch, name, None), torch.dtype) and torch.finfo(g).eps > eps]
    grids.append(2.0 ** scalar.randint(0, 8))  # the fixed-point grid's scale
    scalar.shuffle(grids)
    parts = [t]
    if t.is_contiguous() and t.numel() >= len(grids):
        flat, size = t.view(-1), -(-t.numel() // len(grids))
        parts = [flat[i:i + size] for i in range(0, flat.numel(), size)]
    for part, grid in zip(parts, grids):
        for piece in views(part):
            if isinstance(grid, float):
                piece.copy_(torch.round(piece.double() * grid) / grid)
            else:
                top = min(torch.finfo(grid).max, torch.finfo(t.dtype).max)
                piece.copy_(piece.clamp(-top, top).to(grid))


def _shifts(index: Any, seed: int, top: float, pinned: int) -> Any:
    """The offset draws' shift per index (an int64 tensor of row or column indices): +-10^d, the sign drawn per
    index, d in [0, ``top``]: half of the indices and ``pinned`` within NEAR_TOP of the top, so the largest
    shift, which sizes the allowance, is shared by many and a wrong algorithm's error shows; the others spread
    evenly down to no shift beyond the spread (a kernel wrong only a few spreads from zero is seen). Which
    indices are which comes from a Weyl sequence ``frac(u + index x golden ratio)``, ``u`` drawn: any run of
    consecutive indices covers the decades about evenly (independent draws left a batch of 8 samples without
    one in a band of 1.7 decades one session in 7; red team 2026-12-07)."""
    import torch

    start = float(_hash_uniform(torch.zeros(1, dtype=torch.int64), seed + 2)[0])
    w = torch.frac(start + index.double() * GOLDEN)
    near = (w < 0.5) | (index == pinned)
    v = torch.where(w < 0.5, 2.0 * w, 2.0 * w - 1.0)
    span = min(NEAR_TOP, top - 1.0)
    condition = torch.pow(10.0, torch.where(near, top - v * span, v * top))
    sign = _hash_uniform(index, seed + 1) < 0.5
    return torch.where(sign, -condition, condition)


def _variant_shifts(variant: str, index: Any, seed: int, top: float, count: int) -> Any:
    """The offset draw ``variant``'s signed shift for each of ``index`` (of ``count`` slices): ``offset_moderate``'s
    one moderate shift (MODERATE_DECADES), ``offset_whole``'s one shift near the top or anywhere, the others'
    per index (:func:`_shifts`)."""
    import torch

    if variant == "offset_moderate":
        low, high = _moderate(top)
        d = low + (high - low) * _hash_uniform(index, seed)
        return torch.where(_hash_uniform(index, seed + 1) < 0.5, -1.0, 1.0) * torch.pow(10.0, d)
    return _shifts(index, seed, top, -1 if variant == "offset_whole" else _pinned(seed, count))


def _offset_axis(variant: str, ndim: int) -> int | None:
    """The dimension whose indices an offset draw other than ``offset`` (rows) shifts one by one; None: one shift
    for every element."""
    return {"offset_samples": 0, "offset_features": min(1, ndim - 1), "offset_columns": ndim - 1}.get(variant)


def offset_spread(dtype: Any) -> float:
    """How far (decades) the offset draws scale a tensor of ``dtype`` either way before shifting it: OFFSET_SPREAD,
    less where a shifted draw would come within a decade of a quarter of the dtype's largest value (float16:
    1.2)."""
    import torch

    room = math.log10(float(torch.finfo(dtype).max) / 4) - offset_decades(dtype) - 1.0
    return max(0.0, min(OFFSET_SPREAD, room))


def _moderate(top: float) -> tuple[float, float]:
    """offset_moderate's decades, within ``top`` (the dtype's reach)."""
    return min(MODERATE_DECADES[0], top), min(MODERATE_DECADES[1], top)


def _pinned(seed: int, count: int) -> int:
    """The index :func:`_shifts` puts near the top whatever its Weyl number: one of one or two (three or more
    consecutive indices hold one near the top already); -1: none."""
    return seed % count if 0 < count <= 2 else -1


def _scale(t: Any) -> float:
    """The mean magnitude the offset draws shift by (of the first piece; 1 where that is 0 or not finite)."""
    scale = float(next(iter(views(t))).abs().double().mean())
    return scale if math.isfinite(scale) and scale > 0 else 1.0


def _offset_rows(t: Any, seed: int, top: float, limits: Any = None) -> float:
    """Add c = +-10^d x (mean |x|) to each row along the last dimension (:func:`_shifts`); returns the largest
    10^d drawn.

    Contiguous tensors are walked in flat pieces, each row's draw a hash of its index, so a
    row split between two pieces gets one offset; other layouts get one offset in all.
    """
    import torch

    scale = _scale(t)
    length = max(1, t.shape[-1]) if t.dim() else 1
    limit = torch.finfo(limits if limits is not None else t.dtype).max / 4
    done, largest = 0, 1.0
    count = t.numel() // length if t.is_contiguous() else 1
    for piece in views(t):
        if t.is_contiguous():
            rows = torch.arange(done, done + piece.numel(), device=t.device).view(piece.shape) // length
        else:
            rows = torch.zeros(piece.shape, dtype=torch.int64, device=t.device)
        shift = _variant_shifts("offset", rows, seed, top, count)
        largest = max(largest, float(shift.abs().max()))
        piece.add_((shift * scale).clamp_(-limit, limit))
        done += piece.numel()
    return largest


def _offset_along(t: Any, variant: str, seed: int, top: float, limits: Any = None) -> float:
    """Add c = +-10^d x (mean |x|) to each index along ``variant``'s dimension (:func:`_offset_axis`,
    :func:`_variant_shifts`), the same along every other dimension (none: one c for every element), in place
    (one broadcast add: no copy of ``t``); returns the largest 10^d drawn. A scalar is left as drawn."""
    import torch

    if t.dim() == 0:
        return 1.0
    axis = _offset_axis(variant, t.dim())
    size = t.shape[axis] if axis is not None else 1
    index = torch.arange(size, device=t.device)
    shift = _variant_shifts(variant, index, seed, top, size)
    limit = torch.finfo(limits if limits is not None else t.dtype).max / 4
    shape = [1] * t.dim()
    if axis is not None:
        shape[axis] = size
    t.add_((shift * _scale(t)).clamp_(-limit, limit).to(t.dtype).view(shape))
    return float(shift.abs().max()) if size else 1.0


# The model stage takes its offset runs' allowance slice by slice (verify/model.py) while a draw has at most
# this many slices: a float64 envelope each, held with the run's reference.
OFFSET_SLICES_MAX = 1 << 22


def offset_layout(shape: tuple[int, ...], variant: str) -> tuple[int, int] | None:
    """How the offset draw ``variant`` lays its shifts over a row-major tensor of ``shape``: (length, count),
    element ``i`` shifted by slice ``(i // length) % count``'s (``offset_whole``, ``offset_moderate``: one
    slice of every element); None for a scalar or an empty tensor (left as drawn)."""
    if not shape or math.prod(shape) == 0:
        return None
    numel = math.prod(shape)
    if variant == "offset":  # rows along the last dimension
        return shape[-1], numel // shape[-1]
    axis = _offset_axis(variant, len(shape))
    return (numel, 1) if axis is None else (math.prod(shape[axis + 1:]), shape[axis])


def offset_conditions(inputs: list[Any], variant: str, transform: int,
                      within: Any = None) -> list[tuple[tuple[int, int], Any]]:
    """What :func:`stress_inputs` under an offset draw shifted each floating-point tensor of ``inputs`` by:
    (its :func:`offset_layout`, the shift per slice in units of the tensor's magnitude, float64), computed
    again from the same seeds, not read back (``inputs`` need not be the drawn ones: only their shapes,
    dtypes and layouts matter). Left out: tensors one shift covers, tensors shifted as one because of their
    layout, and draws of more than OFFSET_SLICES_MAX slices."""
    import torch

    found: list[tuple[tuple[int, int], Any]] = []
    seen: set[tuple[int, Any]] = set()
    for k, x in enumerate(x for x in inputs if isinstance(x, torch.Tensor)):
        key = (x.data_ptr(), x.dtype)
        if key in seen:
            continue
        seen.add(key)
        layout = offset_layout(tuple(x.shape), variant) if x.dtype.is_floating_point else None
        if layout is None or layout[1] > OFFSET_SLICES_MAX or (variant == "offset" and not x.is_contiguous()):
            continue
        seed = random.Random(transform + k).getrandbits(62)  # as stress() draws it
        top = offset_decades(limits_of(x.dtype, within))
        count = layout[1]
        shift = _variant_shifts(variant, torch.arange(count, device=x.device), seed, top, count)
        found.append((layout, shift.abs()))
    return found


def _hash_uniform(index: Any, seed: int) -> Any:
    """A uniform number in [0, 1) per element of an int64 tensor, a fixed function of (index, seed)
    (splitmix64's finaliser; int64 products wrap, shifts are masked to be logical)."""
    z = index * -7046029254386353131 + seed  # 0x9E3779B97F4A7C15 as a signed int64
    z = (z ^ ((z >> 30) & ((1 << 34) - 1))) * -4658895280553007687  # 0xBF58476D1CE4E5B9
    z = (z ^ ((z >> 27) & ((1 << 37) - 1))) * -7723592293110705685  # 0x94D049BB133111EB
    z = z ^ ((z >> 31) & ((1 << 33) - 1))
    return ((z >> 11) & ((1 << 53) - 1)).double() / float(1 << 53)


def _row_blocks(t: Any, first: int = 0, limit: int = CHUNK) -> Iterator[tuple[Any, int]]:
    """(a 2-D view of whole rows along the last dimension, the index of its first row), a block of at most
    ``limit`` elements at a time (one row when a row is longer); views, never copies."""
    if t.dim() == 0:
        return
    if t.dim() == 1:
        t = t.unsqueeze(0)
    length = max(1, t.shape[-1])
    if t.dim() > 2:
        try:
            t = t.view(-1, length)
        except RuntimeError:  # a layout that cannot be viewed as rows: one leading index at a time
            per = t[0].numel() // length
            for k, sub in enumerate(t):
                yield from _row_blocks(sub, first + k * per, limit)
            return
    block = max(1, limit // length)
    for start in range(0, t.shape[0], block):
        yield t[start:start + block], first + start


def row_condition(t: Any) -> Any:
    """Each row's condition along the last dimension, in row-major order (float64, on ``t``'s device): its
    |mean| over the root-mean-square of its deviations from the mean (how far the row lies from zero against
    its spread: what a reduction's rounding grows with on the ``offset`` draw); 1 for a constant row (no
    spread to lie far from), +Inf for a row holding NaN/Inf."""
    import torch

    parts = []
    for rows, _ in _row_blocks(t):
        x = rows.double()
        mean = x.mean(dim=1)
        spread = (x - mean[:, None]).pow(2).mean(dim=1).sqrt()
        c = torch.where(spread > 0, mean.abs() / spread, 1.0)
        finite = torch.isfinite(mean) & torch.isfinite(spread)  # a NaN spread is not "no spread"
        parts.append(torch.where(finite & torch.isfinite(c), c, float("inf")))
    return torch.cat(parts) if parts else torch.ones(1, dtype=torch.float64, device=t.device)


def rows_of(t: Any) -> int:
    """How many rows ``t`` has along its last dimension (1 for a scalar)."""
    return t.numel() // max(1, t.shape[-1]) if t.dim() else 1


def _sort_rows(t: Any, descending: bool) -> None:
    """Sort ``t`` along its last dimension in place, a block of rows at a time.

    A row longer than ``CHUNK`` is not sorted (that would hold a copy of it) but filled
    with the standard normal quantiles in order, piece by piece: sorted all the same.
    """
    import torch

    if t.dim() == 0:
        return
    length = t.shape[-1]
    if length > CHUNK:
        for row in (r for rows, _ in _row_blocks(t) for r in rows):
            done = 0
            for piece in views(row):
                n = piece.numel()
                j = torch.arange(done, done + n, dtype=torch.float64, device=t.device)
                q = torch.erfinv((2.0 * (j + 0.5) / length - 1.0).clamp_(-1 + 1e-12, 1 - 1e-12)) * math.sqrt(2.0)
                piece.copy_(-q if descending else q)
                done += n
        return
    for rows, _ in _row_blocks(t):
        rows.copy_(torch.sort(rows, dim=-1, descending=descending).values)


def poison(t: Any) -> None:
    """NaN for floats, the dtype's maximum for integers, True for bools: unwritten elements show."""
    import torch

    if t.dtype.is_floating_point or t.dtype.is_complex:
        t.fill_(float("nan"))
    elif t.dtype == torch.bool:
        t.fill_(True)
    else:
        t.fill_(torch.iinfo(t.dtype).max)


def random_fill(t: Any, seed: int) -> None:
    """Fill ``t`` in place from ``seed``: the same values every time for the same seed.

    Drawn on the tensor's own device, in place, so no second copy is held.
    """
    import torch

    gen = torch.Generator(device=t.device).manual_seed(seed)
    if t.dtype.is_floating_point:
        try:
            t.normal_(generator=gen)
            return
        except (RuntimeError, NotImplementedError):  # fp8 and friends: draw in fp32, chunk by chunk
            for (flat,) in chunks(t):
                flat.copy_(torch.randn(flat.shape, generator=gen, device=t.device).to(t.dtype))
            return
    if t.dtype == torch.bool:
        t.random_(0, 2, generator=gen)
        return
    t.random_(-100, 100, generator=gen)


def any_nonfinite(t: Any) -> bool:
    import torch

    if not t.dtype.is_floating_point:
        return False
    return any(bool((~torch.isfinite(flat)).any()) for (flat,) in chunks(t))
