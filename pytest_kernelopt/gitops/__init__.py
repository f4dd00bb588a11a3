"""Branches and pull requests for the kernels a tuning run stored.

    publish.py  publish_run, the one entry point, and the checks before it (check_repository, check_run_files)
    branch.py   git (GitPython): commits built without a checkout, our branches only, pushes with a lease
    github.py   the GitHub REST API (urllib): open or update the pull request; remote URLs
    errors.py   PublishError, RefusedError, GitHubError
    reverify.py the cascade again on the exact bytes to push (the only source of published figures)
    comment.py  the gate's pull-request comment (``kernelopt comment``)
    history.py  the gate's history file: this checkout's commit appended (``--kernelopt-history``)

This file only re-exports.
"""

from __future__ import annotations

from .branch import branch_name
from .errors import GitHubError, PublishError, RefusedError, RunChangedError
from .publish import PublishResult, check_repository, check_run_files, publish_run, store_for_run

__all__ = ["GitHubError", "PublishError", "PublishResult", "RefusedError", "RunChangedError", "branch_name",
           "check_repository", "check_run_files", "publish_run", "store_for_run"]
