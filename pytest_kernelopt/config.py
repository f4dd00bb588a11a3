"""``[tool.kernelopt]`` in the user's pyproject.toml, and device selection."""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, ValidationError

from .errors import UsageError

Device = Literal["auto", "cuda", "cpu"]


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    problems: list[str] = []
    kernels_dir: str = "kernels"
    device: Device = "auto"
    # Where relative paths are taken from: the folder holding pyproject.toml.
    root: Path = Path(".")

    @property
    def kernels_path(self) -> Path:
        return (self.root / self.kernels_dir).resolve()

    def problem_files(self, globs: list[str] | None = None) -> list[Path]:
        """Problem files matched by ``globs`` (default: the configured ones), sorted, no duplicates."""
        found: dict[Path, None] = {}
        for pattern in globs if globs is not None else self.problems:
            base = pattern if Path(pattern).is_absolute() else str(self.root / pattern)
            matches = sorted(glob.glob(base, recursive=True))
            for match in matches:
                if match.endswith(".py") and not Path(match).name.startswith("_"):
                    found[Path(match).resolve()] = None
        return list(found)


def find_pyproject(start: Path) -> Path | None:
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def load_config(start: Path | None = None) -> Config:
    """Read ``[tool.kernelopt]`` from the nearest pyproject.toml at or above ``start``."""
    start = (start or Path.cwd()).resolve()
    pyproject = find_pyproject(start)
    if pyproject is None:
        return Config(root=start)
    try:
        data = tomllib.loads(pyproject.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc})") from exc
    section = data.get("tool", {}).get("kernelopt", {})
    if not isinstance(section, dict):
        raise UsageError(f"{pyproject}: [tool.kernelopt] must be a table")
    if "root" in section:
        raise UsageError(f"{pyproject}: [tool.kernelopt] root: unknown key (paths are relative to pyproject.toml)")
    try:
        return Config(**section, root=pyproject.parent)
    except ValidationError as exc:
        first = exc.errors()[0]
        key = ".".join(str(p) for p in first["loc"])
        raise UsageError(f"{pyproject}: [tool.kernelopt] {key}: {first['msg']}") from exc


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is present, else ``cpu`` (interpreter mode).

    Choosing ``cpu`` switches this process to interpreter mode; call this before any
    Triton kernel is compiled.
    """
    if requested not in ("auto", "cuda", "cpu"):
        raise UsageError(f"--device must be auto, cuda or cpu, not {requested!r}")
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available (use --device cpu for interpreter mode)")
    device = requested if requested != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        from . import interpret

        interpret.enable()
    return device
