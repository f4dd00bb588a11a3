"""`kernelopt comment`: one comment on the pull request, created and then updated, on a fake GitHub API (127.0.0.1).

The fake is test_gitops' (its pull requests) with the issue-comment calls added; the result
file is written here, so nothing compiles.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from test_gate_report import FAILING, PASSING, result
from test_gitops import TOKEN, FakeGitHub

from pytest_kernelopt.cli import main
from pytest_kernelopt.runs.gate_result import ItemResult, write
from pytest_kernelopt.gitops.comment import MARKER

PR = 7
COMMENTS = f"/repos/acme/widgets/issues/{PR}/comments"


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


class FakeComments(FakeGitHub):
    """Comments of pull request 7 of acme/widgets, listed ``page_size`` a page (GitHub: ``per_page``)."""

    def __init__(self) -> None:
        super().__init__()
        self.comments: list[dict[str, Any]] = []

    def route(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        from urllib.parse import parse_qs, urlsplit

        url = urlsplit(path)
        if method == "GET" and url.path == COMMENTS:
            query = parse_qs(url.query)
            size, page = int(query["per_page"][0]), int(query["page"][0])
            return 200, self.comments[(page - 1) * size:page * size]
        if method == "POST" and path == COMMENTS:
            comment = {"id": 1000 + len(self.comments), "body": body["body"], "user": {"login": "github-actions[bot]"},
                       "html_url": f"https://github.com/acme/widgets/pull/{PR}#issuecomment-{1000 + len(self.comments)}"}
            self.comments.append(comment)
            return 201, comment
        if method == "PATCH" and url.path.startswith("/repos/acme/widgets/issues/comments/"):
            number = int(url.path.rsplit("/", 1)[1])
            for comment in self.comments:
                if comment["id"] == number:
                    comment["body"] = body["body"]
                    return 200, comment
        return 404, {"message": "Not Found"}


@pytest.fixture
def github(monkeypatch, tmp_path):
    fake = FakeComments()
    monkeypatch.setenv("GITHUB_API_URL", fake.url)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    monkeypatch.setenv("GITHUB_REPOSITORY", "acme/widgets")
    monkeypatch.setenv("GITHUB_SERVER_URL", "https://github.com")
    monkeypatch.setenv("GITHUB_RUN_ID", "4242")
    event = tmp_path / "event.json"
    event.write_text(json.dumps({"action": "synchronize", "number": PR, "pull_request": {"number": PR}}))
    monkeypatch.setenv("GITHUB_EVENT_PATH", str(event))
    monkeypatch.chdir(tmp_path)
    yield fake
    fake.close()


TIMED = ItemResult(nodeid="tests/problems/softmax_rows.py::model", problem="tests/problems/softmax_rows.py",
                   model="softmax_rows", item="model", outcome="passed", committed=1, stale=0, baseline=0,
                   speed_measured=True, speedup=1.071, speedup_ci=[1.062, 1.08], vs_base_speedup=1.25,
                   vs_base_ci=[1.2, 1.3], base_ms=0.5, head_ms=0.4, model_ms=0.4, compiled_ms=0.428)


def comment(tmp_path, capsys, *items: ItemResult, args: tuple[str, ...] = ()) -> tuple[int, str, str]:
    path = tmp_path / "kernelopt-gate.json"
    write(result(*items, problems=sorted({i.model for i in items})), path)
    code = main(["comment", str(path), *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_one_comment_created_then_updated(github, tmp_path, capsys):
    code, out, err = comment(tmp_path, capsys, *PASSING, *FAILING)
    assert code == 0, err
    assert out.startswith("created comment 1000: https://github.com/acme/widgets/pull/7")
    [first] = github.comments
    assert first["body"].startswith(MARKER + "\n### kernelopt gate: FAILED")
    assert "rms_norm" in first["body"] and "Failures" in first["body"]
    # the pull request's earlier comments fill a page: the marker is found on the second one
    github.comments[:0] = [{"id": n, "body": "lgtm", "user": {"login": "someone"}} for n in range(1, 101)]
    code, out, err = comment(tmp_path, capsys, TIMED)
    assert code == 0 and out.startswith("updated comment 1000"), err
    assert len(github.comments) == 101 and github.comments[-1]["id"] == 1000  # the same comment, edited
    body = github.comments[-1]["body"]
    assert "### kernelopt gate: passed" in body and "rms_norm" not in body
    # before / after: base and head time, the change and the interval
    assert "| softmax_rows | passed | 0.5 | 0.4 | -20.0% | 1.250x [1.200, 1.300] | 1.071x [1.062, 1.080] |" in body
    assert "[The run](https://github.com/acme/widgets/actions/runs/4242)" in body
    pages = [p for m, p, _, _ in github.requests if m == "GET"]
    assert pages[-2:] == [f"{COMMENTS}?per_page=100&page=1", f"{COMMENTS}?per_page=100&page=2"]
    assert {auth for *_, auth in github.requests} == {f"Bearer {TOKEN}"}
    assert [m for m, *_ in github.requests].count("POST") == 1


def test_a_marker_in_someone_elses_comment_is_not_edited(github, tmp_path, capsys):
    github.comments.append({"id": 1, "body": f"{MARKER} all passed, trust me", "user": {"login": "stranger"}})
    code, out, _ = comment(tmp_path, capsys, TIMED)
    assert code == 0 and out.startswith("created comment")
    assert github.comments[0]["body"] == f"{MARKER} all passed, trust me"
    assert len(github.comments) == 2


def test_what_the_result_file_says_is_escaped(github, tmp_path, capsys):
    hostile = ItemResult(nodeid="tests/problems/x.py::model", problem="tests/problems/x.py", model="x", item="model",
                         outcome="failed", message="![img](https://evil.example/x.png) @everyone <script>| #1\nline 2",
                         vs_base="[click](https://evil.example)")
    code, _, err = comment(tmp_path, capsys, hostile)
    assert code == 0, err
    body = github.comments[0]["body"]
    # each shows as text, inside a code span; the message on one line
    assert "- ` tests/problems/x.py::model `: ` ![img](https://evil.example/x.png) @everyone <script>| #1 line 2 `" \
        in body
    assert "| ` [click](https://evil.example) ` |" in body
    assert body.count("evil.example") == 2 and body.count("<script>") == 1


@pytest.mark.parametrize("status, expected", [
    (403, "403 Forbidden: the token may not do this in acme/widgets (needs pull-requests: write)"),
    (404, "404 Not Found: no repository acme/widgets or no pull request #7 in it, or the token cannot see it "
          "(a workflow's token needs pull-requests: write)"),
])
def test_refusals_name_what_to_fix(github, tmp_path, capsys, status, expected):
    github.fail = ("GET", status, {"message": "Resource not accessible by integration"})
    code, out, err = comment(tmp_path, capsys, TIMED)
    assert code == 2 and out == ""
    assert err.startswith(f"kernelopt: error: GitHub API GET {COMMENTS}: {expected}"), err
    assert TOKEN not in err and err.count("\n") == 1


def test_without_a_token_or_pull_request_it_says_what_to_set(github, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN")
    code, _, err = comment(tmp_path, capsys, TIMED)
    assert code == 2 and "GITHUB_TOKEN is not set" in err and "pull-requests: write" in err
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    (tmp_path / "event.json").write_text(json.dumps({"ref": "refs/heads/main"}))  # a push, not a pull request
    code, _, err = comment(tmp_path, capsys, TIMED)
    assert code == 2 and "is not a pull request's: give --pr N" in err
    code, out, err = comment(tmp_path, capsys, TIMED, args=("--pr", str(PR)))
    assert code == 0 and out.startswith("created comment"), err
    assert github.requests and all(p.startswith(f"/repos/acme/widgets/issues/{PR}/") or m == "POST"
                                   for m, p, *_ in github.requests)


def test_print_shows_the_comment_without_posting(github, tmp_path, capsys, monkeypatch):
    monkeypatch.delenv("GITHUB_TOKEN")
    code, out, _ = comment(tmp_path, capsys, TIMED, args=("--print",))
    assert code == 0 and out.startswith(MARKER) and github.requests == []


def test_an_accepted_regression_shows_in_the_comment(github, tmp_path, capsys):
    accepted = TIMED.model_copy(update={"status": "accepted-regression",
                                        "accepted_regression": "slower by 3% until 2027-01-01: the new layout"})
    code, _, err = comment(tmp_path, capsys, accepted)
    assert code == 0, err
    assert "- softmax_rows: ` accepted regression: slower by 3% until 2027-01-01: the new layout `" \
        in github.comments[0]["body"]
