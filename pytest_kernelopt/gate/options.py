"""The gate's options, read once when pytest configures: ``--kernelopt-*`` and ``[tool.kernelopt]``.

A thin reader: pytest parses the options (``plugin.pytest_addoption``), ``config.load_config``
reads the settings, and this module turns both into one typed :class:`GateOptions`,
checking each value where the gate's command line names it. A bad one is a
:class:`~pytest_kernelopt.errors.UsageError` naming the option; nothing is compiled here.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from ..errors import UsageError

# What each verifier option must be, in the words of the gate's command line; the
# check itself is VerifyOptions' / SpeedPolicy's (one rule, parsed once).
# (The option's name comes from the settings, where it is defined once.)
_OPTION_RULES = {
    "seeds": "must be a whole number from 1 to 1000",
    "seed": "must be a whole number from 0 up to 2**63",
    "timeout": "must be a positive, finite number of seconds",
    "max_slowdown": "must be a fraction from 0 up to, not including, 1",
    "max_regression": "must be a fraction from 0 up to, not including, 1",
}


@dataclass(frozen=True)
class GateOptions:
    """Everything the gate was told, checked."""

    strict: bool  # a stale committed kernel fails (else: skipped with a note)
    verify: Any  # verify.VerifyOptions: seeds, seed, timeout and the speed policy
    shard: Any  # shard.Shard, or None: every problem
    json_path: Path | None  # --kernelopt-json
    report_path: Path | None  # --kernelopt-report
    history_path: Path | None  # --kernelopt-history
    tune: bool
    refresh: bool
    open_pr: bool
    agent: str  # --kernelopt-tune's agent backend
    budget_s: float  # --kernelopt-tune: device seconds per kernel
    device: str | None  # --kernelopt-device (None: [tool.kernelopt] device)
    problem_globs: list[str] | None  # --kernelopt-problems (None: [tool.kernelopt] problems)
    base_ref: str | None  # --kernelopt-base-ref


def read_options(config: pytest.Config, settings: Any) -> GateOptions:
    """The gate's options from pytest's ``config`` and the project's ``settings``, cheapest check first."""
    get = config.getoption
    strict = _strict(get("kernelopt_strict"), get("kernelopt_allow_stale"), settings.allow_stale)
    verify = _verify_options({name: get(f"kernelopt_{name}") for name in _OPTION_RULES})
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
    budget = get("kernelopt_budget_s")
    if not (isinstance(budget, float) and math.isfinite(budget) and budget > 0):
        raise UsageError(f"--kernelopt-budget-s {budget}: must be a positive, finite number of seconds")
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


def _verify_options(given: dict[str, Any]) -> Any:
    from pydantic import ValidationError

    from ..verify import SpeedPolicy, VerifyOptions

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

        raise UsageError(f"{pytest_option(name)} {given[name]}: {_OPTION_RULES[name]}") from None


def _shard(text: str | None) -> Any:
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
