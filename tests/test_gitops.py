"""Publishing a run: branches in a local bare repository, pull requests on a fake GitHub API (127.0.0.1).

The user's clone has ``origin`` configured as https://github.com/acme/widgets.git and
``url.<bare>.insteadOf`` pointing that URL at a local bare repository, so owner and
repository come from a real-looking URL while every push and fetch stays on disk.
"""

from __future__ import annotations

import json
import subprocess
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
import synthetic_run as s

from pytest_kernelopt.gitops import PublishError, publish_run
from pytest_kernelopt.gitops.branch import trailers
from pytest_kernelopt.gitops.github import parse_remote, redact

URL = "https://github.com/acme/widgets.git"


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


class FakeJudge:
    """Stands in for publish's re-verification (gitops/reverify.py) without a compile: ``measured`` maps the
    sha256 of a version's bytes to what the cascade measures for them; other bytes are rejected."""

    measured: dict[str, float] = {}
    calls: list[tuple[Path, str, str, str]] = []

    def __init__(self, device: Any = None) -> None:
        pass

    def __call__(self, problem: Path, model: str, kernel: str, source: str, variant: Any) -> Any:
        from pytest_kernelopt.records import Verdict

        FakeJudge.calls.append((problem, model, kernel, source))
        digest = s.sha256_text(source)
        speedup = self.measured.get(digest)
        if speedup is None:
            return Verdict(model=model, kernel=kernel, fingerprint=s.FINGERPRINT, candidate="v", candidate_sha256=digest,
                           status="rejected", reason="kernel: out_ptr0: 4096 of 4096 written values differ",
                           environment=s.ENV)
        return Verdict(model=model, kernel=kernel, fingerprint=s.FINGERPRINT, candidate="v", candidate_sha256=digest,
                       status="accepted", speed_measured=True, model_timing=s.timing(speedup),
                       kernel_timing=s.timing(1.41, 0.4), errors=s.errors(2e-6, 1.5e-6), environment=s.ENV)

    def close(self) -> None:
        pass


@pytest.fixture(autouse=True)
def judge(monkeypatch):
    """Publish re-verifies with FakeJudge (tests of the real cascade on a real problem: test_trust_data.py)."""
    import pytest_kernelopt.gitops.publish as gitops

    FakeJudge.measured, FakeJudge.calls = {}, []
    monkeypatch.setattr(gitops, "SessionJudge", FakeJudge)
    return FakeJudge

BRANCH = f"kernelopt/{s.SOFTMAX}/{s.SOFTMAX_KERNEL}"
FOLDER = f"kernels/{s.SOFTMAX}/{s.SOFTMAX_KERNEL}"
TOKEN = "ghp_secret_token_123"


def git(cwd: Path, *args: str) -> str:
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True).stdout.strip()


