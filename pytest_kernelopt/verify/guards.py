"""Guard bands: catch a candidate that stores outside the tensors it was given.

A kernel's pointers reach any memory of the process (on a GPU, any device memory of
the context), so a store one element past an output lands in allocator slack or in a
neighbouring tensor and no comparison of the arguments themselves shows it. In the
kernel stage the candidate therefore runs on copies of its tensor arguments, each
placed inside a larger buffer whose padding on both sides (and any gap inside a
strided layout) holds a canary:

* ``"nan"`` (the pass with poisoned outputs): for floating-point dtypes a quiet NaN
  with a random sign and payload, so an out-of-bounds *read* poisons the result too;
  other dtypes random bytes;
* ``"random"`` (the pass with randomly pre-filled outputs): for floating-point dtypes
  standard normal draws, other dtypes random bytes, so a store that rewrites what it
  read (``slot + 1`` leaves a NaN's bits, and a huge float's, as they were) still
  changes them.

After the run every byte outside the argument's elements must be as it was; the stage
fails with "wrote N element(s) outside <arg>". The padding on each side is at least
the argument's own size (4 KiB to 16 MiB) plus a random extra of up to as much again,
and the copy keeps the original's address modulo 512 bytes (Triton specialises on
16-byte alignment), so the layout the candidate sees is the real one but where its
neighbours start is unpredictable.

Costs and limits. Guarding copies every guarded argument and holds about twice its
size (buffer plus a copy of the canary) at each launch, so it is used only while the
guarded arguments' memory spans total at most :data:`GUARD_BYTES` (and, on a GPU, a
quarter of the free device memory): every tensor argument when they fit, else the
written ones, else none, and the stage's detail says which. Arguments that share
memory with a written argument are not copied apart (the kernel may rely on the
aliasing). The guard sees stores; a store farther away than the padding, or one that
a candidate makes only when the memory around its outputs looks like the real
allocator's (host code may read ``data_ptr()``), is not seen. The model stage runs
without guards.
"""

from __future__ import annotations

import os
import random
from dataclasses import dataclass
from typing import Any

GUARD_BYTES = 1 << 30  # guarded arguments' spans, in total, at most this many bytes
MIN_PAD_BYTES = 4 << 10
MAX_PAD_BYTES = 16 << 20
CHUNK = 1 << 24  # bytes compared per step
ALIGN = 512  # the copy keeps the original address modulo this (CUDA's allocator aligns to 512 bytes)


def span(t: Any) -> int:
    """Elements from a tensor's first to its last element in memory (0 for an empty tensor)."""
    if t.numel() == 0:
        return 0
    return 1 + sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))


def _extent(t: Any) -> tuple[int, int]:
    start = t.data_ptr()
    return start, start + span(t) * t.element_size()


def _overlap(a: Any, b: Any) -> bool:
    (a0, a1), (b0, b1) = _extent(a), _extent(b)
    return a0 < b1 and b0 < a1


@dataclass
class Plan:
    """Which arguments of one launch get guard bands, and a phrase for the stage's detail."""

    guarded: list[int]
    note: str


def plan(args: Any, tensors: list[int], written: list[int], names: list[str], device: str,
         limit: int | None = None) -> Plan:
    """Every tensor argument if their spans fit ``limit``, else the written ones, else none."""
    limit = budget(device) if limit is None else limit
    shared = {i for w in written for i in tensors if i != w and _overlap(args[w], args[i])}
    if shared:
        shared |= {w for w in written if any(_overlap(args[w], args[i]) for i in shared)}
    # A broadcast (stride 0) layout cannot be copied into: its elements share memory.
    shared |= {i for i in tensors if args[i].numel() > 0 and span(args[i]) < args[i].numel()}
    candidates = [i for i in tensors if i not in shared and args[i].numel() > 0]
    size = {i: span(args[i]) * args[i].element_size() for i in candidates}
    unguarded = ""
    if shared:
        unguarded = f"; not around {', '.join(names[i] for i in sorted(shared))} (they share memory)"
    everything = sum(size.values())
    if everything <= limit:
        return Plan(candidates, f"guard bands around every tensor argument{unguarded}")
    outputs = [i for i in candidates if i in written]
    total = sum(size[i] for i in outputs)
    if outputs and total <= limit:
        return Plan(outputs, f"guard bands around the written arguments only (all arguments {_size(everything)} "
                             f"exceed the cap of {_size(limit)}){unguarded}")
    return Plan([], f"no guard bands (written arguments {_size(total)} exceed the cap of {_size(limit)}: stores "
                    f"outside them are not detected){unguarded}")


