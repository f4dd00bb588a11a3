"""Guard bands: catch a candidate that stores outside the tensors it was given.

A kernel's pointers reach any memory of the process (on a GPU, any device memory of
the context), so a store one element past an output lands in allocator slack or in a
neighbouring tensor and no comparison of the arguments themselves shows it. In most
of its runs (kernel and model stage) the candidate therefore runs on copies of its tensor arguments, each
placed inside a larger buffer whose padding on both sides (and any gap inside a
strided layout) holds a canary:

* ``"nan"``: for floating-point dtypes a quiet NaN with a random sign and payload, so
  an out-of-bounds *read* poisons the result (a NaN where the compiler's kernel gives a
  number fails the comparison); other dtypes random bytes;
* ``"random"``: for floating-point dtypes standard normal draws, other dtypes random
  bytes, so a store that rewrites what it read (``slot + 1`` leaves a NaN's bits, and a
  huge float's, as they were) still changes them, and a read returns ordinary numbers
  that change the result.

The kind is drawn per launch (:meth:`Bands.canary`), in every stage: the kernel stage's
checked passes (one of each kind per seed, in a drawn order) and unchecked runs, and
launches of the model stage (:class:`GuardedKernel`). The rest of its runs are
:data:`UNGUARDED`: on the model's own tensors, as in production (one pass per launch of
each kernel-stage seed, a drawn share of the draws and of the model stage's launches, one
model-stage seed wholly), so a candidate that looks at the word before its pointer to
tell the two apart is judged on what it does in production either way.

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
aliasing). What is caught: any store into the padding or a strided layout's gaps
(compared bitwise); a read of the padding whose value reaches an output, in the
kernel stage (a NaN canary makes a finite output NaN; a random one changes it), in
one pass at least since each seed runs one pass of each kind. What is not: a store or
read farther away than the padding, a read whose value does not reach an output, and
everything around arguments left unguarded by the cap above (the stage's detail says
which). Outside the kernel stage reads are not judged (nothing compares the outputs
there per launch); stores are.
"""

from __future__ import annotations

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
        # Tensors, None after release(): Any, as every tensor in this module (torch is imported lazily).
        self.buffer: Any = torch.empty(front + ALIGN // size + self.span + back, dtype=t.dtype, device=t.device)
        # Same address modulo ALIGN as the original: Triton's 16-byte specialisation sees the same layout.
        shift = (t.data_ptr() - self.buffer.data_ptr() - front * size) % ALIGN
        self.offset = front + shift // size
        _fill(self.buffer, pattern, seed)
        # A copy of the bytes: clone() of a bool buffer turns the padding's 2..255 into 1.
        self.canary: Any = self.buffer.view(torch.uint8).clone().view(t.dtype)
        self.view: Any = self.buffer.as_strided(self.shape, self.stride, self.offset)
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


CANARIES = ("nan", "random")
# Not a canary: a run on the model's own argument tensors, as production runs the candidate
# (no copies, no padding, the allocator's memory around and under the pointers).
UNGUARDED = "unguarded"


class Bands:
    """Guard bands for the candidate's runs in one checker or one model run.

    Every choice (padding, canary kind, canary values) comes from ``entropy``
    (:class:`.tensors.Entropy`; from the OS when none is given).
    """

    def __init__(self, names: list[str], device: str, entropy: Any = None):
        from .tensors import Entropy

        self.names, self.device = names, device
        self.entropy = entropy or Entropy.from_os()
        self.notes: list[str] = []

    def canary(self) -> str:
        """A canary kind drawn per launch: a candidate cannot tell a pass by the memory around its pointers."""
        return CANARIES[self.entropy.below(len(CANARIES))]

    def wrap(self, args: Any, tensors: list[int], written: list[int],
             pattern: str | None = None) -> tuple[list[Any], list[Guard]]:
        """The arguments to run the candidate on (guarded copies where planned) and the guards.

        ``pattern``: the canary kind; None draws one (:meth:`canary`).
        """
        p = plan(args, tensors, written, self.names, self.device)
        if p.note not in self.notes:
            self.notes.append(p.note)
        pattern = pattern or self.canary()
        seed = self.entropy.seed()
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
    """The candidate wherever it runs unchecked against the compiler's kernel: on guarded copies,
    or, for a drawn share of launches (``unguarded``), on the model's own tensors.

    Used for the kernel stage's unchecked runs and for every launch of the model stage
    (unchecked and checked runs), so what lies around a candidate's pointers, and what
    its written-only outputs hold before it runs (NaN or random values, drawn per launch,
    as in the kernel stage's checked passes), look the same in every stage. An unguarded
    launch is production's: the candidate gets the arguments the compiled model passed,
    nothing is copied or pre-filled, and only writes into read-only arguments are checked
    (against a snapshot). What it wrote
    is copied back into the real arguments (the model goes on with it). An argument the
    compiler's kernel only reads must be bitwise unchanged afterwards (the copy compared
    with the original; unguarded ones against a snapshot). The first breach is kept in
    ``failure`` (a detail), which the stage raises after the run: an out-of-bounds store
    is caught where it happens, before it can corrupt the worker's memory.
    """

    def __init__(self, candidate: Any, infos: list[Any], where: str, device: str, entropy: Any = None,
                 unguarded: float = 0.0):
        self.candidate, self.where, self.device = candidate, where, device
        self.written = {i for i, a in enumerate(infos) if a.written}
        self.read = {i for i, a in enumerate(infos) if a.starts_from_contents}
        self.names = [a.name for a in infos]
        self.bands = Bands(self.names, device, entropy)
        self.failure: str | None = None
        # The share of launches (each drawn) run on the model's own tensors, exactly as
        # production runs the candidate: 1.0 for a run that must judge production's behaviour.
        self.share = unguarded
        self.launches = self.unguarded = 0

    def _unguarded(self) -> bool:
        if self.share >= 1.0:
            return True
        return self.share > 0.0 and self.bands.entropy.below(1 << 20) < self.share * (1 << 20)

    def run(self, *args: Any, stream: Any = None, **kwargs: Any) -> Any:
        import torch

        from .tensors import poison, random_fill, same_bits, snapshot, unchanged

        tensors = [i for i, a in enumerate(args) if isinstance(a, torch.Tensor)]
        written = [i for i in tensors if i in self.written]
        read_only = [i for i in tensors if i not in self.written]
        self.launches += 1
        guards: list[Guard]
        if self._unguarded():  # as production: no copies, outputs as the model allocated them
            ran_on, guards = list(args), []
            self.unguarded += 1
        else:
            ran_on, guards = self.bands.wrap(args, tensors, written)
        before = {i: snapshot(args[i]) for i in read_only if ran_on[i] is args[i]}
        for i in written:
            if i not in self.read and ran_on[i] is not args[i]:  # a copy: its contents are the candidate's to write
                poison(ran_on[i]) if self.bands.entropy.below(2) else random_fill(ran_on[i], self.bands.entropy.seed())
        result = self.candidate.run(*ran_on, stream=stream, **kwargs)
        if self.device == "cuda":
            torch.cuda.synchronize()
        for i in read_only:
            same = unchanged(args[i], before[i]) if i in before else same_bits(ran_on[i], args[i])
            if not same and self.failure is None:
                name = self.names[i] if i < len(self.names) else f"argument {i}"
                self.failure = (f"{self.where}, read-only argument {name}: changed (the candidate wrote into an "
                                "argument the compiler kernel only reads)")
        breach = self.bands.check(guards, self.where)
        if self.failure is None:
            self.failure = breach
        for i in written:
            if ran_on[i] is not args[i]:
                args[i].copy_(ran_on[i])
        return result
