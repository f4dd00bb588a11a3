"""``kernelopt bench`` in interpreter mode, and the statistics behind its N-way timings.

One bench run (module fixture) covers three problems, each in its own child process:
``elementwise_chain`` with a committed kernel that adds 1.0 to its output (so the
kernelopt mode visibly runs it and fails correctness), a problem whose forward raises
(an error row; the others go on), and a small pointwise problem with nothing committed
(kernelopt runs the compiler's kernels).
"""

from __future__ import annotations

import json
import math
import random
import subprocess
import sys
from typing import Any

import pytest

from conftest import TESTS, add_to_last_store

ELEMENTWISE = TESTS / "problems" / "elementwise_chain.py"

BROKEN = '''"""Compiles nowhere: the forward pass fails on its own input."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x @ torch.ones(3, 5)


def get_inputs():
    return [torch.randn(4, 4)]


def get_init_inputs():
    return []
'''

NOTHING_COMMITTED = '''"""One pointwise kernel, quick to compile."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return torch.relu(x) * 2.0 + 1.0


def get_inputs():
    return [torch.randn(8, 32)]


def get_init_inputs():
    return []
'''

CRASH = '''"""Takes its process down at import, as a segfaulting extension would."""
import os

os._exit(3)
'''


# --- one bench run over three problems ---------------------------------------------------

@pytest.fixture(scope="module")
def bench(tmp_path_factory: pytest.TempPathFactory, compiled_models: Any, kernelopt: Any) -> Any:
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.store import Evidence, KernelStore, Provenance, sha256_text

    folder = tmp_path_factory.mktemp("bench")
    (handle,) = compiled_models.get(ELEMENTWISE).kernels.values()
    source = add_to_last_store(render_dump(handle.info, "elementwise_chain"), 1.0)
    # The verification record accept writes: the production path runs nothing without one.
    from test_production import here, verified_at

    evidence = Evidence(status="correct", speed_measured=False, fingerprint=handle.info.fingerprint,
                        sha256=sha256_text(source), launches=[verified_at(handle.info)], environment=here())
    KernelStore(folder / "kernels").add_version(
        model="elementwise_chain", kernel=handle.info.name, fingerprint=handle.info.fingerprint,
        args=handle.info.args, original_source=render_dump(handle.info, "elementwise_chain"),
        source=source, evidence=evidence, provenance=Provenance(), environment=None)
    broken = folder / "broken_matmul.py"
    broken.write_text(BROKEN)
    plain = folder / "relu_affine.py"
    plain.write_text(NOTHING_COMMITTED)
    own_rng = folder / "own_rng.py"  # a generator of its own: every draw differs
    own_rng.write_text(NOTHING_COMMITTED.replace("import torch", "import numpy as np\nimport torch").replace(
        "torch.randn(8, 32)", "torch.from_numpy(np.random.default_rng().standard_normal((8, 32)))"))
    out = folder / "bench.json"
    dropout = folder / "dropout_left_on.py"  # random numbers drawn in the forward
    dropout.write_text(NOTHING_COMMITTED.replace("torch.relu(x)", "torch.nn.functional.dropout(x, 0.2, training=True)"))
    result = kernelopt("bench", ELEMENTWISE, broken, plain, own_rng, dropout, "--modes", "eager,default,kernelopt",
                       "--device", "cpu", "--kernels-dir", folder / "kernels", "--json", out)
    return result, json.loads(out.read_text()) if out.exists() else None


def rows(data: dict[str, Any], model: str) -> tuple[dict[str, Any], dict[str, dict[str, Any]]]:
    (problem,) = [p for p in data["problems"] if p["model"] == model]
    return problem, {m["mode"]: m for m in problem["modes"]}


def test_bench_finishes_despite_a_broken_problem(bench):
    result, data = bench

    assert result.returncode == 0, result.stderr
    assert data is not None
    assert [p["model"] for p in data["problems"]] == ["elementwise_chain", "broken_matmul", "relu_affine", "own_rng",
                                                  "dropout_left_on"]
    assert [p["status"] for p in data["problems"]] == ["ok", "error", "ok", "error", "error"]
    assert "drawing default's inputs" in data["problems"][3]["error"]
    assert "get_inputs() is not reproducible: two draws under seed" in data["problems"][3]["error"]
    assert "the model draws random numbers when it runs (bernoulli_" in data["problems"][4]["error"]


def test_broken_problem_is_an_error_row_naming_the_cause(bench):
    result, data = bench
    problem, _ = rows(data, "broken_matmul")

    assert "fails in eager mode" in problem["error"] and "RuntimeError" in problem["error"]
    assert "broken_matmul" in result.stdout and "ERROR" in result.stdout  # a row of the table


def test_json_is_a_validated_bench_record(bench):
    from pytest_kernelopt.benchmark import BenchResult

    _, data = bench
    record = BenchResult.model_validate(data)

    assert record.schema_version == 1 and record.kind == "kernelopt-bench"
    assert record.settings.modes == ["eager", "default", "kernelopt"]
    assert record.environment is not None and record.environment.device == "cpu"


