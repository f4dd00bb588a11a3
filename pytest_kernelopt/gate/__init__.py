"""The CI gate behind ``pytest --kernelopt``.

Every configured problem file is collected by pytest as a :class:`ProblemFile` (node id:
its path relative to the rootdir) holding one item per Triton kernel
(``problems/x.py::<kernel>``) and one per model (``problems/x.py::model``). Settings,
options and the base revision are checked when pytest configures, before anything is
compiled: a bad one is one line and pytest's usage exit (4). Figures travel in
``user_properties`` (so junit XML and pytest-xdist carry them); the run's summary is
computed once from them and rendered in the terminal, the Markdown report and
``kernelopt merge``.

The modules, in the order a run meets them (the typed result of a run, ``--kernelopt-json``
and ``kernelopt merge``, and its summary are run records: ``runs/gate_result.py``,
``runs/gate_summary.py``):

    session.py        GateSession: one per pytest run, ties the parts together; plugin.py's hooks call it
    options.py        the --kernelopt-* options and [tool.kernelopt], read and checked into GateOptions
    problems.py       the problem files to check, each compiled once
    base.py           --kernelopt-base-ref: the revision each model is also timed against
    xdist.py          pytest -n N: a GPU per xdist worker, a problem's items on one worker
    items.py          the pytest nodes: ProblemFile, KernelItem, ModelItem
    tuning.py         --kernelopt-tune / --kernelopt-refresh, run on a problem's first item
    checks.py         what a kernel item and a model item check (the cascade, the speed policy)
    thresholds.py     each model's speed tolerances ([tool.kernelopt.thresholds]), accepted regressions
    failure.py        GateFailure; a stale kernel fails, or is skipped when allowed
    output.py         header, terminal summary, --kernelopt-json and --kernelopt-report
    publish.py        --kernelopt-open-pr: branches and pull requests after the run
    torch_warnings.py torch's and triton's own warnings, silenced while the gate compiles

Importing this package imports neither torch nor triton (``kernelopt merge`` runs without them).
"""

from __future__ import annotations

from .failure import GateFailure
from .items import GateItem, KernelItem, ModelItem, ProblemFile
from .session import GateSession

__all__ = ["GateFailure", "GateItem", "GateSession", "KernelItem", "ModelItem", "ProblemFile"]
