"""The Coder backends by name: the values of ``kernelopt tune --agent`` (and ``--kernelopt-agent``).

The names, and the module each backend lives in, are ``settings.AGENT_BACKENDS`` (low in the
layers, so the pytest plugin offers them without importing the agents). Each backend declares
the rest as ``BACKEND`` in its own module (:class:`~.coder.Backend`: its coder class, its
command-line options, its SDK). From those two, and nothing else, this module derives the coder
of a name (:func:`make_coder`), the flags ``kernelopt tune`` adds for every backend
(:func:`option_flags`) and the options of the chosen one (:func:`chosen_options`).

A backend's module is imported only when it is chosen or when ``kernelopt tune``'s flags are
made; its SDK only when its coder is constructed: the gate and the production loader never
import ``anthropic``, and ``--agent search`` does not either.

Adding a backend: its module or package here with ``BACKEND``, and one line in
``settings.AGENT_BACKENDS`` (CONTRIBUTING.md, "An agent backend").
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..errors import UsageError
from ..settings import AGENT_BACKENDS
from .coder import Backend, Coder


def backend(name: str) -> Backend:
    """What backend ``name`` declares (its module imported now)."""
    if name not in AGENT_BACKENDS:
        raise UsageError(f"unknown agent backend {name!r} (choose from {', '.join(AGENT_BACKENDS)})")
    module = importlib.import_module(f"{__package__}.{AGENT_BACKENDS[name].module}")
    declared = getattr(module, "BACKEND", None)
    if not isinstance(declared, Backend):
        raise TypeError(f"agent backend {name!r}: {module.__name__} declares no BACKEND (a coder.Backend)")
    return declared


def make_coder(name: str, **options: Any) -> Coder:
    """The backend registered as ``name``, constructed with ``options``."""
    coder: Coder = backend(name).coder(**options)
    return coder


@dataclass(frozen=True)
class BackendOption:
    """One ``kernelopt tune`` flag of one backend, from a field of its options model."""

    backend: str
    name: str  # the field: the coder's keyword
    help: str
    metavar: str | None
    switch: bool  # a bool field: a flag without a value

    @property
    def flag(self) -> str:
        return flag_of(self.name)


def flag_of(name: str) -> str:
    """``--max-usd`` for the option ``max_usd``."""
    return "--" + name.replace("_", "-")


def option_flags() -> dict[str, list[BackendOption]]:
    """Every registered backend's command-line options by flag, in registry order. Two backends may share a
    flag (each checks its value by its own field) when both take a value or both do not."""
    out: dict[str, list[BackendOption]] = {}
    for name in AGENT_BACKENDS:
        model = backend(name).options
        for field, info in (model.model_fields if model is not None else {}).items():
            extra = info.json_schema_extra if isinstance(info.json_schema_extra, dict) else {}
            shown = "" if info.default is None or info.annotation is bool else f" (default {info.default})"
            option = BackendOption(backend=name, name=field, help=f"--agent {name}: {info.description}{shown}",
                                   metavar=str(extra.get("metavar") or field.upper()), switch=info.annotation is bool)
            others = out.setdefault(option.flag, [])
            if others and others[0].switch != option.switch:
                raise TypeError(f"agent backends {others[0].backend!r} and {name!r} both declare {option.flag}, "
                                "one as a switch and one with a value")
            others.append(option)
    return out


def chosen_options(agent: str, given: dict[str, Any]) -> dict[str, Any]:
    """The keywords for backend ``agent``'s coder from the backend flags given (flag -> its text, or True for a
    switch): a flag of another backend is a UsageError naming the backend it belongs to; each value is checked
    by its field (a UsageError saying what it must be)."""
    model = backend(agent).options
    fields = {flag_of(name): name for name in (model.model_fields if model is not None else {})}
    foreign = [flag for flag in given if flag not in fields]
    if foreign:
        owners = sorted({o.backend for flag in foreign for o in option_flags().get(flag, [])})
        verb = "applies" if len(foreign) == 1 else "apply"
        raise UsageError(f"{' and '.join(foreign)} {verb} to --agent {' or '.join(owners)} only, not --agent {agent}")
    if model is None:
        return {}
    try:
        values = model.model_validate({fields[flag]: value for flag, value in given.items()})
    except ValidationError as exc:
        error = exc.errors()[0]
        flag = flag_of(str(error["loc"][0]))
        rule = str(error["msg"]).removeprefix("Value error, ")
        raise UsageError(f"{flag}: {rule[:1].lower()}{rule[1:]}, not {given[flag]!r}") from None
    return values.model_dump(exclude_unset=True)
