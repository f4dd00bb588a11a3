"""Publishing a tuning run: for each kernel it stored whose new version beats the committed one, a
branch, a focused report and a pull request (the package's map: ``gitops/__init__.py``).

The one entry point is :func:`publish_run`: ``kernelopt tune --open-pr`` and the
plugin's ``--kernelopt-open-pr`` call it after a run, ``kernelopt publish RUN_DIR`` later
(a run tuned on another machine, e.g. a CI artifact: see :func:`store_for_run`); both
check the repository first with :func:`check_repository`. Before anything is pushed,
every version the run stored is checked against the sha256 the run recorded
(:func:`check_run_files`), then judged again (:mod:`.reverify`): a run directory is data, and
whoever edits it can record a swapped file's hash and any figure. For each kernel the run stored
whose new version beats the one committed on the base branch it commits, on branch
``kernelopt/<model>/<kernel>`` made from the base branch, the kernel's folder (new
version, manifest, the compiler's original) and a focused report, pushes, and opens
or updates the pull request. GitPython is imported only here, never by the gate, the
verifier or the production loader.
"""

from __future__ import annotations

import hashlib
import os
import re
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Literal

from ..capture.shapes import split_name, store_name
from ..errors import KerneloptError, StoreError
from ..measure.text import interval, speedup_text, timing_text
from ..records import load_json
from ..report import build_view, render_report
from ..report.chart import draw_chart
from ..report.untrusted import INLINE_LIMIT, md_block, md_cell, md_inline, plain
from ..runs.trace import load_run
from ..store import MANIFEST, KernelStore, Manifest, sha256_text
from ..store.recipe import unified_diff
from ..templates import project_templates
from .branch import KERNEL_TRAILER, RUN_TRAILER, Repository, branch_name, describe_foreign
from .errors import GitHubError, PublishError, RefusedError, RunChangedError
from .github import DEFAULT_API, GitHub, RepoRef, parse_remote
from .reverify import Judge, SessionJudge, problem_file

__all__ = ["GitHubError", "PublishError", "PublishResult", "RefusedError", "RunChangedError", "branch_name",
           "check_repository", "check_run_files", "publish_run", "store_for_run"]

REPORT_FILE = "report.md"
CHART_FILE = "speedup.png"
Status = Literal["pushed", "up-to-date", "skipped", "refused", "failed"]


@dataclass
class PublishResult:
    """What publishing did for one kernel the run stored.

    ``status``: ``pushed`` (branch created or replaced), ``up-to-date`` (the branch already
    held exactly this), ``skipped`` (nothing to publish: not faster than the committed
    version, already committed, not measured), ``refused`` (a human commit on the branch,
    uncommitted changes in files we would write), ``failed`` (git or the push failed).
    The pull request's outcome is separate: ``pr_action`` ("opened"/"updated") with
    ``pr_url``, or ``pr_error`` (one line), or ``open_url`` (no token: open it there).
    """

    model: str
    kernel: str
    branch: str
    status: Status
    message: str
    version: int | None = None
    commit: str | None = None
    pr_number: int | None = None
    pr_url: str | None = None
    pr_action: Literal["opened", "updated"] | None = None
    pr_error: str | None = None
    open_url: str | None = None

    @property
    def ok(self) -> bool:
        return self.status in ("pushed", "up-to-date", "skipped") and self.pr_error is None

    def line(self) -> str:
        """One line for the terminal."""
        text = f"{self.branch}: {self.status}"
        if self.commit and self.status in ("pushed", "up-to-date"):
            text += f" {self.commit[:10]}"
        text += f" ({self.message})" if self.message else ""
        if self.pr_action:
            text += f"; pull request #{self.pr_number} {self.pr_action}: {self.pr_url}"
        elif self.pr_error:
            text += f"; pull request not opened: {self.pr_error}"
        elif self.open_url:
            text += f"; no GITHUB_TOKEN: open the pull request at {self.open_url}"
        return text


