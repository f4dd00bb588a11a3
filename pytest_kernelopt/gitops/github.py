"""Pull requests through the GitHub REST API (urllib only), and where a remote URL points.

Open: ``POST /repos/{owner}/{repo}/pulls``. When GitHub answers 422 "A pull request
already exists", the open pull request for that head branch is found
(``GET /repos/{owner}/{repo}/pulls?head=owner:branch&state=open``) and its title and
body are updated (``PATCH /repos/{owner}/{repo}/pulls/{number}``). The gate's comment on a
pull request (``kernelopt comment``): its comments are listed
(``GET /repos/{owner}/{repo}/issues/{number}/comments``, page by page), the one holding the
marker is edited (``PATCH .../issues/comments/{id}``), else one is created. Every failure is
one :class:`GitHubError` line naming the request and the cause; the token never
appears in a message.
"""

from __future__ import annotations

import json
import re
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass
from typing import Any

from .errors import GitHubError

DEFAULT_API = "https://api.github.com"
API_VERSION = "2022-11-28"
# GitHub refuses bodies longer than 65536 characters.
BODY_LIMIT = 60000

# https://[user[:pass]@]host[:port]/owner/repo[.git][/]  and ssh://, git://
_URL = re.compile(r"^(?:https?|ssh|git)://(?:[^@/]+@)?(?P<host>[^/:]+)(?::\d+)?/(?P<owner>[^/]+)/(?P<repo>[^/]+?)"
                  r"(?:\.git)?/?$")
# scp-like: [user@]host:owner/repo[.git]
_SCP = re.compile(r"^(?:[^@/]+@)?(?P<host>[^/:]+):(?!/)(?P<owner>[^/]+)/(?P<repo>[^/]+?)(?:\.git)?/?$")


@dataclass(frozen=True)
class RepoRef:
    """Where pull requests go: ``host`` (for web links), ``owner`` and ``name``."""

    host: str
    owner: str
    name: str

    @property
    def slug(self) -> str:
        return f"{self.owner}/{self.name}"

    @property
    def web(self) -> str:
        return f"https://{self.host}"

    def compare_url(self, base: str, head: str) -> str:
        """The page on which a person opens the pull request by hand."""
        return f"{self.web}/{self.slug}/compare/{_q(base)}...{_q(head)}?expand=1"

    def raw_url(self, commit: str, path: str) -> str:
        return f"{self.web}/{self.slug}/blob/{commit}/{_q(path)}?raw=true"


def _q(text: str) -> str:
    return urllib.parse.quote(text, safe="/")


def parse_remote(url: str) -> RepoRef | None:
    """Owner and repository from a remote URL (https, ssh://, scp-like ``git@host:o/r.git``); None for anything
    else (a local path)."""
    url = url.strip()
    match = _URL.match(url) or (None if "://" in url else _SCP.match(url))
    if match is None:
        return None
    return RepoRef(host=match["host"], owner=match["owner"], name=match["repo"])


def redact(url: str) -> str:
    """``url`` without credentials (``https://x-access-token:SECRET@github.com/...``)."""
    return re.sub(r"(://)[^@/]+@", r"\1***@", url)


@dataclass(frozen=True)
class PullRequest:
    number: int
    url: str
    action: str  # "opened" or "updated"


@dataclass(frozen=True)
class Comment:
    id: int
    url: str
    action: str  # "created" or "updated"


# Comments are listed 100 a page (GitHub's most), at most this many pages.
PAGE_SIZE, MAX_PAGES = 100, 50


