"""A compile setting's launch configurations (capture/launch_configs.py): recorded after the race, fixed before it.

Interpreter mode stands in for the GPU: Triton's interpreter launches a kernel's first configuration, which is
what a fixed point replaces, so a fixed launch changes the blocks the kernel runs with (and its results must not).
"""

from __future__ import annotations

import json
from datetime import datetime, timezone
from types import SimpleNamespace

import pytest

from conftest import TESTS

SOFTMAX = TESTS / "problems" / "softmax_rows.py"
LOOPED = "looped-reductions"


def _config(**point: int) -> SimpleNamespace:
    warps, stages = point.pop("num_warps"), point.pop("num_stages")
    return SimpleNamespace(kwargs=point, num_warps=warps, num_stages=stages)


def _autotuner(*points: dict[str, int], hints: dict[str, int] | None = None) -> SimpleNamespace:
    return SimpleNamespace(configs=[_config(**p) for p in points], launchers=[], compile_results=[],
                           size_hints=hints if hints is not None else {"x": 1024, "r0_": 512})


def _record(kernels, inputs, fingerprint: str, point: dict[str, int]) -> None:
    """softmax_rows' model.json under LOOPED, verified at ``inputs``, recording ``point`` for ``fingerprint``."""
    from pytest_kernelopt.capture import launch_signature

    from pytest_kernelopt.verify.pipeline import environment

    (kernels / "softmax_rows").mkdir(parents=True, exist_ok=True)
    (kernels / "softmax_rows" / "model.json").write_text(json.dumps({"schema_version": 1, "model": "softmax_rows",
        "compile": {"variant": LOOPED, "measured": datetime(2026, 12, 6, tzinfo=timezone.utc).isoformat(),
                    "graphs": [launch_signature(inputs)], "launch_configs": {fingerprint: point},
                    "environment": environment("cpu").model_dump(mode="json")}}))  # production applies it only here


def _in_production(kernels, inputs):
    """softmax_rows compiled afresh through production's backend on ``kernels``: (backend, eager model, output,
    the wrapper's kernels, warnings said)."""
    import warnings

    import torch

    import pytest_kernelopt
    from test_production import fresh, wrapper_globals

    from torch._inductor.codecache import PyCodeCache

    _, model = fresh(SOFTMAX)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        torch._dynamo.reset()
    PyCodeCache.cache_clear()  # not an earlier test's loaded kernel (one fixed to a point has it as its own)
    backend = pytest_kernelopt.backend("softmax_rows", kernels, quiet=True)
    out, found, messages = wrapper_globals(torch.compile(model, backend=backend), *inputs)
    return backend, model, out, found, messages


OWN = {"XBLOCK": 8, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 1}


@pytest.mark.parametrize("point, why", [
    (OWN, None),  # one of its own configurations
    ({"XBLOCK": 64, "R0_BLOCK": 512, "num_warps": 16, "num_stages": 2}, None),  # reachable by coordinate descent
    ({"XBLOCK": 8, "num_warps": 4, "num_stages": 1}, "are not the kernel's"),  # R0_BLOCK dropped (persistent)
    ({"XBLOCK": 8, "R0_BLOCK": 64, "YBLOCK": 2, "num_warps": 4, "num_stages": 1}, "are not the kernel's"),
    ({"XBLOCK": 12, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 1}, "not a power of two"),
    ({"XBLOCK": 2048, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 1}, "over 1024"),  # its size hint
    ({"XBLOCK": 8, "R0_BLOCK": 1024, "num_warps": 4, "num_stages": 1}, "over 512"),
    ({"XBLOCK": 8, "R0_BLOCK": 64, "num_warps": 64, "num_stages": 1}, "num_warps=64"),
    ({"XBLOCK": 8, "R0_BLOCK": 64, "num_warps": 3, "num_stages": 1}, "num_warps=3"),
    ({"XBLOCK": 8, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 0}, "num_stages=0"),
    ({"XBLOCK": 8.0, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 1}, "not a launch point"),
    ({"XBLOCK": True, "R0_BLOCK": 64, "num_warps": 4, "num_stages": 1}, "not a launch point"),
])
def test_a_recorded_point_is_used_only_where_inductor_itself_could_launch_it(point, why):
    from pytest_kernelopt.capture.launch_configs import refusal

    found = refusal(_autotuner(OWN), point)
    assert (found is None) if why is None else (found is not None and why in found), found


