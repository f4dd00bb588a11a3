"""Every setting the command line, the pytest plugin and ``[tool.kernelopt]`` share, defined once.

:class:`Settings` holds one field per setting: its type, default, bounds and help text,
and in ``json_schema_extra`` where it surfaces:

* ``cli``: its ``kernelopt`` flag (each subcommand that takes it calls :func:`add_arguments`);
* ``pytest``: its ``pytest --kernelopt`` option (:func:`add_pytest_options`, in field order);
* ``toml``: true for a ``[tool.kernelopt]`` key (:class:`~pytest_kernelopt.config.Config`).
  Such a setting has no default on the command line: None there means "from the settings".

The options models take their defaults and bounds from here too: ``VerifyOptions``,
``SpeedPolicy`` and ``TuneOptions`` (:func:`field`, :func:`default`). What a
command does with a flag, and the flags of one subcommand alone (``--json``, ``--dump``,
``--modes`` ...), stay with the command in ``cli.py``.

Imported by the plugin at pytest start-up: pydantic only, never torch.
"""

from __future__ import annotations

import argparse
import copy
import math
from datetime import date
from pathlib import Path
from types import UnionType
from typing import Annotated, Any, Iterable, Literal, NamedTuple, Union, get_args, get_origin

from pydantic import AfterValidator, BaseModel, ConfigDict, Field
from pydantic.fields import FieldInfo

SECTION = "[tool.kernelopt]"
Device = Literal["auto", "cuda", "cpu"]
DEVICES: tuple[str, ...] = get_args(Device)


class AgentBackend(NamedTuple):
    """Where an agent backend lives and what it is, for the help of ``--agent`` and ``--kernelopt-agent``."""

    module: str  # its module or package in pytest_kernelopt/agents/, which declares it as ``BACKEND``
    about: str


# The agent backends by name: the values of `kernelopt tune --agent` and `--kernelopt-agent`, and the one
# list of them. Here, not in agents/, so that the plugin offers the names without importing the agents;
# each backend declares the rest (its coder, its command-line options, its SDK) in its own module, which
# agents/backends.py imports only when it is chosen or kernelopt tune's flags are listed.
AGENT_BACKENDS: dict[str, AgentBackend] = {
    "search": AgentBackend("search", "offline (Inductor's alternatives, launch-configuration search, rewrites)"),
    "anthropic": AgentBackend("claude", "Claude through the official SDK (ANTHROPIC_API_KEY)"),
}


def _agent_rule(name: str) -> str:
    if name not in AGENT_BACKENDS:  # read when checked: a backend registered later (a test's) is known
        raise ValueError(f"unknown agent backend {name!r} (choose from {', '.join(AGENT_BACKENDS)})")
    return name


Agent = Annotated[str, AfterValidator(_agent_rule)]


def _seconds_rule(value: float) -> float:
    if not math.isfinite(value) or value <= 0:
        raise ValueError("must be a positive number of seconds")
    return value


Seconds = Annotated[float, AfterValidator(_seconds_rule)]
# A share of a time: the speed rule's tolerances, wherever they are given.
Fraction = Annotated[float, Field(ge=0.0, lt=1.0)]