class FakeGitHub:
    """Pull requests of acme/widgets in memory; ``fail`` = (method, status, payload) answers that request."""

    def __init__(self) -> None:
        self.pulls: dict[int, dict[str, Any]] = {}
        self.requests: list[tuple[str, str, dict[str, Any] | None, str | None]] = []
        self.fail: tuple[str, int, dict[str, Any]] | None = None
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args: Any) -> None:
                pass

            def _answer(self, status: int, payload: Any) -> None:
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def _handle(self, method: str) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                fake.requests.append((method, self.path, body, self.headers.get("Authorization")))
                if fake.fail and fake.fail[0] == method:
                    return self._answer(fake.fail[1], fake.fail[2])
                if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                    return self._answer(401, {"message": "Bad credentials"})
                self._answer(*fake.route(method, self.path, body))

            def do_GET(self) -> None:
                self._handle("GET")

            def do_POST(self) -> None:
                self._handle("POST")

            def do_PATCH(self) -> None:
                self._handle("PATCH")

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def route(self, method: str, path: str, body: dict[str, Any] | None) -> tuple[int, Any]:
        pulls = "/repos/acme/widgets/pulls"
        if method == "POST" and path == pulls:
            if any(p["head"] == body["head"] and p["state"] == "open" for p in self.pulls.values()):
                return 422, {"message": "Validation Failed", "errors": [
                    {"resource": "PullRequest", "code": "custom",
                     "message": f"A pull request already exists for acme:{body['head']}."}]}
            number = len(self.pulls) + 1
            self.pulls[number] = {**body, "number": number, "state": "open",
                                  "html_url": f"https://github.com/acme/widgets/pull/{number}"}
            return 201, self.pulls[number]
        if method == "GET" and path.startswith(f"{pulls}?"):
            from urllib.parse import parse_qs, urlsplit

            query = parse_qs(urlsplit(path).query)
            head = query["head"][0].split(":", 1)[1]
            return 200, [p for p in self.pulls.values() if p["head"] == head and p["state"] == query["state"][0]]
        if method == "PATCH" and path.startswith(f"{pulls}/"):
            pull = self.pulls[int(path.rsplit("/", 1)[1])]
            pull.update(body)
            return 200, pull
        return 404, {"message": "Not Found"}

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def github(monkeypatch):
    fake = FakeGitHub()
    monkeypatch.setenv("GITHUB_API_URL", fake.url)
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    for name in ("GITHUB_REPOSITORY", "GITHUB_SERVER_URL"):
        monkeypatch.delenv(name, raising=False)
    yield fake
    fake.close()


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A clone whose main has softmax v1 (1.05x) committed and pushed; returns (clone, bare remote)."""
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CONFIG_GLOBAL", str(tmp_path / "gitconfig"))  # none of the machine's git settings
    bare = tmp_path / "remote.git"
    git(tmp_path, "init", "-q", "--bare", "-b", "main", str(bare))
    clone = tmp_path / "work"
    git(tmp_path, "init", "-q", "-b", "main", str(clone))
    git(clone, "config", "user.name", "Alice")
    git(clone, "config", "user.email", "alice@example.com")
    git(clone, "remote", "add", "origin", URL)
    git(clone, "config", f"url.{bare}.insteadOf", URL)
    assert git(clone, "remote", "get-url", "origin") == str(bare)  # no push or fetch leaves this machine
    (clone / "README.md").write_text("widgets\n")
    for problem in (f"models/{s.SOFTMAX}.py", f"tests/problems/{s.SOFTMAX}.py"):  # the problem files runs name
        (clone / problem).parent.mkdir(parents=True, exist_ok=True)
        (clone / problem).write_text("# the problem\n")
    s.store_version(clone / "kernels", s.SOFTMAX, s.SOFTMAX_KERNEL, s.variant(256), 1.05)
    git(clone, "add", "-A")
    git(clone, "commit", "-q", "-m", "softmax v1")
    git(clone, "push", "-q", "origin", "main")
    return clone, bare


def tune(clone: Path, tmp: Path, block: int, speedup: float, run_id: str) -> Path:
    """What `kernelopt tune` leaves behind: a new version in the clone's kernel store, a run directory outside it."""
    source = s.variant(block, 8)
    record = s.store_version(clone / "kernels", s.SOFTMAX, s.SOFTMAX_KERNEL, source, speedup)
    outcome = s.softmax_outcome(source, record.version, speedup)
    FakeJudge.measured[s.sha256_text(source)] = speedup  # an honest run: re-verification measures the same
    return s.write_run(tmp / "runs", clone / "kernels", [s.softmax_problem(outcome), s.rms_problem()], run_id=run_id)


def state(clone: Path) -> tuple[str, str, str]:
    """The user's HEAD, index and working tree as git sees them."""
    return (git(clone, "rev-parse", "HEAD"), git(clone, "diff", "--cached", "--name-status"),
            git(clone, "status", "--porcelain", "--untracked-files=all"))