def budget(device: str) -> int:
    """The cap on guarded bytes: GUARD_BYTES, and on a GPU at most a quarter of the free memory."""
    if device != "cuda":
        return GUARD_BYTES
    import torch

    free, _ = torch.cuda.mem_get_info()
    return min(GUARD_BYTES, free // 4)


def _size(n: int) -> str:
    for unit, scale, digits in (("GiB", 1 << 30, 2), ("MiB", 1 << 20, 1), ("KiB", 1 << 10, 1)):
        if n >= scale:
            return f"{n / scale:.{digits}f} {unit}"
    return f"{n} bytes"


# Quiet-NaN bits per floating-point dtype, as the signed integer view of the same width.
def _nan_bits() -> dict[Any, tuple[Any, int]]:
    import torch

    return {torch.float16: (torch.int16, 0x7E00), torch.bfloat16: (torch.int16, 0x7FC0),
            torch.float32: (torch.int32, 0x7FC00000), torch.float64: (torch.int64, 0x7FF8000000000000)}


class Guard:
    """One argument's copy inside a canary-padded buffer: ``view`` is what the candidate gets."""

    def __init__(self, t: Any, name: str, pattern: str, seed: int):
        import torch

        self.name, self.shape, self.stride = name, tuple(t.shape), tuple(t.stride())
        size = t.element_size()
        self.size, self.span = size, span(t)
        pad = min(max(self.span * size, MIN_PAD_BYTES), MAX_PAD_BYTES)
        pad = -(-pad // ALIGN) * ALIGN
        draw = random.Random(seed)  # 0 to 100% more padding on each side: where the neighbours start is not known
        front, back = ((pad + draw.randrange(pad // ALIGN + 1) * ALIGN) // size for _ in range(2))
        self.buffer = torch.empty(front + ALIGN // size + self.span + back, dtype=t.dtype, device=t.device)
        # Same address modulo ALIGN as the original: Triton's 16-byte specialisation sees the same layout.
        shift = (t.data_ptr() - self.buffer.data_ptr() - front * size) % ALIGN
        self.offset = front + shift // size
        _fill(self.buffer, pattern, seed)
        # A copy of the bytes: clone() of a bool buffer turns the padding's 2..255 into 1.
        self.canary = self.buffer.view(torch.uint8).clone().view(t.dtype)
        self.view = self.buffer.as_strided(self.shape, self.stride, self.offset)
        self.view.copy_(t)

    def breaches(self) -> tuple[int, str]:
        """(elements changed outside the argument, where the one nearest to it is)."""
        expected = self.canary
        expected.as_strided(self.shape, self.stride, self.offset).copy_(self.view)  # its own elements may change
        got, want = _words(self.buffer), _words(expected)  # one row per element
        total = sum(int(_differ(got[a:b], want[a:b]).sum()) for a, b in _steps(0, got.shape[0], self.size))
        if not total:
            return 0, ""
        end = self.offset + self.span
        sides = []
        for a, b in reversed(list(_steps(0, self.offset, self.size))):
            hits = _differ(got[a:b], want[a:b]).nonzero()
            if hits.numel():
                sides.append((self.offset - (a + int(hits[-1, 0])), "before its start"))
                break
        for a, b in _steps(end, got.shape[0], self.size):
            hits = _differ(got[a:b], want[a:b]).nonzero()
            if hits.numel():
                sides.append((a + int(hits[0, 0]) - end + 1, "past its end"))
                break
        if not sides:
            return total, "all of them in gaps of its strided layout"
        distance, side = min(sides)
        return total, f"the nearest is {distance} element(s) {side}"

    def release(self) -> None:
        self.buffer = self.canary = self.view = None


def _words(buffer: Any) -> Any:
    """``buffer``'s bytes as one integer (or one row of integers) per element, for a bitwise comparison."""
    import torch

    size = buffer.element_size()
    as_int = {1: torch.uint8, 2: torch.int16, 4: torch.int32, 8: torch.int64}
    if size in as_int:
        return buffer.view(as_int[size]).view(-1, 1)
    return buffer.view(torch.int64 if size % 8 == 0 else torch.uint8).view(buffer.numel(), -1)


def _steps(start: int, stop: int, size: int) -> Any:
    """(a, b) ranges of rows covering [start, stop), CHUNK bytes at a time."""
    rows = max(1, CHUNK // size)
    return ((a, min(a + rows, stop)) for a in range(start, stop, rows))


def _differ(a: Any, b: Any) -> Any:
    """Per row: whether any word differs (a flat bool tensor)."""
    ne = a != b
    return ne[:, 0] if ne.shape[1] == 1 else ne.any(1)


def _fill(buffer: Any, pattern: str, seed: int) -> None:
    import torch

    if pattern not in ("nan", "random"):
        raise ValueError(f"unknown canary pattern {pattern!r}")
    gen = torch.Generator(device=buffer.device).manual_seed(seed)
    if pattern == "random" and buffer.dtype.is_floating_point:
        try:
            buffer.normal_(generator=gen)
            return
        except (RuntimeError, NotImplementedError):  # fp8 and friends: random bytes
            pass
    raw = buffer.view(torch.uint8)
    raw.random_(0, 256, generator=gen)
    if buffer.dtype == torch.bool:
        raw.bitwise_or_(2)  # neither False nor True: any store of a bool shows
    elif pattern == "nan" and buffer.dtype in _nan_bits():
        int_dtype, bits = _nan_bits()[buffer.dtype]
        buffer.view(int_dtype).bitwise_or_(bits)


class Bands:
    """Guard bands for the candidate's runs in one checker (one model run of the kernel stage)."""

    def __init__(self, names: list[str], device: str):
        self.names, self.device = names, device
        self.notes: list[str] = []

    def wrap(self, args: Any, tensors: list[int], written: list[int], pattern: str) -> tuple[list[Any], list[Guard]]:
        """The arguments to run the candidate on (guarded copies where planned) and the guards."""
        p = plan(args, tensors, written, self.names, self.device)
        if p.note not in self.notes:
            self.notes.append(p.note)
        seed = int.from_bytes(os.urandom(8), "little") >> 1
        guards = {i: Guard(args[i], self.names[i], pattern, seed + i) for i in p.guarded}
        ran_on = [guards[i].view if i in guards else a for i, a in enumerate(args)]
        return ran_on, list(guards.values())

    @staticmethod
    def check(guards: list[Guard], where: str) -> str | None:
        """The first breach as a failure detail, or None; the guards' memory is released."""
        failure = None
        for g in guards:
            if failure is None:
                n, first = g.breaches()
                if n:
                    failure = (f"{where}: the candidate wrote {n} element(s) outside {g.name} (a store out of "
                               f"bounds; {first})")
            g.release()
        return failure


class GuardedKernel:
    """The candidate for the kernel stage's unchecked runs: every launch on guarded copies.

    What it wrote is copied back into the real arguments (the model goes on with it);
    copies of arguments it may only read are dropped. The first store outside an
    argument is kept in ``failure`` (a detail), which the stage raises after the run:
    an out-of-bounds store is caught where it happens, before it can corrupt the
    worker's memory ahead of the checked run.
    """

    def __init__(self, candidate: Any, infos: list[Any], where: str, device: str):
        self.candidate, self.where, self.device = candidate, where, device
        self.written = {i for i, a in enumerate(infos) if a.written}
        self.bands = Bands([a.name for a in infos], device)
        self.failure: str | None = None

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        import torch

        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        written = [i for i in tensors if i in self.written]
        ran_on, guards = self.bands.wrap(args, tensors, written, "random")
        result = self.candidate.run(*ran_on, stream=stream, **kwargs)
        if self.device == "cuda":
            torch.cuda.synchronize()
        breach = self.bands.check(guards, self.where)
        if self.failure is None:
            self.failure = breach
        for i in written:
            if ran_on[i] is not args[i]:
                args[i].copy_(ran_on[i])
        return result