def _text_rule(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty")
    return value


Text = Annotated[str, AfterValidator(_text_rule)]


class Thresholds(BaseModel):
    """``[tool.kernelopt.thresholds."<model id or glob>"]``: the speed tolerances of the matching models,
    in place of the run's (``--kernelopt-max-slowdown``, ``--kernelopt-max-regression``). Numerics
    have no per-model tolerance: the numerics rule is the same for every model."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_slowdown: Fraction | None = None
    max_regression: Fraction | None = None


class AcceptedRegression(BaseModel):
    """``[tool.kernelopt.accepted_regressions.<model id>]``: a known slowdown of one model, accepted until
    ``expires`` (inclusive, UTC), up to ``max_slowdown`` on every speed check of its items. Numerics
    failures are never accepted."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    max_slowdown: Annotated[float, Field(gt=0.0, lt=1.0)]
    reason: Text
    by: Text  # who accepted it, and when (free text: "alice, 2026-12-04, PR #12")
    expires: date


def _on(*, cli: str | None = None, pytest: str | None = None, toml: bool = False, metavar: str | None = None,
        default_help: str | None = None, **extra: Any) -> dict[str, Any]:
    """Where a setting surfaces (the field's ``json_schema_extra``); ``default_help`` replaces the
    generated "(default ...)" clause; ``pytest_default`` and ``pytest_prefix`` apply to the pytest option;
    ``choices`` (a collection of names) are the values a plain ``str`` setting takes."""
    return {"cli": cli, "pytest": pytest, "toml": toml, "metavar": metavar, "default_help": default_help, **extra}


class Settings(BaseModel):
    """One field per setting; the order is the order of ``pytest --help``'s kernelopt group."""

    model_config = ConfigDict(extra="forbid")

    gate: bool = Field(False, description="collect and verify committed kernels and models",
                       json_schema_extra=_on(pytest="--kernelopt"))
    device: Device = Field("auto", description="where to run", json_schema_extra=_on(
        cli="--device", pytest="--kernelopt-device", toml=True,
        default_help=f"default: {SECTION} device, else auto: cuda if present, else cpu interpreter mode"))
    problems: list[str] = Field([], description="problem files", json_schema_extra=_on(
        pytest="--kernelopt-problems", toml=True, metavar="GLOB", default_help=f"default: {SECTION} problems"))
    kernels_dir: str = Field("kernels", description="the kernel store", json_schema_extra=_on(
        cli="--kernels-dir", toml=True, metavar="DIR", parse="path",
        default_help=f"default: {SECTION} kernels_dir of the problem's project"))
    config: Path | None = Field(None, description=f"read {SECTION} from this pyproject.toml instead of the problem's "
                                                  "project", json_schema_extra=_on(cli="--config", metavar="PYPROJECT"))
    strict: bool = Field(False, description=f"stale kernels fail even where {SECTION} allow_stale = true (they fail "
                                            "by default)", json_schema_extra=_on(pytest="--kernelopt-strict"))
    allow_stale: bool = Field(False, description="skip, with a note, committed kernels that cannot be verified at the "
                                                 "problem's shape (stale, or no longer generated) instead of failing "
                                                 "them", json_schema_extra=_on(pytest="--kernelopt-allow-stale",
                                                                               toml=True))
    base_ref: str | None = Field(None, description="also compare each model with its problem file at git revision "
                                                   "REF, measured side by side",
                                 json_schema_extra=_on(pytest="--kernelopt-base-ref", metavar="REF"))
    # The speed rule's tolerances (SpeedPolicy); why these values: see SpeedPolicy.
    max_slowdown: Fraction = Field(0.01, description="fail only when the 95% CI's upper bound is below 1 - FRACTION",
                                   json_schema_extra=_on(pytest="--kernelopt-max-slowdown", metavar="FRACTION"))
    max_regression: Fraction = Field(0.05, description="fail the model item when its speedup falls below the one "
                                                       "recorded in model.json (this environment) by more than FRACTION",
                                     json_schema_extra=_on(pytest="--kernelopt-max-regression", metavar="FRACTION"))
    # Per model (a [tool.kernelopt] table each): the gate's speed tolerances, and known slowdowns accepted
    # for a time. Validated by their records above; the gate checks the names against its problems.
    thresholds: dict[str, Thresholds] = Field({}, description="per-model speed tolerances of the gate",
                                              json_schema_extra=_on(toml=True))
    accepted_regressions: dict[str, AcceptedRegression] = Field(
        {}, description="known slowdowns the gate accepts for a time", json_schema_extra=_on(toml=True))
    seeds: int = Field(3, ge=1, le=1000, description="input seeds for the kernel and model stages",
                       json_schema_extra=_on(cli="--seeds", pytest="--kernelopt-seeds", metavar="N"))
    # A seed a human gives (VerifyOptions.session_seeds): `kernelopt verify` reproduces a run
    # from it; everywhere else (the gate, accept, tune, refresh: what stores a kernel or passes a
    # gate) its seeds are only added to seeds drawn from the OS, so a pinned seed (addopts, a
    # pull request's pyproject) cannot narrow what is checked. Every check's own draws are fresh.
    seed: int | None = Field(None, ge=0, lt=1 << 63,
                             description="add the input seeds derived from S to the fresh ones (kernelopt verify: "
                                         "reproduce a run from S exactly)",
                             json_schema_extra=_on(cli="--seed", pytest="--kernelopt-seed", metavar="S",
                                                   default_help="default: none; seeds and every check's draws come "
                                                                "from the OS; verdict files name the seeds they ran "
                                                                "with"))
    # Seconds one candidate's checks may take in the worker (kernel, model, speed). The gate's
    # default is longer: on a cold cache its first check of a problem also compiles the model.
    timeout: Seconds = Field(300.0, description="seconds one candidate's checks may take in the isolated worker",
                             json_schema_extra=_on(cli="--timeout", pytest="--kernelopt-timeout", metavar="S",
                                                   parse="seconds", pytest_default=600.0))
    shard: str | None = Field(None, description="only the problems of shard K of N (stable: a problem's shard depends "
                                                "on its file name alone), to spread one run over N machines",
                              json_schema_extra=_on(cli="--shard", pytest="--kernelopt-shard", metavar="K/N"))
    json_out: str | None = Field(None, description="write every gate item's result to PATH as JSON (merge shards "
                                                   "with `kernelopt merge`)",
                                 json_schema_extra=_on(pytest="--kernelopt-json", metavar="PATH"))
    tune: bool = Field(False, description="before checking a problem, run `kernelopt tune` on it: versions the cascade "
                                          "accepts are stored and then gated like any committed kernel",
                       json_schema_extra=_on(pytest="--kernelopt-tune"))
    agent: Agent = Field("search", description="the agent backend; " + "; ".join(
                             f"{name}: {backend.about}" for name, backend in AGENT_BACKENDS.items()),
                         json_schema_extra=_on(cli="--agent", pytest="--kernelopt-agent", choices=AGENT_BACKENDS,
                                               pytest_prefix="--kernelopt-tune: "))
    budget_s: Seconds = Field(300.0, description="device seconds per kernel",
                              json_schema_extra=_on(cli="--budget-s", pytest="--kernelopt-budget-s", metavar="S",
                                                    parse="seconds", pytest_prefix="--kernelopt-tune: "))
    # Offered by the search backend, the one that harvests (`kernelopt tune --agent search --harvest-jobs`,
    # agents/search/coder.py's options); None: agents/harvest.py's harvest_jobs() decides from the CPU count.
    harvest_jobs: int | None = Field(None, ge=1, le=64,
                                     description="Inductor compiles of the harvest run at once, one child process "
                                                 "each (default: one per compile setting, at most half the CPU cores)",
                                     json_schema_extra=_on(metavar="N"))
    run_budget_s: Seconds | None = Field(None, description="device seconds for the whole run",
                                         json_schema_extra=_on(cli="--run-budget-s", metavar="S", parse="seconds",
                                                               default_help="default: no limit"))
    min_share: float = Field(0.02, ge=0.0, lt=1.0, description="skip kernels below this share of model GPU time",
                             json_schema_extra=_on(cli="--min-share", metavar="F"))
    allow_reduced_precision: bool = Field(False, description="accept candidates that compute in fp16/bf16/TF32 where "
                                                             "the compiler kernel did not",
                                          json_schema_extra=_on(cli="--allow-reduced-precision"))
    refresh: bool = Field(False, description="before checking a problem whose committed kernels are stale (a compiler "
                                             "upgrade, a changed model), run `kernelopt refresh` on it: each stale "
                                             "kernel's recipe is replayed on the new compiler kernel and stored when "
                                             "the cascade passes it, else the kernel is retired",
                          json_schema_extra=_on(pytest="--kernelopt-refresh"))
    # Not the same promise as `kernelopt tune --open-pr` (every faster kernel): the gate opens
    # pull requests only for problems whose items all passed.
    open_pr: bool = Field(False, description="--kernelopt-tune or --kernelopt-refresh: after the run, for each problem "
                                             "whose items all passed, commit what its tuning stored to branch "
                                             "kernelopt/<model>/<kernel>, push, and open or update a pull request "
                                             "(GITHUB_TOKEN; without one, print where to open it)",
                          json_schema_extra=_on(pytest="--kernelopt-open-pr"))
    report: str | None = Field(None, description="write a Markdown report of the gate run to PATH: what was checked, "
                                                 "verdicts, speedups, failures with their stage and reason",
                               json_schema_extra=_on(pytest="--kernelopt-report", metavar="PATH"))
    history: str | None = Field(None, description="append each timed model's time to the history file FILE (JSON, "
                                                  "github-action-benchmark's format; `kernelopt report --history` "
                                                  "draws it)",
                                json_schema_extra=_on(pytest="--kernelopt-history", metavar="FILE"))
    base: str | None = Field(None, description="the branch pull requests go into",
                             json_schema_extra=_on(cli="--base", metavar="BRANCH",
                                                   default_help="default: the remote's default branch"))
    remote: str = Field("origin", description="the git remote", json_schema_extra=_on(cli="--remote", metavar="NAME"))


FIELDS: dict[str, FieldInfo] = Settings.model_fields


def _extra(info: FieldInfo) -> dict[str, Any]:
    extra = info.json_schema_extra
    assert isinstance(extra, dict), "every setting says where it surfaces"
    return extra


TOML_KEYS: tuple[str, ...] = tuple(n for n, f in FIELDS.items() if _extra(f)["toml"])
CLI_SETTINGS: tuple[str, ...] = tuple(n for n, f in FIELDS.items() if _extra(f)["cli"])
PYTEST_SETTINGS: tuple[str, ...] = tuple(n for n, f in FIELDS.items() if _extra(f)["pytest"])


def field(name: str) -> Any:
    """A copy of setting ``name``'s field (default, bounds, validators, help), for another model to declare
    (``seeds: int = settings.field("seeds")``)."""
    return copy.deepcopy(FIELDS[name])


def default(name: str) -> Any:
    """Setting ``name``'s default (a fresh copy of a list)."""
    return FIELDS[name].get_default(call_default_factory=True)


def cli_flag(name: str) -> str:
    flag = _extra(FIELDS[name])["cli"]
    if flag is None:
        raise KeyError(f"setting {name!r} has no kernelopt flag")
    return str(flag)


def pytest_option(name: str) -> str:
    option = _extra(FIELDS[name])["pytest"]
    if option is None:
        raise KeyError(f"setting {name!r} has no pytest option")
    return str(option)


# --- deriving argparse arguments ---------------------------------------------------------

def _base_type(annotation: Any) -> Any:
    """int for ``int | None``, float for ``Seconds | None``; a Literal or ``list[str]`` as it is."""
    while get_origin(annotation) is Annotated:
        annotation = get_args(annotation)[0]
    if get_origin(annotation) in (Union, UnionType):  # X | None
        return _base_type(next(a for a in get_args(annotation) if a is not type(None)))
    return annotation


def _bound(info: FieldInfo, kind: str) -> Any:
    return next((getattr(m, kind) for m in info.metadata if hasattr(m, kind)), None)


def _fmt(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, float):
        return f"{value:g}"
    return str(value)


def positive_seconds(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number of seconds: {text!r}") from None
    if not math.isfinite(value) or value <= 0:
        raise argparse.ArgumentTypeError(f"must be a positive, finite number of seconds, not {text!r}")
    return value


def _whole_number(info: FieldInfo) -> Any:
    """A command-line type for a bounded whole number, its bounds read from the field."""
    low, high = _bound(info, "ge"), _bound(info, "le")
    if high is None and (lt := _bound(info, "lt")) is not None:
        high = lt - 1
    # 2^63 - 1 reads better than 9223372036854775807.
    high_text = f"2^{high.bit_length()} - 1" if high > 10**6 and (high + 1) & high == 0 else str(high)

    def whole_number(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
        if not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be between {low} and {high_text}, not {text}")
        return value

    return whole_number


def _range_text(info: FieldInfo, metavar: str | None) -> str:
    """"1 to 1000" for a whole number bounded both ways, "0 <= F < 1" for a fraction; else nothing."""
    base, ge = _base_type(info.annotation), _bound(info, "ge")
    if base is int and ge is not None and (le := _bound(info, "le")) is not None:
        return f"{ge} to {le}"
    if base is float and ge is not None and (lt := _bound(info, "lt")) is not None:
        return f"{ge:g} <= {metavar} < {lt:g}"
    return ""


def validate(name: str, value: Any) -> Any:
    """``value`` checked by setting ``name``'s field (type, bounds, validators): pydantic's ValidationError
    when it is no such value. The one check of a setting, whichever surface gave it."""
    from pydantic import TypeAdapter

    info = FIELDS[name]
    # mypy cannot type an Annotated built at run time from a field's annotation.
    return TypeAdapter(Annotated[info.annotation, info]).validate_python(value)  # type: ignore[arg-type]


def rule_text(name: str) -> str:
    """What a value of setting ``name`` must be, in words, from its field: the gate's usage errors say it."""
    info = FIELDS[name]
    base, ge = _base_type(info.annotation), _bound(info, "ge")
    le, lt = _bound(info, "le"), _bound(info, "lt")
    if _extra(info).get("parse") == "seconds":
        return "must be a positive, finite number of seconds"
    if base is int and ge is not None and le is not None:
        return f"must be a whole number from {ge} to {le}"
    if base is int and ge is not None and lt is not None:
        upper = f"2**{lt.bit_length() - 1}" if lt > 10**6 and lt & (lt - 1) == 0 else str(lt)
        return f"must be a whole number from {ge} up to {upper}"
    if base is float and ge is not None and lt is not None:
        return f"must be a fraction from {ge:g} up to, not including, {lt:g}"
    raise KeyError(f"setting {name!r} has no rule in words")


def _surface_default(name: str, surface: str) -> Any:
    info, extra = FIELDS[name], _extra(FIELDS[name])
    if extra["toml"]:
        return None  # unset: the project's [tool.kernelopt], else the setting's default
    if surface == "pytest" and "pytest_default" in extra:
        return extra["pytest_default"]
    return info.get_default(call_default_factory=True)


def help_text(name: str, surface: str = "cli", *, prefix: str = "", note: str = "") -> str:
    """The help of setting ``name``: description, range, default (as ``surface`` applies it), then ``note``."""
    info, extra = FIELDS[name], _extra(FIELDS[name])
    text = prefix + (extra.get("pytest_prefix", "") if surface == "pytest" else "") + str(info.description)
    if rng := _range_text(info, extra["metavar"]):
        text += f", {rng}"
    value = _surface_default(name, surface)
    if extra["default_help"] is not None:
        text += f" ({extra['default_help']})"
    elif extra["toml"]:
        text += f" (default: {SECTION} {name}, else {_fmt(info.default)})"
    elif value is not None and not isinstance(value, bool):
        text += f" (default {_fmt(value)})"
    return text + note


def argparse_spec(name: str, surface: str = "cli") -> tuple[str, dict[str, Any]]:
    """(flag, keyword arguments of ``add_argument``/``addoption``) of setting ``name`` on ``surface``
    (``cli``: kernelopt's argparse; ``pytest``: pytest's ``addoption``)."""
    info, extra = FIELDS[name], _extra(FIELDS[name])
    flag = extra[surface]
    if flag is None:
        raise KeyError(f"setting {name!r} is not a {surface} option")
    base = _base_type(info.annotation)
    kwargs: dict[str, Any] = {}
    value = _surface_default(name, surface)
    if base is bool:
        kwargs["action"] = "store_true"
        if value is None:
            kwargs["default"] = None  # unset: the [tool.kernelopt] key decides
    else:
        if extra.get("choices") is not None:  # names kept elsewhere (AGENT_BACKENDS), read when the flag is made
            kwargs["choices"] = list(extra["choices"])
        elif get_origin(base) is Literal:
            kwargs["choices"] = list(get_args(base))
        elif get_origin(base) is list:
            kwargs["nargs"] = "+"
        elif surface == "cli" and extra.get("parse") == "seconds":
            kwargs["type"] = positive_seconds
        elif surface == "cli" and (extra.get("parse") == "path" or base is Path):
            kwargs["type"] = Path
        elif surface == "cli" and base is int:
            kwargs["type"] = _whole_number(info)
        elif base in (int, float):
            kwargs["type"] = base
        kwargs["default"] = value
        if extra["metavar"] is not None:
            kwargs["metavar"] = extra["metavar"]
    return flag, kwargs


def add_arguments(parser: argparse.ArgumentParser, names: Iterable[str], *, prefix: str = "",
                  notes: dict[str, str] | None = None, helps: dict[str, str] | None = None) -> None:
    """Add the flags of settings ``names`` to a kernelopt subcommand, in that order.

    ``prefix`` goes before each help (``with --open-pr: ``); ``notes`` add to a setting's help on this
    subcommand; ``helps`` replace it where the subcommand gives the setting another meaning.
    """
    for name in names:
        flag, kwargs = argparse_spec(name, "cli")
        helped = (helps or {}).get(name) or help_text(name, "cli", prefix=prefix, note=(notes or {}).get(name, ""))
        parser.add_argument(flag, help=helped.replace("%", "%%"), **kwargs)


def add_pytest_options(group: Any) -> None:
    """Add every pytest-visible setting to pytest's ``kernelopt`` option group, in field order.

    The option's dest is pytest's own from the flag (``--kernelopt-seeds`` -> ``kernelopt_seeds``):
    the gate reads them by those names.
    """
    for name in PYTEST_SETTINGS:
        flag, kwargs = argparse_spec(name, "pytest")
        group.addoption(flag, help=help_text(name, "pytest").replace("%", "%%"), **kwargs)
