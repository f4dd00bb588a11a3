"""KernelBench-format problem files: ``class Model``, ``get_inputs()``, ``get_init_inputs()``.

A problem's id is its file's stem. The problem's own weights are what ``Model(*get_init_inputs())``
builds under a fixed seed, on the CPU, then moved (the same weights on every device; trained
weights a problem loads are its own too). The verifier varies them as production does:
:func:`perturb_weights` turns them, in place, into another set drawn from a seed. Inputs come from a seed of the
caller's choosing and are drawn on the device the model runs on (``get_inputs()``
runs under ``torch.device(device)``): drawing 2^31 numbers on the CPU took longer
than verifying a candidate, and full-size inputs never pass through host memory.
The same seed gives the same inputs on the same kind of device: the draw runs with torch's, Python's
``random`` and numpy's global generators seeded (:func:`seeded`); a generator of the file's own
(``np.random.default_rng()``, an unseeded ``torch.Generator``) is not, and the verifier refuses a
problem whose two draws under one seed differ (verify/pipeline.py).

A problem may declare several input shapes (``SHAPES``, :mod:`.shapes`); a :class:`Problem` is
opened at one of them (``shape``, default the first declared) and draws its inputs there.
"""

from __future__ import annotations

import hashlib
import importlib.util
import sys
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

from ..errors import ProblemError
from .shapes import choose_shape, overridden, read_shapes, store_name

WEIGHT_SEED = 0  # the seed while the problem's own weights are built

# Perturbed weights (:func:`perturb_weights`): parameters get additive noise of this many times
# their RMS; buffers are scaled element by element by 2**u, u uniform in [-BUFFER_OCTAVES/2, +BUFFER_OCTAVES/2].
PARAMETER_NOISE = 0.25
BUFFER_OCTAVES = 1.0
_PIECE = 1 << 24  # elements drawn at a time: no full-size temporary beside an 8 GiB weight


def _where(exc: BaseException, path: Path) -> str:
    """``line N`` of the innermost frame inside the problem file, if any."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno})" if frames else ""


def seeded(seed: int) -> None:
    """Seed every global generator a problem file may draw from: torch's (every device), Python's ``random``
    and numpy's legacy one (``np.random.randn``...), the last from all 64 bits of ``seed``."""
    import random

    import torch

    torch.manual_seed(seed)
    random.seed(seed)
    numpy = sys.modules.get("numpy")
    if numpy is not None:
        bits = seed % 2 ** 64
        numpy.random.seed([bits & 0xFFFFFFFF, bits >> 32])