def check_repository(project: Path | str, remote: str = "origin", store: Path | None = None,
                     base: str | None = None) -> Path:
    """The checks ``tune --open-pr`` and ``publish`` make before any work: ``project`` lies in a git
    working tree with ``remote`` (and GitPython is installed), the kernel store ``store`` lies
    inside it, and the remote has the branch ``base`` (when one is named; this asks the remote).
    Returns the working tree's top folder; raises :class:`PublishError` naming the problem."""
    repository = Repository(Path(project), remote)
    top = repository.top
    if store is not None and not Path(store).resolve().is_relative_to(top):
        raise PublishError(f"the kernel store {Path(store).resolve()} is not inside the repository {top}")
    if base is not None:
        out = repository.git("ls-remote", "--heads", remote, f"refs/heads/{base}")
        if not any(line.endswith(f"\trefs/heads/{base}") for line in out.splitlines()):
            raise PublishError(f"remote {remote} has no branch {base!r} to base the kernel branches on (--base)")
    return top


def store_for_run(run_dir: Path | str, top: Path, explicit: Path | None, configured: Path) -> Path:
    """Where the versions of the run in ``run_dir`` are, for ``kernelopt publish``.

    ``explicit`` (``--kernels-dir``) when given; else the store the run recorded when it lies in
    this repository (the run was tuned here); else ``configured`` (the project's ``kernels_dir``):
    a run tuned on another machine, whose kernel store was copied into this checkout (the CI
    artifact). :func:`check_run_files` then proves these are the files the run stored.
    """

    if explicit is not None:
        return Path(explicit).resolve()
    record, _ = load_run(Path(run_dir))
    recorded = Path(record.kernels_dir) if record.kernels_dir else None
    if recorded is not None:
        recorded = (recorded if recorded.is_absolute() else top / recorded).resolve()
        if recorded.is_relative_to(top):
            return recorded
    return Path(configured).resolve()


def check_run_files(record: Any, kernels_abs: Path, kernels_rel: PurePosixPath) -> None:
    """Refuse the whole run (:class:`RunChangedError`, naming the file) when a version it stored
    is missing, or its bytes or its manifest entry differ from the sha256 the run recorded."""

    store = KernelStore(kernels_abs)
    for problem in record.problems:
        for outcome in problem.kernels:
            if outcome.stored_version is None:
                continue
            # The store folder: ``<kernel>@<shape>`` for a declared shape of a problem with SHAPES.
            model, kernel, version = problem.model, store_name(outcome.kernel, problem.shape), outcome.stored_version
            try:
                folder = store.kernel_dir(model, kernel)
                entry = load_json(Manifest, folder / MANIFEST).version(version)
            except StoreError as exc:
                raise RunChangedError(f"{kernels_rel / model / kernel / MANIFEST}: no v{version}, which run "
                                      f"{record.run_id} stored ({exc})") from None
            name = str(kernels_rel / model / kernel / entry.file)
            expected = outcome.best_sha256 or entry.sha256
            if entry.sha256 != expected:
                raise RunChangedError(f"{kernels_rel / model / kernel / MANIFEST}: v{version} is recorded with sha256 "
                                      f"{entry.sha256[:12]}, run {record.run_id} stored {expected[:12]}: changed "
                                      f"since the run; not publishing it")
            try:
                digest = hashlib.sha256((folder / entry.file).read_bytes()).hexdigest()
            except OSError as exc:
                raise RunChangedError(f"{name}: cannot read the version run {record.run_id} stored "
                                      f"({exc.strerror})") from None
            if digest != expected:
                raise RunChangedError(f"{name}: changed since run {record.run_id} stored it (sha256 {digest[:12]}, "
                                      f"recorded {expected[:12]}); not publishing the run")