def test_names_coordinate_descent_does_not_walk_keep_a_value_of_the_kernel_s_own_configurations():
    """A split reduction's configurations (max-autotune, torch 2.11, H100: ``RSPLIT_SIZE``, ``NUM_STAGES``): its
    descent changed XBLOCK from 4 to 1 and kept the rest, which is used; another RSPLIT_SIZE is not."""
    from pytest_kernelopt.capture.launch_configs import refusal

    own = {"XBLOCK": 4, "RSPLIT_SIZE": 16, "NUM_STAGES": 3, "num_warps": 8, "num_stages": 1}
    tuner = _autotuner(own, {**own, "RSPLIT_SIZE": 32}, hints={"x": 4096, "r0_": 1024})
    assert refusal(tuner, {**own, "XBLOCK": 1}) is None
    assert refusal(tuner, {**own, "XBLOCK": 1, "RSPLIT_SIZE": 32}) is None
    assert "RSPLIT_SIZE=64: none of the kernel's own" in refusal(tuner, {**own, "RSPLIT_SIZE": 64})
    # Its NUM_STAGES (the tl.range's pipelining) is walked one step at a time: on an H100 (torch 2.11) the first
    # compile's descent ended at 4, above the 3 of every configuration, and the first rule refused it there.
    assert refusal(tuner, {**own, "XBLOCK": 2, "NUM_STAGES": 4}) is None
    assert "NUM_STAGES=6 is not from 1 to 5" in refusal(tuner, {**own, "NUM_STAGES": 6})
    assert "NUM_STAGES=0 is not from 1 to 5" in refusal(tuner, {**own, "NUM_STAGES": 0})
    # What Inductor's coordinate descent itself would not try (its is_valid_config: a split reduction's XBLOCK no
    # larger than its RSPLIT_SIZE) is not launched either, nor a point its check cannot read.
    tuner.coordesc_tuner = SimpleNamespace(is_valid_config=lambda c: c.kwargs["XBLOCK"] <= c.kwargs["RSPLIT_SIZE"])
    assert refusal(tuner, {**own, "XBLOCK": 16}) is None
    assert "coordinate descent would not launch it" in refusal(tuner, {**own, "XBLOCK": 32})
    tuner.coordesc_tuner = SimpleNamespace(is_valid_config=lambda c: c.kwargs["YBLOCK"] > 0)
    assert "Inductor's check of it failed (KeyError)" in refusal(tuner, {**own, "XBLOCK": 8})


def test_a_point_that_would_make_triton_compile_a_huge_tile_is_refused():
    """A pull request's model.json point within the kernel's size hints but with a 512k-element tile on one warp
    (16k elements a thread): compiling it could take minutes and gigabytes before any check runs. Refused by the
    bounds the search's own launch space keeps (candidate/launch_space.py), so the kernel races instead."""
    from pytest_kernelopt.capture.launch_configs import refusal

    tuner = _autotuner(OWN)
    assert "elements per program" in refusal(tuner, {"XBLOCK": 1024, "R0_BLOCK": 512, "num_warps": 1, "num_stages": 1})
    assert "per thread" in refusal(tuner, {"XBLOCK": 128, "R0_BLOCK": 128, "num_warps": 1, "num_stages": 1})
    assert refusal(tuner, {"XBLOCK": 128, "R0_BLOCK": 128, "num_warps": 8, "num_stages": 1}) is None


def test_a_point_on_a_dimension_without_a_size_hint_is_refused_unless_it_is_the_kernel_s_own():
    from pytest_kernelopt.capture.launch_configs import refusal

    tuner = _autotuner(OWN, hints={"x": 1024})
    assert refusal(tuner, OWN) is None
    assert "records no size" in refusal(tuner, {**OWN, "R0_BLOCK": 128})