class GitHub:
    """The few REST calls publishing needs, for one repository."""

    def __init__(self, token: str, repo: RepoRef, api_url: str = DEFAULT_API, *, timeout: float = 30.0):
        self.token, self.repo, self.timeout = token, repo, timeout
        self.api = api_url.rstrip("/")

    def _request(self, method: str, path: str, body: dict[str, Any] | None = None) -> tuple[int, Any]:
        url = f"{self.api}{path}"
        data = json.dumps(body).encode("utf-8") if body is not None else None
        request = urllib.request.Request(url, data=data, method=method, headers={
            "Authorization": f"Bearer {self.token}", "Accept": "application/vnd.github+json",
            "X-GitHub-Api-Version": API_VERSION, "User-Agent": "pytest-kernelopt",
            **({"Content-Type": "application/json"} if data is not None else {}),
        })
        what = f"GitHub API {method} {path.split('?')[0]}"
        try:
            with urllib.request.urlopen(request, timeout=self.timeout) as response:  # noqa: S310 (https or the user's API root)
                return response.status, _json(response.read())
        except urllib.error.HTTPError as exc:
            payload = _json(exc.read())
            return exc.code, payload if payload is not None else {"message": exc.reason}
        except (urllib.error.URLError, TimeoutError, OSError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise GitHubError(f"{what}: cannot reach {redact(self.api)} ({reason})") from None

    def _fail(self, method: str, path: str, status: int, payload: Any, *, missing: str = "",
              retry: str = "the branch is pushed, try again later") -> GitHubError:
        """One line for a refused request; ``missing``: what a 404 may also mean, ``retry``: what a 5xx leaves."""
        what = f"GitHub API {method} {path.split('?')[0]}"
        message = _message(payload)
        if status == 401:
            return GitHubError(f"{what}: 401 Unauthorized: GITHUB_TOKEN was rejected (expired, revoked or mistyped)")
        if status == 403:
            return GitHubError(f"{what}: 403 Forbidden: the token may not do this in {self.repo.slug} "
                               f"(needs pull-requests: write){f': {message}' if message else ''}")
        if status == 404:
            return GitHubError(f"{what}: 404 Not Found: no repository {self.repo.slug}{missing}, or the token cannot "
                               f"see it (a workflow's token needs pull-requests: write)")
        if status == 422:
            return GitHubError(f"{what}: 422 Unprocessable: {message or 'validation failed'}")
        if status >= 500:
            return GitHubError(f"{what}: GitHub server error {status}{f' ({message})' if message else ''}; {retry}")
        return GitHubError(f"{what}: unexpected HTTP {status}{f': {message}' if message else ''}")

    def open_or_update(self, head: str, base: str, title: str, body: str) -> PullRequest:
        """Open a pull request from branch ``head`` into ``base``; if one is open for ``head``, update its title and
        body."""
        body = _fit(body)
        pulls = f"/repos/{_q(self.repo.owner)}/{_q(self.repo.name)}/pulls"
        status, payload = self._request("POST", pulls, {"title": title, "head": head, "base": base, "body": body,
                                                        "maintainer_can_modify": True})
        if status == 201:
            return PullRequest(number=int(payload["number"]), url=str(payload["html_url"]), action="opened")
        if status != 422 or "already exists" not in _message(payload).lower():
            raise self._fail("POST", pulls, status, payload)
        query = f"{pulls}?head={urllib.parse.quote(f'{self.repo.owner}:{head}', safe='')}&state=open"
        status, found = self._request("GET", query)
        if status != 200:
            raise self._fail("GET", query, status, found)
        if not isinstance(found, list) or not found:
            raise GitHubError(f"GitHub API POST {pulls}: 422: GitHub says a pull request from {head} exists, "
                              f"but none is open (closed? reopen it or delete the branch)")
        number = int(found[0]["number"])
        path = f"{pulls}/{number}"
        status, payload = self._request("PATCH", path, {"title": title, "body": body})
        if status != 200:
            raise self._fail("PATCH", path, status, payload)
        return PullRequest(number=number, url=str(payload.get("html_url") or found[0].get("html_url")),
                           action="updated")


    # --- one comment on a pull request, kept up to date ------------------------------------------

    def upsert_comment(self, number: int, marker: str, body: str, author: str | None) -> Comment:
        """Update the comment on pull request ``number`` that holds ``marker`` (and was written by ``author``,
        when given), else create it; ``body`` must hold ``marker``. Comments are read page by page."""
        body = _fit(body, "on the run's summary page")
        comments = f"/repos/{_q(self.repo.owner)}/{_q(self.repo.name)}/issues/{number}/comments"
        missing, retry = f" or no pull request #{number} in it", "no comment was written, try again later"
        ours = None
        for page in range(1, MAX_PAGES + 1):
            query = f"{comments}?per_page={PAGE_SIZE}&page={page}"
            status, found = self._request("GET", query)
            if status != 200 or not isinstance(found, list):
                raise self._fail("GET", query, status, found, missing=missing, retry=retry)
            for comment in found:
                if not isinstance(comment, dict) or marker not in str(comment.get("body") or ""):
                    continue
                user = found_user if isinstance(found_user := comment.get("user"), dict) else {}
                if author is None or user.get("login") == author:
                    ours = ours or comment  # the first one: later runs keep editing it
            if len(found) < PAGE_SIZE:
                break
        if ours is None:
            status, payload = self._request("POST", comments, {"body": body})
            if status != 201:
                raise self._fail("POST", comments, status, payload, missing=missing, retry=retry)
            return Comment(id=int(payload["id"]), url=str(payload.get("html_url") or ""), action="created")
        path = f"/repos/{_q(self.repo.owner)}/{_q(self.repo.name)}/issues/comments/{int(ours['id'])}"
        status, payload = self._request("PATCH", path, {"body": body})
        if status != 200:
            raise self._fail("PATCH", path, status, payload, missing=f" or no comment {ours['id']}", retry=retry)
        return Comment(id=int(ours["id"]), url=str(payload.get("html_url") or ours.get("html_url") or ""),
                       action="updated")


def _json(data: bytes) -> Any:
    try:
        return json.loads(data.decode("utf-8")) if data else None
    except (ValueError, UnicodeDecodeError):
        return None


def _message(payload: Any) -> str:
    """GitHub's message and the messages of its ``errors`` list, on one line."""
    if not isinstance(payload, dict):
        return ""
    parts = [str(payload.get("message") or "")]
    for error in payload.get("errors") or []:
        if isinstance(error, dict):
            parts.append(str(error.get("message") or error.get("code") or ""))
        else:
            parts.append(str(error))
    return ": ".join(p for p in parts if p).replace("\n", " ")


def _fit(body: str, where: str = "on the branch") -> str:
    if len(body) <= BODY_LIMIT:
        return body
    return body[:BODY_LIMIT] + f"\n\n_(report truncated here; the full report is {where})_\n"
