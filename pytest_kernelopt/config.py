"""``[tool.kernelopt]`` in the user's pyproject.toml, and device selection.

Settings belong to the project that holds the problem files: the nearest
pyproject.toml *with a ``[tool.kernelopt]`` table*, searched upwards from the
problem file (command line) or from pytest's rootdir (plugin). Without one, the
defaults apply, rooted at the nearest pyproject.toml's folder (else the top of the
git working tree, else the start folder). Relative paths in the settings are relative to the file they are in;
relative paths given as arguments, to the current folder. The kernel store and the
runs folder are resolved by :func:`kernels_folder` and :func:`runs_folder` alone.
"""

from __future__ import annotations

import glob
import tomllib
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError

from . import settings
from .errors import UsageError
# DEVICES, SECTION: this module's names too.
from .settings import DEVICES, SECTION, TOML_KEYS, AcceptedRegression, Device, Thresholds  # noqa: F401


class Config(BaseModel):
    model_config = ConfigDict(extra="forbid")

    # The [tool.kernelopt] keys: defaults and help in ..settings, shared with the command line and the gate.
    problems: list[str] = settings.field("problems")
    kernels_dir: str = settings.field("kernels_dir")
    device: Device = settings.field("device")
    # The gate: a committed kernel it cannot verify at the problem's shape (stale, or a kernel the
    # compiler no longer generates) is skipped with a note instead of failing. Command line:
    # --kernelopt-allow-stale (and --kernelopt-strict, which overrides this to false).
    allow_stale: bool = settings.field("allow_stale")
    # The gate's per-model speed tolerances ([tool.kernelopt.thresholds."<model or glob>"]) and known
    # slowdowns accepted until a date ([tool.kernelopt.accepted_regressions.<model>]): gate/thresholds.py.
    thresholds: dict[str, Thresholds] = settings.field("thresholds")
    accepted_regressions: dict[str, AcceptedRegression] = settings.field("accepted_regressions")
    # Where relative paths are taken from: the folder holding pyproject.toml.
    root: Path = Path(".")
    # The file the settings were read from; None: defaults.
    source: Path | None = None

    @property
    def kernels_path(self) -> Path:
        """The kernel store these settings name (:func:`kernels_folder`)."""
        return kernels_folder(self)

    @property
    def runs_path(self) -> Path:
        """Where run directories go by default (:func:`runs_folder`)."""
        return runs_folder(self)

    def describe(self, kernels_dir: Path | None = None) -> str:
        """One line: where the settings came from and where the kernel store is (``kernels_dir``: --kernels-dir)."""
        # Printed after "settings: ", so it does not say "settings" again.
        origin = f"{self.source} {SECTION}" if self.source else f"defaults, no {SECTION} found (root {self.root})"
        if kernels_dir is not None:
            return f"{origin}; kernel store {kernels_folder(self, kernels_dir)} (--kernels-dir)"
        return f"{origin}; kernel store {self.kernels_path}"

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

    def unmatched(self, globs: list[str] | None = None) -> list[str]:
        """The patterns of ``globs`` (default: the configured ones) that match no problem file."""
        return [p for p in (globs if globs is not None else self.problems) if not self.problem_files([p])]


# --- the project's folders: one rule, every caller (CLI, gate, tune workers, the runtime) -----

# Run directories (tune, refresh, the gate's --kernelopt-tune and --kernelopt-refresh), under the project's root.
RUNS_DIR = Path(".kernelopt") / "runs"


def kernels_folder(settings: Config | None, given: str | Path | None = None) -> Path:
    """The kernel store, absolute: ``given`` (``--kernels-dir``, an argument) relative to the current folder,
    else ``[tool.kernelopt] kernels_dir`` relative to the folder of the pyproject.toml holding it
    (``settings.root``; without settings: the nearest pyproject.toml's folder, else the git working tree's
    top, else the start folder).
    ``settings`` None: the current folder's project (:func:`load_config`), read only when needed."""
    if given is not None:  # what a person typed is taken from where they typed it
        return Path(given).resolve()
    settings = settings if settings is not None else load_config()
    return (settings.root / settings.kernels_dir).resolve()  # what a file says, from that file's folder


def runs_folder(settings: Config | None, given: str | Path | None = None) -> Path:
    """Where run directories go, absolute: ``given`` (``--runs-dir``) relative to the current folder, else
    ``.kernelopt/runs`` under ``settings.root`` (the rule of :func:`kernels_folder`)."""
    if given is not None:
        return Path(given).resolve()
    settings = settings if settings is not None else load_config()
    return (settings.root / RUNS_DIR).resolve()


def find_pyproject(start: Path) -> Path | None:
    """The nearest pyproject.toml at or above ``start``, with or without settings."""
    for folder in [start, *start.parents]:
        candidate = folder / "pyproject.toml"
        if candidate.is_file():
            return candidate
    return None


def _read_section(pyproject: Path) -> dict[str, Any] | None:
    """``[tool.kernelopt]`` of ``pyproject`` (None when it has none); unreadable or invalid TOML is a UsageError."""
    try:
        text = pyproject.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        why = exc.strerror if isinstance(exc, OSError) else "not UTF-8 text"
        raise UsageError(f"{pyproject}: cannot read ({why})") from exc
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise UsageError(f"{pyproject}: not valid TOML ({exc})") from exc
    tool = data.get("tool", {})
    if not isinstance(tool, dict) or "kernelopt" not in tool:
        return None
    section = tool["kernelopt"]
    if not isinstance(section, dict):
        raise UsageError(f"{pyproject}: {SECTION} must be a table, not {type(section).__name__}")
    return section