def test_new_branch_and_pull_request(project, github, tmp_path, judge):
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    before = state(clone)
    lines: list[str] = []
    [result] = publish_run(run, clone, progress=lines.append)
    assert result.status == "pushed" and result.ok, result.line()
    assert result.pr_action == "opened" and result.pr_number == 1
    assert result.pr_url == "https://github.com/acme/widgets/pull/1"
    assert lines == [result.line()] and "pull request #1 opened" in lines[0]
    assert state(clone) == before  # working tree, index and HEAD untouched

    tip = git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    assert tip == result.commit
    assert git(bare, "rev-parse", f"{tip}^") == git(bare, "rev-parse", "main")  # one commit on top of the base
    files = set(git(bare, "diff", "--name-only", "main", tip).splitlines())
    assert files == {f"{FOLDER}/v2.py", f"{FOLDER}/manifest.json", f"{FOLDER}/report.md", f"{FOLDER}/speedup.png"}
    assert git(bare, "show", f"{tip}:{FOLDER}/v2.py") == (clone / FOLDER / "v2.py").read_text().strip()
    message = git(bare, "log", "-1", "--format=%B", tip)
    assert message.startswith(f"kernelopt: {s.SOFTMAX}/{s.SOFTMAX_KERNEL} v2, model 1.184x faster")
    assert "replaces v1 (1.050x)" in message
    assert trailers(message) == {"Kernelopt-Run": "run-1", "Kernelopt-Kernel": f"{s.SOFTMAX}/{s.SOFTMAX_KERNEL}"}
    assert git(clone, "rev-parse", f"refs/heads/{BRANCH}") == tip  # the local branch too

    report = git(bare, "show", f"{tip}:{FOLDER}/report.md")
    assert "![speedup per model and stored kernel](speedup.png)" in report
    assert "rms_norm" not in report  # focused on this kernel's model
    assert "+    XBLOCK = 1024" in report and "-    XBLOCK = 256" not in report.split("```diff")[0]

    [post] = [r for r in github.requests if r[0] == "POST"]
    assert post[1] == "/repos/acme/widgets/pulls" and post[3] == f"Bearer {TOKEN}"
    body = post[2]
    assert body["head"] == BRANCH and body["base"] == "main"
    assert body["title"] == f"kernelopt: {s.SOFTMAX}/{s.SOFTMAX_KERNEL} v2 (1.184x model speedup)"
    # The body's figures are the re-verification's (of the exact bytes pushed); the chart, drawn from the run's
    # own records, stays on the branch.
    assert [(c[1], c[2], c[3]) for c in judge.calls] == [(s.SOFTMAX, s.SOFTMAX_KERNEL, (clone / FOLDER / "v2.py").read_text())]
    assert judge.calls[0][0] == clone / "models" / f"{s.SOFTMAX}.py"
    assert "speedup.png" not in body["body"]
    assert "```diff" in body["body"] and "1.184x [1.164, 1.204]" in body["body"]
    assert "+    XBLOCK = 1024" in body["body"] and "-    XBLOCK = 256" in body["body"]  # against the committed v1


def test_a_pinned_version_is_not_called_faster(project, github, tmp_path):
    clone, _ = project  # v1 (1.050x) is committed; a pin replaces it only when measured faster
    source = s.variant(512, 8)
    record = s.store_version(clone / "kernels", s.SOFTMAX, s.SOFTMAX_KERNEL, source, 1.062)
    FakeJudge.measured[s.sha256_text(source)] = 1.062
    outcome = s.softmax_outcome(source, record.version, 1.062).model_copy(update={"pinned": True})
    run = s.write_run(tmp_path / "runs", clone / "kernels", [s.softmax_problem(outcome)], run_id="run-pin")
    [result] = publish_run(run, clone)
    assert result.ok, result.line()
    message = git(project[1], "log", "-1", "--format=%B", result.commit)
    assert message.startswith(f"kernelopt: {s.SOFTMAX}/{s.SOFTMAX_KERNEL} v2, pinned, model 1.062x\n")
    assert "faster" not in message.splitlines()[0] and "Pinned: Inductor picks among" in message
    assert github.pulls[1]["title"] == f"kernelopt: {s.SOFTMAX}/{s.SOFTMAX_KERNEL} v2 (pinned, 1.062x model speedup)"


def test_second_run_updates_the_same_pull_request(project, github, tmp_path):
    clone, bare = project
    first = publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)[0]
    # The user merges nothing; a later run finds a better version still (v3).
    second_run = tune(clone, tmp_path, 2048, 1.25, "run-2")
    [second] = publish_run(second_run, clone)
    assert second.status == "pushed" and second.pr_action == "updated", second.line()
    assert second.pr_number == first.pr_number == 1 and len(github.pulls) == 1
    assert [r[0] for r in github.requests] == ["POST", "POST", "GET", "PATCH"]
    assert github.pulls[1]["title"].endswith("v3 (1.250x model speedup)")
    tip = git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    assert tip == second.commit != first.commit
    assert git(bare, "rev-list", "--count", f"main..{tip}") == "1"  # replaced, not stacked
    # v2, published by the first run and still uncommitted in the clone, stays in the store on the branch.
    assert {f"{FOLDER}/v2.py", f"{FOLDER}/v3.py"} <= set(git(bare, "diff", "--name-only", "main", tip).splitlines())
    assert "Kernelopt-Run: run-2" in git(bare, "log", "-1", "--format=%B", tip)

    # Publishing the same run again changes nothing on the branch and updates the pull request.
    [again] = publish_run(second_run, clone)
    assert again.status == "up-to-date" and again.commit == tip and again.pr_action == "updated"