@pytest.mark.slow
def test_max_autotune_on_a_cpu_is_skipped_saying_why(kernelopt, tmp_path):
    """torch 2.13 on a CPU: max-autotune of a GEMM fails inside torch (its C++ templates); that is a skip
    naming the torch version, not an error row."""
    import torch

    out = tmp_path / "bench.json"
    result = kernelopt("bench", TESTS / "problems" / "linear_gelu.py", "--modes", "default,max-autotune-no-cudagraphs",
                       "--device", "cpu", "--json", out)
    assert result.returncode == 0, result.stderr
    problem, modes = rows(json.loads(out.read_text()), "linear_gelu")
    assert problem["status"] == "ok" and modes["default"]["correct"] is True
    assert problem["min_flops"] == {"float32": 2 * 4 * 64 * 64}  # the addmm, counted at its dtype
    autotune = modes["max-autotune-no-cudagraphs"]
    if autotune["skipped"] is None:  # a torch whose CPU max-autotune builds this model: it ran and was checked
        assert autotune["error"] is None and autotune["correct"] is not None
        return
    version = torch.__version__.split("+")[0]
    assert autotune["error"] is None
    assert autotune["skipped"].startswith(f"max-autotune is not available for CPU Triton in torch {version}; skipped")
    assert "max-autotune is not available for CPU Triton" in result.stdout


@pytest.mark.parametrize("model", ["elementwise_chain", "relu_affine"])
def test_every_mode_is_built_and_checked_against_float64(bench, model):
    _, data = bench
    problem, modes = rows(data, model)

    assert list(modes) == ["eager", "default", "kernelopt"]
    assert problem["reference"] == "float64" and problem["device"] == "cpu"
    assert modes["eager"]["compile_seconds"] is None
    for name in ("default", "kernelopt"):
        assert modes[name]["compile_seconds"] > 0
    for name in ("eager", "default"):
        m = modes[name]
        assert m["correct"] is True and m["error"] is None
        assert 0 <= m["error_vs_allowed"] <= 1
        assert 0 < m["max_abs_error"] < 1e-5
        assert m["relative_error"] == pytest.approx(m["max_abs_error"] / m["scale"])


def test_kernelopt_runs_the_committed_kernel(bench):
    _, data = bench
    _, modes = rows(data, "elementwise_chain")
    m = modes["kernelopt"]

    assert m["committed_kernels"] == 1
    assert "v1" in m["kernels_note"]
    # The committed version adds 1.0: kernelopt (and only kernelopt) is off by exactly that.
    assert m["correct"] is False and m["max_abs_error"] == pytest.approx(1.0, abs=1e-5)
    assert m["error_vs_allowed"] > 1
    assert modes["default"]["max_abs_error"] < 1e-5


def test_kernelopt_without_committed_kernels_says_it_is_default(bench):
    result, data = bench
    _, modes = rows(data, "relu_affine")
    m = modes["kernelopt"]

    assert m["committed_kernels"] == 0 and m["correct"] is True
    assert m["kernels_note"].startswith("same as default")
    assert m["max_abs_error"] == modes["default"]["max_abs_error"]
    assert "same as default" in result.stdout


def test_speed_is_not_measured_in_interpreter_mode(bench):
    result, data = bench

    assert data["speed_measured"] is False and data["geomeans"] == []
    for problem in data["problems"]:
        assert problem["speed_measured"] is False and problem["method"] is None
        assert problem["triton_share"] is None and problem["kernels"] == []
        for m in problem["modes"]:
            assert m["median_us"] is m["speedup"] is m["speedup_ci_low"] is m["samples"] is None
            assert m["limit_pct"] is None
    assert "speed not measured" in result.stdout


def test_the_memory_limit_is_the_models_floor_of_bytes_over_the_copy_bandwidth(monkeypatch):
    """Inputs, parameters and outputs moved once; shown for Triton-bound models only (issue 23)."""
    import torch

    from pytest_kernelopt.benchmark import ModeResult, ProblemResult
    from pytest_kernelopt.benchmark import one_problem
    from pytest_kernelopt.measure import roofline

    model = torch.nn.Linear(256, 256)  # 256*256 + 256 fp32 parameters
    x, y = torch.zeros(1024, 256), torch.zeros(1024, 256)
    from pytest_kernelopt.measure.roofline import min_bytes

    floor = min_bytes(model, [x, 3], [y])
    assert floor == 4 * (2 * 1024 * 256 + 256 * 256 + 256)
    monkeypatch.setattr(roofline, "copy_ceiling_gbps", lambda: 4000.0)
    problem = ProblemResult(problem="p.py", model="p", min_bytes=4_000_000, triton_share=0.97,
                            modes=[ModeResult(mode="default", median_us=2.0), ModeResult(mode="kernelopt", median_us=1.25),
                                   ModeResult(mode="eager", median_us=None)])
    one_problem._limits(problem)
    assert [m.limit_pct for m in problem.modes] == [50.0, 80.0, None]  # 4 MB in 2 us = 2 TB/s of 4
    gemm = problem.model_copy(update={"triton_share": 0.3, "copy_ceiling_gbps": None,
                                      "modes": [ModeResult(mode="default", median_us=2.0)]})
    one_problem._limits(gemm)  # 70% of its time is work neither floor counts (no FLOPs counted): no figure
    assert gemm.modes[0].limit_pct is None and gemm.copy_ceiling_gbps is None


