"""Jinja templates: the bundled ones, overridable by the user's own ``templates/`` folder.

The bundled templates live in the repository's top-level ``templates/`` folder
(``report.md.j2``, ``report.html.j2``, ``prompts/*.j2``, ...). The wheel ships that
folder as ``pytest_kernelopt/_templates`` (``package-dir`` in pyproject.toml); a
checkout or an editable install reads it where it is. A template of the same name in
the user's folder wins; everything else falls back to the bundled one.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from .errors import UsageError

_PACKAGE = Path(__file__).resolve().parent
# Installed from a wheel: inside the package. From a checkout: the top-level folder.
_CANDIDATES = (_PACKAGE / "_templates", _PACKAGE.parent / "templates")


def bundled_dir() -> Path:
    """The folder holding the templates that ship with pytest-kernelopt."""
    for folder in _CANDIDATES:
        if folder.is_dir():
            return folder
    raise UsageError(f"the bundled templates are missing (looked in {', '.join(str(c) for c in _CANDIDATES)}); "
                     f"reinstall pytest-kernelopt")


def project_templates(start: Path | None = None) -> Path | None:
    """``templates/`` beside the nearest pyproject.toml at or above ``start`` (default: the
    current folder), if that folder exists: the user's overrides."""
    from .config import find_pyproject

    pyproject = find_pyproject(Path(start or Path.cwd()).resolve())
    if pyproject is None:
        return None
    folder = pyproject.parent / "templates"
    return folder if folder.is_dir() else None


def environment(user_dir: Path | None = None, *, html: bool = False, filters: dict[str, Any] | None = None,
                finalize: Any = None) -> Any:
    """A Jinja environment that looks in ``user_dir`` first, then in the bundled templates.

    Undefined names are errors (a template that names a missing field fails loudly
    instead of printing nothing). ``html`` turns on autoescaping; ``filters`` are added
    to Jinja's own; ``finalize`` is applied to every ``{{ ... }}`` (Markdown's escaping:
    ``report.untrusted.md_finalize``).
    """
    import jinja2

    dirs = [str(bundled_dir())]
    if user_dir is not None:
        user = Path(user_dir)
        if not user.is_dir():
            raise UsageError(f"{user}: templates folder does not exist")
        dirs.insert(0, str(user))
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(dirs), undefined=jinja2.StrictUndefined, autoescape=html,
        trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True, finalize=finalize,
    )
    env.filters.update(filters or {})
    return env


def render(name: str, context: dict[str, Any], user_dir: Path | None = None, *, html: bool = False,
           filters: dict[str, Any] | None = None, finalize: Any = None) -> str:
    """Render template ``name`` with ``context``; a missing or broken template is one UsageError naming it."""
    import jinja2

    env = environment(user_dir, html=html, filters=filters, finalize=finalize)
    try:
        template = env.get_template(name)
    except jinja2.TemplateNotFound as exc:
        # Also raised for a template that includes a missing one: name the one missing.
        raise UsageError(f"template {exc.name} not found (looked in {', '.join(env.loader.searchpath)})") from None
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError(f"{exc.filename or name}:{exc.lineno}: template syntax error: {exc.message}") from exc
    try:
        return template.render(**context)
    except jinja2.TemplateNotFound as exc:
        raise UsageError(f"template {exc.name} not found (included from {template.filename})") from None
    except jinja2.TemplateSyntaxError as exc:
        raise UsageError(f"{exc.filename or name}:{exc.lineno}: template syntax error: {exc.message}") from exc
    except jinja2.UndefinedError as exc:
        raise UsageError(f"{template.filename}: {exc.message}") from exc
