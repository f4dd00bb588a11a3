"""Errors of publishing: part of the one exception tree (:class:`~pytest_kernelopt.errors.KerneloptError`)."""

from __future__ import annotations

from ..errors import KerneloptError


class PublishError(KerneloptError):
    """Publishing cannot go on: not a git repository, no such remote or base branch, a push that failed.

    ``status`` is what a kernel's :class:`~.PublishResult` says when this stops it:
    ``refused`` (we will not overwrite or commit something: a human commit on the
    branch, uncommitted changes in files we would write) or ``failed``.
    """

    status = "failed"


class RefusedError(PublishError):
    status = "refused"


class GitHubError(PublishError):
    """The GitHub API said no (401, 403, 404, 422, 5xx) or could not be reached; one line, no token in it."""


class RunChangedError(RefusedError):
    """A file the run stored is not the file it recorded (edited, or swapped, since the run):
    the whole run is refused before anything is pushed. Exit code 2, naming the file."""
