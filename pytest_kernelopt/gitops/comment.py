"""``kernelopt comment``: the gate's result as one comment on the pull request, updated on later runs.

The comment is found again by a hidden marker (:data:`MARKER`, an HTML comment GitHub does not
show) and by its author (``github-actions[bot]``, the workflow token's, unless told another),
so a comment someone else wrote with the marker in it is never the one edited. Everything
the comment shows comes from the result file through ``templates/gate_comment.md.j2``, escaped
(:func:`~pytest_kernelopt.report.gate.render_gate_comment`).
"""

from __future__ import annotations

import json
import os
import urllib.parse
from pathlib import Path
from typing import Any

from ..errors import UsageError
from .github import DEFAULT_API, Comment, GitHub, RepoRef

MARKER = "<!-- kernelopt-gate -->"
ACTIONS_BOT = "github-actions[bot]"
TOKEN_HINT = ("in a workflow: `env: GITHUB_TOKEN: ${{ github.token }}` on the step, and `permissions: "
              "pull-requests: write` on the job")


def pull_request_number(event_path: str | None) -> int:
    """The pull request of the workflow's event (``$GITHUB_EVENT_PATH``: ``pull_request.number``, or
    ``issue.number`` for a comment on a pull request)."""
    if not event_path:
        raise UsageError("comment: no pull request number: give --pr N (GITHUB_EVENT_PATH is not set)")
    try:
        event = json.loads(Path(event_path).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"comment: {event_path} (GITHUB_EVENT_PATH): cannot read the event ({exc})") from None
    for key in ("pull_request", "issue"):
        number = event.get(key, {}).get("number") if isinstance(event.get(key), dict) else None
        if isinstance(number, int) and number > 0:
            return number
    raise UsageError(f"comment: the event in {event_path} (GITHUB_EVENT_PATH) is not a pull request's: give --pr N")


def repository(explicit: str | None) -> RepoRef:
    """``--repo owner/name``, else ``$GITHUB_REPOSITORY``."""
    slug = explicit or os.environ.get("GITHUB_REPOSITORY")
    if not slug:
        raise UsageError("comment: no repository: give --repo OWNER/NAME (GITHUB_REPOSITORY is not set)")
    owner, _, name = slug.partition("/")
    if not owner or not name or "/" in name:
        raise UsageError(f"comment: --repo {slug!r}: expected OWNER/NAME")
    host = os.environ.get("GITHUB_SERVER_URL", "https://github.com").split("://", 1)[-1].strip("/") or "github.com"
    return RepoRef(host=host, owner=owner, name=name)


def run_url() -> str | None:
    """The workflow run's page (from GitHub Actions' own variables), or None outside a run."""
    server, slug, run = (os.environ.get(k) for k in ("GITHUB_SERVER_URL", "GITHUB_REPOSITORY", "GITHUB_RUN_ID"))
    if not (server and slug and run and run.isdigit() and server.startswith("https://")):
        return None
    return f"{server.rstrip('/')}/{urllib.parse.quote(slug, safe='/')}/actions/runs/{run}"


def comment_body(result: Any, templates_dir: Path | None = None) -> str:
    """The marker, then the rendered comment."""
    from ..report.gate import render_gate_comment
    from ..report.untrusted import MdSafe

    url = run_url()
    return f"{MARKER}\n" + render_gate_comment(result, templates_dir, run_url=MdSafe(url) if url else None)


def post_comment(result: Any, *, repo: str | None = None, pr: int | None = None, author: str | None = ACTIONS_BOT,
                 templates_dir: Path | None = None, token: str | None = None,
                 api_url: str | None = None) -> Comment:
    """Create or update the gate's comment on the pull request; every failure is one line naming what to fix."""
    token = token if token is not None else os.environ.get("GITHUB_TOKEN")
    if not token:
        raise UsageError(f"comment: GITHUB_TOKEN is not set ({TOKEN_HINT})")
    where = repository(repo)
    number = pr if pr is not None else pull_request_number(os.environ.get("GITHUB_EVENT_PATH"))
    github = GitHub(token, where, api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API)
    return github.upsert_comment(number, MARKER, comment_body(result, templates_dir), author)