@dataclass
class Problem:
    path: Path
    module: ModuleType = field(repr=False)
    # The declared shapes (name -> the globals each overrides; {}: none declared) and the one opened.
    shapes: dict[str, dict[str, Any]] = field(default_factory=dict)
    shape: str | None = None
    shape_weights: dict[str, float] = field(default_factory=dict)
    # The seed of the latest make_inputs(): a training step's default loss weights derive from it
    # (capture/training.py), so a draw and its float64 reference get the same incoming gradients.
    draw_seed: int = field(default=0, repr=False)
    # A training step's incoming gradients, drawn: a callable the verifier's stress draws set for one run
    # (verify/kernel.py), given the loss's gradient of each output to turn in place into the draw before the
    # backward runs (capture/training.py: step); None, the loss's own. Set only inside training.incoming_drawn().
    incoming_draw: Any = field(default=None, repr=False)
    # A training step's default incoming gradients per (seed, outputs), drawn once (capture/training.py:
    # default_incoming); held by the problem, so they go when it goes.
    incoming: dict[tuple, list[Any]] = field(default_factory=dict, repr=False, compare=False)
    # The bytes of the incoming gradients the latest training step's backward started from, where the step
    # gave them in full (the default loss's, capture/training.py: step); 0: none counted (a file's own loss,
    # whose gradient may be an expanded scalar, or not a training problem). Part of the step's floor (floor.py).
    incoming_bytes: int = field(default=0, repr=False, compare=False)

    @property
    def id(self) -> str:
        return self.path.stem

    def at(self, shape: str | None) -> Problem:
        """This problem opened at ``shape`` (None: the first declared); an undeclared one is a ProblemError."""
        return Problem(path=self.path, module=self.module, shapes=self.shapes,
                       shape=choose_shape(self.path, self.shapes, shape), shape_weights=self.shape_weights)

    def build_model(self, device: str = "cpu") -> Any:
        """The model in eval mode on ``device``, weights drawn from a fixed seed."""
        import torch

        seeded(WEIGHT_SEED)
        try:
            init = list(self.module.get_init_inputs())
            model = self.module.Model(*init)
        except Exception as exc:  # a user's file: any error is theirs to see in one line
            raise ProblemError(self.path, f"Model(*get_init_inputs()) failed{_where(exc, self.path)}: {exc!r}") from exc
        if not isinstance(model, torch.nn.Module):
            raise ProblemError(self.path, "Model is not a torch.nn.Module")
        return model.to(device).eval()

    def check_reproducible(self, seed: int, first: list[Any], second: list[Any]) -> None:
        """This problem's error when two draws of ``get_inputs()`` under ``seed`` differ (``first`` and ``second``:
        a checksum or the like per input): every check compares runs on inputs drawn again from their seed, so
        such a problem would fail every candidate, the compiler's own kernels included."""
        differ = [i for i, (a, b) in enumerate(zip(first, second)) if a != b]
        if differ or len(first) != len(second):
            which = f"input {differ[0]}" if differ else f"{len(first)} and {len(second)} inputs"
            raise ProblemError(self.path, f"get_inputs() is not reproducible: two draws under seed {seed} differ "
                                          f"({which}). Draw with torch (torch.randn...), Python's random or numpy's "
                                          "global generator (np.random.randn...), which kernelopt seeds before each "
                                          "draw; a generator of your own (np.random.default_rng(), "
                                          "torch.Generator()) must be seeded from torch.initial_seed()")

    def store_name(self, kernel: str) -> str:
        """The store folder of ``kernel`` at this problem's shape (``<kernel>@<shape>`` when it declares SHAPES)."""
        return store_name(kernel, self.shape)

    def make_inputs(self, seed: int, device: str = "cpu", shape: str | None = None) -> list[Any]:
        """``get_inputs()`` under ``seed``, drawn on ``device``: tensors there, and Python numbers
        (``int``, ``float``, ``bool``: a scale factor, a dimension) passed as they are. ``shape``
        (default: the problem's own, :attr:`shape`): the declared shape whose globals are in force."""
        import torch

        chosen = choose_shape(self.path, self.shapes, shape or self.shape) if self.shapes or shape else None
        overrides = self.shapes[chosen] if chosen is not None else {}
        seeded(seed)
        self.draw_seed = seed
        try:
            with torch.device(device), overridden(self.module, overrides):
                inputs = self.module.get_inputs()
        except torch.OutOfMemoryError:
            raise
        except Exception as exc:
            raise ProblemError(self.path, f"get_inputs() failed{_where(exc, self.path)}: {exc!r}") from exc
        if not isinstance(inputs, (list, tuple)):
            raise ProblemError(self.path, f"get_inputs() must return a list (of tensors and Python numbers), "
                                          f"not {type(inputs).__name__}")
        bad = [i for i, x in enumerate(inputs) if not isinstance(x, (torch.Tensor, int, float, bool))]
        if bad:
            raise ProblemError(self.path, f"get_inputs() item {bad[0]} is a {type(inputs[bad[0]]).__name__}, "
                                          f"not a tensor or a Python number")
        if all(not isinstance(x, torch.Tensor) for x in inputs):
            what = "an empty list" if not inputs else "no tensor"
            raise ProblemError(self.path, f"get_inputs() returned {what}: the model needs at least one tensor "
                                          "input (a kernel's results are checked on the inputs drawn here)")
        return [x.to(device) if isinstance(x, torch.Tensor) else x for x in inputs]


def load_problem(path: str | Path, shape: str | None = None) -> Problem:
    """Import a problem file, opened at ``shape`` (None: its first declared shape, if it declares
    any); any defect gives a ProblemError naming the file and the cause."""
    path = Path(path).resolve()
    if path.is_dir():
        raise ProblemError(path, "a folder, not a problem file (name the .py files, e.g. models/*.py)")
    if not path.is_file():
        raise ProblemError(path, "no such file")
    if path.suffix != ".py":
        raise ProblemError(path, "a problem file must be a .py file")
    digest = hashlib.sha1(str(path).encode()).hexdigest()[:8]
    name = f"kernelopt_problem_{path.stem}_{digest}"
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        source = path.read_text()
        compile(source, str(path), "exec")
    except SyntaxError as exc:
        raise ProblemError(path, f"syntax error at line {exc.lineno}: {exc.msg}") from exc
    except (OSError, UnicodeDecodeError) as exc:
        raise ProblemError(path, f"cannot read: {exc}") from exc
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:  # a user's file: sys.exit() at import is a defect too
        sys.modules.pop(name, None)
        raise ProblemError(path, f"importing failed{_where(exc, path)}: {exc!r}") from exc
    for attr in ("Model", "get_inputs", "get_init_inputs"):
        if not hasattr(module, attr):
            raise ProblemError(path, f"not a problem file: no `{attr}` defined")
    if not isinstance(module.Model, type):
        raise ProblemError(path, "`Model` must be a class")
    from .training import validate

    validate(path, module)  # TRAINING = True: a training step (capture/training.py)
    shapes, weights = read_shapes(path, module)
    return Problem(path=path, module=module, shapes=shapes, shape=choose_shape(path, shapes, shape),
                   shape_weights=weights)


