"""The launch configuration each Triton kernel of a compile runs with: read after its first call, fixed before it.

Inductor compiles several launch configurations of most kernels, times them once, briefly, at the
kernel's first call and keeps the fastest; under max-autotune, coordinate descent then walks from that
pick, timing more. So two compiles of one model under one setting run different configurations: on an
H100 (2026-12-06) seven max-autotune compiles of one bf16 RMSNorm training step ran 0.877x to 1.039x of the
default compile (whose own four compiles ran within 0.2% of each other), and a stored
``max-autotune-nd-tiling`` that measured 1.037x in tune, confirmed on a second compile, ran 0.903x in a bench.

So a compile setting is stored with what its confirming check timed (``model.json``'s
``compile.launch_configs``: kernel fingerprint -> launch point, :func:`picked`; tune's confirming check
launches what its first trial ran, agents/compile_choice.py), and every later compile
of that setting (the verifier's, so the gate's, and production's) runs those configurations: it
skips the race and the descent for every kernel listed (:func:`fixed_at_first_call` where the compile
runs inside a block of ours, :func:`fix` right after a compile elsewhere). A kernel whose fingerprint
is not listed (another compile, another shape) races as Inductor does.

``model.json`` is read from the repository (a stranger's pull request may edit it), so a listed point
is used only where Inductor itself could launch it (:func:`refusal`): the keys of the kernel's own
configurations, powers of two within the bounds coordinate descent keeps to (``TRITON_MAX_BLOCK``, the
kernel's size hints: the bounds Inductor's masks are written for), warps, stages and a tile within what the
search's own launch space allows (so no recorded point makes Triton compile a huge tile), and one Inductor's own
coordinate descent would try (its ``is_valid_config``). What runs is then checked like any stored setting: the gate's check compiles it so.

Inductor's autotuner (``CachingAutotuner``: ``launchers``, ``compile_results``, ``_precompile_config``)
is read and set here only (torch 2.11-2.13); any failure leaves the kernel to Inductor's own race.
"""

from __future__ import annotations

import contextlib
import copy
import logging
from collections.abc import Callable, Iterable, Iterator
from typing import Any

# The bounds the search's own launch space keeps (a tile Triton can hold in registers, warps, stages): a recorded
# point past them would have Triton compile a huge tile (minutes, gigabytes) before any check runs.
from ..candidate.launch_space import MAX_PER_THREAD, MAX_STAGES, MAX_TILE, MAX_WARPS

__all__ = ["FixedLaunches", "first_calls", "fix", "fixed_at_first_call", "merged", "picked", "point_of", "refusal"]

log = logging.getLogger("pytest_kernelopt")

# What model.json records at most (its schema's bounds): names per point, kernels per setting. A kernel with more
# names (a combo kernel's per-part blocks) is not recorded, and races.
MAX_NAMES = 16
MAX_KERNELS = 4096
# The block bounds where this torch keeps none (torch 2.11-2.13's ``TRITON_MAX_BLOCK``).
_MAX_BLOCK = {"X": 4096, "Y": 1024, "Z": 1024, "R0_": 4096 * 16, "R1_": 2048 * 16}

Point = dict[str, int]
# A kernel's fingerprint from its autotuner (capture.compiled.autotuner_fingerprint); None: it has none.
Fingerprint = Callable[[Any], "str | None"]


def point_of(cfg: Any) -> Point:
    """An Inductor launch configuration as a point: its integer block sizes, ``num_warps``, ``num_stages``."""
    point = {k: int(v) for k, v in cfg.kwargs.items() if isinstance(v, int)}
    for key in ("num_warps", "num_stages"):
        if isinstance(getattr(cfg, key, None), int):
            point[key] = getattr(cfg, key)
    return point


def _max_blocks() -> dict[str, int]:
    try:
        from torch._inductor.runtime.hints import TRITON_MAX_BLOCK

        return dict(TRITON_MAX_BLOCK)
    except Exception:  # noqa: BLE001 - another torch: the bounds of the versions this was written for
        return dict(_MAX_BLOCK)


def _prefix(key: str) -> str | None:
    """``XBLOCK`` -> ``X``, ``R0_BLOCK`` -> ``R0_``, ``RBLOCK`` -> ``R0_`` (older Inductor); None: not a block."""
    if not key.endswith("BLOCK") or key == "BLOCK":
        return None
    prefix = key[: -len("BLOCK")]
    return "R0_" if prefix == "R" else prefix


def _own_configs(autotuner: Any) -> list[Any]:
    """The configurations the kernel has (launchers, compile results, configs)."""
    configs = [getattr(x, "config", None) for x in getattr(autotuner, "launchers", None) or []]
    configs += [getattr(x, "config", None) for x in getattr(autotuner, "compile_results", None) or []]
    configs += list(getattr(autotuner, "configs", None) or [])
    return [cfg for cfg in configs if cfg is not None]


def _compiled_points(autotuner: Any) -> list[Point]:
    """The launch points of the configurations the kernel has."""
    points: list[Point] = []
    for cfg in _own_configs(autotuner):
        p = point_of(cfg)
        if p not in points:
            points.append(p)
    return points