def _validated(pyproject: Path, section: dict[str, Any]) -> Config:
    """One line naming the file and the key for anything but the documented settings and types."""
    def bad(key: str, why: str) -> UsageError:
        return UsageError(f"{pyproject}: {SECTION} {key}: {why}")

    for key, value in section.items():
        if key == "device":
            if value not in DEVICES:
                raise bad(key, f"must be one of {', '.join(DEVICES)}, not {value!r}")
        elif key == "allow_stale":
            if not isinstance(value, bool):
                raise bad(key, f"must be true or false, not {value!r}")
        elif key == "kernels_dir":
            if not isinstance(value, str) or not value.strip():
                raise bad(key, f"must be a non-empty string (a folder relative to pyproject.toml), not {value!r}")
        elif key == "problems":
            if isinstance(value, str):  # not iterated by character
                raise bad(key, f"must be a list of glob strings, not a string (write problems = [{value!r}])")
            if not isinstance(value, list):
                raise bad(key, f"must be a list of glob strings, not {type(value).__name__}")
            for i, item in enumerate(value):
                if not isinstance(item, str) or not item.strip():
                    raise bad(f"{key}[{i}]", f"must be a non-empty glob string, not {item!r}")
        elif key in _TABLES:
            _check_tables(key, value, bad)
        else:
            raise bad(key, f"unknown key (known: {', '.join(sorted(TOML_KEYS))}; paths are relative to "
                           f"{pyproject.name})")
    return Config(**section, root=pyproject.parent, source=pyproject)


# The [tool.kernelopt] keys that hold one table per model: what each table must be.
_TABLES: dict[str, type[BaseModel]] = {"thresholds": Thresholds, "accepted_regressions": AcceptedRegression}


def _check_tables(key: str, value: Any, bad: Any) -> None:
    """``[tool.kernelopt.<key>.<name>]`` tables, each checked by its record; the first error names the table's
    key and the field (``thresholds."softmax_*".max_slowdown: ...``)."""
    if not isinstance(value, dict):
        raise bad(key, f"must be a table of tables ([tool.kernelopt.{key}.<model>]), not {type(value).__name__}")
    record = _TABLES[key]
    for name, table in value.items():
        where = f"{key}.{toml_key(name)}"
        if not name.strip():
            raise bad(where, "the model name must not be empty")
        if not isinstance(table, dict):
            raise bad(where, f"must be a table ([tool.kernelopt.{where}]), not {type(table).__name__}")
        try:
            record.model_validate(table)
        except ValidationError as exc:
            # An unknown key first: a misspelt one is also reported missing under its right name.
            error = min(exc.errors(), key=lambda e: e["type"] != "extra_forbidden")
            field = ".".join(str(p) for p in error["loc"])
            kind, keys = error["type"], ", ".join(record.model_fields)
            if kind == "extra_forbidden":
                why = f"unknown key (known: {keys})"
            elif kind == "missing":
                why = f"missing (each such table gives {keys})"
            else:
                why = f"{error['msg'].lower()}, not {error['input']!r}"
            raise bad(f"{where}.{field}" if field else where, why) from None


def toml_key(name: str) -> str:
    """``name`` as TOML writes a key: bare when it can be, else quoted."""
    return name if name and all(c.isalnum() or c in "_-" for c in name) else f'"{name}"'


def _settings_from(start: Path) -> Config:
    nearest: Path | None = None
    repository: Path | None = None  # the top of the git working tree holding ``start``
    for folder in [start, *start.parents]:
        repository = repository or (folder if (folder / ".git").exists() else None)
        pyproject = folder / "pyproject.toml"
        if not pyproject.is_file():
            continue
        nearest = nearest or pyproject
        section = _read_section(pyproject)
        if section is not None:
            return _validated(pyproject, section)
    # Without settings, one root for every command wherever it runs from: tune given models/x.py and the
    # gate run from the repository's top must find the same kernel store (a project with no pyproject.toml
    # once had tune store under models/ and the gate look at the top).
    return Config(root=nearest.parent if nearest else repository or start)


def load_config(start: Path | None = None) -> Config:
    """Settings for the project at ``start`` (default: the current folder; the plugin passes pytest's rootdir):
    the nearest pyproject.toml with a ``[tool.kernelopt]`` table at or above it."""
    return _settings_from((start or Path.cwd()).resolve())


def config_for_problem(problem: Path, *, config: Path | None = None) -> Config:
    """Settings for the project that holds ``problem``, wherever the command runs from.

    ``config``, a pyproject.toml given explicitly, wins (it must exist and be readable);
    otherwise the nearest pyproject.toml with a ``[tool.kernelopt]`` table above the
    problem file's folder; else defaults rooted at the nearest pyproject.toml's folder,
    else at the top of the git working tree holding the problem, else at the problem's folder.
    """
    if config is not None:
        path = Path(config).resolve()
        if not path.is_file():
            raise UsageError(f"{config}: config file {'is not a file' if path.exists() else 'does not exist'}")
        section = _read_section(path)
        return _validated(path, section) if section is not None else Config(root=path.parent)
    return _settings_from(Path(problem).resolve().parent)


def resolve_device(requested: str) -> str:
    """``auto`` -> ``cuda`` when a CUDA device is present, else ``cpu`` (interpreter mode).

    Choosing ``cpu`` switches this process to interpreter mode; call this before any
    Triton kernel is compiled.
    """
    if requested not in DEVICES:
        raise UsageError(f"--device must be auto, cuda or cpu, not {requested!r}")
    import torch

    if requested == "cuda" and not torch.cuda.is_available():
        raise UsageError("--device cuda: no CUDA device is available (use --device cpu for interpreter mode)")
    device = requested if requested != "auto" else ("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cpu":
        from . import interpret

        interpret.enable()
    return device