def perturb_weights(model: Any, seed: int) -> None:
    """Turn the model's weights, in place on their device, into another set drawn from ``seed``.

    Parameters (floating point): additive normal noise of :data:`PARAMETER_NOISE` times the
    tensor's RMS, or, for an all-zero one (a bias or a LayerNorm shift as initialised), the
    mean RMS of the model's other parameters; so constant ones (LayerNorm's ones and zeros)
    vary too. Buffers and tensors kept as plain attributes (:func:`tensor_attributes`; floating
    point): each element scaled by a positive factor, so signs,
    zeros, infinities and NaNs keep their places (a running variance stays positive, a mask
    of zeros and -inf stays one). Integer and bool tensors are left alone. The same seed
    gives the same weights on the same kind of device.
    """
    import hashlib

    import torch

    root = int.from_bytes(hashlib.sha256(f"kernelopt-weights:{seed}".encode()).digest()[:8], "little") >> 1
    params = [p for p in model.parameters() if p.dtype.is_floating_point]
    rms = [_rms(p) for p in params]
    nonzero = [r for r in rms if r > 0]
    floor = sum(nonzero) / len(nonzero) if nonzero else 1.0
    with torch.no_grad():
        for k, (p, r) in enumerate(zip(params, rms)):
            gen = torch.Generator(device=p.device).manual_seed(root + k)
            scale = PARAMETER_NOISE * (r if r > 0 else floor)
            for piece in _pieces(p):
                piece.add_(torch.randn(piece.shape, generator=gen, device=p.device, dtype=torch.float32)
                           .mul_(scale).to(piece.dtype))
        for k, b in enumerate([*model.buffers(), *tensor_attributes(model)]):
            if not b.dtype.is_floating_point:
                continue
            gen = torch.Generator(device=b.device).manual_seed(root + len(params) + k)
            for piece in _pieces(b):
                u = torch.rand(piece.shape, generator=gen, device=b.device, dtype=torch.float32) - 0.5
                piece.mul_(torch.exp2(u * BUFFER_OCTAVES).to(piece.dtype))


def tensor_attributes(model: Any) -> list[Any]:
    """The floating-point tensors the model's modules keep as plain attributes (``self.temp = torch.full(...)``,
    a KernelBench LSTM's ``self.h0``): not parameters or buffers, so not in its state_dict, but read by its
    kernels like weights and changeable at run time. Those sharing memory with a parameter or buffer are left
    out (they change with it)."""
    owned = {t.untyped_storage().data_ptr() for t in [*model.parameters(), *model.buffers()]}
    found: list[Any] = []
    for _, _, value in plain_tensors(model):
        if value.untyped_storage().data_ptr() not in owned and all(value is not t for t in found):
            found.append(value)
    return found


def plain_tensors(model: Any) -> list[tuple[Any, str, Any]]:
    """(module, attribute name, tensor) for every floating-point tensor a module of ``model`` keeps as a plain
    attribute (not a parameter or buffer, not a private ``_name``)."""
    import torch

    return [(module, name, value) for module in model.modules() for name, value in vars(module).items()
            if isinstance(value, torch.Tensor) and value.dtype.is_floating_point and not name.startswith("_")
            and not isinstance(value, torch.nn.Parameter)]


def _pieces(t: Any) -> list[Any]:
    """Views of ``t`` (in-place operations on them change ``t``) of at most _PIECE elements."""
    if not t.is_contiguous() or t.numel() <= _PIECE:
        return [t]
    flat = t.view(-1)
    return [flat[i:i + _PIECE] for i in range(0, flat.numel(), _PIECE)]


def _rms(t: Any) -> float:
    """Root mean square of the finite elements of ``t``, accumulated in float64 piece by piece."""
    import torch

    total, count = 0.0, 0
    for piece in _pieces(t.detach()):
        x = piece.double()
        finite = torch.isfinite(x)
        total += float(torch.where(finite, x * x, 0.0).sum())
        count += int(finite.sum())
    return (total / count) ** 0.5 if count else 0.0
