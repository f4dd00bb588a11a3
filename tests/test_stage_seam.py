"""The stage seam: a stage added to the one ordered list (verify/stages.py) runs in its place,
lands in the verdict and in the reports, and stops the cascade when it fails, with no other
file of the package edited.

The extra stage is registered the way a test can: the list is replaced in this process (the
parent: the session's loop, the checks on the worker's messages, the reports) and in a worker
started from a small script that replaces it the same way, then serves as the real worker does.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from pytest_kernelopt.verify import stages
from pytest_kernelopt.verify import worker as worker_module
from pytest_kernelopt.verify.worker import WorkerProcess

ROOT = Path(__file__).resolve().parent.parent
PROBLEM = ROOT / "tests" / "problems" / "elementwise_chain.py"

# Registers the extra stage after ``model``; it fails for a candidate whose file is named fail.py.
REGISTER = '''
from pytest_kernelopt.verify import stages
from pytest_kernelopt.verify.prepared import StageFailure


def extra(check):
    labels = [c.label for c in check.request.replacements.values()]
    if any(label.endswith("fail.py") for label in labels):
        raise StageFailure("the extra stage says no")
    return f"{len(check.prepared.seeds)} seed(s): looked at {', '.join(labels)}", {}


at = stages.names().index("model") + 1
stages.STAGES = (*stages.STAGES[:at], stages.Stage("extra", "a test's stage", "worker", extra), *stages.STAGES[at:])
'''

WORKER = REGISTER + '''
import sys

from pytest_kernelopt.verify import worker

sys.exit(worker.serve(int(sys.argv[1]), int(sys.argv[2])))
'''


@pytest.fixture
def extra_stage(monkeypatch):
    """The extra stage, registered in this process; restored afterwards."""
    namespace: dict = {}
    monkeypatch.setattr(stages, "STAGES", stages.STAGES)  # put back whatever the script sets
    exec(compile(REGISTER, "<extra stage>", "exec"), namespace)
    assert stages.names() == ("static", "kernel", "model", "extra", "speed")


def test_an_added_stage_runs_in_order_and_lands_in_the_verdict(extra_stage, interpreter, tmp_path, monkeypatch):
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.cli import verdict_lines
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    script = tmp_path / "worker_with_extra_stage.py"
    script.write_text(WORKER)

    class Worker(WorkerProcess):
        def __init__(self, program=worker_module.WORKER, **kwargs):
            if program == worker_module.WORKER:  # the static checker stays the real one
                program = [sys.executable, str(script)]
            super().__init__(program, **kwargs)

    monkeypatch.setattr(worker_module, "WorkerProcess", Worker)
    with VerifySession(PROBLEM, interpreter, VerifyOptions(seeds=1)) as session:
        kernel = next(iter(session.kernels))
        dump = render_dump(session.kernel_info(kernel), PROBLEM.stem)
        good = session.verify(kernel, source_of(dump, "fine.py"))
        bad = session.verify(kernel, source_of(dump, "fail.py"))

    assert good.status == "correct", good.reason
    assert [s.name for s in good.stages] == ["static", "kernel", "model", "extra", "speed"]
    extra = good.stages[3]
    assert extra.passed is True and extra.detail == "1 seed(s): looked at fine.py"
    assert good.stages[4].passed is None and good.stages[4].detail.startswith("not measured")
    lines = verdict_lines(good)  # the terminal's account: one aligned line per stage
    assert lines[3].startswith("extra   pass ") and lines[3].endswith("looked at fine.py"), lines

    assert bad.status == "rejected" and bad.reason == "extra: the extra stage says no"
    assert [s.name for s in bad.stages] == ["static", "kernel", "model", "extra"]  # stopped there: no speed row


def test_an_added_stage_is_ordered_in_the_run_report(extra_stage, tmp_path):
    import synthetic_run as s

    from pytest_kernelopt.runs.trace import load_run
    from pytest_kernelopt.report import build_view, render_report

    run_dir, _ = s.standard_run(tmp_path)
    record, events = load_run(run_dir)
    kernel = record.problems[0].kernels[0]
    rejected = next(a for a in kernel.history if a.status == "rejected" and a.stage == "kernel")
    rejected.stage = "extra"
    kernel.by_stage = {}  # counted from the history
    markdown = render_report(build_view(record, events), "md")
    assert "reviewed 1, static 1, extra 1, correct 1, accepted 1" in markdown


def test_the_worker_may_only_name_a_stage_of_the_list():
    """The parent checks the worker's messages against the list: a stage it does not know is refused."""
    from pydantic import ValidationError

    from pytest_kernelopt.records import StageResult
    from pytest_kernelopt.verify.protocol import StageDone, StageStarted

    assert StageStarted(stage="model").stage == "model"
    for bad in (lambda: StageStarted(stage="extra"),
                lambda: StageDone(result=StageResult(name="accepted", passed=True))):
        with pytest.raises(ValidationError, match="not a stage of the cascade"):
            bad()


def test_stages_in_the_parent_come_first():
    """The worker gets the candidate only once the parent's stages passed: they lead the list."""
    where = [s.where for s in stages.STAGES]
    assert where == sorted(where, key=["parent", "worker"].index)
    assert len(set(stages.names())) == len(stages.STAGES)
    assert sum(s.measures for s in stages.STAGES) == 1  # the one the speed policy judges


def test_every_stage_has_its_paragraph_in_the_docs():
    """Adding a stage's third file: docs/cascade.md's list of the stages, in the list's order."""
    text = (ROOT / "docs" / "cascade.md").read_text()
    section = text[text.index("## The stages"):text.index("## Adding a stage")]
    found = [section.index(f"**{name}**") for name in stages.names()]
    assert found == sorted(found), stages.names()
