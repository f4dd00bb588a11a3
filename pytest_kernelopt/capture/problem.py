"""KernelBench-format problem files: ``class Model``, ``get_inputs()``, ``get_init_inputs()``.

A problem's id is its file's stem. Weights come from a fixed seed, drawn on the CPU
and then moved (the same weights on every device). Inputs come from a seed of the
caller's choosing and are drawn on the device the model runs on (``get_inputs()``
runs under ``torch.device(device)``): drawing 2^31 numbers on the CPU took longer
than verifying a candidate, and full-size inputs never pass through host memory.
The same seed gives the same inputs on the same kind of device.
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

WEIGHT_SEED = 0


def _where(exc: BaseException, path: Path) -> str:
    """``line N`` of the innermost frame inside the problem file, if any."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if Path(f.filename) == path]
    return f" (line {frames[-1].lineno})" if frames else ""


@dataclass
class Problem:
    path: Path
    module: ModuleType = field(repr=False)

    @property
    def id(self) -> str:
        return self.path.stem

    def build_model(self, device: str = "cpu") -> Any:
        """The model in eval mode on ``device``, weights drawn from a fixed seed."""
        import torch

        torch.manual_seed(WEIGHT_SEED)
        try:
            init = list(self.module.get_init_inputs())
            model = self.module.Model(*init)
        except Exception as exc:  # a user's file: any error is theirs to see in one line
            raise ProblemError(self.path, f"Model(*get_init_inputs()) failed{_where(exc, self.path)}: {exc!r}") from exc
        if not isinstance(model, torch.nn.Module):
            raise ProblemError(self.path, "Model is not a torch.nn.Module")
        return model.to(device).eval()

    def make_inputs(self, seed: int, device: str = "cpu") -> list[Any]:
        """``get_inputs()`` under ``seed``, drawn on ``device``: tensors there, and Python numbers
        (``int``, ``float``, ``bool``: a scale factor, a dimension) passed as they are."""
        import torch

        torch.manual_seed(seed)
        try:
            with torch.device(device):
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


def load_problem(path: str | Path) -> Problem:
    """Import a problem file; any defect gives a ProblemError naming the file and the cause."""
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
    return Problem(path=path, module=module)