def _inductor_refuses(autotuner: Any, point: Point) -> str | None:
    """Inductor's own test of a configuration coordinate descent may try (``CoordescTuner.is_valid_config``:
    a split reduction's XBLOCK no larger than its RSPLIT_SIZE, a native matmul's tile), where this torch has one."""
    valid = getattr(getattr(autotuner, "coordesc_tuner", None), "is_valid_config", None)
    own = _own_configs(autotuner)
    if not callable(valid) or not own:
        return None
    try:
        if valid(_config_at(own[0], point)):
            return None
    except Exception as exc:  # noqa: BLE001 - a point Inductor's own check cannot read is not launched
        return f"Inductor's check of it failed ({type(exc).__name__})"
    return "coordinate descent would not launch it (Inductor's own check of a configuration)"


# Pipelining stages coordinate descent walks one step at a time: Triton's, and a mix-order (split) reduction's
# ``NUM_STAGES`` of its ``tl.range`` (torch 2.11 on an H100 raced one to 4, above the 3 its configurations have).
STAGES = ("num_stages", "NUM_STAGES")


def _fixed_part(point: Point) -> Point:
    """The names of a point that are not block sizes, warps or stages, with their values."""
    return {k: v for k, v in point.items() if _prefix(k) is None and k != "num_warps" and k not in STAGES}


def refusal(autotuner: Any, point: Any) -> str | None:
    """Why ``point`` may not be launched for this kernel (None: it may): one of its own configurations, or a point
    coordinate descent could reach from them (module docstring)."""
    if not isinstance(point, dict) or not all(isinstance(k, str) and type(v) is int for k, v in point.items()):
        return "not a launch point (names to whole numbers)"
    own = _compiled_points(autotuner)
    if not own:
        return "the kernel has no launch configuration to compare it with"
    if point in own:
        return None
    if set(point) != set(own[0]):
        return f"its names {sorted(point)} are not the kernel's {sorted(own[0])}"
    # What coordinate descent does not walk (a split reduction's RSPLIT_SIZE) stays as one of the kernel's
    # configurations has it.
    if _fixed_part(point) not in [_fixed_part(p) for p in own]:
        return (f"{', '.join(f'{k}={v}' for k, v in _fixed_part(point).items())}: none of the kernel's own "
                f"configurations has that")
    warps = point.get("num_warps", 4)
    if not (1 <= warps <= MAX_WARPS and warps & (warps - 1) == 0):
        return f"num_warps={warps} is not a power of two from 1 to {MAX_WARPS}"
    for name in STAGES:
        if name in point and not 1 <= point[name] <= MAX_STAGES:
            return f"{name}={point[name]} is not from 1 to {MAX_STAGES}"
    hints = getattr(autotuner, "size_hints", None)
    bounds = _max_blocks()
    tile = 1
    for key, value in point.items():
        prefix = _prefix(key)
        if prefix is None:
            continue
        if value < 1 or value & (value - 1):
            return f"{key}={value} is not a power of two"
        hint = hints.get(prefix.lower()) if isinstance(hints, dict) else None
        if prefix not in bounds or not isinstance(hint, int):
            return f"{key}: the kernel records no size for that dimension"
        limit = min(bounds[prefix], max(hint, 1))
        if value > limit:
            return f"{key}={value} is over {limit}, the largest the kernel's masks allow"
        tile *= value
    if tile > MAX_TILE:
        return f"{tile} elements per program, over {MAX_TILE}"
    if tile // (32 * warps) > MAX_PER_THREAD:
        return f"{tile // (32 * warps)} elements per thread, over {MAX_PER_THREAD}"
    return _inductor_refuses(autotuner, point)


def _config_at(base: Any, point: Point) -> Any:
    """Inductor configuration ``base`` with ``point``'s block sizes, warps and stages."""
    cfg = copy.copy(base)
    cfg.kwargs = {**base.kwargs, **{k: v for k, v in point.items() if k in base.kwargs}}
    for key in ("num_warps", "num_stages"):
        if key in point:
            setattr(cfg, key, point[key])
    return cfg


def _launcher(autotuner: Any, point: Point) -> Any:
    """A launcher of ``autotuner`` at ``point``: one it has, else one compiled now (as coordinate descent does)."""
    for launcher in getattr(autotuner, "launchers", None) or []:
        if point_of(launcher.config) == point:
            return launcher
    cfg = _config_at(_own_configs(autotuner)[0], point)
    ensure = getattr(autotuner, "_ensure_kernel_loaded", None)
    if callable(ensure):  # torch 2.13: a kernel compiled in a worker process is loaded back first
        ensure()
    elif getattr(getattr(autotuner, "fn", None), "fn", True) is None and callable(getattr(autotuner, "_reload_kernel",
                                                                                            None)):
        autotuner.fn = autotuner._reload_kernel().fn  # torch 2.11
    with getattr(autotuner, "lock", None) or contextlib.nullcontext():
        return autotuner._precompile_config(cfg).make_launcher()