def publish_run(run_dir: Path | str, repo_path: Path | str = ".", *, base: str | None = None, remote: str = "origin",
                open_pr: bool = True, token: str | None = None, api_url: str | None = None, repo: str | None = None,
                templates_dir: Path | None = None, progress: Callable[[str], None] | None = None,
                kernels_dir: Path | None = None, judge: Judge | None = None,
                device: str | None = None) -> list[PublishResult]:
    """Publish every kernel the run in ``run_dir`` stored into the git repository at ``repo_path``.

    ``base``: the branch pull requests go into (default: the remote's default branch).
    ``open_pr``: open or update a pull request per branch; needs ``token`` (default
    ``$GITHUB_TOKEN``); without one the branch is pushed and ``open_url`` says where to
    open it. ``api_url`` defaults to ``$GITHUB_API_URL``, else the public API;
    ``repo`` ("owner/name") defaults to the remote's URL, else ``$GITHUB_REPOSITORY``.
    ``templates_dir`` defaults to the repository's ``templates/`` (when it has one).
    ``progress`` gets one line per kernel. ``kernels_dir``: the kernel store holding the run's
    versions (default: the one the run recorded). ``judge``: re-verifies each version before it is
    committed (default: :class:`~.reverify.SessionJudge` on ``device``, default ``auto``: the GPU
    when there is one, else interpreter mode); every figure published is its verdict's, and a version
    it rejects is ``refused``. A problem with the repository as a whole
    (not a git repository, no such remote or base branch, GitPython missing) raises
    :class:`PublishError`, a stored version that is not the file the run recorded
    :class:`RunChangedError` (nothing is pushed); a problem with one kernel is that kernel's result.
    """

    say = progress or (lambda line: None)
    record, events = load_run(Path(run_dir))
    stored = [(p, k) for p in record.problems for k in p.kernels if k.stored_version is not None]
    if not stored:
        say("publish: the run stored no kernel version; nothing to publish")
        return []
    git = Repository(Path(repo_path), remote)
    kernels_abs = Path(kernels_dir) if kernels_dir is not None else Path(record.kernels_dir)
    kernels_abs = (kernels_abs if kernels_abs.is_absolute() else git.top / kernels_abs).resolve()
    if not kernels_abs.is_relative_to(git.top):
        raise PublishError(f"the run's kernel store {kernels_abs} is not inside the repository {git.top}")
    kernels_rel = PurePosixPath(kernels_abs.relative_to(git.top).as_posix())
    check_run_files(record, kernels_abs, kernels_rel)
    base = base or git.default_branch()
    base_sha = git.remote_tip(base)
    if base_sha is None:
        raise PublishError(f"remote {remote} has no branch {base!r} to base the kernel branches on")
    where = _pull_requests(git, repo)
    token = token if token is not None else os.environ.get("GITHUB_TOKEN") or None
    github = None
    if open_pr and token and where is not None:
        github = GitHub(token, where, api_url or os.environ.get("GITHUB_API_URL") or DEFAULT_API)
    if templates_dir is None:
        templates_dir = project_templates(git.top)
    own = None
    if judge is None:  # the GPU when there is one, else interpreter mode (the publish job of tune.yml has none)
        judge = own = SessionJudge(device)
    ctx = _Context(git=git, record=record, events=events, kernels_abs=kernels_abs, kernels_rel=kernels_rel, base=base,
                   base_sha=base_sha, where=where, github=github, open_pr=open_pr, templates_dir=templates_dir,
                   judge=judge)
    results = []
    try:
        for problem, outcome in stored:
            result = _publish_kernel(ctx, problem, outcome)
            results.append(result)
            say(result.line())
    finally:
        if own is not None:
            own.close()
    return results


def _pull_requests(git: Repository, explicit: str | None) -> RepoRef | None:
    """Where pull requests go: ``explicit`` ("owner/name"), the remote's URL, else $GITHUB_REPOSITORY."""
    parsed = parse_remote(git.remote_url())
    server = os.environ.get("GITHUB_SERVER_URL", "").removeprefix("https://").removeprefix("http://").strip("/")
    host = parsed.host if parsed else (server or "github.com")
    slug = explicit or (parsed.slug if parsed else os.environ.get("GITHUB_REPOSITORY"))
    if not slug:
        return None
    owner, _, name = slug.partition("/")
    if not owner or not name or "/" in name:
        raise PublishError(f"repository {slug!r}: expected owner/name")
    return RepoRef(host=host, owner=owner, name=name)


@dataclass
class _Context:
    git: Repository
    record: Any
    events: list[Any]
    kernels_abs: Path
    kernels_rel: PurePosixPath
    base: str
    base_sha: str
    where: RepoRef | None
    github: GitHub | None
    open_pr: bool
    templates_dir: Path | None
    judge: Judge


