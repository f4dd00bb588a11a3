"""``python -m pytest_kernelopt.benchmark JOB_JSON``: the child process that benches one problem."""

import sys

from .one_problem import main

if __name__ == "__main__":  # pragma: no cover - the child process
    sys.exit(main(sys.argv[1:]))