def test_checks_that_picked_a_kernel_differently_leave_it_to_race():
    from pytest_kernelopt.capture.launch_configs import merged

    a, b = {"XBLOCK": 8, "num_warps": 4}, {"XBLOCK": 16, "num_warps": 4}
    assert merged([None, None]) is None
    assert merged([{"k1": a, "k2": a}, None, {"k1": a, "k2": b, "k3": b}]) == {"k1": a, "k3": b}


@pytest.mark.slow
def test_a_compile_launches_its_recorded_point_and_stays_correct_and_a_refused_one_races(interpreter):
    """The looped softmax kernel recorded at 64-element chunks instead of its one 128: the compile launches that
    (two chunks per row), its outputs still match eager; a point the kernel cannot take is refused and said."""
    import torch
    from torch._inductor.codecache import PyCodeCache

    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.compiled import autotuner_fingerprint
    from pytest_kernelopt.capture.launch_configs import picked
    from pytest_kernelopt.capture.problem import load_problem

    problem = load_problem(SOFTMAX)
    plain = compile_problem(problem, interpreter, variant=LOOPED)
    (handle,) = plain.kernels.values()
    fp = handle.info.fingerprint
    own = picked([handle.original], autotuner_fingerprint)[fp]
    assert own["R0_BLOCK"] == 128 and plain.launches_fixed == 0
    chunked = {**own, "XBLOCK": 1, "R0_BLOCK": 64}

    fixed = compile_problem(problem, interpreter, variant=LOOPED, launch_configs={fp: chunked, "0" * 16: own})
    (again,) = fixed.kernels.values()
    assert again.info.fingerprint == fp  # the fingerprint does not depend on the launch
    assert fixed.launches_fixed == 1 and fixed.launches_refused == []
    assert again.info.launch.kwargs == {"XBLOCK": 1, "R0_BLOCK": 64}
    assert picked([again.original], autotuner_fingerprint)[fp] == chunked  # what a later check records is what ran
    inputs = problem.make_inputs(3, interpreter)
    with torch.no_grad():
        torch.testing.assert_close(fixed(*inputs), fixed.model(*inputs), rtol=1e-5, atol=1e-6)

    # Inductor keeps a loaded kernel module (and its autotuner, fixed above) for a compile of the same source in
    # this process, as it keeps a kernel's race: dropped here so the next compile loads the kernel afresh.
    PyCodeCache.cache_clear()
    bad = compile_problem(problem, interpreter, variant=LOOPED, launch_configs={fp: {**own, "R0_BLOCK": 96}})
    assert bad.launches_fixed == 0 and len(bad.launches_refused) == 1
    assert "R0_BLOCK=96 is not a power of two" in bad.launches_refused[0]
    assert next(iter(bad.kernels.values())).info.launch.kwargs["R0_BLOCK"] == 128


@pytest.mark.slow
def test_production_launches_model_json_s_recorded_point_and_warns_on_one_it_refuses(interpreter, tmp_path):
    import torch

    from test_production import fresh

    from pytest_kernelopt.capture import compile_problem

    problem, _ = fresh(SOFTMAX)
    (handle,) = compile_problem(problem, interpreter, variant=LOOPED).kernels.values()
    fp, own = handle.info.fingerprint, {**handle.info.launch.kwargs, "num_warps": handle.info.launch.num_warps,
                                         "num_stages": handle.info.launch.num_stages}
    inputs = problem.make_inputs(0, "cpu")
    kernels = tmp_path / "kernels"

    _record(kernels, inputs, fp, {**own, "XBLOCK": 1, "R0_BLOCK": 32})
    backend, model, out, found, _ = _in_production(kernels, inputs)
    (kernel,) = found.values()
    assert backend.launches_fixed == 1 and backend.launches_refused == []
    assert kernel.configs[0].kwargs == {"XBLOCK": 1, "R0_BLOCK": 32}
    with torch.no_grad():
        torch.testing.assert_close(out, model(*inputs), rtol=1e-5, atol=1e-6)

    _record(kernels, inputs, fp, {**own, "XBLOCK": 1 << 20})  # no larger than the kernel's 8 rows
    backend, model, out, found, messages = _in_production(kernels, inputs)
    assert backend.launches_fixed == 0 and "XBLOCK=1048576 is over 8" in backend.launches_refused[0]
    assert any("launch configuration recorded for" in m and "Inductor races" in m for m in messages)
    assert next(iter(found.values())).configs[0].kwargs["XBLOCK"] != 1 << 20


