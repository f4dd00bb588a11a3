"""The gate's options, read once when pytest configures: ``--kernelopt-*`` and ``[tool.kernelopt]``.

A thin reader: pytest parses the options (``plugin.pytest_addoption``), ``config.load_config``
reads the settings, and this module turns both into one typed :class:`GateOptions`,
checking each value where the gate's command line names it. A bad one is a
:class:`~pytest_kernelopt.errors.UsageError` naming the option; nothing is compiled here.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, ConfigDict

from ..errors import UsageError
from ..settings import Agent, rule_text
from ..shard import Shard
from ..verify.options import VerifyOptions

# The verifier's options the gate's command line gives; each is checked by VerifyOptions / SpeedPolicy
# (one rule, parsed once) and a bad one named in the words of its field (settings.rule_text).
_VERIFY_OPTIONS = ("seeds", "seed", "timeout", "max_slowdown", "max_regression")


class GateOptions(BaseModel):
    """Everything the gate was told, checked: built once when pytest configures, then handed down whole
    (the checks, the outputs, and ``--kernelopt-tune``, which takes ``verify`` as it is)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    strict: bool  # a stale committed kernel fails (else: skipped with a note)
    verify: VerifyOptions  # seeds, seed, timeout and the speed policy
    shard: Shard | None  # None: every problem
    json_path: Path | None  # --kernelopt-json
    report_path: Path | None  # --kernelopt-report
    history_path: Path | None  # --kernelopt-history
    tune: bool
    refresh: bool
    open_pr: bool
    agent: Agent  # --kernelopt-tune's agent backend
    budget_s: float  # --kernelopt-tune: device seconds per kernel
    device: str | None  # --kernelopt-device (None: [tool.kernelopt] device)
    problem_globs: list[str] | None  # --kernelopt-problems (None: [tool.kernelopt] problems)
    base_ref: str | None  # --kernelopt-base-ref


def read_options(config: pytest.Config, settings: Any) -> GateOptions:
    """The gate's options from pytest's ``config`` and the project's ``settings``, cheapest check first."""
    get = config.getoption
    strict = _strict(get("kernelopt_strict"), get("kernelopt_allow_stale"), settings.allow_stale)
    verify = _verify_options({name: get(f"kernelopt_{name}") for name in _VERIFY_OPTIONS})
    shard = _shard(get("kernelopt_shard"))
    here = config.invocation_params.dir
    json_path = _writable("--kernelopt-json", here, get("kernelopt_json"))
    report_path = _writable("--kernelopt-report", here, get("kernelopt_report"))
    history_path = _writable("--kernelopt-history", here, get("kernelopt_history"))
    if history_path is not None:
        from ..report.history import read_history

        read_history(history_path)  # a file that is no history fails now, before anything is compiled
    tune, refresh, open_pr = bool(get("kernelopt_tune")), bool(get("kernelopt_refresh")), bool(get("kernelopt_open_pr"))
    if open_pr and not (tune or refresh):
        raise UsageError("--kernelopt-open-pr publishes what --kernelopt-tune or --kernelopt-refresh stored; "
                         "give one of them too")
    budget = _checked("budget_s", get("kernelopt_budget_s"))
    return GateOptions(strict=strict, verify=verify, shard=shard, json_path=json_path, report_path=report_path,
                       history_path=history_path, tune=tune, refresh=refresh, open_pr=open_pr, agent=get("kernelopt_agent"), budget_s=budget,
                       device=get("kernelopt_device"), problem_globs=get("kernelopt_problems"),
                       base_ref=get("kernelopt_base_ref"))


def _strict(strict: bool, allow: bool | None, allow_setting: bool) -> bool:
    """Whether a committed kernel that cannot be verified at the problem's shape fails.

    It does unless ``--kernelopt-allow-stale`` or ``allow_stale = true`` says otherwise;
    ``--kernelopt-strict`` (which predates the safe default) overrides the setting.
    """
    if strict and allow:
        raise UsageError("--kernelopt-strict and --kernelopt-allow-stale contradict each other: give one")
    return bool(strict or not (allow or allow_setting))


def _checked(name: str, value: Any) -> Any:
    """``value`` of setting ``name`` checked by its field (type, bounds, validators); else a UsageError
    naming the pytest option, the value and the rule."""
    from pydantic import ValidationError

    from ..settings import pytest_option, validate

    try:
        return validate(name, value)
    except ValidationError:
        raise UsageError(f"{pytest_option(name)} {value}: {rule_text(name)}") from None


def _verify_options(given: dict[str, Any]) -> VerifyOptions:
    from pydantic import ValidationError

    from ..verify import SpeedPolicy

    try:
        # Slower "beyond noise" must also be slower by more than max_slowdown: an unedited
        # dump measured 0.996x with a CI entirely below 1 on the H200 (20 of 20 runs).
        speed = SpeedPolicy(max_slowdown=given["max_slowdown"], max_regression=given["max_regression"])
        # Never exact: a --kernelopt-seed (addopts, a pull request's pyproject) only adds its seeds to fresh ones.
        return VerifyOptions(seeds=given["seeds"], seed=given["seed"], timeout=given["timeout"], speed=speed,
                             exact=False)
    except ValidationError as exc:
        name = str(exc.errors()[0]["loc"][-1])
        from ..settings import pytest_option

        raise UsageError(f"{pytest_option(name)} {given[name]}: {rule_text(name)}") from None


def _shard(text: str | None) -> Shard | None:
    from ..shard import parse_shard

    if text is None:
        return None
    try:
        return parse_shard(text)
    except UsageError as exc:
        raise UsageError(f"--kernelopt-shard {exc}") from None


def _writable(option: str, here: Path, given: str | None) -> Path | None:
    """A file the gate will write, from the folder pytest was started in; its folder must exist."""
    if given is None:
        return None
    path = Path(here, given).resolve()
    folder = path.parent
    if path.is_dir() or not (folder.is_dir() and os.access(folder, os.W_OK)):
        raise UsageError(f"{option} {given}: cannot write a file there")
    return path
