"""One exception hierarchy; the CLI and the plugin turn each into one line and an exit code."""

from __future__ import annotations

# Where the package installs from until its first release on PyPI; pyproject's [project.urls]
# Repository is the same URL (tests/test_packaging.py keeps them equal).
REPOSITORY = "https://github.com/pytest-kernelopt/pytest-kernelopt"


def install_hint(extra: str = "") -> str:
    """The pip command that installs this package, with ``extra`` (e.g. ``agents``), today."""
    name = f"pytest-kernelopt[{extra}]" if extra else "pytest-kernelopt"
    return f'pip install "{name} @ git+{REPOSITORY}"'


class KerneloptError(Exception):
    """Base of every error this tool raises on purpose. ``exit_code`` is what the CLI returns."""

    exit_code = 2


class UsageError(KerneloptError):
    """Bad input: a missing file, an unknown kernel name, a bad option value."""


class ProblemError(KerneloptError):
    """A problem file that cannot be loaded, run or compiled."""

    def __init__(self, path: object, cause: str):
        self.path, self.cause = str(path), cause
        super().__init__(f"{self.path}: {cause}")


class CaptureError(KerneloptError):
    """The compiled model could not be opened (no wrapper module, unsupported kernel kind)."""


class CandidateError(KerneloptError):
    """A candidate file that cannot be loaded or launched."""


class StoreError(KerneloptError):
    """A corrupt or inconsistent kernel store (manifest, version files)."""


class InterpreterUnsupported(KerneloptError):
    """Something a kernel needs that interpreter mode does not provide (names the function)."""


class VerifierError(KerneloptError):
    """The verifier itself could not judge (out of GPU memory, its worker failed while
    opening the problem): never a verdict on the candidate."""


class BudgetSpent(KerneloptError):
    """The caller's time budget ran out while a check was still running (the check was stopped): never a verdict
    on what was being checked."""


class MergeError(KerneloptError):
    """Gate results that cannot be combined into one (``kernelopt merge``): shards that
    overlap or are missing, other settings, another environment."""


class Terminated(KeyboardInterrupt):
    """SIGTERM (a CI job's time limit, ``timeout(1)``, a container stopping), raised where Ctrl-C's
    KeyboardInterrupt would be, so that a command stops as cleanly: what finished is kept and summarised."""