def test_a_human_commit_on_the_branch_is_not_overwritten(project, github, tmp_path):
    clone, bare = project
    publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)
    human = tmp_path / "bob"
    git(tmp_path, "clone", "-q", "-b", BRANCH, str(bare), str(human))
    (human / FOLDER / "NOTES.md").write_text("tried num_warps=16: slower\n")
    git(human, "add", "-A")
    git(human, "-c", "user.name=Bob", "-c", "user.email=bob@example.com", "commit", "-q", "-m", "Notes on the kernel")
    git(human, "push", "-q", "origin", BRANCH)
    bob_tip = git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    requests = len(github.requests)

    [result] = publish_run(tune(clone, tmp_path, 2048, 1.25, "run-2"), clone)
    assert result.status == "refused" and not result.ok
    assert "the remote branch" in result.message and "kernelopt did not make" in result.message
    assert "Notes on the kernel" in result.message and "Bob <bob@example.com>" in result.message
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == bob_tip
    assert len(github.requests) == requests  # no pull request update either


def test_a_human_commit_on_the_local_branch_is_not_overwritten(project, github, tmp_path):
    clone, bare = project
    publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)
    ours = git(clone, "rev-parse", f"refs/heads/{BRANCH}")
    # Alice commits on the local branch in a second worktree; the user's own checkout stays on main.
    side = tmp_path / "side"
    git(clone, "worktree", "add", "-q", str(side), BRANCH)
    (side / "NOTES.md").write_text("local notes\n")
    git(side, "add", "NOTES.md")
    git(side, "commit", "-q", "-m", "Local notes")
    alice_tip = git(clone, "rev-parse", f"refs/heads/{BRANCH}")
    [result] = publish_run(tune(clone, tmp_path, 2048, 1.25, "run-2"), clone)
    assert result.status == "refused" and "the local branch" in result.message and "Local notes" in result.message
    assert git(clone, "rev-parse", f"refs/heads/{BRANCH}") == alice_tip
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == ours

    # Checked out but still ours: the remote branch moves, the checked-out local branch is left alone.
    git(side, "reset", "-q", "--hard", ours)
    (clone / FOLDER / "v3.py").unlink()  # the user discards the refused run's version
    (clone / FOLDER / "manifest.json").write_text(git(clone, "show", f"{ours}:{FOLDER}/manifest.json") + "\n")
    [result] = publish_run(tune(clone, tmp_path, 4096, 1.3, "run-3"), clone)
    assert result.status == "pushed", result.line()
    assert f"local branch {BRANCH} is checked out, left as it is" in result.message
    assert git(clone, "rev-parse", f"refs/heads/{BRANCH}") == ours != result.commit
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == result.commit


def test_a_branch_that_moved_since_it_was_read_is_not_overwritten(project, github, tmp_path, monkeypatch):
    """The push carries a lease on the tip that was inspected: if someone pushed in between, git refuses."""
    from pytest_kernelopt.gitops.branch import Repository

    clone, bare = project
    publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)
    tip = git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    real = Repository.remote_tip

    def stale(self, branch):  # reads the branch as it was before the first publication: absent
        real(self, branch)
        return None if branch == BRANCH else real(self, branch)

    monkeypatch.setattr(Repository, "remote_tip", stale)
    [result] = publish_run(tune(clone, tmp_path, 2048, 1.25, "run-2"), clone)
    assert result.status == "failed" and result.message.startswith("git push failed: ! [rejected]"), result.message
    assert "stale info" in result.message
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == tip