def test_the_limit_counts_the_flops_of_matrix_products_at_their_dtypes_measured_rate(monkeypatch):
    """A GEMM-bound model (Triton share 30%) gets a figure once its FLOPs are counted (issue 23, item 1)."""
    from pytest_kernelopt.benchmark import ModeResult, ProblemResult
    from pytest_kernelopt.benchmark import one_problem
    from pytest_kernelopt.measure import roofline

    monkeypatch.setattr(roofline, "copy_ceiling_gbps", lambda: 4000.0)
    asked: list[list[str]] = []
    monkeypatch.setattr(roofline, "flop_ceiling_tflops", lambda dtypes: asked.append(dtypes) or {"float32": 50.0})
    # 8 GFLOP fp32 at 50 TFLOP/s: 160 us, far above 4 MB at 4 TB/s (1 us).
    gemm = ProblemResult(problem="p.py", model="p", min_bytes=4_000_000, triton_share=0.3, min_flops={"float32": 8 * 10**9},
                         modes=[ModeResult(mode="default", median_us=200.0), ModeResult(mode="kernelopt", median_us=160.0)])
    one_problem._limits(gemm)
    assert asked == [["float32"]] and gemm.flop_ceilings_tflops == {"float32": 50.0}
    assert [m.limit_pct for m in gemm.modes] == [80.0, 100.0]
    # A dtype with counted FLOPs but no measured rate: the compute floor is unknown, so no figure.
    monkeypatch.setattr(roofline, "flop_ceiling_tflops", lambda dtypes: {})
    unknown = gemm.model_copy(update={"modes": [ModeResult(mode="default", median_us=200.0)]})
    one_problem._limits(unknown)
    assert unknown.modes[0].limit_pct is None


def test_flops_are_counted_on_meta_tensors_per_rate_with_torchs_formulas():
    import torch
    from torch.utils.flop_counter import FlopCounterMode

    from pytest_kernelopt.measure.roofline import floor_seconds, min_flops

    class Block(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.linear = torch.nn.Linear(64, 32)
            self.conv = torch.nn.Conv2d(3, 8, 3)

        def forward(self, x, image, a, b):
            half = torch.bmm(a.half(), b.half())
            return torch.relu(self.linear(x)).sum(), self.conv(image).mean(), half.float().sum()

    model = Block()
    inputs = [torch.randn(16, 64), torch.randn(2, 3, 10, 10), torch.randn(2, 4, 8), torch.randn(2, 8, 5)]
    with FlopCounterMode(display=False) as counter:
        model.conv(inputs[1])
    linear, conv, bmm = 2 * 16 * 64 * 32, counter.get_total_flops(), 2 * 2 * 4 * 8 * 5
    saved = torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32
    try:
        # torch's defaults: float32 convolutions on TF32, float32 matrix products not
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = True, False
        flops = min_flops(model, inputs)
        assert flops == {"float32": linear, "tf32": conv, "float16": bmm}
        # set_float32_matmul_precision("high") and cuDNN's TF32 off
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = False, True
        assert min_flops(model, inputs) == {"tf32": linear, "float32": conv, "float16": bmm}
    finally:
        torch.backends.cudnn.allow_tf32, torch.backends.cuda.matmul.allow_tf32 = saved
    assert model.linear.weight.device.type == "cpu" and not model.linear.weight.is_meta  # the model is untouched

    class Rebinding(torch.nn.Module):  # KernelBench's LSTMs keep h0 as a plain attribute and move it in forward
        def __init__(self):
            super().__init__()
            self.h0 = torch.randn(2, 3)
            self.linear = torch.nn.Linear(3, 3)

        def forward(self, x):
            self.h0 = self.h0.to(x.device)
            return self.linear(x + self.h0)

    rebinding = Rebinding()
    h0 = rebinding.h0
    assert min_flops(rebinding, [torch.randn(2, 3)]) == {"float32": 2 * 2 * 3 * 3}
    assert rebinding.h0 is h0  # not the meta tensor its forward bound on the meta run
    rebinding(torch.randn(2, 3))  # and the model still runs

    class Pointwise(torch.nn.Module):
        def forward(self, x):
            return x * 2

    class NeedsData(torch.nn.Module):
        def forward(self, x):
            return x * float(x.sum().item())

    assert min_flops(Pointwise(), [torch.randn(4)]) == {}
    assert min_flops(NeedsData(), [torch.randn(4)]) is None  # not countable: no FLOP floor, never an error
    assert floor_seconds(4_000, 4.0, {"float32": 10**12}, {"float32": 100.0}) == pytest.approx(0.01)
    assert floor_seconds(4_000_000_000, 4.0, {"float32": 10**9}, {"float32": 100.0}) == pytest.approx(1.0)


def test_tf32_is_read_from_the_new_api_where_torch_refuses_the_legacy_flag():
    # In a fresh Python: once torch's new TF32 API is set, reading the legacy flag raises (and
    # the suite's own process must not mix the two).
    code = ("import torch\nfrom pytest_kernelopt.measure.roofline import tf32_allowed\n"
            "if not hasattr(torch.backends.cuda.matmul, 'fp32_precision'):\n    print('old torch'); raise SystemExit\n"
            "torch.backends.cuda.matmul.fp32_precision = 'tf32'\ntorch.backends.cudnn.conv.fp32_precision = 'ieee'\n"
            "print(tf32_allowed(False), tf32_allowed(True))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.split() in (["True", "False"], ["old", "torch"]), done.stderr


def test_a_ceiling_the_child_cannot_measure_is_left_out(tmp_path):
    # The real measuring child (a fresh Python: the caller's TF32 settings untouched) on a machine
    # without CUDA fails; no figure, never an error, nothing cached.
    import torch

    from pytest_kernelopt.measure.roofline import flop_ceiling_tflops

    if torch.cuda.is_available():
        pytest.skip("measures for real on a GPU")
    cache = tmp_path / "ceilings.json"
    assert flop_ceiling_tflops(["tf32"], cache=cache) == {}
    assert not cache.exists()


def test_a_training_steps_flops_count_its_backward_to_the_inputs_and_parameters_it_differentiates():
    import torch

    from pytest_kernelopt.measure.roofline import min_flops

    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 32))
    x = torch.randn(16, 64)
    first, second = 2 * 16 * 64 * 128, 2 * 16 * 128 * 32  # each layer's forward product
    assert min_flops(model, [x]) == {"float32": first + second}
    # Backward: each weight's gradient (as many FLOPs as its forward) and each layer's input gradient...
    assert min_flops(model, [x], [0]) == {"float32": 3 * (first + second)}
    # ...but not the first layer's, when the step wants no gradient of the input.
    assert min_flops(model, [x], []) == {"float32": 3 * (first + second) - first}
    model[0].weight.requires_grad_(False)  # a frozen weight: no gradient of it
    assert min_flops(model, [x], []) == {"float32": 3 * (first + second) - 2 * first}
    assert all(p.grad is None and not p.is_meta for p in model.parameters())  # the model is untouched