def _publish_kernel(ctx: _Context, problem: Any, outcome: Any) -> PublishResult:
    # The store folder (``<kernel>@<shape>`` for a problem with SHAPES) names the branch and the files.
    model, kernel, version = problem.model, store_name(outcome.kernel, problem.shape), outcome.stored_version
    branch = branch_name(model, kernel)
    result = PublishResult(model=model, kernel=kernel, branch=branch, status="pushed", message="", version=version)
    try:
        ctx.git.check_ref_name(branch)
        plan = _plan(ctx, problem, model, kernel, version, outcome)
        if isinstance(plan, str):
            result.status, result.message = "skipped", plan
            return result
        files, message, title, speed = plan.files, plan.message, plan.title, plan.speed
        folder = ctx.kernels_rel / model / kernel
        report_path, chart_path = str(folder / REPORT_FILE), str(folder / CHART_FILE)
        remote_sha = ctx.git.remote_tip(branch)
        local_sha = ctx.git.local_tip(branch)
        for where, tip in (("the remote", remote_sha), ("the local", local_sha)):
            if tip is not None:
                foreign = ctx.git.foreign_commits(ctx.base_sha, tip, model, kernel)
                if foreign:
                    raise RefusedError(describe_foreign(where, branch, foreign))
        published = [tip for tip in (remote_sha, local_sha) if tip is not None]
        _refuse_dirty(ctx, model, kernel, version, files, [report_path, chart_path], published)
        view, chart = _view(ctx, model, kernel)
        files[report_path] = _text(ctx, view, CHART_FILE if chart is not None else None).encode("utf-8")
        if chart is not None:
            files[chart_path] = chart
        commit = ctx.git.build_commit(ctx.base_sha, files, message)
        if remote_sha is not None and ctx.git.tree_of(remote_sha) == ctx.git.tree_of(commit) \
                and ctx.git.parents_of(remote_sha) == [ctx.base_sha]:
            commit, result.status = remote_sha, "up-to-date"
        else:
            ctx.git.push(commit, branch, remote_sha)
        result.commit = commit
        result.message = speed
        if local_sha != commit:
            if ctx.git.checked_out(branch):
                result.message += f"; local branch {branch} is checked out, left as it is"
            else:
                ctx.git.set_local(branch, commit, local_sha)
    except PublishError as exc:
        result.status, result.message = exc.status, str(exc)  # type: ignore[assignment]
        return result
    if ctx.open_pr:
        _pull_request(ctx, result, title, plan.body)
    return result


@dataclass
class _Plan:
    """What publishing one kernel commits and says: every figure from the re-verification (:mod:`.reverify`)."""

    files: dict[str, bytes]
    message: str
    title: str
    speed: str
    body: str