def test_without_a_token_the_branch_is_pushed_and_the_page_named(project, github, tmp_path, monkeypatch):
    clone, bare = project
    monkeypatch.delenv("GITHUB_TOKEN")
    [result] = publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)
    assert result.status == "pushed" and result.ok and result.pr_action is None
    assert result.open_url == f"https://github.com/acme/widgets/compare/main...{BRANCH}?expand=1"
    assert "no GITHUB_TOKEN: open the pull request at https://github.com/acme/widgets/compare/" in result.line()
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == result.commit
    assert github.requests == []


@pytest.mark.parametrize("edit", ["tracked version", "report", "manifest"])
def test_uncommitted_changes_in_files_we_would_write_are_refused(project, github, tmp_path, edit):
    clone, bare = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    folder = clone / FOLDER
    if edit == "tracked version":
        (folder / "v1.py").write_text((folder / "v1.py").read_text() + "# tweak\n")
        expected = f"{FOLDER}/v1.py has uncommitted changes (M) this run did not make"
    elif edit == "report":
        (folder / "report.md").write_text("my notes\n")
        expected = f"{FOLDER}/report.md has uncommitted changes (??) this run did not make"
    else:  # a hand edit of the committed version's record in the manifest
        manifest = json.loads((folder / "manifest.json").read_text())
        manifest["versions"][0]["provenance"]["proposed_by"] = "carol"
        (folder / "manifest.json").write_text(json.dumps(manifest, indent=2))
        expected = f"{FOLDER}/manifest.json has uncommitted changes this run did not make (v1)"
    before = state(clone)
    [result] = publish_run(run, clone)
    assert result.status == "refused" and expected in result.message, result.message
    assert "commit or discard them first" in result.message
    assert git(bare, "branch", "--list", BRANCH) == ""  # nothing pushed
    assert github.requests == [] and state(clone) == before


@pytest.mark.parametrize("fail, expected", [
    (("POST", 401, {"message": "Bad credentials"}),
     "GitHub API POST /repos/acme/widgets/pulls: 401 Unauthorized: GITHUB_TOKEN was rejected"),
    (("POST", 422, {"message": "Validation Failed", "errors": [{"message": "No commits between main and x"}]}),
     "GitHub API POST /repos/acme/widgets/pulls: 422 Unprocessable: Validation Failed: No commits between main and x"),
    (("POST", 502, {"message": "Server Error"}),
     "GitHub API POST /repos/acme/widgets/pulls: GitHub server error 502 (Server Error); the branch is pushed"),
    (("PATCH", 503, {}), "GitHub API PATCH /repos/acme/widgets/pulls/1: GitHub server error 503"),
])
def test_api_errors_are_one_clear_line(project, github, tmp_path, fail, expected):
    clone, bare = project
    if fail[0] == "PATCH":  # an update fails: the pull request exists already
        publish_run(tune(clone, tmp_path, 1024, 1.184, "run-1"), clone)
    github.fail = fail
    [result] = publish_run(tune(clone, tmp_path, 2048, 1.25, "run-2"), clone)
    assert result.status == "pushed" and not result.ok  # the branch is there; the pull request is not
    assert result.pr_error is not None and result.pr_error.startswith(expected), result.pr_error
    assert "\n" not in result.pr_error and TOKEN not in result.pr_error
    assert git(bare, "rev-parse", f"refs/heads/{BRANCH}") == result.commit
    assert f"pull request not opened: {result.pr_error}" in result.line()


def test_a_version_that_does_not_beat_the_committed_one_is_skipped(project, github, tmp_path):
    clone, bare = project
    [result] = publish_run(tune(clone, tmp_path, 1024, 1.02, "run-1"), clone)
    assert result.status == "skipped" and result.ok
    assert result.message == "v2 (1.020x re-verified) does not beat v1 (1.050x), committed on main"
    assert git(bare, "branch", "--list", BRANCH) == "" and github.requests == []


def test_repository_problems_raise_one_error(tmp_path, project):
    clone, _ = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    with pytest.raises(PublishError, match="not inside a git repository"):
        publish_run(run, tmp_path / "runs")
    with pytest.raises(PublishError, match="no git remote named 'upstream' \\(remotes: origin\\)"):
        publish_run(run, clone, remote="upstream")
    with pytest.raises(PublishError, match="remote origin has no branch 'release'"):
        publish_run(run, clone, base="release")