def test_attention_is_counted_at_its_own_dtype_and_causal_pairs_not_as_the_float32_math_fallback():
    import torch
    import torch.nn.functional as F

    from pytest_kernelopt.measure.roofline import _attention_flops, min_flops

    class Attention(torch.nn.Module):
        def __init__(self, causal: bool):
            super().__init__()
            self.causal = causal

        def forward(self, q, k, v):
            return F.scaled_dot_product_attention(q, k, v, is_causal=self.causal)

    q = torch.randn(2, 4, 16, 8, dtype=torch.bfloat16)
    kv = torch.randn(2, 4, 16, 8, dtype=torch.bfloat16)
    full = 2 * 2 * 4 * 16 * 16 * (8 + 8)  # query by key, weights by value, over every pair
    assert min_flops(Attention(False), [q, kv, kv]) == {"bfloat16": full}
    causal = 2 * 2 * 4 * (16 * 17 // 2) * (8 + 8)  # query i attends the first i + 1 keys
    assert min_flops(Attention(True), [q, kv, kv]) == {"bfloat16": causal}
    assert min_flops(Attention(True), [q, kv, kv], [0, 1, 2]) == {"bfloat16": 3 * causal}  # + dV, dP, dQ, dK
    # More queries than keys: those past the last key attend every key; the same as counting pair by pair.
    for queries, keys in ((5, 3), (3, 5), (7, 7)):
        by_pair = sum(min(i + 1, keys) for i in range(queries))
        assert _attention_flops((1, 1, queries, 4), (1, 1, keys, 4), (1, 1, keys, 4), True, False) == 2 * by_pair * 8


def test_flop_ceilings_are_measured_once_per_machine_and_rate_then_read_from_the_cache(tmp_path):
    from pytest_kernelopt.measure.roofline import flop_ceiling_tflops

    cache = tmp_path / "ceilings.json"
    measured: list[str] = []

    def measure(dtype: str) -> float:
        measured.append(dtype)
        if dtype == "float64":
            raise RuntimeError("no such product here")
        return {"float32": 51.23, "bfloat16": 790.0, "tf32": 370.04}[dtype]

    first = flop_ceiling_tflops(["float32", "bfloat16", "int64", "float64", "tf32"], measure, cache)
    assert first == {"float32": 51.2, "bfloat16": 790.0, "tf32": 370.0}  # int64: not floating; float64 failed
    assert measured == ["float32", "bfloat16", "float64", "tf32"]
    again = flop_ceiling_tflops(["bfloat16", "float32", "tf32"], measure, cache)
    assert again == {"bfloat16": 790.0, "float32": 51.2, "tf32": 370.0} and len(measured) == 4
    cache.write_text("{not json")
    assert flop_ceiling_tflops(["float32"], measure, cache) == {"float32": 51.2}  # a broken cache: measured again
    assert measured[-1] == "float32"


def test_progress_and_settings_go_to_stderr(bench):
    result, _ = bench

    assert "settings:" in result.stderr and "--kernels-dir" in result.stderr
    assert "broken_matmul: error:" in result.stderr
    assert "settings:" not in result.stdout


def test_a_crashing_problem_alone_is_an_error_row_and_exit_2(kernelopt, tmp_path):
    crash = tmp_path / "crash_at_import.py"
    crash.write_text(CRASH)
    out = tmp_path / "bench.json"
    result = kernelopt("bench", crash, "--modes", "default", "--device", "cpu", "--json", out)

    assert result.returncode == 2
    (problem,) = json.loads(out.read_text())["problems"]
    assert problem["status"] == "error"
    assert "the benchmark process died (exit code 3) while loading the problem" in problem["error"]


@pytest.mark.parametrize("modes, says", [
    ("eager,bogus", "unknown mode 'bogus'"),
    ("eager,kernelopt", "must include default"),
    ("default,default", "named twice"),
    ("default,", "comma-separated list"),
])
def test_bad_modes_are_one_error_line_and_exit_2(kernelopt, modes, says):
    result = kernelopt("bench", ELEMENTWISE, "--modes", modes, "--device", "cpu")

    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("kernelopt: error:") and says in lines[0]


def test_missing_problem_file_is_exit_2_before_any_work(kernelopt, tmp_path):
    result = kernelopt("bench", tmp_path / "nope.py", "--device", "cpu")

    assert result.returncode == 2
    assert result.stderr.strip() == f"kernelopt: error: {tmp_path / 'nope.py'}: no such file"


# --- statistics of N interleaved modes ---------------------------------------------------

def interleaved(ratios: dict[str, float], rounds: int = 80, noise: float = 0.03, drift: float = 0.2,
                seed: int = 0) -> dict[str, list[float]]:
    """Timings (ms) per mode, round by round: mode ``m`` takes ``ratios[m]`` times as long as 2 ms.

    ``drift`` is shared by every mode of a round (the machine's state), which the
    paired ratios cancel; ``noise`` is independent per timing.
    """
    rng = random.Random(seed)
    times: dict[str, list[float]] = {m: [] for m in ratios}
    for _ in range(rounds):
        shared = math.exp(rng.gauss(0, drift))
        for mode, ratio in ratios.items():
            times[mode].append(2.0 * ratio * shared * math.exp(rng.gauss(0, noise)))
    return times


def test_each_modes_interval_covers_its_true_speedup_in_95_percent_of_runs():
    from pytest_kernelopt.measure.stats import mode_estimates

    true_time = {"default": 1.0, "eager": 1.25, "max-autotune": 0.8, "kernelopt": 0.95}
    runs = 400
    covered = {mode: 0 for mode in true_time}
    for seed in range(runs):
        est = mode_estimates(interleaved(true_time, seed=seed), "default")
        for mode, ratio in true_time.items():
            speedup = est[mode].vs_baseline
            covered[mode] += speedup.ci_low <= 1 / ratio <= speedup.ci_high
            assert (speedup.ci_high - speedup.ci_low) / speedup.speedup < 0.05, mode  # pairing removes the 20% drift
            assert speedup.pairs == est[mode].samples == 80

    assert covered["default"] == runs  # [1, 1]
    for mode in ("eager", "max-autotune", "kernelopt"):
        # 95% nominal (order statistics of 80 pairs: 96.5% exact); 400 runs put 93% 3 sd below that.
        assert covered[mode] / runs >= 0.93, (mode, covered[mode])


def test_speedups_beyond_noise_have_intervals_apart_from_one():
    from pytest_kernelopt.measure.stats import mode_estimates

    est = mode_estimates(interleaved({"default": 1.0, "eager": 1.25, "max-autotune": 0.8}), "default")

    assert est["max-autotune"].vs_baseline.ci_low > 1.0 > est["eager"].vs_baseline.ci_high


def test_identical_modes_have_an_interval_around_one():
    from pytest_kernelopt.measure.stats import mode_estimates

    est = mode_estimates(interleaved({"default": 1.0, "a": 1.0, "b": 1.0}, seed=3), "default")

    for mode in ("a", "b"):
        assert est[mode].vs_baseline.ci_low <= 1.0 <= est[mode].vs_baseline.ci_high
        assert est[mode].vs_baseline.speedup == pytest.approx(1.0, abs=0.02)


def test_the_baseline_against_itself_is_exactly_one():
    from pytest_kernelopt.measure.stats import mode_estimates

    est = mode_estimates(interleaved({"default": 1.0, "other": 0.5}), "default")["default"]

    assert (est.vs_baseline.speedup, est.vs_baseline.ci_low, est.vs_baseline.ci_high) == (1.0, 1.0, 1.0)


def test_mode_medians_and_intervals_are_in_milliseconds():
    from statistics import median

    from pytest_kernelopt.measure.stats import median_ci, mode_estimates

    times = interleaved({"default": 1.0, "slow": 3.0}, rounds=41)
    est = mode_estimates(times, "default")

    assert est["slow"].median_ms == median(times["slow"])
    assert (est["slow"].ci_low_ms, est["slow"].ci_high_ms) == median_ci(times["slow"])[1:]
    assert est["slow"].ci_low_ms <= est["slow"].median_ms <= est["slow"].ci_high_ms


def test_mode_estimates_need_the_baseline():
    from pytest_kernelopt.measure.stats import mode_estimates

    with pytest.raises(ValueError):
        mode_estimates({"eager": [1.0, 2.0]}, "default")


def test_geomean():
    from pytest_kernelopt.measure.stats import geomean

    assert geomean([2.0, 0.5]) == pytest.approx(1.0)
    assert geomean([1.55, 1.38, 1.0]) == pytest.approx((1.55 * 1.38) ** (1 / 3))
    for bad in ([], [1.0, 0.0], [1.0, -2.0]):
        with pytest.raises(ValueError):
            geomean(bad)


@pytest.mark.parametrize("steps", [1, 2, 3, 4])
def test_round_robin_puts_every_mode_in_every_position(steps):
    from pytest_kernelopt.measure.timing import round_order

    orders = [round_order(i, steps) for i in range(steps)]

    assert all(sorted(order) == list(range(steps)) for order in orders)  # each mode once per round
    for position in range(steps):
        assert sorted(order[position] for order in orders) == list(range(steps))
    if steps == 2:
        assert orders == [[0, 1], [1, 0]]  # the verifier's A B, B A


def test_geomeans_skip_default_errors_and_untimed_problems():
    from pytest_kernelopt.benchmark import ModeResult, ProblemResult, geomeans

    def problem(status: str, measured: bool, eager: float | None, kernelopt: float) -> ProblemResult:
        return ProblemResult(problem="p.py", model="p", status=status, speed_measured=measured, modes=[
            ModeResult(mode="eager", speedup=eager), ModeResult(mode="default", speedup=1.0),
            ModeResult(mode="kernelopt", speedup=kernelopt)])

    result = geomeans([problem("ok", True, 0.5, 1.2), problem("ok", True, None, 1.0 / 1.2 * 1.5),
                       problem("error", True, 4.0, 9.0), problem("ok", False, 4.0, 9.0)],
                      ["eager", "default", "kernelopt"])

    assert [(g.mode, g.problems) for g in result] == [("eager", 1), ("kernelopt", 2)]
    assert result[0].speedup == pytest.approx(0.5)
    assert result[1].speedup == pytest.approx(math.sqrt(1.5))


def test_timed_modes_are_recorded_judged_and_tabled():
    """The GPU path's bookkeeping, fed synthetic interleaved timings: figures, the speed policy's word, geomeans."""
    import io

    from rich.console import Console

    from pytest_kernelopt.benchmark import (BenchResult, BenchSettings, ModeResult, ProblemResult, bench_table,
                                            geomeans, record_timings)
    from pytest_kernelopt.measure.stats import mode_estimates

    modes = ["eager", "default", "max-autotune-no-cudagraphs", "kernelopt"]
    problems = []
    for name, base_ms in (("big", 0.2), ("tiny", 0.005)):  # 200 us, and 5 us: under the policy's 20 us floor
        times = interleaved({"eager": 1.3, "default": 1.0, "max-autotune-no-cudagraphs": 0.8, "kernelopt": 1.0})
        problem = ProblemResult(problem=f"{name}.py", model=name, method="cuda-graph",
                                modes=[ModeResult(mode=m) for m in modes])  # type: ignore[arg-type]
        record_timings(problem, mode_estimates({m: [t * base_ms / 2.0 for t in ts] for m, ts in times.items()},
                                               "default"))
        problems.append(problem)
    big = {m.mode: m for m in problems[0].modes}

    assert problems[0].speed_measured and problems[0].rounds == 80
    assert big["default"].median_us == pytest.approx(200, rel=0.05)
    assert big["default"].speedup == 1.0 and big["default"].vs_default is None
    assert big["eager"].vs_default == "slower" and big["eager"].speedup == pytest.approx(1 / 1.3, rel=0.02)
    assert big["max-autotune-no-cudagraphs"].vs_default == "faster"
    assert big["kernelopt"].vs_default == "within noise"
    assert {m.vs_default for m in problems[1].modes if m.mode != "default"} == {"too short to judge"}

    result = BenchResult(created="2026-12-01T00:00:00Z", speed_measured=True, problems=problems,
                         settings=BenchSettings(modes=modes, device="cuda", seconds=3.0, timeout=None),  # type: ignore[arg-type]
                         geomeans=geomeans(problems, modes))
    assert [(g.mode, g.problems) for g in result.geomeans] == [
        ("eager", 2), ("max-autotune-no-cudagraphs", 2), ("kernelopt", 2)]
    assert BenchResult.model_validate_json(result.model_dump_json()) == result
    console = Console(file=io.StringIO(), width=250)
    console.print(bench_table(result))
    text = console.file.getvalue()
    assert "geomean" in text and "over 2 problem(s)" in text and "cuda-graph timing, 80 rounds" in text
    assert f"{result.geomeans[1].speedup:.3f}x" in text


def test_ceilings_are_the_median_of_the_timed_calls_after_the_warm_up(monkeypatch):
    """Both ceilings (copy, matrix product) time their operation this one way (no GPU here: fake events)."""
    import torch

    from pytest_kernelopt.measure.roofline import median_event_seconds

    elapsed_ms = iter([3.0, 1.0, 2.0])  # read for the timed calls only, never for the warm-up

    class Event:
        def __init__(self, enable_timing: bool) -> None:
            assert enable_timing

        def record(self) -> None:
            pass

        def synchronize(self) -> None:
            pass

        def elapsed_time(self, end: Event) -> float:
            return next(elapsed_ms)

    calls = []
    monkeypatch.setattr(torch.cuda, "Event", Event)
    assert median_event_seconds(lambda: calls.append(1), runs=3, warmup=3) == pytest.approx(0.002)
    assert len(calls) == 6


def test_the_kernelopt_row_says_where_its_speed_comes_from():
    """Issue 41 item 5: a stored compile setting is named as the source of the row's speed, not "same as default"."""
    from types import SimpleNamespace

    from pytest_kernelopt.benchmark.one_problem import _kernels_note

    def kernel(runs, version=None, reason=None):
        return SimpleNamespace(name="triton_per_fused_0", runs=runs, version=version, reason=reason, folder=None)

    def note(settings, kernels):
        return _kernels_note(SimpleNamespace(model="m", kernels=kernels, settings_applied=settings), [])

    assert note(["looped-reductions"], [kernel("compiler")]) == (
        0, "speed from compile setting looped-reductions from model.json (no committed kernels in use)")
    count, text = note(["looped-reductions", None], [kernel("committed", 2)])
    assert count == 1 and text.startswith("speed from compile setting looped-reductions from model.json; 1 of 1")
    assert "triton_per_fused_0 v2" in text
    assert note([None], [kernel("compiler")])[1].startswith("same as default: no compile setting")
    assert "compiler's kernel kept for triton_per_fused_0: stale" in note([None], [kernel("compiler", 1, "stale")])[1]
    # The setting's recorded launch configurations (compile.launch_configs): how many kernels ran them.
    fixed = SimpleNamespace(model="m", kernels=[kernel("compiler")], settings_applied=["max-autotune"],
                            launches_fixed=3, launches_refused=["triton_red_fused_1: XBLOCK=3 is not a power of two"])
    assert _kernels_note(fixed, [])[1].startswith("speed from compile setting max-autotune from model.json (3 kernel(s) "
                                                  "at its recorded launch configurations, 1 refused)")


def test_a_stray_overlong_protocol_line_is_dropped_as_it_comes(monkeypatch, tmp_path):
    """A write to the protocol's descriptor without a newline is never held whole (it was: every byte)."""
    import sys
    import tracemalloc

    from pytest_kernelopt.benchmark import run
    from pytest_kernelopt.benchmark.records import BenchJob, ChildMessage, ProblemResult

    done = ChildMessage(event="result", result=ProblemResult(problem="p.py", model="p", status="ok")).model_dump_json()
    code = ("import os, sys\nfor _ in range(128): os.write(1, b'x' * 65536)\n"
            f"os.write(1, b'\\n' + {done!r}.encode() + b'\\n')")
    monkeypatch.setattr(run, "module_command", lambda *args: (sys.executable, "-c", code))
    monkeypatch.setattr(run, "MESSAGE_BYTES", 256 * 1024)
    job = BenchJob(problem="p.py", modes=["default"], device="cpu", kernels_dir=str(tmp_path), seconds=1.0)
    tracemalloc.start()
    try:
        result = run.run_problem(job, 60, lambda text: None)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert result.status == "ok" and result.model == "p"
    assert peak < 2 << 20, f"the parent held {peak} bytes of an 8 MiB stray line"


def test_the_memory_floor_is_a_copy_for_a_copy_and_a_read_for_a_reduction():
    from pytest_kernelopt.measure.roofline import limit_pct, memory_seconds

    copy, read = 4000.0, 4800.0
    gib = 1 << 30
    # As many bytes written as read: exactly the copy's time, whatever the read ceiling.
    assert memory_seconds(2 * gib, copy, gib, read) == pytest.approx(2 * gib / (copy * 1e9))
    # Nothing written: the read ceiling's time; a reduction at the read ceiling is at 100%, no more.
    assert memory_seconds(gib, copy, 0, read) == pytest.approx(gib / (read * 1e9))
    assert limit_pct(gib, gib / (read * 1e9), copy, written=0, read_gbps=read) == pytest.approx(100.0)
    # Read-mostly work streaming faster than a copy was over 100% of a copy-only floor.
    assert limit_pct(gib, gib / (read * 1e9), copy) > 100.0
    # No read figure: every byte at the copy bandwidth, as before.
    assert memory_seconds(3 * gib, copy, gib, None) == pytest.approx(3 * gib / (copy * 1e9))
    # A read figure below the copy's (a slow read kernel) never makes a byte cheaper than a copy's.
    assert memory_seconds(gib, copy, 0, 1000.0) == pytest.approx(gib / (copy * 1e9))
    # Writes cost more than reads once reads stream faster, and a floor is never negative.
    assert memory_seconds(gib, copy, gib, read) > memory_seconds(gib, copy, 0, read) > 0


def test_the_read_ceiling_kernel_reads_every_element():
    import torch

    from pytest_kernelopt.measure import read_kernel

    for shape in read_kernel.SHAPES:
        n = 3 * shape[0] * shape[1] + 123  # a ragged last program
        src = torch.arange(n, dtype=torch.float32) % 7
        partial = torch.zeros(read_kernel.programs(n, shape), dtype=torch.float32)
        read_kernel.launch(src, partial, shape)
        assert partial.sum().item() == src.sum().item()


def test_each_mode_races_its_launch_configurations_itself(monkeypatch, tmp_path):
    """A launch configuration Inductor remembered on this machine (its local autotune cache: a tune's harvest
    children, racing side by side, write there) is read by no mode: every mode's compile and first call run
    with the remembered pick unread, and Inductor's own reading is back afterwards."""
    from torch._inductor.runtime.autotune_cache import AutotuneCache

    from pytest_kernelopt.benchmark import one_problem
    from pytest_kernelopt.benchmark.records import BenchJob

    remembered = lambda self, inductor_meta, configs: configs[0]  # noqa: E731
    monkeypatch.setattr(AutotuneCache, "read_best", remembered)
    seen: dict[str, list[object]] = {}

    def build(mode, model, model_id, kernels_dir):
        def first_call(*inputs):
            seen.setdefault(mode, []).append(AutotuneCache.read_best(object.__new__(AutotuneCache), {}, ["a", "b"]))
            return model(*inputs)
        return first_call, None

    monkeypatch.setattr(one_problem, "_build", build)
    problem = tmp_path / "relu_affine.py"
    problem.write_text(NOTHING_COMMITTED)
    job = BenchJob(problem=str(problem), modes=["eager", "default"], device="cpu", kernels_dir=str(tmp_path / "k"),
                   seconds=0.1)
    result = one_problem.bench_problem(job, lambda where: None)
    assert {m.mode: m.error for m in result.modes} == {"eager": None, "default": None}
    assert seen == {"eager": [None], "default": [None]}
    assert AutotuneCache.read_best is remembered


def test_bench_says_when_the_default_compiles_own_error_is_a_large_part_of_an_outputs_scale():
    """Every mode is judged within the default compile's own error envelope; where that error is a large part of an
    output's scale (49% of an embedding gradient's, from an interpreter fault, 2026-12-06) large errors pass, and
    bench says so beside the problem instead of an unqualified "ok"."""
    import io

    import torch
    from rich.console import Console

    from pytest_kernelopt.benchmark import BenchResult, BenchSettings, ModeResult, ProblemResult, bench_table
    from pytest_kernelopt.benchmark.one_problem import BASELINE_SUSPECT, _suspect_baseline
    from pytest_kernelopt.verify.model import OutputReference

    def ref(err: float, scale: float, floating: bool = True) -> OutputReference:
        return OutputReference(shape=(4,), dtype=torch.float32, floating=floating, baseline_err=err, scale=scale)

    names = ["output 0", "gradient of parameter emb.weight", "output 2"]
    assert _suspect_baseline([ref(1e-6, 30.0), ref(1e-3, 0.4), ref(0.0, 0.0)], names) is None
    assert _suspect_baseline([ref(1e-6, 30.0), ref(BASELINE_SUSPECT * 0.4 * 0.99, 0.4)], names) is None
    note = _suspect_baseline([ref(1e-6, 30.0), ref(0.19, 0.387), ref(5.0, 1.0, floating=False)], names)
    assert note is not None and "gradient of parameter emb.weight is 49% of its scale" in note
    problem = ProblemResult(problem="m.py", model="m", baseline_note=note, reference="float64",
                            modes=[ModeResult(mode="default", correct=True, relative_error=6.3e-3)])
    result = BenchResult(created="2026-12-06T00:00:00Z", speed_measured=False, problems=[problem],
                         settings=BenchSettings(modes=["default"], device="cpu", seconds=3.0, timeout=None))
    assert BenchResult.model_validate_json(result.model_dump_json()) == result
    console = Console(file=io.StringIO(), width=400)
    console.print(bench_table(result))
    assert "49% of its scale" in console.file.getvalue()


def test_tune_bench_gpu_lets_each_tune_end_by_its_own_budget(tmp_path, monkeypatch, capsys):
    """bench/tune_bench_gpu.py gives each tune --run-budget-s at 80% of --timeout (a tune stopped by the limit
    keeps no compile setting), unless --tune-args names one."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("tune_bench_gpu", Path(__file__).parents[1] / "bench" / "tune_bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    commands = []

    kernels = [{"kernel": "triton_poi_a", "stored_version": 1, "best_kernel_timing": {"speedup": 1.25},
                "profile": {"bottleneck": "memory", "share": 0.3, "roofline_pct": 70.0}},
               {"kernel": "triton_red_b", "profile": {"bottleneck": "memory", "share": 0.2, "roofline_pct": 104.0}},
               {"kernel": "triton_red_c", "profile": {"bottleneck": "memory", "share": 0.1, "roofline_pct": 300.0}},
               {"kernel": "triton_per_d", "profile": {"bottleneck": "launch", "share": 0.1, "roofline_pct": 5.0}}]

    def run(cmd, log, timeout):
        commands.append(cmd)
        compile = {"chosen": None, "tried": [{"variant": "max-autotune-nd-tiling", "status": "correct", "speedup": 1.03,
                                              "second_speedup": 1.001, "reason": "not confirmed on a second compile"}]}
        return 0, 0.0, json.dumps({"problems": [{"kernels": kernels, "compile": compile}] if "tune" in cmd else []})

    monkeypatch.setattr(module, "_run", run)
    for extra, budget in (([], "92"), (["--tune-args", "--run-budget-s 40"], "40")):
        commands.clear()
        monkeypatch.setattr(sys, "argv", ["tune_bench_gpu.py", str(tmp_path / "out"), "p.py", "--timeout", "115", *extra])
        assert module.main() == 0
        tune = commands[0]
        assert tune[tune.index("tune") + 1] == "p.py" and tune.count("--run-budget-s") == 1
        assert tune[tune.index("--run-budget-s") + 1] == budget
    # The memory-bound kernels' mean distance to the limit, as the planner reads it (104% at the limit, 300% an
    # overcount left out), the compiler's and with the stored version (70% x 1.25).
    assert "memory-bound kernels profiled: 2, mean % of the memory limit 85.0 (compiler's) -> 93.8" in \
        capsys.readouterr().out
    # Why a setting faster on its trial was not chosen, in the row.
    (row,) = json.loads((tmp_path / "out" / "rows.json").read_text())
    assert row["compiles"]["null"]["trials"]["max-autotune-nd-tiling"] == {
        "status": "correct", "second": 1.001, "reason": "not confirmed on a second compile"}


def test_tune_bench_gpu_benches_each_problem_after_its_tune_within_the_deadline(tmp_path, monkeypatch):
    """One at a time, a problem's bench follows its tune (a device call's deadline then costs only the problems not
    reached: on an H100 a third tune, cut by the call's end, left its bench no time); each tune's limit keeps a
    bench's time before the deadline, and a problem with too little left is neither tuned nor benched."""
    import importlib.util
    from pathlib import Path

    spec = importlib.util.spec_from_file_location("tune_bench_gpu", Path(__file__).parents[1] / "bench" / "tune_bench_gpu.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    now = [0.0]
    monkeypatch.setattr(module.time, "monotonic", lambda: now[0])
    calls: list[tuple[str, str, float]] = []

    def run(cmd, log, timeout):
        calls.append((cmd[cmd.index("-m") + 2], cmd[cmd.index("-m") + 3], timeout))
        now[0] += 100.0  # every tune and bench takes 100 s of the call
        return 0, 100.0, json.dumps({"problems": []})

    monkeypatch.setattr(module, "_run", run)
    monkeypatch.setattr(sys, "argv", ["tune_bench_gpu.py", str(tmp_path / "out"), "a.py", "b.py", "c.py",
                                      "--timeout", "200", "--deadline-s", "440"])
    assert module.main() == 0
    # a: its whole 200 s, then benched; b: at 200 s, 240 left, its tune cut to 180 to keep 60 for its bench, which
    # gets the 140 then left; c: at 400 s, 40 left: neither tuned nor benched.
    assert calls == [("tune", "a.py", 200.0), ("bench", "a.py", 200.0), ("tune", "b.py", 180.0),
                     ("bench", "b.py", 140.0)]
    rows = json.loads((tmp_path / "out" / "rows.json").read_text())
    assert [r["problem"] for r in rows] == ["a", "b", "c"] and rows[2]["bench_error"] == "not benched: deadline"
    # Every record and log in one archive (a device call brings back a limited number of files).
    import tarfile

    with tarfile.open(tmp_path / "out" / "logs.tgz") as tar:
        assert {"rows.json", "a.tune.json", "b.bench.txt"} <= set(tar.getnames()), tar.getnames()
