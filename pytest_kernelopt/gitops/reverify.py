"""What ``publish`` pushes is judged again here, not taken from the run.

A run directory and the kernel store beside it are data from an artifact: whoever can edit
them can swap a version file and record its sha256 again (in the manifest and in
``run.json``), and write any figure into the run's records. So before a kernel is
committed, the exact bytes to be pushed go through the cascade again in a verification
session on the problem file of *this* checkout (:class:`SessionJudge`), and every figure of
the commit message, the pull request's title and its body comes from that verdict (on a
machine without a GPU: interpreter mode, correctness only, "speed not measured").

The problem file a run names is Python that the verifier imports: it must lie in this
repository, be tracked at HEAD and carry no uncommitted change (:func:`problem_file`), so a
run cannot point publish at a file that came with the artifact.
"""

from __future__ import annotations

from pathlib import Path, PurePosixPath
from typing import Any, Protocol

from .errors import RefusedError


class Judge(Protocol):
    """``judge(problem, model, kernel, source, variant[, shape=][, launch_configs=]) -> Verdict``: the cascade on
    ``source`` as ``kernel`` of the problem file ``problem`` compiled under ``variant`` (model.json's compile
    settings), at ``shape`` (a declared shape of a problem with SHAPES; passed only for one), with the
    setting's ``launch_configs`` (passed only where model.json records some)."""

    def __call__(self, problem: Path, model: str, kernel: str, source: str, variant: str | None,
                 *, shape: str = ..., launch_configs: dict[str, dict[str, int]] = ...) -> Any: ...


class SessionJudge:
    """The cascade in one verification session per problem file, on ``device`` (``auto``: the GPU when there
    is one, else interpreter mode); :meth:`close` ends the sessions."""

    def __init__(self, device: str | None = None, options: Any = None):
        self.device = device
        self.options = options
        self._sessions: dict[tuple[Path, str | None, str | None], Any] = {}

    def __call__(self, problem: Path, model: str, kernel: str, source: str, variant: str | None,
                 shape: str | None = None, launch_configs: dict[str, dict[str, int]] | None = None) -> Any:
        from ..config import resolve_device
        from ..verify import VerifyOptions, VerifySession, source_of

        key = (problem, variant, shape)
        session = self._sessions.get(key)
        if session is None:
            self.device = resolve_device(self.device or "auto")
            session = VerifySession(problem, self.device, self.options or VerifyOptions(), variant=variant,
                                    shape=shape, launch_configs=launch_configs)
            self._sessions[key] = session
            session.open()
        return session.verify(kernel, source_of(source, f"{model}/{kernel} as the run stored it"))

    def close(self) -> None:
        for session in self._sessions.values():
            session.close()
        self._sessions.clear()


def problem_file(git: Any, recorded: str, tuned_in: Path | None) -> Path:
    """The problem file a run recorded (``recorded``: relative to the repository, or absolute in the checkout
    the run was tuned in, ``tuned_in``), in this repository; RefusedError unless it lies inside it, is
    tracked at HEAD and unchanged."""
    path = Path(recorded)
    if path.is_absolute() and tuned_in is not None and path.is_relative_to(tuned_in):
        path = path.relative_to(tuned_in)
    full = (path if path.is_absolute() else git.top / path).resolve()
    if not full.is_relative_to(git.top):
        raise RefusedError(f"the run names problem file {recorded!r}, outside the repository {git.top}: "
                           f"not re-verified, not published")
    rel = PurePosixPath(full.relative_to(git.top).as_posix())
    head = git.head_commit()
    if head is None or git.read(head, str(rel)) is None:
        raise RefusedError(f"{rel}: the run's problem file is not tracked at HEAD; publish re-verifies only "
                           f"against the repository's own problem files")
    if git.dirty([str(rel)]):
        raise RefusedError(f"{rel}: the run's problem file has uncommitted changes; commit or discard them first")
    return full