def test_production_reads_a_kernel_s_fingerprint_once_for_the_launch_fix_and_the_lookup(tmp_path, monkeypatch):
    """Both ask for it when model.json records launches and versions are committed (a few ms a kernel)."""
    from types import SimpleNamespace

    import pytest_kernelopt
    import pytest_kernelopt.capture as capture

    calls: list[str] = []
    monkeypatch.setattr(capture, "kernel_fingerprint", lambda kernel, source, fn: calls.append(fn) or f"fp-{id(kernel)}")
    monkeypatch.setattr(capture, "read_kernel_source", lambda kernel, module, attr: "source")
    backend = pytest_kernelopt.backend("m", tmp_path, quiet=True)
    module = SimpleNamespace(k=object())
    first = backend._fingerprint(module, "k", "triton_poi_0")
    assert backend._fingerprint(module, "k", "triton_poi_0") == first and calls == ["triton_poi_0"]
    module.k = object()  # recompiled: another kernel object, read afresh
    assert backend._fingerprint(module, "k", "triton_poi_0") != first and len(calls) == 2


def test_the_launch_configs_script_reads_points_and_launches_them_on_a_fresh_compile(interpreter, capsys):
    """bench/launch_configs_gpu.py, the check the results page quotes, in interpreter mode: one kernel, its point
    read and fixed on a second compile of fresh kernel objects, nothing refused."""
    import importlib.util

    spec = importlib.util.spec_from_file_location("launch_configs_gpu", TESTS.parent / "bench" / "launch_configs_gpu.py")
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(SOFTMAX), LOOPED, "--device", "cpu"]) == 0
    result = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert result["kernels"] == result["points"] == result["fixed"] == 1
    assert result["refused"] == [] and result["differs"] == {} and result["fresh"] is True


def test_a_pull_request_s_point_inductor_itself_would_not_try_is_not_launched_in_production(interpreter, tmp_path,
                                                                                            monkeypatch):
    """Attack: a model.json edited in a pull request asks for a point inside every bound of ours (powers of two,
    size hints, tile, warps) that Inductor's own coordinate descent would never try (here its is_valid_config
    says so for XBLOCK 1, as it does for a split reduction's XBLOCK above its RSPLIT_SIZE on a GPU). Production
    does not launch it: it warns, the kernel races as Inductor does, and the model's results are unchanged."""
    import torch
    from torch._inductor.runtime.coordinate_descent_tuner import CoordescTuner

    from test_production import fresh

    from pytest_kernelopt.capture import compile_problem

    problem, _ = fresh(SOFTMAX)
    (handle,) = compile_problem(problem, interpreter, variant=LOOPED).kernels.values()
    own = {**handle.info.launch.kwargs, "num_warps": handle.info.launch.num_warps,
           "num_stages": handle.info.launch.num_stages}
    inputs = problem.make_inputs(0, "cpu")
    kernels = tmp_path / "kernels"
    _record(kernels, inputs, handle.info.fingerprint, {**own, "XBLOCK": 1, "R0_BLOCK": 32})
    asked: list[dict] = []

    def is_valid_config(self, config):
        asked.append(dict(config.kwargs))
        return config.kwargs.get("XBLOCK") != 1

    monkeypatch.setattr(CoordescTuner, "is_valid_config", is_valid_config)
    backend, model, out, found, messages = _in_production(kernels, inputs)
    assert {"XBLOCK": 1, "R0_BLOCK": 32} in asked  # Inductor's own check was asked, on the attacker's point
    assert backend.launches_fixed == 0 and "coordinate descent would not launch it" in backend.launches_refused[0]
    assert any("launch configuration recorded for" in m and "Inductor races" in m for m in messages)
    assert next(iter(found.values())).configs[0].kwargs != {"XBLOCK": 1, "R0_BLOCK": 32}
    with torch.no_grad():
        torch.testing.assert_close(out, model(*inputs), rtol=1e-5, atol=1e-6)