def _plan(ctx: _Context, problem: Any, model: str, kernel: str, version: int, outcome: Any) -> str | _Plan:
    """The kernel folder's files to commit, the commit message, the PR's title and body and a speed summary;
    or why there is nothing to publish. The version's bytes are judged again first (RefusedError when the
    cascade rejects them): the run's own figures are never shown."""

    try:
        store = KernelStore(ctx.kernels_abs)
        folder_abs = store.kernel_dir(model, kernel)  # names that cannot leave the store (nor carry markup)
        shape = split_name(kernel)[1]  # a <kernel>@<shape> folder: that shape's compile setting
        variant, configs = store.compile_variant(model, shape), store.launch_configs(model, shape)
    except StoreError as exc:
        raise RefusedError(str(exc)) from None
    folder_rel = ctx.kernels_rel / model / kernel
    try:
        manifest = load_json(Manifest, folder_abs / MANIFEST)
        record = manifest.version(version)
    except StoreError as exc:
        raise RefusedError(f"cannot publish v{version}: {exc}") from None
    try:
        new_bytes = (folder_abs / record.file).read_bytes()
    except OSError as exc:
        raise RefusedError(f"{folder_abs / record.file}: cannot read the version the run stored ({exc.strerror})") \
            from None
    text = new_bytes.decode("utf-8", "replace")
    digest = sha256_text(text)
    if digest != record.sha256 or (outcome.best_sha256 and digest != outcome.best_sha256):
        raise RefusedError(f"{folder_rel / record.file}: not the file the run stored (sha256 differs): edited since?")
    claimed = outcome.best_timing or record.evidence.model_timing
    if claimed is None and not record.evidence.speed_measured:
        return f"v{version}: speed not measured (interpreter mode), nothing shows it is faster"
    base_manifest = _manifest_at(ctx, ctx.base_sha, str(folder_rel / MANIFEST))
    active = None
    if base_manifest is not None and base_manifest.active is not None:
        active = base_manifest.version(base_manifest.active)
        if active.sha256 == record.sha256:
            return f"v{version} is already the active version on {ctx.base}"

    # The bytes to push, judged again on this checkout's problem file: the only source of figures below.
    where = problem_file(ctx.git, problem.problem, _tuned_in(ctx.record.kernels_dir, ctx.kernels_rel))
    # Judged as the compiler's kernel it replaces, at the shape it was tuned at.
    at: dict[str, Any] = {"shape": problem.shape} if problem.shape else {}
    if configs:  # the compile's launch configurations as model.json records them
        at["launch_configs"] = configs
    verdict = ctx.judge(where, model, outcome.kernel, text, variant, **at)
    if verdict.candidate_sha256 != digest:
        raise RefusedError(f"{folder_rel / record.file}: the re-verification judged other bytes; not published")
    if verdict.status == "rejected":
        raise RefusedError(f"{folder_rel / record.file}: re-verified before publishing and rejected at "
                           f"{plain(verdict.reason, INLINE_LIMIT, lines=False)}; not published")
    if verdict.fingerprint != record.fingerprint:
        raise RefusedError(f"{folder_rel / record.file}: v{version} replaces compiler kernel {record.fingerprint}, "
                           f"but this checkout's compiler generates {verdict.fingerprint}; not published (refresh "
                           f"or re-tune it here)")
    new = verdict.model_timing if verdict.speed_measured else None
    if verdict.speed_measured and verdict.status != "accepted":
        return (f"v{version}: re-verified correct but not faster beyond noise here"
                f"{f' ({timing_text(new)})' if new else ''}")
    replaced = "the compiler's kernel"
    if active is not None:
        old = active.evidence.model_timing  # committed on the base branch: reviewed, gated
        replaced = f"v{active.version}" + (f" ({old.speedup:.3f}x)" if old else "")
        # A committed version for another compiler kernel (stale: ``kernelopt refresh`` replaced it) is
        # no competitor: it no longer runs.
        if new is not None and old is not None and new.speedup <= old.speedup and \
                (active.fingerprint is None or active.fingerprint == record.fingerprint):
            return (f"v{version} ({new.speedup:.3f}x re-verified) does not beat v{active.version} "
                    f"({old.speedup:.3f}x), committed on {ctx.base}")
    files: dict[str, bytes] = {}
    names = {MANIFEST, manifest.original} | {v.file for v in manifest.versions} | \
        {v.original for v in manifest.versions if v.original}
    for name in sorted(names):
        try:
            files[str(folder_rel / name)] = (folder_abs / name).read_bytes()
        except OSError as exc:
            raise RefusedError(f"{folder_rel / name}: recorded in {MANIFEST} but cannot be read ({exc.strerror})") \
                from None
    env = verdict.environment
    on = f" on {_words(env.gpu or env.device)}" if env else ""
    measured = f"model {timing_text(new)}" if new else \
        "speed not measured (re-verified in interpreter mode: correctness only)"
    speed = f"v{version}, {measured}{on}"
    errors = [e for e in verdict.errors if e.candidate_vs_fp64 is not None]
    error_line = ""
    if errors:
        worst = max(e.candidate_vs_fp64 for e in errors)
        baseline = max((e.baseline_vs_fp64 for e in errors if e.baseline_vs_fp64 is not None), default=None)
        error_line = f"Max error vs float64: {worst:.3g}" + (f" (compiled baseline {baseline:.3g})" if baseline else "") \
            + ".\n"
    made_by = record.recipe.describe() if record.recipe else outcome.best_origin or record.provenance.proposed_by
    how = _words(made_by)
    pinned = outcome.pinned
    if new is None:
        headline, figure = "correct, speed not measured", "correct, speed not measured"
    else:
        headline = f"pinned, model {new.speedup:.3f}x" if pinned else f"model {new.speedup:.3f}x faster"
        figure = f"{'pinned, ' if pinned else ''}{new.speedup:.3f}x model speedup"
    why_pinned = ("Pinned: Inductor picks among several launch configurations of this kernel by timing them once "
                  "at each compile, so its pick varies; this is the fastest configuration the run measured.\n"
                  if pinned and new is not None else "")
    timing_line = (f"Model speedup vs torch.compile: {speedup_text(new.speedup)}, 95% CI {interval(new.ci_low, new.ci_high)} "
                   f"({new.pairs} pairs, {_words(new.method)}){on}.\n" if new is not None else
                   f"Speed not measured: re-verified in interpreter mode{on} (correctness only).\n")
    message = (f"kernelopt: {model}/{kernel} v{version}, {headline}\n\n"
               f"{kernel} of {model}: v{version} ({how}) replaces {replaced}.\n{why_pinned}"
               f"Re-verified by kernelopt publish. {timing_line}{error_line}"
               f"Report: {folder_rel / REPORT_FILE}\n\n"
               f"{RUN_TRAILER}: {_words(ctx.record.run_id)}\n{KERNEL_TRAILER}: {model}/{kernel}\n")
    title = f"kernelopt: {model}/{kernel} v{version} ({figure})"
    if active is not None:
        before = ctx.git.read(ctx.base_sha, str(folder_rel / active.file))
    else:
        before = files.get(str(folder_rel / (record.original or manifest.original)))
    diff = unified_diff((before or b"").decode("utf-8", "replace"), text)
    body = _body(ctx, model, kernel, version, verdict, new, replaced, made_by, diff, where)
    return _Plan(files=files, message=message, title=title, speed=speed, body=body)