@pytest.mark.parametrize("url, slug, host", [
    ("https://github.com/acme/widgets.git", "acme/widgets", "github.com"),
    ("https://x-access-token:abc@github.com/acme/widgets", "acme/widgets", "github.com"),
    ("git@github.com:acme/widgets.git", "acme/widgets", "github.com"),
    ("ssh://git@ghe.example.com:2222/acme/widgets.git", "acme/widgets", "ghe.example.com"),
    ("/srv/git/widgets.git", None, None),
    ("https://github.com/acme", None, None),
])
def test_owner_and_repository_from_the_remote_url(url, slug, host):
    ref = parse_remote(url)
    assert (ref.slug if ref else None, ref.host if ref else None) == (slug, host)
    assert "abc" not in redact(url)


# --- the split flow of CI: tune on the GPU runner without a token, `kernelopt publish` elsewhere with one ----------

def checkout(tmp: Path, bare: Path, name: str) -> Path:
    """A fresh clone of the remote's main, as actions/checkout makes one on a runner (origin: the GitHub URL)."""
    clone = tmp / name
    git(tmp, "init", "-q", "-b", "main", str(clone))
    git(clone, "remote", "add", "origin", URL)
    git(clone, "config", f"url.{bare}.insteadOf", URL)
    git(clone, "fetch", "-q", "origin", "main")
    git(clone, "checkout", "-q", "-B", "main", "origin/main")
    return clone


def gpu_tune(tmp: Path, bare: Path) -> tuple[Path, Path]:
    """The GPU job: tune in its own checkout, no token anywhere; returns (checkout, the artifact folder)
    holding the run directory and the kernel store, as the workflow uploads them."""
    import shutil

    runner = checkout(tmp, bare, "gpu-runner/_work/widgets/widgets")
    source = s.variant(1024, 8)
    record = s.store_version(runner / "kernels", s.SOFTMAX, s.SOFTMAX_KERNEL, source, 1.184)
    FakeJudge.measured[s.sha256_text(source)] = 1.184
    problem = s.softmax_problem(s.softmax_outcome(source, record.version, 1.184)).model_copy(
        update={"problem": str(runner / "tests" / "problems" / f"{s.SOFTMAX}.py")})  # tune records it absolute
    run = s.write_run(runner / "kernelopt-artifact" / "runs", runner / "kernels", [problem], run_id="run-ci")
    artifact = tmp / "artifact"
    shutil.copytree(run, artifact / "runs" / run.name)
    shutil.copytree(runner / "kernels", artifact / "kernels")
    return runner, artifact


def publish(cwd: Path, monkeypatch, capsys, *args: str) -> tuple[int, str, str]:
    from pytest_kernelopt.cli import main

    monkeypatch.chdir(cwd)
    code = main(["publish", *args])
    out, err = capsys.readouterr()
    return code, out, err


def test_split_flow_tune_without_token_then_publish_with_it(project, github, tmp_path, monkeypatch, capsys):
    import shutil

    _, bare = project
    monkeypatch.delenv("GITHUB_TOKEN")
    runner, artifact = gpu_tune(tmp_path, bare)
    assert git(bare, "branch", "--list", BRANCH) == "" and github.requests == []  # the GPU job pushed nothing
    assert str(runner) in (artifact / "runs" / "run-ci" / "run.json").read_text()  # paths of the GPU runner

    # The publish job: another machine, a fresh checkout; the artifact's kernel store copied into it.
    monkeypatch.setenv("GITHUB_TOKEN", TOKEN)
    here = checkout(tmp_path, bare, "publish-runner/_work/widgets/widgets")
    shutil.copytree(artifact / "kernels", here / "kernels", dirs_exist_ok=True)
    code, out, err = publish(here, monkeypatch, capsys, str(artifact / "runs" / "run-ci"), "--json")
    assert code == 0, err
    payload = json.loads(out)
    assert payload["run_id"] == "run-ci" and payload["kernels_dir"] == "kernels"
    [result] = payload["results"]
    assert result["status"] == "pushed" and result["ok"] and result["pr_action"] == "opened", result
    assert "publishing run run-ci from the kernel store kernels" in err

    tip = git(bare, "rev-parse", f"refs/heads/{BRANCH}")
    assert tip == result["commit"] and git(bare, "rev-parse", f"{tip}^") == git(bare, "rev-parse", "main")
    assert git(bare, "show", f"{tip}:{FOLDER}/v2.py") == (runner / FOLDER / "v2.py").read_text().strip()
    [post] = [r for r in github.requests if r[0] == "POST"]
    body = post[2]["body"]
    assert post[3] == f"Bearer {TOKEN}" and "1.184x [1.164, 1.204]" in body
    # Repository-relative paths only: neither runner's checkout, nor the artifact, nor the machine's folders.
    assert "`kernels`" in body and f"`tests/problems/{s.SOFTMAX}.py`" in body
    for path in (runner, here, artifact, tmp_path):
        assert str(path) not in body
    report = git(bare, "show", f"{tip}:{FOLDER}/report.md")
    assert str(tmp_path) not in report and f"`tests/problems/{s.SOFTMAX}.py`" in report