def _interpreted(autotuner: Any) -> bool:
    """Whether Inductor launches this kernel under Triton's interpreter: then ``configs[0]``, nothing compiled or
    raced (``CachingAutotuner.triton_interpret``, torch 2.11-2.13)."""
    return bool(getattr(autotuner, "triton_interpret", False))


def fix(autotuner: Any, point: Any) -> str | None:
    """Make ``autotuner`` launch ``point`` from its next call on, raced or descended no more; None when done,
    else why not (the kernel then keeps Inductor's own race)."""
    why = refusal(autotuner, point)
    if why is not None:
        return why
    try:
        if _interpreted(autotuner):
            configs = list(autotuner.configs)
            cfg = next((c for c in configs if point_of(c) == point), None) or _config_at(configs[0], point)
            autotuner.configs = [cfg, *(c for c in configs if c is not cfg)]
            return None
        if not getattr(autotuner, "launchers", None):
            autotuner.precompile()
        launcher = _launcher(autotuner, point)
        launcher.config.found_by_coordesc = True  # Inductor's mark: no coordinate descent from it
        autotuner.launchers = [launcher]
    except Exception as exc:  # noqa: BLE001 - Inductor's internals moved: its own race runs instead
        return f"could not compile it ({type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''})"
    return None


class FixedLaunches:
    """What :func:`fixed_at_first_call` did: kernels fixed, and the listed ones it could not fix (with why)."""

    def __init__(self) -> None:
        self.fixed = 0
        self.refused: list[str] = []


@contextlib.contextmanager
def first_calls(hook: Callable[[Any, tuple[Any, ...]], None]) -> Iterator[None]:
    """While the block runs, ``hook(autotuner, args)`` before each Inductor kernel's first launch (where Inductor
    races its configurations: ``CachingAutotuner.run``, torch 2.11-2.13)."""
    from torch._inductor.runtime.triton_heuristics import CachingAutotuner

    seen: set[int] = set()
    original = CachingAutotuner.run

    def run(self: Any, *args: Any, **kwargs: Any) -> Any:
        if id(self) not in seen:
            seen.add(id(self))
            hook(self, args)
        return original(self, *args, **kwargs)

    from unittest import mock

    with mock.patch.object(CachingAutotuner, "run", run):
        yield


@contextlib.contextmanager
def fixed_at_first_call(points: dict[str, Point] | None, fingerprint: Fingerprint) -> Iterator[FixedLaunches]:
    """While the block runs, each Inductor kernel whose ``fingerprint`` ``points`` lists launches that point from
    its first call (before Inductor would race its configurations). Nothing is patched when ``points`` is empty."""
    done = FixedLaunches()
    if not points:
        yield done
        return

    def fix_listed(autotuner: Any, args: tuple[Any, ...]) -> None:
        name = getattr(autotuner.fn, "__name__", "?")
        try:
            fp = fingerprint(autotuner)
        except Exception as exc:  # noqa: BLE001 - unreadable: Inductor's race, said
            done.refused.append(f"{name}: its fingerprint ({type(exc).__name__})")
            return
        if fp is None or fp not in points:
            return
        why = fix(autotuner, points[fp])
        if why is None:
            done.fixed += 1
            return
        done.refused.append(f"{name}: {why}")
        log.warning("kernelopt: launch configuration %s not used for %s: %s", points[fp], name, why)

    with first_calls(fix_listed):
        yield done


def picked(autotuners: Iterable[Any], fingerprint: Fingerprint) -> dict[str, Point]:
    """Each kernel's launch point once its first call has raced it (fingerprint -> point): the ones with one
    launcher left and a file to fingerprint (under Triton's interpreter: the configuration it launches)."""
    out: dict[str, Point] = {}
    for autotuner in autotuners:
        interpreted = _interpreted(autotuner)
        launchers = getattr(autotuner, "launchers", None) or []
        configs = [c.config for c in launchers] if not interpreted else list(getattr(autotuner, "configs", None) or [])
        if not configs or (len(configs) != 1 and not interpreted):
            continue
        try:
            fp = fingerprint(autotuner)
            point = point_of(configs[0])
            if fp is not None and len(point) <= MAX_NAMES:
                out[fp] = point
        except Exception:  # noqa: BLE001 - a kernel we cannot read is left to race
            continue
    return out


def merged(parts: Iterable[dict[str, Point] | None]) -> dict[str, Point] | None:
    """Several checks' picks in one (a problem with SHAPES: one per shape); a kernel picked differently by two
    checks is left out (it races). None when no check recorded any."""
    out: dict[str, Point] = {}
    clash: set[str] = set()
    found = False
    for part in parts:
        if part is None:
            continue
        found = True
        for fp, point in part.items():
            if fp in out and out[fp] != point:
                clash.add(fp)
            out.setdefault(fp, point)
    kept = [(fp, p) for fp, p in out.items() if fp not in clash]
    return dict(kept[:MAX_KERNELS]) if found else None