def _words(value: Any) -> str:
    """Run or candidate text for a commit message: one line, at most 160 characters, and only characters
    that no Markdown, mention (``@``) or issue reference (``#``) is made of."""
    return re.sub(r"[^A-Za-z0-9 ._:=,+/()-]", "?", plain(value, 160, lines=False))


def _code(text: str) -> str:
    """A path or name as a code span (kept exactly when it is one already safe to show)."""
    return f"`{text}`" if re.fullmatch(r"[A-Za-z0-9._/+-]+", text) else md_inline(text)


def _body(ctx: _Context, model: str, kernel: str, version: int, verdict: Any, new: Any, replaced: str, how: str,
          diff: str, problem: Path) -> str:
    """The pull request's body: the re-verification's figures only, every other text inert (report/untrusted.py)."""
    env = verdict.environment
    rows = [("re-verified by", "`kernelopt publish`" + (f" on {md_inline(env.gpu or env.device)}, torch "
                                                         f"{md_inline(env.torch)}, triton {md_inline(env.triton)}"
                                                         if env else "")),
            ("verdict", md_inline(verdict.status)),
            ("model speedup vs torch.compile [95% CI]",
             f"{timing_text(new)} ({new.pairs} pairs)" if new else
             "not measured (interpreter mode: correctness only)")]
    kernel_timing = verdict.kernel_timing if verdict.speed_measured else None
    if kernel_timing is not None:
        rows.append(("kernel alone", timing_text(kernel_timing)))
    errors = [e for e in verdict.errors if e.candidate_vs_fp64 is not None]
    if errors:
        worst = max(e.candidate_vs_fp64 for e in errors)
        base = max((e.baseline_vs_fp64 for e in errors if e.baseline_vs_fp64 is not None), default=None)
        rows.append((f"max error vs float64 over {len(errors)} seed(s)",
                     f"{worst:.3g}" + (f" (compiled baseline {base:.3g})" if base is not None else "")))
    rows += [("replaces", md_cell(replaced)), ("made by", md_cell(how)),
             ("problem", _code(problem.relative_to(ctx.git.top).as_posix())),
             ("kernel store", _code(ctx.kernels_rel.as_posix() or "."))]
    table = "\n".join(f"| {name} | {value} |" for name, value in rows)
    return (f"## {_code(model)} / {_code(kernel)}: v{version}\n\n| | |\n|---|---|\n{table}\n\n"
            f"Every figure above was measured by the re-verification of the exact bytes on this branch; the tuning "
            f"run's own records (`{ctx.kernels_rel / model / kernel / REPORT_FILE}` on the branch) were not "
            f"re-checked.\n\n{md_block(diff or '(no change)', 50000, 'diff')}\n")


def _manifest_at(ctx: _Context, commit: str | None, path: str) -> Any:
    data = ctx.git.read(commit, path) if commit else None
    if data is None:
        return None
    try:
        return Manifest.model_validate_json(data)
    except ValueError as exc:
        raise RefusedError(f"{path} at {commit[:10] if commit else '?'} is not a valid manifest ({exc})") from None