@pytest.mark.parametrize("tamper", ["version", "version and manifest", "missing"])
def test_publish_refuses_a_run_whose_stored_files_changed(project, github, tmp_path, monkeypatch, capsys, tamper):
    import shutil

    _, bare = project
    runner, artifact = gpu_tune(tmp_path, bare)
    here = checkout(tmp_path, bare, "publish-runner")
    shutil.copytree(artifact / "kernels", here / "kernels", dirs_exist_ok=True)
    version = here / FOLDER / "v2.py"
    if tamper == "missing":
        version.unlink()
        expected = f"kernelopt: error: {FOLDER}/v2.py: cannot read the version run run-ci stored"
    else:
        version.write_text(version.read_text().replace("num_warps=8", "num_warps=16"))
        expected = f"kernelopt: error: {FOLDER}/v2.py: changed since run run-ci stored it (sha256 "
    if tamper == "version and manifest":  # the manifest made to agree: the run's own record still says no
        manifest = json.loads((here / FOLDER / "manifest.json").read_text())
        manifest["versions"][-1]["sha256"] = s.sha256_text(version.read_text())
        (here / FOLDER / "manifest.json").write_text(json.dumps(manifest, indent=2))
        expected = f"kernelopt: error: {FOLDER}/manifest.json: v2 is recorded with sha256 "
    code, out, err = publish(here, monkeypatch, capsys, str(artifact / "runs" / "run-ci"))
    assert code == 2 and err.startswith(expected) and "pushed" not in out, err
    assert len(err.strip().splitlines()) == 1
    assert git(bare, "branch", "--list", BRANCH) == "" and github.requests == []  # nothing pushed, no PR


def test_publish_makes_the_checks_of_tune_open_pr(project, tmp_path, monkeypatch, capsys):
    clone, _ = project
    run = tune(clone, tmp_path, 1024, 1.184, "run-1")
    elsewhere = tmp_path / "not-a-repo"
    elsewhere.mkdir()
    for cwd, args, needle in ((elsewhere, [str(run)], "kernelopt: error: publish: "),
                              (clone, [str(run), "--remote", "upstream"], "no git remote named 'upstream'"),
                              (clone, [str(run), "--base", "nosuchbranch"], "no branch 'nosuchbranch'"),
                              (clone, [str(run), "--kernels-dir", str(tmp_path / "kernels")],
                               "is not inside the repository"),
                              (clone, [str(tmp_path)], "not a tuning run directory")):
        code, out, err = publish(cwd, monkeypatch, capsys, *args)
        assert code == 2 and needle in err and len(err.strip().splitlines()) == 1, err


def test_tune_open_pr_with_a_base_the_remote_lacks_stops_before_tuning(project, tmp_path, monkeypatch, capsys):
    """--base names a branch the remote does not have: exit 2 at once, naming it (it used to tune, then exit 0)."""
    from pytest_kernelopt.cli import main

    clone, _ = project
    problem = clone / "sum_reduce.py"
    problem.write_text((Path(__file__).parent / "problems" / "sum_reduce.py").read_text())
    monkeypatch.chdir(clone)
    code = main(["tune", str(problem), "--device", "cpu", "--open-pr", "--base", "nosuchbranch"])
    err = capsys.readouterr().err
    assert code == 2 and "--open-pr: remote origin has no branch 'nosuchbranch'" in err, err
    assert len(err.strip().splitlines()) == 1
    assert not (clone / ".kernelopt").exists()  # nothing was tuned
