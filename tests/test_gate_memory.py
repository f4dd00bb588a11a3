"""The gate holds one problem's memory at a time, and says what it lacked when memory runs out.

* Each problem's verification session (its worker, which holds the problem's device memory)
  is closed right after the problem's last item, also when the items of several problems
  run interleaved; at most one is open when items run problem by problem.
* The gate's own process keeps only the kernels' records of what it compiled at collection:
  no model compiled there is still alive when the first problem is verified.
* An out-of-memory message names what the worker held and asked, what was free of how much,
  what other processes held, and the way out.

The gate runs for real in-process (pytester) on three tiny pointwise problems with their
kernels' unedited dumps committed; only the verification session is a recording stand-in.
"""

from __future__ import annotations

import json

import weakref
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

pytest_plugins = ["pytester"]

PROBLEM = '''"""One pointwise kernel."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.{op}(x) * {scale} + 1.0


def get_inputs():
    return [torch.randn(4, 32)]


def get_init_inputs():
    return []
'''
PROBLEMS = {"a_sin": ("sin", 2.0), "b_cos": ("cos", 3.0), "c_exp": ("exp", 0.5)}
PYPROJECT = '[tool.kernelopt]\nproblems = ["problems/*.py"]\ndevice = "cpu"\n'
# Round-robin over the problem files: a.k b.k c.k a.model b.model c.model.
INTERLEAVE = '''
def pytest_collection_modifyitems(items):
    groups = {}
    for item in items:
        groups.setdefault(item.path, []).append(item)
    queues = list(groups.values())
    items[:] = [q[i] for i in range(max(map(len, queues))) for q in queues if i < len(q)]
'''


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory, compiled_models: Any) -> Path:
    """Three problems, each with its one kernel's unedited dump committed (so its items open a session)."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance
    from test_production import verified_at

    repo = tmp_path_factory.mktemp("memory")
    (repo / "problems").mkdir()
    (repo / "pyproject.toml").write_text(PYPROJECT)
    store = KernelStore(repo / "kernels")
    for model, (op, scale) in PROBLEMS.items():
        path = repo / "problems" / f"{model}.py"
        path.write_text(PROBLEM.format(op=op, scale=scale))
        (name, handle), = compiled_models.get(path).kernels.items()
        dump = render_dump(handle.info, model)
        store.add_version(model=model, kernel=name, fingerprint=handle.info.fingerprint, args=handle.info.args,
                          original_source=dump, source=dump,
                          evidence=Evidence(status="correct", speed_measured=False, launches=[verified_at(handle.info)]),
                          provenance=Provenance(proposed_by="test"), environment=None)
    return repo


class Recorder:
    """A stand-in for ``VerifySession`` that records what the gate does with sessions; every check is correct.

    It also records, as each session opens, how many of the models the gate compiled at
    collection are still alive in the gate's process.
    """

    def __init__(self) -> None:
        self.events: list[tuple[str, str]] = []
        self.open_now: set[str] = set()
        self.most_open = 0
        self.models: list[weakref.ref[Any]] = []
        self.alive_at_open: list[int] = []

    def session(self, problem: Any, device: str, options: Any = None, **_: Any) -> Any:
        from pytest_kernelopt.records import Verdict

        name, recorder = Path(problem).stem, self

        class Session:
            opened = SimpleNamespace(min_bytes=None)

            def open(self) -> Any:
                import gc

                gc.collect()
                recorder.alive_at_open.append(sum(ref() is not None for ref in recorder.models))
                recorder.events.append(("open", name))
                recorder.open_now.add(name)
                recorder.most_open = max(recorder.most_open, len(recorder.open_now))
                return self.opened

            def verify(self, kernel: str, source: Any) -> Any:
                recorder.events.append(("kernel", name))
                # Verified at the launches its manifest records (the gate requires each to be one its run verified).
                manifest = json.loads((Path(source.label).parent / "manifest.json").read_text())
                return Verdict(model=name, kernel=kernel, candidate=source.label, candidate_sha256=source.sha256,
                               status="correct", launches=manifest["versions"][-1]["evidence"]["launches"])

            def verify_model(self, replacements: dict[str, Any], base_problem: Any = None,
                             base_kernels: Any = None) -> Any:
                recorder.events.append(("model", name))
                return Verdict(model=name, kernel="", candidate="model", candidate_sha256="0" * 64, status="correct")

            def close(self) -> None:
                recorder.events.append(("close", name))
                recorder.open_now.discard(name)

        return Session()

    def compile_problem(self, real: Any) -> Any:
        def compile_problem(*args: Any, **kwargs: Any) -> Any:
            compiled = real(*args, **kwargs)
            self.models += [weakref.ref(compiled), weakref.ref(compiled.model)]
            return compiled

        return compile_problem


@pytest.fixture
def recorder(template: Path, pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> Recorder:
    import shutil

    import pytest_kernelopt.capture
    import pytest_kernelopt.verify

    shutil.copytree(template, pytester.path, dirs_exist_ok=True)
    recorder = Recorder()
    monkeypatch.setattr(pytest_kernelopt.verify, "VerifySession", recorder.session)
    monkeypatch.setattr(pytest_kernelopt.capture, "compile_problem",
                        recorder.compile_problem(pytest_kernelopt.capture.compile_problem))
    return recorder


def _run(pytester: pytest.Pytester) -> Any:
    return pytester.runpytest("--kernelopt", "-p", "no:cacheprovider", "-p", "no:xdist", "-W", "ignore")


def test_problem_by_problem_one_session_is_open_at_a_time(recorder: Recorder, pytester: pytest.Pytester) -> None:
    _run(pytester).assert_outcomes(passed=6)
    assert recorder.events == [(event, name) for name in PROBLEMS for event in ("open", "kernel", "model", "close")]
    assert recorder.most_open == 1
    # The gate compiled each problem at collection; none of those models outlives it.
    assert len(recorder.models) == 2 * len(PROBLEMS) and recorder.alive_at_open == [0, 0, 0]


def test_interleaved_items_close_each_session_after_its_own_last_item(recorder: Recorder,
                                                                      pytester: pytest.Pytester) -> None:
    pytester.makeconftest(INTERLEAVE)
    _run(pytester).assert_outcomes(passed=6)
    a, b, c = PROBLEMS
    assert recorder.events == [("open", a), ("kernel", a), ("open", b), ("kernel", b), ("open", c), ("kernel", c),
                               ("model", a), ("close", a), ("model", b), ("close", b), ("model", c), ("close", c)]


def test_deselected_items_do_not_keep_a_session_open(recorder: Recorder, pytester: pytest.Pytester) -> None:
    """Counted after ``-k``: a problem whose model item is deselected closes after its kernel item."""
    pytester.makeconftest(INTERLEAVE)
    pytester.runpytest("--kernelopt", "-p", "no:cacheprovider", "-p", "no:xdist", "-W", "ignore",
                       "-k", "not (a_sin and model)").assert_outcomes(passed=5)
    a, b, _ = PROBLEMS
    assert recorder.events[:4] == [("open", a), ("kernel", a), ("close", a), ("open", b)]


# --- the message -----------------------------------------------------------------------

TORCH_OOM = ("CUDA out of memory. Tried to allocate 8.00 GiB. GPU 0 has a total capacity of 139.81 GiB of which "
             "5.25 GiB is free. Including non-PyTorch memory, this process has 32.50 GiB memory in use. Of the "
             "allocated memory 31.75 GiB is allocated by PyTorch, and 0.25 GiB is reserved by PyTorch but unallocated.")


def _cuda(monkeypatch: pytest.MonkeyPatch, *, allocated: float, reserved: float, free: float, total: float) -> None:
    import torch

    gib = float(1 << 30)
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "memory_allocated", lambda *a: int(allocated * gib))
    monkeypatch.setattr(torch.cuda, "memory_reserved", lambda *a: int(reserved * gib))
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda *a: (int(free * gib), int(total * gib)))


def test_out_of_memory_names_held_asked_free_total_others_and_the_way_out(monkeypatch: pytest.MonkeyPatch) -> None:
    """From torch's own figures (those at the time of the failure), not the driver's now."""
    from pytest_kernelopt.verify.prepared import out_of_memory

    _cuda(monkeypatch, allocated=1.0, reserved=1.0, free=100.0, total=139.81)
    text = str(out_of_memory(RuntimeError(TORCH_OOM), "kernel stage"))
    assert text.startswith("not enough GPU memory to verify at this size (kernel stage): needed about 39.8 GiB "
                           "(this worker held 31.8 GiB and asked for 8.0 GiB more); 5.2 GiB of the GPU's 139.8 GiB "
                           "were free; other processes held about 102.1 GiB of it.")
    assert "pytest --kernelopt <problem file>" in text and "more memory" in text and "inputs smaller" in text


def test_out_of_memory_without_torchs_figures_asks_the_driver(monkeypatch: pytest.MonkeyPatch) -> None:
    from pytest_kernelopt.verify.prepared import out_of_memory

    _cuda(monkeypatch, allocated=30.0, reserved=34.0, free=2.0, total=80.0)
    text = str(out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 512.00 MiB"), "preparing the problem"))
    assert ("needed about 30.5 GiB (this worker held 30.0 GiB and asked for 0.5 GiB more); 2.0 GiB of the GPU's "
            "80.0 GiB were free; other processes held about 44.0 GiB of it.") in text
    # The GPU to itself: nothing said about other processes.
    _cuda(monkeypatch, allocated=30.0, reserved=34.0, free=45.6, total=80.0)
    text = str(out_of_memory(RuntimeError("CUDA out of memory. Tried to allocate 50.00 GiB"), "model stage"))
    assert "45.6 GiB of the GPU's 80.0 GiB were free." in text and "other processes" not in text