def _refuse_dirty(ctx: _Context, model: str, kernel: str, version: int, files: dict[str, bytes],
                  extra: list[str], published: list[str]) -> None:
    """Refuse when a file we would write has uncommitted changes the run did not make.

    The run itself leaves its new version file (and a new original) untracked and the
    manifest modified: that is what we publish. Uncommitted files that an earlier run
    published on our branch (``published``: its tips) are fine as they are there. The
    manifest may differ from HEAD's only by this run's version and versions on our
    branch; anything else (a hand edit, a version never published, an edited report)
    stops publishing this kernel.
    """

    folder = ctx.kernels_rel / model / kernel
    manifest_path = str(folder / MANIFEST)
    manifest = Manifest.model_validate_json(files[manifest_path])
    record = manifest.version(version)
    own = {str(folder / record.file)}
    head = ctx.git.head_commit()
    if record.original and (head is None or ctx.git.read(head, str(folder / record.original)) is None):
        own.add(str(folder / record.original))
    head_manifest = _manifest_at(ctx, head, manifest_path)
    known = [m for m in [head_manifest, *(_manifest_at(ctx, c, manifest_path) for c in published)] if m is not None]
    dirty = ctx.git.dirty([*files, *extra])
    for path, code in sorted(dirty.items()):
        if path == manifest_path:
            now = {v.version: v for v in manifest.versions}
            missing = [v.version for v in (head_manifest.versions if head_manifest else []) if v.version not in now]
            unknown = [n for n, v in now.items() if n != version and not any(v in m.versions for m in known)]
            if missing or unknown:
                which = ", ".join(f"v{n}" for n in sorted(missing + unknown))
                raise RefusedError(f"{path} has uncommitted changes this run did not make ({which}): commit or "
                                   f"discard them first")
        elif path in own and code in ("??", "A "):
            continue
        elif any(ctx.git.read(tip, path) == _working(ctx, path) for tip in published):
            continue  # published on our branch by an earlier run, unchanged since
        else:
            raise RefusedError(f"{path} has uncommitted changes ({code.strip()}) this run did not make: commit or "
                               f"discard them first")


def _working(ctx: _Context, path: str) -> bytes | None:
    try:
        return (ctx.git.top / path).read_bytes()
    except OSError:
        return None


def _view(ctx: _Context, model: str, kernel: str) -> tuple[Any, bytes | None]:
    """The focused report's figures for one kernel and its chart's PNG bytes (None when not drawn:
    ``view.chart_note`` says why)."""

    # Paths relative to this repository and to the one the run was tuned in (another runner's checkout).
    roots = [ctx.git.top, *([tuned] if (tuned := _tuned_in(ctx.record.kernels_dir, ctx.kernels_rel)) else [])]
    view = build_view(ctx.record, ctx.events, ctx.kernels_abs, only=(model, kernel), roots=roots)
    with tempfile.TemporaryDirectory(prefix="kernelopt-chart-") as tmp:
        view.chart_note = draw_chart(view, Path(tmp) / CHART_FILE)
        png = (Path(tmp) / CHART_FILE).read_bytes() if view.chart_note is None else None
    return view, png


def _tuned_in(recorded: str, kernels_rel: PurePosixPath) -> Path | None:
    """The top of the checkout the run was tuned in: the kernel store it recorded, less the store's
    place in the repository (``/runner/_work/w/w/kernels`` less ``kernels``); None when that does not fit."""
    path = PurePosixPath(recorded)
    depth = len(kernels_rel.parts)
    if not path.is_absolute() or len(path.parts) <= depth or path.parts[len(path.parts) - depth:] != kernels_rel.parts:
        return None
    return Path(*path.parts[:len(path.parts) - depth])


def _text(ctx: _Context, view: Any, chart_link: str | None) -> str:
    view.chart = chart_link
    if chart_link is None and view.chart_note is None:
        view.chart_note = "chart: see the branch"
    return render_report(view, "md", ctx.templates_dir)


def _pull_request(ctx: _Context, result: PublishResult, title: str, body: str) -> None:
    """Open or update the pull request for ``result.branch`` (or say where to open it)."""
    if ctx.github is None:
        if ctx.where is not None:
            result.open_url = ctx.where.compare_url(ctx.base, result.branch)
        else:
            result.message += f"; open a pull request from {result.branch} into {ctx.base}"
        return
    try:
        body += (f"\n---\nBranch `{result.branch}` is kept by kernelopt: a later tuning run replaces it unless someone "
                 f"else has committed to it.\n")
        pr = ctx.github.open_or_update(result.branch, ctx.base, title, body)
    except KerneloptError as exc:
        result.pr_error = str(exc)
        return
    result.pr_number, result.pr_url, result.pr_action = pr.number, pr.url, pr.action  # type: ignore[assignment]
