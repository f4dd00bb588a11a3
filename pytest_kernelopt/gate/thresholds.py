"""The gate's speed rule per model: the run's tolerances, a model's own, and a known slowdown accepted for a time.

* ``[tool.kernelopt.thresholds."<model id or glob>"]`` gives the matching models their own
  ``max_slowdown`` / ``max_regression`` in place of the run's (``--kernelopt-max-slowdown``,
  ``--kernelopt-max-regression``). A model id wins over globs; two globs that match one model
  and no id for it is an error, as is a key that matches no problem.
* ``[tool.kernelopt.accepted_regressions.<model id>]`` accepts a known slowdown of one model
  up to its ``max_slowdown``, with a reason and who accepted it, until ``expires`` (a date,
  inclusive, UTC; at most :data:`ACCEPT_MAX_DAYS` ahead, so none stays for good). A speed check
  that fails under the model's tolerances and passes under the accepted bound passes with status
  ``accepted-regression`` and the story (``accepted_regression``), which the summary, the JSON
  and the report show; beyond the bound it fails, saying so; once expired the model item fails,
  naming the entry. Only speed: a numerics failure (a rejection) is never accepted.

Every speed decision of the gate goes through :meth:`SpeedRules.judge`, which asks the one
speed policy (``verify.SpeedPolicy``) with the model's tolerances.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Callable, Iterable
from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from typing import Any

from ..config import toml_key as _key
from ..errors import UsageError
from ..settings import AcceptedRegression
from .failure import GateFailure
from ..runs.gate_result import ModelThresholds

# How far ahead an accepted regression may expire: long enough for a compiler fix to ship
# (torch releases come about every three months), short enough that none is forgotten.
ACCEPT_MAX_DAYS = 183
ACCEPTED = "accepted-regression"  # the status of an item that passed only by an accepted regression


def today() -> date:
    return datetime.now(timezone.utc).date()


def _pct(fraction: float) -> str:
    return f"{fraction * 100:g}%"


class SpeedRules:
    """The speed policy of each model of a gate run, and the accepted regressions.

    ``policy``: the run's (``verify.SpeedPolicy``); ``settings``: the project's ``Config``;
    ``models``: every model id the names in the settings may refer to; ``on``: the date
    expiry is judged on (UTC today).
    """

    def __init__(self, policy: Any, settings: Any, models: Iterable[str], on: date | None = None):
        self.default = policy
        self.on = on or today()
        self.source: Path | None = settings.source
        ids = sorted(set(models))
        self.thresholds: dict[str, ModelThresholds] = {}
        matched: dict[str, list[str]] = {}
        for key in settings.thresholds:
            found = [m for m in ids if fnmatch.fnmatchcase(m, key)]
            if not found:
                raise self._error(f"thresholds.{_key(key)}", f"matches no problem of the run ({', '.join(ids)})")
            for model in found:
                matched.setdefault(model, []).append(key)
        for model, keys in matched.items():
            exact = [k for k in keys if k == model]
            if not exact and len(keys) > 1:
                raise self._error(f"thresholds.{_key(keys[0])}", f"matches {model}, and so does "
                                  f"thresholds.{_key(keys[1])}: give {model} a table of its own, or narrow the globs")
            key = exact[0] if exact else keys[0]
            given = settings.thresholds[key]
            self.thresholds[model] = ModelThresholds(
                max_slowdown=policy.max_slowdown if given.max_slowdown is None else given.max_slowdown,
                max_regression=policy.max_regression if given.max_regression is None else given.max_regression,
                key=key)
        self.accepted: dict[str, AcceptedRegression] = dict(settings.accepted_regressions)
        horizon = self.on + timedelta(days=ACCEPT_MAX_DAYS)
        for model, entry in self.accepted.items():
            if model not in ids:
                raise self._error(f"accepted_regressions.{_key(model)}", f"names no problem of the run "
                                  f"({', '.join(ids)}); a model id, not a glob: remove the entry if the model is gone")
            if entry.expires > horizon:
                raise self._error(f"accepted_regressions.{_key(model)}.expires",
                                  f"{entry.expires} is more than {ACCEPT_MAX_DAYS} days away: an accepted regression "
                                  f"is temporary; expire it by {horizon} at the latest and renew it then if need be")

    def _error(self, key: str, why: str) -> UsageError:
        return UsageError(f"{self.source}: [tool.kernelopt] {key}: {why}")

    def where(self, model: str) -> str:
        """The table of ``model``'s accepted regression, as the user finds it."""
        return f"[tool.kernelopt.accepted_regressions.{_key(model)}] in {self.source}"

    def policy(self, model: str) -> Any:
        """The speed policy ``model`` is gated by: the run's, with the model's own tolerances where given."""
        own = self.thresholds.get(model)
        if own is None:
            return self.default
        return self.default.model_copy(update={"max_slowdown": own.max_slowdown,
                                               "max_regression": own.max_regression})

    def active(self, model: str) -> AcceptedRegression | None:
        entry = self.accepted.get(model)
        return entry if entry is not None and self.on <= entry.expires else None

    def expired(self, model: str) -> str | None:
        """Why ``model``'s accepted regression fails its model item (it expired), or None."""
        entry = self.accepted.get(model)
        if entry is None or self.on <= entry.expires:
            return None
        return (f"{model}: the accepted regression {self.where(model)} expired on {entry.expires} (accepted "
                f"{_pct(entry.max_slowdown)} slower by {entry.by}: {entry.reason}): remove it, or renew it with a "
                f"new date and reason if the slowdown is still known and accepted")

    def judge(self, model: str, fails: Callable[[Any], bool], message: Callable[[], str]) -> str | None:
        """One speed check of ``model``: ``fails(policy)`` says whether it fails under a policy.

        Passes (None) under the model's own policy; else passes by its active accepted regression
        (returns the story the item records) when it passes under the accepted bound; else raises
        :class:`GateFailure` with ``message()``, saying which bound it went beyond.
        """
        policy = self.policy(model)
        if not fails(policy):
            return None
        entry = self.active(model)
        if entry is None:
            own = self.thresholds.get(model)
            note = self.expired(model) or (None if own is None else (
                f"gated at its own tolerances: max slowdown {_pct(own.max_slowdown)}, max regression "
                f"{_pct(own.max_regression)} ([tool.kernelopt.thresholds.{_key(own.key)}] in {self.source})"))
            raise GateFailure(message() + (f"; {note}" if note else ""))
        accepted = policy.model_copy(update={"max_slowdown": max(policy.max_slowdown, entry.max_slowdown),
                                             "max_regression": max(policy.max_regression, entry.max_slowdown)})
        if fails(accepted):
            raise GateFailure(f"{message()}; beyond the regression accepted in {self.where(model)} (up to "
                              f"{_pct(entry.max_slowdown)} slower, until {entry.expires}: {entry.reason})")
        return (f"{message()}: accepted up to {_pct(entry.max_slowdown)} slower until {entry.expires} by {entry.by}: "
                f"{entry.reason}")

    def settings_thresholds(self) -> dict[str, ModelThresholds]:
        """The models gated by their own tolerances (JSON ``settings.thresholds``)."""
        return dict(sorted(self.thresholds.items()))

    def settings_accepted(self) -> dict[str, AcceptedRegression]:
        """The accepted regressions as written (JSON ``settings.accepted_regressions``)."""
        return dict(sorted(self.accepted.items()))
