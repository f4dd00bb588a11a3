"""The agents: launch space, harvest matching, planner, profiler, reviewer, search coder, trace, the loop.

The loop runs here against a scripted Benchmarker (no compile, no worker), so its
decisions (budgets, what is stored, confirmation, Ctrl-C) are checked exactly;
``test_tune_cli_interpreter`` runs the real thing once, end to end, in interpreter mode.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

import pytest

import forkserver
from pydantic import BaseModel, Field

from pytest_kernelopt.agents import TuneOptions, Tuner
from pytest_kernelopt.agents.coder import Backend
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.measure.rule import SpeedPolicy
from pytest_kernelopt.agents.harvest import Harvested, HarvestResult, layout, matches, stem
from pytest_kernelopt.candidate.launch_space import Limits, describe, neighbours, read_point, with_point
from pytest_kernelopt.agents.planner import limit_pct, plan
from pytest_kernelopt.agents.profiler import build_profile, bytes_moved, classify, parse_ncu_csv, swap_bound
from pytest_kernelopt.runs.records import Attempt, CoderContext, ModelProfile, KernelProfile, Proposal, RunRecord
from pytest_kernelopt.agents.reviewer import review
from pytest_kernelopt.agents.search import SearchCoder
from pytest_kernelopt.candidate.rewrites import approximate_divisions, drop_eviction_hints
from pytest_kernelopt.runs.trace import RunDir, load_run
from pytest_kernelopt.records import (ArgInfo, Environment, KernelInfo, LaunchConfig, SeedErrors, StageResult, Timing,
                                      Verdict)
from pytest_kernelopt.verify.protocol import KernelTime, Profiled

ROOT = Path(__file__).resolve().parent.parent

KERNEL_SRC = '''"""kernelopt candidate: `triton_red_fused_sum_0` of model `m`."""
import triton
import triton.language as tl


@triton.jit
def triton_red_fused_sum_0(in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK : tl.constexpr, R0_BLOCK : tl.constexpr):
    xoffset = tl.program_id(0) * XBLOCK
    xindex = xoffset + tl.arange(0, XBLOCK)[:, None]
    xmask = xindex < xnumel
    r0_base = tl.arange(0, R0_BLOCK)[None, :]
    acc = tl.full([XBLOCK, R0_BLOCK], 0, tl.float32)
    for r0_offset in range(0, r0_numel, R0_BLOCK):
        r0_index = r0_offset + r0_base
        r0_mask = r0_index < r0_numel
        tmp0 = tl.load(in_ptr0 + (r0_index + r0_numel * xindex), r0_mask & xmask, eviction_policy='evict_first', other=0.0)
        acc = acc + tmp0
    tmp1 = tl.sum(acc, 1)[:, None]
    tl.store(out_ptr0 + (xindex), tmp1, xmask)


def run(in_ptr0, out_ptr0, xnumel, r0_numel, *, stream=None):
    """Launch."""
    XBLOCK = 8
    R0_BLOCK = 128
    grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)
    triton_red_fused_sum_0[grid](in_ptr0, out_ptr0, xnumel, r0_numel, XBLOCK=XBLOCK, R0_BLOCK=R0_BLOCK, num_warps=4, num_stages=1)
'''


def _info(xnumel: int = 64, r0_numel: int = 1000, name: str = "triton_red_fused_sum_0", source: str = KERNEL_SRC) -> KernelInfo:
    return KernelInfo(
        name=name, function=name, graph=0, fingerprint="f" * 16, source=source, launch=LaunchConfig(),
        args=[ArgInfo(name="in_ptr0", kind="tensor", read=True, shape=[xnumel, r0_numel], dtype="float32"),
              ArgInfo(name="out_ptr0", kind="tensor", written=True, shape=[xnumel], dtype="float32"),
              ArgInfo(name="xnumel", kind="int", value=xnumel), ArgInfo(name="r0_numel", kind="int", value=r0_numel)])


# --- launch space ------------------------------------------------------------------------

def test_read_and_write_a_launch_point_touch_only_those_literals():
    point = read_point(KERNEL_SRC)
    assert point == {"XBLOCK": 8, "R0_BLOCK": 128, "num_warps": 4, "num_stages": 1}
    changed = with_point(KERNEL_SRC, {"XBLOCK": 16, "num_warps": 8})
    assert read_point(changed) == {"XBLOCK": 16, "R0_BLOCK": 128, "num_warps": 8, "num_stages": 1}
    diff = [(a, b) for a, b in zip(KERNEL_SRC.splitlines(), changed.splitlines()) if a != b]
    assert diff == [("    XBLOCK = 8", "    XBLOCK = 16"),
                    (KERNEL_SRC.splitlines()[-1], KERNEL_SRC.splitlines()[-1].replace("num_warps=4", "num_warps=8"))]


def test_a_grid_block_the_grid_does_not_use_is_not_tunable():
    fixed_grid = KERNEL_SRC.replace("grid = (triton.cdiv(xnumel, XBLOCK), 1, 1)", "grid = (8, 1, 1)")
    assert "XBLOCK" not in read_point(fixed_grid)
    assert "R0_BLOCK" in read_point(fixed_grid)  # a loop's step needs no grid change


def test_neighbours_respect_extents_masks_and_tile_size():
    info = _info(xnumel=8, r0_numel=100)
    point = read_point(KERNEL_SRC)
    found = [describe(p) for p in neighbours(point, Limits(info, KERNEL_SRC))]
    assert "R0_BLOCK=128,XBLOCK=8,num_stages=1,num_warps=8" in found
    assert not any("XBLOCK=16" in f for f in found)  # beyond xnumel=8 rounded up
    assert not any("R0_BLOCK=256" in f for f in found)  # beyond r0_numel=100 rounded up (128)
    assert "R0_BLOCK=64,XBLOCK=8,num_stages=1,num_warps=4" in found
    assert all(p != point for p in neighbours(point, Limits(info, KERNEL_SRC)))
    # No mask for x: the block must divide the extent.
    unmasked = KERNEL_SRC.replace("xmask = xindex < xnumel", "xmask = tl.full([XBLOCK, 1], True, tl.int1)")
    limits = Limits(_info(xnumel=24), unmasked)
    assert not limits.valid({"XBLOCK": 16, "R0_BLOCK": 128, "num_warps": 4, "num_stages": 1})
    assert limits.valid({"XBLOCK": 8, "R0_BLOCK": 128, "num_warps": 4, "num_stages": 1})
    assert not limits.valid({"XBLOCK": 8, "R0_BLOCK": 128, "num_warps": 3, "num_stages": 1})
    # Diagonal steps come after every single step: the tile's shape, or block and warps together.
    wide = neighbours(point, Limits(_info(xnumel=64, r0_numel=1000), KERNEL_SRC))
    described = [describe(p) for p in wide]
    single = [i for i, p in enumerate(wide) if sum(p[k] != point[k] for k in p) == 1]
    assert single == list(range(len(single)))
    assert "R0_BLOCK=64,XBLOCK=16,num_stages=1,num_warps=4" in described
    assert "R0_BLOCK=256,XBLOCK=4,num_stages=1,num_warps=4" in described
    assert "R0_BLOCK=128,XBLOCK=16,num_stages=1,num_warps=8" in described
    assert "R0_BLOCK=64,XBLOCK=8,num_stages=1,num_warps=2" in described
    assert "R0_BLOCK=256,XBLOCK=16,num_stages=1,num_warps=4" not in described  # two steps, same direction
    big = Limits(_info(xnumel=1 << 20, r0_numel=1 << 20), KERNEL_SRC)
    assert not big.valid({"XBLOCK": 1024, "R0_BLOCK": 1024, "num_warps": 4, "num_stages": 1})  # tile too large


# --- harvest ----------------------------------------------------------------------------

def test_a_variant_holding_the_kernel_itself_offers_only_that_one_not_its_siblings():
    """A held-out BERT block (2026-12-07): the query, key and value slices of its fused projection are kernels
    of one job on arguments of one layout, so each matched the others' harvested kernel and was offered it (a
    candidate spent on a certain rejection). A variant holding the kernel itself (its name or fingerprint)
    offers only that; a variant without it still offers what matches."""
    from pytest_kernelopt.agents.harvest import fitting

    base = _info(name="triton_poi_fused_select_0")
    args = [a.name for a in base.args]

    def alt(variant: str, name: str, fingerprint: str) -> Harvested:
        return Harvested(variant=variant, name=name, graph=0, fingerprint=fingerprint, args=args,
                         written=["out_ptr0"], source=KERNEL_SRC, layout=layout(base))

    same = alt("looped-reductions", "triton_poi_fused_select_0", base.fingerprint)
    sibling = alt("looped-reductions", "triton_poi_fused_select_2", "2" * 16)
    renamed = alt("coordinate-descent", "triton_poi_fused_select_1", "c" * 16)
    assert matches(base, sibling)  # alone it looks like this kernel's
    assert fitting(base, [sibling, same, renamed]) == [same, renamed]
    assert fitting(base, [sibling]) == [sibling]  # no variant holds it: what matches is offered
    by_fingerprint = alt("looped-reductions", "other", base.fingerprint)
    assert fitting(base, [sibling, by_fingerprint]) == [by_fingerprint]


def test_harvested_kernels_match_by_fingerprint_or_call_convention():
    base = _info()
    alt = Harvested(variant="looped-reductions", name="triton_per_fused_sum_3", graph=0, fingerprint="x" * 16,
                    args=["in_ptr0", "out_ptr0", "xnumel", "r0_numel"], written=["out_ptr0"], source=KERNEL_SRC)
    assert stem("triton_per_fused_sum_3__g1") == "fused_sum"
    assert matches(base, alt)
    assert not matches(base, alt.model_copy(update={"graph": 1}))
    assert not matches(base, alt.model_copy(update={"written": ["in_ptr0"]}))
    assert not matches(base, alt.model_copy(update={"name": "triton_per_fused_mean_3"}))
    assert matches(base, alt.model_copy(update={"name": "other", "fingerprint": base.fingerprint}))
    # The same name and argument names, compiled for other argument layouts: another job.
    assert matches(base, alt.model_copy(update={"layout": layout(base)}))
    for field, value in (("shape", [8, 64]), ("stride", [1, 8]), ("dtype", "float16")):
        args = [a.model_copy(update={field: value}) if a.kind == "tensor" else a for a in base.args]
        assert not matches(base, alt.model_copy(update={"layout": layout(base.model_copy(update={"args": args}))}))
    args = [a.model_copy(update={"value": 7}) if a.kind == "int" else a for a in base.args]
    assert not matches(base, alt.model_copy(update={"layout": layout(base.model_copy(update={"args": args}))}))


# A harvest child's stand-in (``python -S -c``, no torch): it logs when it runs, then writes the result a
# real child writes for its one variant. "slow" finishes last; "broken" exits 3; "oom" runs out of GPU memory
# the first time (beside the others) and not the second (alone).
FAKE_HARVEST_CHILD = r"""
import json, os, pathlib, sys, time
problem, device, out, variant = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[-1]
folder = pathlib.Path(problem).parent
def log(what):
    with open(folder / "log.txt", "a") as f:
        f.write(f"{what} {variant}-{os.getpid()} {time.monotonic()}\n")
log("start")
pause = 0.6 if variant == "slow" else 0.1
time.sleep(pause)
log("end")
if variant == "broken":
    print("ValueError: this variant's compile broke", file=sys.stderr)
    sys.exit(3)
kernels, errors = [dict(variant=variant, name="triton_per_fused_sum_0", graph=0, fingerprint=variant, args=[],
                        written=[], source="")], {}
if variant == "oom" and not (folder / "oom-once").exists():
    (folder / "oom-once").write_text("")
    kernels, errors = [], {variant: "OutOfMemoryError: CUDA out of memory. Tried to allocate 2.00 GiB"}
pathlib.Path(out).write_text(json.dumps(dict(kernels=kernels, errors=errors, seconds={variant: pause})))
"""


@pytest.fixture
def fake_harvest_child(monkeypatch):
    from pytest_kernelopt import child

    monkeypatch.setattr(child, "module_command", lambda module, *args, site=True: (
        sys.executable, "-S", "-c", FAKE_HARVEST_CHILD, *args))


def test_the_harvest_runs_its_variants_at_once_and_merges_them_in_their_order(fake_harvest_child, tmp_path):
    from pytest_kernelopt.agents.harvest import harvest

    from test_child import _intervals, _most_at_once  # tests/ is on the path (as for forkserver)

    result = harvest(tmp_path / "problem.py", "cpu", ["slow", "broken", "fast", "oom"], timeout=60, jobs=2)
    # The variants' order, though "slow" finished last and "oom" came back from its run alone.
    assert [k.variant for k in result.kernels] == ["slow", "fast", "oom"]
    assert list(result.seconds) == ["slow", "broken", "fast", "oom"] and result.jobs == 2
    # One child failing costs its variant alone, and its error says why.
    assert list(result.errors) == ["broken"]
    assert "exited with 3" in result.errors["broken"] and "this variant's compile broke" in result.errors["broken"]
    # Never more than two children at once, and two at once indeed; "oom" ran twice.
    spans = _intervals(tmp_path / "log.txt")
    assert len(spans) == 5 and _most_at_once(spans) == 2
    assert result.wall_seconds > 0


def test_how_many_harvest_children_run_at_once(monkeypatch):
    from pytest_kernelopt.agents.harvest import harvest_jobs
    from pytest_kernelopt.agents.search.coder import SearchOptions

    for cores, variants, jobs in [(2, 4, 1), (1, 4, 1), (None, 4, 1), (16, 4, 4), (6, 4, 3), (64, 1, 1)]:
        monkeypatch.setattr("os.cpu_count", lambda cores=cores: cores)
        assert harvest_jobs(variants) == jobs, (cores, variants)
    assert harvest_jobs(4, 3) == 3 and harvest_jobs(4, 8) == 4 and harvest_jobs(0) == 1
    # The setting, given to the search backend: `kernelopt tune --harvest-jobs N`.
    from pytest_kernelopt.agents.backends import chosen_options, make_coder

    assert chosen_options("search", {"--harvest-jobs": "2"}) == {"harvest_jobs": 2}
    with pytest.raises(UsageError, match="^--harvest-jobs: input should be greater than or equal to 1"):
        chosen_options("search", {"--harvest-jobs": "0"})
    coder = make_coder("search", harvest_jobs=2)
    assert isinstance(coder, SearchCoder) and coder.harvest_jobs == 2
    assert SearchOptions().harvest_jobs is None


# --- profiler and planner ------------------------------------------------------------------

def test_bytes_moved_counts_reads_and_writes():
    assert bytes_moved(_info(xnumel=64, r0_numel=1000)) == 64 * 1000 * 4 + 64 * 4


def test_classify_by_launch_time_counters_and_roofline():
    assert classify(None, None, {}) == "unknown"
    assert classify(3.0, 90.0, {}) == "launch"
    assert classify(50.0, 80.0, {}) == "memory"
    assert classify(50.0, 20.0, {}) == "occupancy"
    assert classify(50.0, 20.0, {"sm_pct": 80.0, "dram_pct": 30.0}) == "compute"
    assert classify(50.0, 20.0, {"sm_pct": 30.0, "dram_pct": 70.0}) == "memory"


def test_nsight_counters_of_a_function_name_two_graphs_share_are_used_for_neither():
    """ncu names a kernel by its Triton function: two graphs' kernels of one name would get each other's counters
    mixed (a median over both), so neither gets them; a name of one kernel does."""
    a = _info(name="triton_poi_fused_add_0")
    b = _info(name="triton_poi_fused_add_0__g1").model_copy(update={"function": "triton_poi_fused_add_0", "graph": 1})
    c = _info(name="triton_red_fused_sum_1")
    profiled = Profiled(measured=True, model_gpu_us=100.0, copy_gbps=4000.0, kernels={
        k.name: KernelTime(gpu_us=20.0, launches=1) for k in (a, b, c)})
    counters = {"triton_poi_fused_add_0": {"dram_pct": 90.0, "sm_pct": 10.0, "registers": 30.0},
                "triton_red_fused_sum_1": {"dram_pct": 20.0, "sm_pct": 85.0, "registers": 60.0}}
    rows = {k.kernel: k for k in build_profile("m", "cuda", [a, b, c], profiled, counters).kernels}
    for name in (a.name, b.name):
        assert rows[name].source == "roofline" and rows[name].dram_pct is None
        assert "2 kernels of several graphs are named triton_poi_fused_add_0" in rows[name].note
    assert rows[c.name].source == "ncu" and rows[c.name].dram_pct == 20.0 and rows[c.name].registers == 60


def test_nsight_compute_profiles_the_declared_shape_being_tuned(tmp_path, monkeypatch):
    """The ncu child compiles the problem at the shape tune is at (before: always its first shape, so another
    shape's kernels, of the same names, were classified by the first shape's counters)."""
    from pytest_kernelopt.agents import profiler

    fake = tmp_path / "ncu"
    log = tmp_path / "argv.txt"
    fake.write_text(f"#!{sys.executable}\nimport sys\nopen({str(log)!r}, 'w').write(repr(sys.argv[1:]))\n")
    fake.chmod(0o755)
    monkeypatch.setattr(profiler, "ncu_available", lambda: str(fake))
    counters, note = profiler.ncu_counters(tmp_path / "p.py", timeout=60, variant="max-autotune", shape="r8")
    argv = eval(log.read_text())
    assert counters is None and argv[-3:] == [str(tmp_path / "p.py"), "--shape=r8", "max-autotune"]
    profiler.ncu_counters(tmp_path / "p.py", timeout=60)
    assert eval(log.read_text())[-1] == str(tmp_path / "p.py")
    # Under a stored setting with launch configurations: the child is given them (a file it reads), so the
    # counters are of the launches the search's session runs.
    points = {"f" * 64: {"XBLOCK": 8, "num_warps": 4, "num_stages": 1}}
    fake.write_text(f"#!{sys.executable}\nimport sys\nargs = sys.argv[1:]\n"
                    f"flag = [a for a in args if a.startswith('--launch-configs=')]\n"
                    f"text = open(flag[0].split('=', 1)[1]).read() if flag else ''\n"
                    f"open({str(log)!r}, 'w').write(repr((args, text)))\n")
    profiler.ncu_counters(tmp_path / "p.py", timeout=60, variant="max-autotune", launch_configs=points)
    argv, text = eval(log.read_text())
    assert argv[-3] == str(tmp_path / "p.py") and argv[-2].startswith("--launch-configs=")
    assert argv[-1] == "max-autotune" and json.loads(text) == points

    # The child's side: the shape, then the variant, from its arguments (stopped before it compiles).
    import pytest_kernelopt.capture.problem as problem_module
    import pytest_kernelopt.config as config

    seen: list[str | None] = []

    def load(path, shape=None):
        seen.append(shape)
        raise SystemExit(0)

    monkeypatch.setattr(problem_module, "load_problem", load)
    monkeypatch.setattr(config, "resolve_device", lambda device: "cpu")
    for rest, shape in ((["--shape=r8", "max-autotune"], "r8"), (["max-autotune"], None), ([], None)):
        with pytest.raises(SystemExit):
            profiler._ncu_target(str(tmp_path / "p.py"), *rest)
        assert seen.pop() == shape

    # ... and the launch configurations' file, passed on to the compile.
    import pytest_kernelopt.capture as capture

    given: list = []
    monkeypatch.setattr(problem_module, "load_problem", lambda path, shape=None: object())
    monkeypatch.setattr(capture, "compile_problem", lambda p, d, variant=None, launch_configs=None: (
        given.append((variant, launch_configs)), sys.exit(0)))
    saved = tmp_path / "lc.json"
    saved.write_text(json.dumps({"f" * 64: {"XBLOCK": 8}}))
    with pytest.raises(SystemExit):
        profiler._ncu_target(str(tmp_path / "p.py"), "--shape=r8", f"--launch-configs={saved}", "max-autotune")
    with pytest.raises(SystemExit):
        profiler._ncu_target(str(tmp_path / "p.py"), "max-autotune")
    assert given == [("max-autotune", {"f" * 64: {"XBLOCK": 8}}), ("max-autotune", None)]


def test_build_profile_shares_roofline_and_order():
    a, b = _info(name="k_a"), _info(name="k_b", xnumel=640)
    profiled = Profiled(measured=True, model_gpu_us=200.0, copy_gbps=4000.0,
                        kernels={"k_a": KernelTime(gpu_us=20.0, launches=1), "k_b": KernelTime(gpu_us=150.0, launches=1,
                                                                                            registers=40, spills=0)})
    profile = build_profile("m", "cuda", [a, b], profiled, None)
    assert [k.kernel for k in profile.kernels] == ["k_b", "k_a"]
    kb = profile.kernels[0]
    assert kb.share == pytest.approx(0.75) and kb.registers == 40 and kb.source == "roofline"
    assert kb.achieved_gbps == pytest.approx(bytes_moved(b) / 150e-6 / 1e9, rel=1e-3)
    assert profile.triton_share == pytest.approx(0.85)
    cpu = build_profile("m", "cpu", [a, b], Profiled(measured=False), None)
    assert {k.source for k in cpu.kernels} == {"bytes"} and sum(k.share for k in cpu.kernels) == pytest.approx(1.0)
    # The bound: each kernel's share times its distance to the limit, Amdahl over the model.
    left = sum(k.share * (1 - k.roofline_pct / 100) for k in profile.kernels)
    assert profile.swap_bound == pytest.approx(1 / (1 - left), rel=1e-3) and cpu.swap_bound is None


def test_swap_bound_counts_each_kernel_by_its_distance_to_the_limit():
    """A kernel at 80% leaves 20% of its time; 100-125% (L2 hits) nothing; over 125% (the byte count is off)
    or with no estimate, all of it. Without timing there is no bound."""
    def k(name, share, pct, source="roofline"):
        return KernelProfile(kernel=name, source=source, bottleneck="memory", share=share, roofline_pct=pct)

    profile = ModelProfile(model="m", device="cuda", kernels=[
        k("at80", 0.5, 80.0), k("l2", 0.2, 110.0), k("indexed", 0.1, 300.0), k("none", 0.05, None)])
    assert swap_bound(profile) == pytest.approx(1 / (1 - (0.5 * 0.2 + 0.0 + 0.1 + 0.05)), abs=1e-4)
    assert swap_bound(ModelProfile(model="m", device="cuda", kernels=[k("a", 0.3, 100.0)])) == 1.0
    assert swap_bound(ModelProfile(model="m", device="cpu", kernels=[k("a", 1.0, None, "bytes")])) is None
    assert swap_bound(ModelProfile(model="m", device="cuda")) is None


def test_plan_searches_nothing_when_every_kernel_at_its_limit_would_gain_the_model_too_little():
    """A GEMM-bound model whose Triton kernels could make it at most 1.5% faster: no version could clear the
    2% model gain, so none is searched (each still pinned where its pick varies), unless named."""
    def k(name, share, pct):
        return KernelProfile(kernel=name, source="roofline", bottleneck="memory", share=share, roofline_pct=pct)

    kernels = [k("gelu", 0.10, 95.0), k("norm", 0.05, 85.0), k("tiny", 0.01, 50.0)]
    profile = ModelProfile(model="m", device="cuda", triton_share=0.16, kernels=kernels)
    profile.swap_bound = swap_bound(profile)
    assert profile.swap_bound is not None and profile.swap_bound < 1.02
    items = {i.kernel: i for i in plan(profile, min_share=0.02, min_gain=0.02)}
    assert all(i.skip is not None for i in items.values())
    assert "at most 1.0" in items["norm"].skip and "2%" in items["norm"].skip and items["norm"].at_limit
    assert "below the 2% threshold" in items["tiny"].skip and not items["tiny"].at_limit
    named = plan(profile, min_share=0.02, only=["norm"], min_gain=0.02)
    assert [i.kernel for i in named if i.skip is None] == ["norm"]
    assert [i.kernel for i in plan(profile, min_share=0.02, min_gain=0.01) if i.skip is None] == ["norm"]
    assert [i.kernel for i in plan(profile, min_share=0.02) if i.skip is None] == ["norm"]


def test_parse_ncu_csv_takes_medians_per_kernel():
    text = ('==PROF== Connected\n"ID","Kernel Name","Metric Name","Metric Unit","Metric Value"\n'
            '"0","triton_poi_fused_0","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","81.5"\n'
            '"0","triton_poi_fused_0","launch__registers_per_thread","register/thread","24"\n'
            '"1","triton_poi_fused_0","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","85.5"\n'
            '"2","triton_poi_fused_0","dram__throughput.avg.pct_of_peak_sustained_elapsed","%","83.0"\n'
            '"3","triton_red_fused_1","gpu__time_duration.sum","nsecond","1,234"\n')
    out = parse_ncu_csv(text)
    assert out["triton_poi_fused_0"] == {"dram_pct": 83.0, "registers": 24.0}
    assert out["triton_red_fused_1"] == {"time_ns": 1234.0}
    assert parse_ncu_csv("ncu: error: no kernels were profiled") == {}


def _profile(shares: dict[str, float]) -> ModelProfile:
    return ModelProfile(model="m", device="cuda", kernels=[
        KernelProfile(kernel=k, source="roofline", bottleneck="memory", share=s) for k, s in shares.items()])


def test_plan_orders_by_share_and_says_why_it_skips():
    items = plan(_profile({"small": 0.01, "big": 0.7, "mid": 0.29}), min_share=0.02)
    assert [i.kernel for i in items] == ["big", "mid", "small"]
    assert items[2].skip and "1.0%" in items[2].skip and "2%" in items[2].skip
    assert "rewrite:eviction" in items[0].strategies and items[0].strategies[0] == "rewrite:reverse-pass"
    only = plan(_profile({"big": 0.7, "mid": 0.29}), only=["mid"])
    assert [i.kernel for i in only if i.skip is None] == ["mid"]
    # A kernel named with --kernel is searched under --min-share too (it was skipped as "below the threshold").
    named = plan(_profile({"small": 0.003, "big": 0.997}), min_share=0.02, only=["small"])
    assert [i.kernel for i in named if i.skip is None] == ["small"] and named[0].strategies


def test_plan_spends_the_budget_by_distance_to_the_limit_and_skips_kernels_at_it():
    """share x (1 - percent of the memory limit): a big kernel near the copy ceiling goes after a smaller,
    slower one; one at 90% or more is not searched, as is one at 100-125% (inputs in L2: at its limit); over
    125% (bytes overestimated) says nothing."""
    def k(name, share, pct, source="roofline"):
        return KernelProfile(kernel=name, source=source, bottleneck="memory", share=share, roofline_pct=pct)

    profile = ModelProfile(model="m", device="cuda", kernels=[
        k("near", 0.5, 80.0), k("far", 0.3, 40.0), k("at", 0.15, 93.0), k("over", 0.05, 180.0), k("l2", 0.1, 110.0)])
    items = plan(profile, min_share=0.02)
    assert [i.kernel for i in items] == ["far", "near", "over", "at", "l2"]  # 0.18, 0.10, 0.05 (unknown distance)
    assert items[3].skip and "93%" in items[3].skip and "90%" in items[3].skip and items[3].at_limit
    assert items[4].skip and "100%" in items[4].skip and items[4].at_limit
    assert all(i.skip is None for i in items[:3])
    # Interpreter mode (shares of bytes, no timing): no limit is known, the order is by share.
    bytes_only = ModelProfile(model="m", device="cpu", kernels=[k("a", 0.6, None, "bytes"), k("b", 0.4, None, "bytes")])
    assert [i.kernel for i in plan(bytes_only)] == ["a", "b"]
    assert limit_pct(k("x", 0.5, 60.0), 1.5) == 90.0 and limit_pct(k("x", 0.5, 80.0), 1.5) == 100.0
    assert limit_pct(k("x", 0.5, 120.0)) == 100.0 and limit_pct(k("x", 0.5, 130.0)) is None


# --- reviewer and search coder ------------------------------------------------------------------

def test_review_stops_duplicates_language_violations_and_bad_launches():
    info = _info()
    assert review(KERNEL_SRC, info, KERNEL_SRC, set()).status == "duplicate"
    edited = with_point(KERNEL_SRC, {"num_warps": 8})
    ok = review(edited, info, KERNEL_SRC, set())
    assert ok.ok
    assert review(edited, info, KERNEL_SRC, {ok.sha256}).status == "duplicate"
    hostile = edited.replace('"""Launch."""', '"""Launch."""\n    import os')
    bad = review(hostile, info, KERNEL_SRC, set())
    assert not bad.ok and bad.status == "reviewed" and bad.reason
    too_big = with_point(KERNEL_SRC, {"XBLOCK": 128})
    assert "outside" in review(too_big, info, KERNEL_SRC, set()).reason


WELFORD_SRC = KERNEL_SRC.replace('''@triton.jit
def triton_red_fused_sum_0''', '''@triton.jit
def welford_combine(mean_1, m2_1, weight_1, mean_2, m2_2, weight_2):
    delta = mean_2 - mean_1
    new_weight = weight_1 + weight_2
    w2_over_w = tl.where(new_weight == 0.0, 0.0, weight_2 / new_weight)
    return (mean_1 + delta * w2_over_w, m2_1 + m2_2 + delta * delta * weight_1 * w2_over_w, new_weight)


@triton.jit
def triton_red_fused_sum_0''').replace("    tmp1 = tl.sum(acc, 1)[:, None]\n",
                                      "    tmp1 = (tl.sum(acc, 1)[:, None] / (r0_numel / 2)) / 3\n    x0 = xindex // 3\n")


def test_approximate_division_rewrites_every_device_division_and_nothing_else():
    assert "/ new_weight" in WELFORD_SRC and "/ 3" in WELFORD_SRC
    out = approximate_divisions(WELFORD_SRC)
    assert "tl.where(new_weight == 0.0, 0.0, tl.fdiv(weight_2, new_weight))" in out
    # Nested divisions from the inside out (the call groups them), an integer literal divided as a float.
    assert "tmp1 = tl.fdiv(tl.fdiv(tl.sum(acc, 1)[:, None], tl.fdiv(r0_numel, 2.0)), 3.0)" in out
    assert "x0 = xindex // 3" in out  # floor division is integer arithmetic: untouched
    assert out.replace("tl.fdiv(", "").count("/") == WELFORD_SRC.count("/") - 4  # docstring and host code untouched
    assert approximate_divisions(out) == out  # nothing left to rewrite
    assert approximate_divisions(KERNEL_SRC) == KERNEL_SRC  # no division: no candidate
    no_tl = WELFORD_SRC.replace("import triton.language as tl", "from triton import language as tl")
    assert approximate_divisions(no_tl) == no_tl  # the spelling it writes must mean Triton's language


def test_an_approximate_division_candidate_passes_review():
    info = _info(source=WELFORD_SRC)
    r = review(approximate_divisions(WELFORD_SRC), info, WELFORD_SRC, set())
    assert r.ok, r.reason


def test_search_proposes_the_approximate_division_rewrite_of_the_best_so_far():
    coder = SearchCoder()
    coder._device = "cuda"
    best = with_point(WELFORD_SRC, {"XBLOCK": 4})
    ctx = CoderContext(model="m", device="cuda", kernel=_info(source=WELFORD_SRC), original=WELFORD_SRC, best=best,
                       attempts=[], strategies=["rewrite:approx-div", "launch"])
    first = coder.propose(ctx)
    assert [p.origin for p in first] == ["rewrite:approx-div"]
    assert first[0].source == approximate_divisions(best) and read_point(first[0].source)["XBLOCK"] == 4


def _ctx(best: str = KERNEL_SRC, attempts: list[Attempt] | None = None, device: str = "cuda") -> CoderContext:
    return CoderContext(model="m", device=device, kernel=_info(), original=KERNEL_SRC, best=best,
                        attempts=attempts or [], strategies=["harvest:forms", "harvest", "rewrite:eviction", "launch"])


def test_search_proposes_harvest_then_rewrites_then_launch_neighbours():
    coder = SearchCoder()
    coder._device = "cuda"
    alt = with_point(KERNEL_SRC, {"XBLOCK": 4, "num_warps": 2})
    coder.harvested = HarvestResult(kernels=[
        Harvested(variant="max-autotune", name="triton_red_fused_sum_0", graph=0, fingerprint="f" * 16,
                  args=["in_ptr0", "out_ptr0", "xnumel", "r0_numel"], written=["out_ptr0"], source=alt),
        Harvested(variant="coordinate-descent", name="triton_red_fused_sum_0", graph=0, fingerprint="f" * 16,
                  args=["in_ptr0", "out_ptr0", "xnumel", "r0_numel"], written=["out_ptr0"], source=KERNEL_SRC)])
    first = coder.propose(_ctx())
    assert [p.origin for p in first] == ["harvest:max-autotune"]  # the unchanged one is not proposed
    second = coder.propose(_ctx())
    assert [p.origin for p in second] == ["rewrite:eviction"]
    assert "eviction_policy" not in second[0].source and second[0].source == drop_eviction_hints(KERNEL_SRC)
    third = coder.propose(_ctx())
    assert third and all(p.origin.startswith("launch:") for p in third)
    tried: list[Attempt] = []
    batch = third
    while batch:  # rounds of at most launch_per_round, until every neighbour of the best was tried
        assert len(batch) <= coder.launch_per_round
        tried += [Attempt(kernel="k", origin=p.origin, sha256=__import__("hashlib").sha256(p.source.encode()).hexdigest(),
                          status="correct") for p in batch]
        batch = coder.propose(_ctx(attempts=tried))
    assert len(tried) == len(neighbours(read_point(KERNEL_SRC), Limits(_info(), KERNEL_SRC)))
    assert coder.propose(_ctx(attempts=tried)) == []  # the search ends
    moved = coder.propose(_ctx(best=third[0].source, attempts=tried))
    assert moved and all(read_point(p.source) != read_point(third[0].source) for p in moved)


def test_search_offers_the_other_configurations_inductor_compiled_first():
    from types import SimpleNamespace

    import triton

    from pytest_kernelopt.capture.compiled import _alternatives

    kept = triton.Config({"XBLOCK": 8, "R0_BLOCK": 128}, num_warps=4, num_stages=1)
    other = triton.Config({"XBLOCK": 16, "R0_BLOCK": 64}, num_warps=8, num_stages=1)
    points = _alternatives(SimpleNamespace(configs=[kept, other, other]), kept)
    assert points == [{"XBLOCK": 16, "R0_BLOCK": 64, "num_warps": 8, "num_stages": 1}]
    # After precompiling, Inductor keeps the configurations only in its compile results.
    compiled = SimpleNamespace(configs=None, compile_results=[SimpleNamespace(config=kept), SimpleNamespace(config=other)])
    assert _alternatives(compiled, kept) == points
    info = _info()
    info = info.model_copy(update={"launch": info.launch.model_copy(update={
        "compiled_configs": 3, "alternatives": points + [{"XBLOCK": 4, "R0_BLOCK": 128, "num_warps": 4, "num_stages": 1,
                                                          "YBLOCK": 2}]})})
    coder = SearchCoder()
    coder._device = "cuda"
    proposals = coder.propose(_ctx().model_copy(update={"kernel": info}))
    assert [p.origin for p in proposals] == ["harvest:compiled"]  # the one with a setting the dump lacks is not offered
    assert read_point(proposals[0].source) == points[0]
    assert "3 configurations Inductor compiled" in proposals[0].rationale


def test_harvest_judges_kernels_of_another_form_first_and_leaves_the_old_form_once_one_wins():
    # A persistent kernel (another kind prefix) harvested from another compile is proposed in a round of its own,
    # before the configurations the default compile raced and another compile's kernel of the compiler's form;
    # once a kernel of another form is the best, those configurations of the left form are not proposed.
    persistent = KERNEL_SRC.replace("triton_red_fused_sum_0", "triton_per_fused_sum_0")
    args = ["in_ptr0", "out_ptr0", "xnumel", "r0_numel"]
    coder = SearchCoder()
    coder._device = "cuda"
    coder.harvested = HarvestResult(kernels=[
        Harvested(variant="max-autotune-extern", name="triton_red_fused_sum_0", graph=0, fingerprint="e" * 16,
                  args=args, written=["out_ptr0"], source=with_point(KERNEL_SRC, {"XBLOCK": 4})),
        Harvested(variant="persistent-rows", name="triton_per_fused_sum_0", graph=0, fingerprint="p" * 16,
                  args=args, written=["out_ptr0"], source=persistent)])
    info = _info()
    info = info.model_copy(update={"launch": info.launch.model_copy(update={
        "compiled_configs": 2, "alternatives": [{"XBLOCK": 16, "R0_BLOCK": 64, "num_warps": 8, "num_stages": 1}]})})
    ctx = _ctx().model_copy(update={"kernel": info, "strategies": ["harvest:forms", "harvest", "launch"]})
    assert [p.origin for p in coder.propose(ctx)] == ["harvest:persistent-rows"]
    assert [p.origin for p in coder.propose(ctx)] == ["harvest:compiled", "harvest:max-autotune-extern"]
    # The same search where the persistent kernel won: the next round is the launch descent around it.
    coder._done.clear()
    assert [p.origin for p in coder.propose(ctx)] == ["harvest:persistent-rows"]
    won = ctx.model_copy(update={"best": persistent})
    after = coder.propose(won)
    assert after and all(p.origin.startswith("launch:") and "triton_per_fused_sum_0" in p.source for p in after)


def test_search_in_interpreter_mode_tries_only_a_few_launch_points():
    coder = SearchCoder()
    ctx = _ctx(device="cpu").model_copy(update={"strategies": ["launch"]})
    assert len(coder.propose(ctx)) == 2
    assert coder.propose(ctx) == []


# --- run directory ----------------------------------------------------------------------------

def test_run_dir_writes_trace_and_record_and_tolerates_a_torn_last_line(tmp_path):
    run = RunDir.create(tmp_path, RunRecord(run_id="r1", started="now", agent="search", kernels_dir="k"))
    run.event("planner", "plan", model="m", kernel="k", strategies=["launch"])
    rel = run.save_candidate("m", "k", "ab" * 32, "x = 1\n")
    run.close()
    assert (run.root / rel).read_text() == "x = 1\n"
    with open(run.root / "trace.jsonl", "a") as f:
        f.write('{"t": 1.0, "role": "cod')  # killed mid-write
    record, events = load_run(run.root)
    assert record.run_id == "r1" and [e.event for e in events] == ["plan"]
    second = RunDir.create(tmp_path, RunRecord(run_id="r1", started="now", agent="search", kernels_dir="k"))
    assert second.root.name == "r1-2"
    second.close()


# --- the loop, against a scripted benchmarker ---------------------------------------------------

ENV = Environment(device="cuda", torch="2.11", triton="3.6", python="3.12", gpu="H200")


def _timing(speedup: float, half: float = 0.01) -> Timing:
    return Timing(baseline_ms=1.0, candidate_ms=1.0 / speedup, speedup=speedup, ci_low=speedup - half,
                  ci_high=speedup + half, pairs=40, method="cuda-graph")


class FakeSession:
    """Judges candidates by their num_warps: speedup = table[num_warps]; records every call."""

    def __init__(self, info: KernelInfo, speed: dict[int, float], seconds: float = 1.0,
                 compile_speed: dict[str, float] | None = None):
        self.info, self.speed, self.seconds = info, speed, seconds
        self.options = None
        self.calls: list[tuple[str, float]] = []
        self.compile_speed = compile_speed or {}  # variant -> whole-model speedup over the default compile
        self.compile_calls: list[str] = []
        self.variants: list[str | None] = []  # the variant of each session opened
        self.launch_configs: list[dict | None] = []  # the launch configurations each session opened with
        self.opened = type("O", (), {"kernels": [info], "externs": [], "environment": ENV, "seconds": 0.1})()

    def __call__(self, problem, device, options, progress=None, variant=None, shape=None, launch_configs=None):
        self.options = options
        self.variants.append(variant)
        self.launch_configs.append(launch_configs)
        return self

    def verify_compile(self, variant, launch_configs=None, budget_s=None):
        self.compile_calls.append(variant)
        self.compile_budgets = [*getattr(self, "compile_budgets", []), budget_s]
        took = getattr(self, "compile_seconds", {}).get(variant, 0.0)  # what its compile and checks would take
        if budget_s is not None and took > budget_s:
            from pytest_kernelopt.errors import BudgetSpent

            raise BudgetSpent(f"stopped {budget_s:.0f} s into its model stage: the run's budget (--run-budget-s) "
                              f"ran out")
        self.compile_given = [*getattr(self, "compile_given", []), launch_configs]
        # Each check's compile races afresh (its own pick of one kernel's launch: the n-th check's XBLOCK 2**n)
        # unless given the launches to run.
        picks = launch_configs or {self.info.fingerprint: {"XBLOCK": 2 ** len(self.compile_calls), "num_warps": 4,
                                                            "num_stages": 1}}
        speedup = self.compile_speed.get(variant, 1.0)
        faster = bool(speedup) and SpeedPolicy().for_settings().judge(_timing(speedup))[0]  # as the session judges
        status = "rejected" if speedup == 0 else "accepted" if faster else "correct"
        ratio = getattr(self, "compile_ratio", {}).get(variant)  # its worst element's share of the allowance
        return Verdict(model="m", kernel=f"compile:{variant}", candidate=variant, candidate_sha256="", status=status,
                       model_timing=_timing(speedup) if speedup else None, speed_measured=bool(speedup),
                       environment=ENV, seeds=[1, 2, 3], errors=[SeedErrors(seed=1, model_ratio=ratio)] if ratio else [],
                       reason="model: seed 1, output 0: outside its allowance" if speedup == 0 else None,
                       launch_configs=picks)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return None

    def open(self, budget_s=None):
        self.open_budgets = [*getattr(self, "open_budgets", []), budget_s]
        return self.opened

    def profile(self):
        return Profiled(measured=True, model_gpu_us=100.0, copy_gbps=4000.0,
                        kernels={self.info.name: KernelTime(gpu_us=90.0, launches=1)})

    def kernel_info(self, name):
        return self.info

    def verify(self, kernel, source):
        import time as _t

        _t.sleep(self.seconds)
        warps = read_point(source.source).get("num_warps", 4)
        speedup = self.speed.get(warps, 0.99)
        self.calls.append((source.label, self.options.model_seconds))
        status = "accepted" if speedup > 1.02 else "correct"
        if speedup < 0:
            v = Verdict(model="m", kernel=kernel, candidate=source.label, candidate_sha256=source.sha256,
                        status="rejected", reason="kernel: wrong", stages=[StageResult(name="kernel", passed=False)])
        else:
            v = Verdict(model="m", kernel=kernel, fingerprint=self.info.fingerprint, candidate=source.label,
                        candidate_sha256=source.sha256, status=status, model_timing=_timing(speedup),
                        kernel_timing=_timing(speedup), speed_measured=True, environment=ENV,
                        stages=[StageResult(name="static", passed=True)])
        v.kernel_info = self.info
        v.verified_source = source.source
        return v

    def verify_model(self, replacements):
        return Verdict(model="m", kernel="all", candidate="committed", candidate_sha256="", status="accepted",
                       model_timing=_timing(1.3), speed_measured=True)


def _inductor_info() -> KernelInfo:
    """A kernel record as capture makes it: Inductor's source and the launch it chose (render_dump makes the file)."""
    kernel_only = KERNEL_SRC.split("\n\ndef run(")[0] + "\n"
    launch = LaunchConfig(kwargs={"XBLOCK": 8, "R0_BLOCK": 128}, num_warps=4, num_stages=1,
                          grid=["triton.cdiv(xnumel, XBLOCK)", "1", "1"])
    return _info(source=kernel_only).model_copy(update={"launch": launch})


def _problem(tmp_path: Path) -> Path:
    path = tmp_path / "m.py"
    path.write_text("import torch\nclass Model(torch.nn.Module):\n    def forward(self, x):\n        return x.sum(1)\n"
                    "def get_inputs():\n    return [torch.randn(64, 1000)]\ndef get_init_inputs():\n    return []\n")
    return path


def _tuner(tmp_path: Path, session: FakeSession, **options) -> tuple[Tuner, RunDir, object]:
    from pytest_kernelopt.store import KernelStore

    store = KernelStore(tmp_path / "kernels")
    run = RunDir.create(tmp_path / "runs", RunRecord(run_id="t", started="now", agent="search", kernels_dir=str(store.root)))
    coder = SearchCoder(variants=[])
    coder.prepare = lambda problem, device, kernels, shape=None, budget_s=None: None  # no harvest child here
    coder._device = "cuda"
    opts = TuneOptions(device="cuda", ncu=False, **options)
    return Tuner(opts, coder, store, run, session_factory=session), run, store


def test_loop_climbs_confirms_and_stores_the_best_accepted(tmp_path):
    session = FakeSession(_inductor_info(), {8: 1.2, 16: 1.4, 32: 1.1}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert k.stored_version == 1 and k.best_timing.speedup == pytest.approx(1.4)
    assert read_point(store.active_file("m", k.kernel).source)["num_warps"] == 16
    assert k.stored_recipe is not None and k.stored_recipe.startswith("launch ") and "num_warps=16" in k.stored_recipe
    screened = [s for label, s in session.calls if "(confirm)" not in label]
    confirmed = [s for label, s in session.calls if "(confirm)" in label]
    assert screened and all(s == 0.25 for s in screened)  # exploration is timed briefly
    assert confirmed and all(s == 1.0 for s in confirmed)  # what is stored was timed in full
    assert outcome.model_timing.speedup == pytest.approx(1.3)
    record, events = load_run(run.root)
    roles = {e.role for e in events}
    assert {"profiler", "planner", "coder", "reviewer", "benchmarker", "store"} <= roles or \
        {"profiler", "planner", "coder", "benchmarker", "store"} <= roles
    assert record.problems[0].kernels[0].history


class SlowInModelSession(FakeSession):
    """num_warps 16 is fast alone (1.5x) but slower in the model (0.9x); the rest as the table says."""

    def verify(self, kernel, source):
        v = super().verify(kernel, source)
        if read_point(source.source).get("num_warps") == 16 and v.model_timing is not None:
            v.kernel_timing, v.model_timing = _timing(1.5), _timing(0.9)
            v.status = "correct"
        return v


def test_loop_does_not_confirm_a_candidate_the_model_timing_puts_below_the_compiled_model(tmp_path):
    session = SlowInModelSession(_inductor_info(), {8: 1.2, 32: 1.1}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    _, events = load_run(run.root)
    screened_16 = [e for e in events if e.event == "verdict" and e.data.get("speedup") == pytest.approx(0.9)]
    assert screened_16, "the 1.5x-alone candidate was screened"
    assert all(e.data["stages"] == {"static": 0.0} for e in events if e.event == "verdict")  # seconds per stage
    confirms = [e for e in events if e.event == "confirm"]
    assert confirms and all(e.data["speedup"] != pytest.approx(0.9) for e in confirms)
    assert read_point(store.active_file("m", outcome.kernels[0].kernel).source)["num_warps"] == 8


def test_loop_keeps_the_active_version_unless_beaten_beyond_noise(tmp_path):
    session = FakeSession(_inductor_info(), {8: 1.5, 16: 1.45}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    tuner.tune_problem(_problem(tmp_path))
    first = store.active_file("m", _info().name)
    assert read_point(first.source)["num_warps"] == 8
    again, run2, _ = _tuner(tmp_path, session)
    outcome = again.tune_problem(_problem(tmp_path))
    k = outcome.kernels[0]
    assert k.stored_version is None and "not faster than the active v1" in k.message or "active" in k.message
    # The search ran out of ideas, not of budget: the kernel's line says so (a trial's tune stopped in 11 s, silent).
    assert "search ended before its budget: the coder has nothing new to try" in k.message, k.message
    assert store.manifest("m", _info().name).active == 1 and len(store.manifest("m", _info().name).versions) == 1


def test_loop_honours_the_kernel_budget(tmp_path):
    session = FakeSession(_inductor_info(), {8: 1.2, 16: 1.4, 2: 1.1, 1: 1.0}, seconds=0.2)
    tuner, run, _ = _tuner(tmp_path, session, budget_s=0.5, confirm=0)
    outcome = tuner.tune_problem(_problem(tmp_path))
    judged = [label for label, _ in session.calls]
    assert 2 <= len(judged) <= 4  # stops before a candidate that would overrun (estimate: median so far)
    assert outcome.kernels[0].gpu_seconds <= 0.5 + 0.2 + 0.1
    _, events = load_run(run.root)
    assert any(e.event == "stop" and "kernel budget" in e.data.get("reason", "") for e in events)
    # The kernel's line says that the budget, not the ideas, ended the search, and what to do.
    assert "stopped by the kernel budget" in outcome.kernels[0].message
    assert outcome.kernels[0].message.endswith(f"after {len(judged)} candidate(s): raise --budget-s to try more")
    # Stopped before the budget is spent (the next candidate would overrun it): the line says so, not "spent".
    stop = next(e.data["reason"] for e in events if e.event == "stop")
    spent, budget = (float(v) for v in re.search(r"kernel budget: (\S+) of (\S+) s spent", stop).groups())
    assert spent >= budget or ", the next candidate's checks expected to take" in stop, stop


def test_loop_records_rejections_by_stage_and_stores_nothing_slower(tmp_path):
    session = FakeSession(_inductor_info(), {8: -1.0, 2: -1.0, 16: 0.97}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    k = outcome.kernels[0]
    assert k.by_stage.get("rejected:kernel", 0) >= 2 and k.stored_version is None
    assert store.manifest("m", k.kernel) is None


class TwoKernelSession(FakeSession):
    """Two kernels, each half the model's time: the model gains half of each kernel's gain (summed together)."""

    def __init__(self, speed: dict[str, dict[int, float]], twins: bool = False):
        first = _inductor_info()  # k2: another kernel, or (twins) the same compiler kernel under a second name
        self.infos = {first.name: first, "k2": first.model_copy(update={"name": "k2", "fingerprint": (
            first.fingerprint if twins else "e" * 16)})}
        super().__init__(first, {}, seconds=0.0)
        self.per_kernel = speed
        self.opened = type("O", (), {"kernels": list(self.infos.values()), "externs": [], "environment": ENV, "seconds": 0.1})()
        self.models: list[dict[str, float]] = []

    def profile(self):
        return Profiled(measured=True, model_gpu_us=100.0, copy_gbps=4000.0,
                        kernels={n: KernelTime(gpu_us=50.0, launches=1) for n in self.infos})

    def kernel_info(self, name):
        return self.infos[name]

    def _kernel_speed(self, kernel, source):
        return self.per_kernel[kernel].get(read_point(source).get("num_warps", 4), 0.99)

    def verify(self, kernel, source):
        k = self._kernel_speed(kernel, source.source)
        self.calls.append((source.label, self.options.model_seconds))
        m = 1 + 0.5 * (k - 1)
        v = Verdict(model="m", kernel=kernel, fingerprint=self.infos[kernel].fingerprint, candidate=source.label,
                    candidate_sha256=source.sha256, status="accepted" if m >= 1.02 else "correct",
                    model_timing=_timing(m, 0.002), kernel_timing=_timing(k, 0.002), speed_measured=True,
                    environment=ENV, stages=[StageResult(name="static", passed=True)])
        v.kernel_info = self.infos[kernel]
        v.verified_source = source.source
        return v

    def verify_model(self, replacements):
        gains = {k: self._kernel_speed(k, s.source) for k, s in replacements.items()}
        self.models.append(gains)
        m = 1 + sum(0.5 * (k - 1) for k in gains.values())
        return Verdict(model="m", kernel="+".join(replacements), candidate="committed kernels", candidate_sha256="",
                       status="accepted" if m >= 1.02 else "correct", model_timing=_timing(m, 0.002),
                       speed_measured=True, environment=ENV)


def test_near_misses_of_two_kernels_are_stored_together_when_the_model_gains(tmp_path):
    # Each kernel alone: 3% faster, the model 1.5% (below the 2% a version needs); together 3%.
    session = TwoKernelSession({_info().name: {8: 1.03}, "k2": {8: 1.03}})
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert [k.stored_version for k in outcome.kernels] == [1, 1]
    assert all("as one of a set" in k.message for k in outcome.kernels)
    for name in session.infos:
        active = store.active_file("m", name)
        assert read_point(active.source)["num_warps"] == 8
        evidence = active.record.evidence
        assert evidence.status == "correct" and evidence.combined_timing.speedup == pytest.approx(1.03)
        assert evidence.combined_with == sorted(set(session.infos) - {name})
        assert active.record.provenance.proposed_by.endswith(", combined)")
    baseline = next(iter(store.model_record("m").baselines.values()))
    assert baseline.kernels == {name: 1 for name in session.infos}
    assert baseline.timing.speedup == pytest.approx(1.03)
    assert outcome.model_timing.speedup == pytest.approx(1.03)
    _, events = load_run(run.root)
    assert any(e.event == "combine" for e in events)
    assert any(e.event == "confirm" and "(combine)" in e.data["origin"] for e in events)


def test_near_misses_are_not_stored_when_together_they_stay_below_the_threshold(tmp_path):
    session = TwoKernelSession({_info().name: {8: 1.015}, "k2": {8: 1.015}})  # together 1.5%
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert [k.stored_version for k in outcome.kernels] == [None, None]
    assert all("not stored" in k.message for k in outcome.kernels)
    assert session.models and set(session.models[-1]) == set(session.infos)  # the set was measured
    assert not list((tmp_path / "kernels").rglob("v*.py"))


def test_a_near_miss_joins_a_version_stored_alone_when_it_adds_beyond_noise(tmp_path):
    session = TwoKernelSession({_info().name: {8: 1.1}, "k2": {8: 1.03}})  # model 1.05 alone, 1.065 with k2
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    first, second = outcome.kernels
    assert first.stored_version == 1 and "as one of a set" not in first.message
    assert second.stored_version == 1 and "as one of a set" in second.message
    assert store.active_file("m", "k2").record.evidence.combined_with == [_info().name]
    assert outcome.model_timing.speedup == pytest.approx(1.065)
    assert next(iter(store.model_record("m").baselines.values())).kernels == {_info().name: 1, "k2": 1}


def test_a_lone_near_miss_is_not_combined(tmp_path):
    session = TwoKernelSession({_info().name: {8: 1.03}, "k2": {}})  # k2: nothing faster
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert [k.stored_version for k in outcome.kernels] == [None, None]
    assert session.models == []
    _, events = load_run(run.root)
    assert not any(e.event == "combine" for e in events)


class SlowToOpenSession(FakeSession):
    """Opening takes longer than the budget it is given (a full-size model compiled and referenced on a CPU)."""

    def open(self, budget_s=None):
        from pytest_kernelopt.errors import BudgetSpent

        super().open(budget_s)
        if budget_s is not None:
            raise BudgetSpent(f"stopped {budget_s:.0f} s into opening the problem (...): the budget it was given "
                              f"ran out")
        return self.opened


def test_the_run_budget_bounds_opening_the_search_session_and_ends_the_run_without_an_error(tmp_path, capsys):
    from pytest_kernelopt.agents.progress import print_tune_table

    session = SlowToOpenSession(_inductor_info(), {8: 1.2})
    tuner, run, store = _tuner(tmp_path, session, run_budget_s=30.0)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    print_tune_table(load_run(run.root)[0])  # the problem's row says why it has no kernel rows
    assert "kernel search not started" in capsys.readouterr().out
    assert 0 < session.open_budgets[0] <= 30.0  # the budget's remainder, not the 30-minute opening limit
    assert outcome.error is None and not outcome.kernels
    assert outcome.notes and outcome.notes[0].startswith("kernel search not started: stopped"), outcome.notes
    assert tuner.stop_reason == "run budget: 30 s spent" or tuner._shape_stop, (tuner.stop_reason, tuner._shape_stop)
    no_budget = SlowToOpenSession(_inductor_info(), {8: 1.2})  # without --run-budget-s: opened as before
    tuner, run, _ = _tuner(tmp_path / "again", no_budget)
    assert tuner.tune_problem(_problem(tmp_path)).kernels and set(no_budget.open_budgets) == {None}


def test_a_kernel_of_a_searched_fingerprint_checks_that_kernels_best_and_is_not_searched_again(tmp_path):
    # Inductor writes one text twice (BERT's two add + LayerNorm kernels): the second is not searched again, the
    # first's best goes through its own checks and is stored for it when it is faster there.
    session = TwoKernelSession({_info().name: {8: 1.1, 16: 1.2}, "k2": {8: 1.1, 16: 1.2}}, twins=True)
    tuner, run, store = _tuner(tmp_path, session)
    first, second = tuner.tune_problem(_problem(tmp_path)).kernels
    run.close()
    assert first.attempts > 2 and first.stored_version == 1
    assert [a.origin for a in second.history if "(confirm)" not in a.origin] == [f"twin:{_info().name}"]
    assert second.stored_version == 1 and read_point(store.active_file("m", "k2").source)["num_warps"] == 16
    assert f"the same compiler kernel as {_info().name} (equal fingerprint): its best candidate checked here" \
        in second.message, second.message


def test_a_kernel_of_a_searched_fingerprint_whose_search_found_nothing_is_not_searched_again(tmp_path):
    session = TwoKernelSession({_info().name: {}, "k2": {8: 1.2}}, twins=True)
    tuner, run, store = _tuner(tmp_path, session)
    first, second = tuner.tune_problem(_problem(tmp_path)).kernels
    run.close()
    assert first.attempts > 2 and second.attempts == 0 and second.stored_version is None
    assert "its search found nothing faster; not searched again" in second.message, second.message
    assert not list((tmp_path / "kernels").rglob("v*.py"))


@pytest.mark.parametrize("breaks", [[], ["Attempted to wrap RNN, GRU, or LSTM"]])
def test_a_model_without_triton_kernels_says_so(tmp_path, capsys, breaks):
    from pytest_kernelopt.agents.progress import print_tune_table
    from pytest_kernelopt.records import ExternCallInfo

    session = FakeSession(_inductor_info(), {}, seconds=0.0)
    session.opened = type("O", (), {"kernels": [], "environment": ENV, "seconds": 0.1, "externs": [
        ExternCallInfo(name="buf0", graph=0, target="extern_kernels.mm")], "graph_breaks": breaks})()
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert outcome.error is None and outcome.kernels == []
    assert outcome.note == ("no Triton kernels to tune: Inductor generated none; the model runs 1 extern call(s) "
                            "(extern_kernels.mm), which kernelopt leaves alone"
                            + ("; Dynamo broke its graph (Attempted to wrap RNN, GRU, or LSTM), and what runs "
                               "eagerly gets no kernel" if breaks else ""))
    assert session.calls == []
    record, _ = load_run(run.root)
    assert record.problems[0].note == outcome.note
    print_tune_table(record)
    row = next(line for line in capsys.readouterr().out.splitlines() if "no Triton kernels" in line)
    assert row.rstrip(" │|").endswith(" 0")  # no candidate ran: no device seconds, whatever the compile took


def _varying(configs: int = 3) -> KernelInfo:
    """A kernel Inductor compiled ``configs`` launch configurations of (timed at the first call)."""
    info = _inductor_info()
    return info.model_copy(update={"launch": info.launch.model_copy(update={"compiled_configs": configs})})


def test_a_kernel_whose_compiler_pick_varies_is_pinned_to_the_fastest_measured(tmp_path):
    from pytest_kernelopt.candidate import render_dump

    info = _varying()
    session = FakeSession(info, {4: 1.0}, seconds=0.0)  # nothing beats the compiler's pick (num_warps=4)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert k.stored_version == 1 and k.pinned and k.best_origin == "compiler"
    assert "pinned v1" in k.message and "3 launch configurations" in k.message
    active = store.active_file("m", info.name)
    assert active.source == render_dump(info, "m")  # exactly the compiler's pick of this compile
    assert active.record.evidence.status == "correct"
    assert active.record.provenance.proposed_by == "kernelopt tune (compiler, pinned)"
    assert next(iter(store.model_record("m").baselines.values())).kernels == {info.name: 1}
    assert any(label == "compiler (pin)" and s == 1.0 for label, s in session.calls)  # checked at full length
    _, events = load_run(run.root)
    assert any(e.event == "pinned" for e in events)


@pytest.mark.parametrize("configs", [3, 1])
def test_a_kernel_at_its_limit_is_not_searched_but_its_varying_pick_is_pinned(tmp_path, configs, capsys):
    # 256256 bytes in 0.0674 us over a 4000 GB/s copy ceiling: 95% of the limit, not searched. Its
    # pick of three raced configurations would vary at the next compile (H200: 51 vs 308 us).
    from pytest_kernelopt.agents.progress import print_tune_table
    from pytest_kernelopt.candidate import render_dump

    class AtLimit(FakeSession):
        def profile(self):
            return Profiled(measured=True, model_gpu_us=0.075, copy_gbps=4000.0,
                            kernels={self.info.name: KernelTime(gpu_us=0.0674, launches=1)})

    session = AtLimit(_varying(configs), {4: 1.0}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert k.skipped and "95% of its memory limit" in k.skipped and k.attempts == 0
    assert [label for label, _ in session.calls if "pin" not in label] == []  # no candidate searched
    if configs == 1:  # one configuration compiled: nothing varies, nothing to pin
        assert session.calls == [] and k.stored_version is None
        return
    assert k.pinned and k.stored_version == 1 and k.best_origin == "compiler"
    assert store.active_file("m", k.kernel).source == render_dump(session.info, "m")  # this compile's pick
    record, _ = load_run(run.root)
    print_tune_table(record)
    row = next(line for line in capsys.readouterr().out.splitlines() if k.kernel[:20] in line)
    assert "v1 (pinned)" in row


def test_a_kernel_the_stored_setting_records_a_launch_for_is_not_pinned(tmp_path):
    """A chosen compile setting records each kernel's launch configuration, which every compile of it launches: its
    pick no longer varies, so the pin pass (a check per kernel, then the model) is not spent on it."""
    info = _varying()
    session = FakeSession(info, {4: 1.0}, seconds=0.0, compile_speed={"max-autotune": 1.3})
    tuner, run, store = _tuner(tmp_path, session, compile_variants=["max-autotune"])
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert store.compile_variant("m") == "max-autotune"
    assert set(store.launch_configs("m")) == {info.fingerprint} and session.launch_configs[-1] == store.launch_configs("m")
    k = outcome.kernels[0]
    assert not k.pinned and k.stored_version is None
    assert "not pinned: the stored compile setting records its launch configuration" in k.message
    assert not any("pin" in label for label, _ in session.calls)


def test_a_near_miss_is_pinned_before_the_compiler_pick(tmp_path):
    # 1.5% faster: beyond noise, under the 2% a version needs to be stored as faster.
    session = FakeSession(_varying(), {4: 1.0, 8: 1.015}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert k.pinned and k.stored_version == 1 and k.best_origin.startswith("launch:")
    assert read_point(store.active_file("m", k.kernel).source)["num_warps"] == 8
    assert not any(label == "compiler (pin)" for label, _ in session.calls)


def test_pins_are_not_stored_when_the_model_with_them_is_slower(tmp_path):
    # Each pin passes alone (1.0x at full length); the model with the pin in force runs 0.997x
    # [0.996, 0.998]: a loss, so nothing is stored (measured on the H200: a group norm).
    class SlowerTogether(FakeSession):
        def verify_model(self, replacements):
            self.models = [*getattr(self, "models", []), sorted(replacements)]
            return Verdict(model="m", kernel="all", candidate="stored and pinned", candidate_sha256="",
                           status="correct", model_timing=_timing(0.997, half=0.001), speed_measured=True)

    session = SlowerTogether(_varying(), {4: 1.0}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert session.models == [[k.kernel]]  # the model was timed with the pin in force
    assert k.stored_version is None and not k.pinned
    assert "not pinned: the model with the pinned version(s) measured 0.997x [0.996, 0.998], slower than the " \
           "compiled model" in k.message
    assert not list((tmp_path / "kernels").rglob("v*.py"))
    assert not store.model_record("m").baselines
    _, events = load_run(run.root)
    assert any(e.event == "pins-not-stored" for e in events)


@pytest.mark.parametrize("configs, speed, pin, why", [
    (1, {4: 1.0}, True, None),  # one configuration compiled: the pick does not vary
    (3, {4: 1.0}, False, None),  # --no-pin
    (3, {4: 0.97}, True, "not pinned: no configuration measured at least as fast"),  # the dump ran slower
])
def test_pins_only_where_the_pick_varies_and_nothing_slower(tmp_path, configs, speed, pin, why):
    session = FakeSession(_varying(configs), speed, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session, pin=pin)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    k = outcome.kernels[0]
    assert k.stored_version is None and not k.pinned
    assert not list((tmp_path / "kernels").rglob("v*.py"))
    if why:
        assert why in k.message


def test_ctrl_c_keeps_the_record_and_leaves_no_partial_files(tmp_path):
    from pytest_kernelopt.agents import tune
    from pytest_kernelopt.store import KernelStore

    class Interrupting(FakeSession):
        def verify(self, kernel, source):
            if len(self.calls) == 2:
                raise KeyboardInterrupt
            return super().verify(kernel, source)

    import pytest_kernelopt.agents.loop as loop_mod

    session = Interrupting(_inductor_info(), {8: 1.3, 16: 1.4}, seconds=0.0)
    original = loop_mod.Tuner.__init__

    def with_fake(self, *a, **kw):
        kw["session_factory"] = session
        original(self, *a, **kw)

    loop_mod.Tuner.__init__ = with_fake
    try:
        with pytest.raises(KeyboardInterrupt):
            tune([_problem(tmp_path)], TuneOptions(device="cuda", ncu=False), agent="search",
                 agent_options={"variants": []}, store=KernelStore(tmp_path / "kernels"), runs_dir=tmp_path / "runs")
    finally:
        loop_mod.Tuner.__init__ = original
    (run_dir,) = (tmp_path / "runs").iterdir()
    record = json.loads((run_dir / "run.json").read_text())
    assert record["interrupted"] is True and record["finished"]
    assert not list(tmp_path.rglob("*.tmp"))
    assert not (tmp_path / "kernels").exists() or not list((tmp_path / "kernels").rglob("v*.py"))
    # The kernel Ctrl-C stopped is in the record with the candidates checked before it, and the report says so.
    (kernel,) = record["problems"][0]["kernels"]
    assert kernel["message"].startswith("interrupted (Ctrl-C)") and kernel["attempts"] == len(kernel["history"]) >= 1
    from pytest_kernelopt.report import write_report

    text = write_report(run_dir).report.read_text()
    assert f"1 kernel(s) looked at, {kernel['attempts']} candidate(s) checked" in text
    assert "**Interrupted** (Ctrl-C)" in text and "done before the interrupt" in text


def test_ctrl_c_in_the_command_prints_the_summary_and_the_stop_reason(tmp_path, monkeypatch, capsys):
    """Ctrl-C during ``kernelopt tune``: the table of what finished, why it stopped, the run directory; exit 130."""
    import pytest_kernelopt.agents.loop as loop_mod
    from pytest_kernelopt.cli import main

    def interrupted(self, problem_path):
        raise KeyboardInterrupt

    monkeypatch.setattr(loop_mod.Tuner, "tune_problem", interrupted)
    code = main(["tune", str(ROOT / "tests" / "problems" / "sum_reduce.py"), "--device", "cpu", "--budget-s", "60",
                 "--kernels-dir", str(tmp_path / "kernels"), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 130
    assert "stopped early: interrupted (Ctrl-C)" in out and f"run directory: {tmp_path / 'runs'}" in out
    assert "cpu s" in out and "gpu s" not in out  # the seconds column names the device the checks ran on
    assert "budget: 60 s of checks per kernel (--budget-s)" in err and err.rstrip().endswith("kernelopt: interrupted")



def test_sigterm_stops_tune_as_ctrl_c_does_and_says_so(tmp_path, monkeypatch, capsys):
    """SIGTERM (a CI job's time limit, timeout(1)) during ``kernelopt tune``: the summary of what finished and the
    run directory, as for Ctrl-C, naming SIGTERM; exit 130; SIGTERM's own action restored afterwards."""
    import os
    import signal
    import threading
    import time

    import pytest_kernelopt.agents.loop as loop_mod
    from pytest_kernelopt.cli import main

    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        pytest.skip("SIGTERM is handled by the test runner here")

    def terminated(self, problem_path):
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler raises at the next bytecode; reaching the end means it was never installed
        raise AssertionError("SIGTERM did not stop the command")

    monkeypatch.setattr(loop_mod.Tuner, "tune_problem", terminated)
    code = main(["tune", str(ROOT / "tests" / "problems" / "sum_reduce.py"), "--device", "cpu", "--json",
                 "--kernels-dir", str(tmp_path / "kernels"), "--runs-dir", str(tmp_path / "runs")])
    out, err = capsys.readouterr()
    assert code == 130
    record = json.loads(out)
    assert record["interrupted"] is True and record["finished"] and record["stop_reason"].startswith("terminated (SIGTERM)")
    assert err.rstrip().endswith("kernelopt: terminated (SIGTERM)")
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL

# --- end to end, interpreter mode ----------------------------------------------------------------

def _smaller_sum_reduce(folder: Path) -> Path:
    """tests/problems/sum_reduce.py at 16 rows instead of 128: each interpreted launch runs 8x fewer programs
    (the interpreter's cost; what the tests check does not depend on the size)."""
    text = (ROOT / "tests" / "problems" / "sum_reduce.py").read_text()
    assert "(4, 16, 32)" in text
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "sum_reduce.py"
    path.write_text(text.replace("(4, 16, 32)", "(2, 16, 8)"))
    return path


def test_tune_cli_interpreter(tmp_path):
    """The real loop on a small problem: harvest child, session, profile, plan, candidates, run directory."""
    cmd = [sys.executable, "-m", "pytest_kernelopt.cli", "tune", str(_smaller_sum_reduce(tmp_path / "problems")),
           "--device", "cpu", "--seeds", "1", "--kernels-dir", str(tmp_path / "kernels"), "--runs-dir",
           str(tmp_path / "runs"), "--json"]
    proc = forkserver.run(cmd, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    record = RunRecord.model_validate_json(proc.stdout)
    (problem,) = record.problems
    assert problem.error is None and not problem.speed_measured
    (kernel,) = problem.kernels
    assert kernel.attempts >= 3 and kernel.stored_version is None
    assert kernel.by_stage.get("correct", 0) >= 3, kernel.history  # harvest, rewrite, launch points: all correct
    assert "nothing stored" in kernel.message
    run_dir = tmp_path / "runs" / record.run_id
    _, events = load_run(run_dir)
    assert {"harvest", "profile", "plan", "proposals", "verdict"} <= {e.event for e in events}
    files = [a.file for a in kernel.history if a.file]
    assert files and all((run_dir / f).is_file() for f in files)
    assert not (tmp_path / "kernels").exists()


def test_tune_cli_rejects_bad_options(tmp_path):
    problem = str(ROOT / "tests" / "problems" / "sum_reduce.py")
    for extra, needle in ((["--min-share", "2"], "--min-share"), (["--max-usd", "3"], "anthropic only"),
                          (["--budget-s", "-1"], "budget")):
        proc = forkserver.run([sys.executable, "-m", "pytest_kernelopt.cli", "tune", problem, "--device", "cpu",
                               *extra], timeout=120, cwd=tmp_path)
        assert proc.returncode == 2 and needle in proc.stderr and len(proc.stderr.strip().splitlines()) == 1, proc.stderr


def test_tune_open_pr_checks_the_repository_before_tuning(tmp_path):
    """A repository the pull requests cannot come from is exit 2 at once, not after the run."""
    problem = tmp_path / "sum_reduce.py"
    problem.write_text((ROOT / "tests" / "problems" / "sum_reduce.py").read_text())
    for where, extra, needle in ((problem, [], "not inside a git repository"),
                                 (ROOT / "tests" / "problems" / "sum_reduce.py", ["--remote", "no-such-remote"],
                                  "no git remote named 'no-such-remote'")):
        proc = forkserver.run([sys.executable, "-m", "pytest_kernelopt.cli", "tune", str(where), "--device", "cpu",
                               "--open-pr", *extra], timeout=120, cwd=tmp_path)
        lines = proc.stderr.strip().splitlines()
        assert proc.returncode == 2 and len(lines) == 1 and "--open-pr" in lines[0] and needle in lines[0], proc.stderr
    assert not (tmp_path / ".kernelopt").exists()  # nothing ran


def test_a_reply_without_code_does_not_end_the_kernel(tmp_path):
    """A backend whose round produced nothing usable (last_error set) gets the next round."""
    session = FakeSession(_inductor_info(), {8: 1.3}, seconds=0.0)
    tuner, run, _ = _tuner(tmp_path, session)

    class Flaky:
        name, model = "anthropic", "fake"
        stopped = None
        spend = SearchCoder().spend

        def __init__(self):
            self.calls, self.last_error = 0, None

        def prepare(self, *a, **k):
            return None

        def propose(self, ctx):
            self.calls += 1
            if self.calls == 1:
                self.last_error = "the reply held no python block"
                return []
            self.last_error = None
            if self.calls == 2:
                return [Proposal(source=with_point(ctx.original, {"num_warps": 8}), origin="anthropic:fake")]
            return []

    tuner.coder = Flaky()
    outcome = tuner.tune_problem(_problem(tmp_path))
    assert tuner.coder.calls == 3 and outcome.kernels[0].attempts == 1
    _, events = load_run(run.root)
    assert any(e.event == "proposals" and e.data.get("error") for e in events)


def test_tune_workers_and_shards_merge_into_one_run(tmp_path):
    """Two worker processes (interpreter mode: no pinning), one merged run.json and trace; a shard filter.

    One run does both: the shard filter drops a third problem before any work, and the two problems
    of the shard go to the two workers (a second tune run, for the shard alone, cost about 25 s)."""
    from pytest_kernelopt.shard import shard_of

    shard = shard_of("sum_reduce", 2)
    assert shard_of("softmax_rows", 2) == shard
    other = next(p for p in sorted((ROOT / "tests" / "problems").glob("*.py")) if shard_of(p.stem, 2) != shard)
    problems = [str(_smaller_sum_reduce(tmp_path / "problems")), str(ROOT / "tests" / "problems" / "softmax_rows.py"),
                str(other)]
    cmd = [sys.executable, "-m", "pytest_kernelopt.cli", "tune", *problems, "--device", "cpu", "--seeds", "1",
           "--seed", "5", "--kernel", "none-selected", "--workers", "2", "--shard", f"{shard}/2", "--kernels-dir",
           str(tmp_path / "kernels"), "--runs-dir", str(tmp_path / "runs"), "--json"]
    proc = forkserver.run(cmd, timeout=600, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert f"shard {shard}/2: 2 of 3 problem(s): sum_reduce, softmax_rows" in proc.stderr, proc.stderr[-2000:]
    record = RunRecord.model_validate_json(proc.stdout)
    assert sorted(p.model for p in record.problems) == ["softmax_rows", "sum_reduce"]  # not the other shard's
    assert all(k.skipped == "not selected (--kernel)" for p in record.problems for k in p.kernels)
    _, events = load_run(tmp_path / "runs" / record.run_id)
    assert {e.data.get("worker") for e in events} == {1, 2}
    assert other.stem not in {e.model for e in events}
    # Each worker was handed the parent's options whole (the pinned seed among them), not flags parsed again.
    from pytest_kernelopt.agents.multi_gpu import WorkerJob

    jobs = [WorkerJob.model_validate_json((tmp_path / "runs" / record.run_id / f"worker-{k}.json").read_text())
            for k in (1, 2)]
    assert jobs[0].options == jobs[1].options and jobs[0].options.verify.seed == 5
    assert jobs[0].options.verify.seeds == 1 and jobs[0].options.kernels == ["none-selected"]
    bad = forkserver.run([*cmd[:5], "--device", "cpu", "--shard", "3/2"], timeout=120)
    assert bad.returncode == 2 and "--shard" in bad.stderr and len(bad.stderr.strip().splitlines()) == 1


def test_kernel_limits_place_the_compiler_max_autotune_and_the_stored_version(capsys):
    from pytest_kernelopt.agents.planner import kernel_limits
    from pytest_kernelopt.agents.progress import print_tune_table
    from pytest_kernelopt.runs.records import Attempt, KernelOutcome, KernelProfile, ProblemOutcome

    prof = KernelProfile(kernel="k", source="roofline", bottleneck="memory", share=0.9, roofline_pct=78.5)
    autotuned = Attempt(kernel="k", origin="harvest:max-autotune", sha256="a", status="correct",
                        kernel_timing=_timing(1.02))
    other = Attempt(kernel="k", origin="harvest:compiled", sha256="b", status="correct", kernel_timing=_timing(0.5))
    outcome = KernelOutcome(kernel="k", fingerprint="f", profile=prof, history=[other, autotuned], stored_version=1,
                            best_kernel_timing=_timing(1.174))
    limits = kernel_limits(outcome)
    assert (limits.compiler, limits.max_autotune, limits.stored) == (78.5, 80.1, 92.2)
    assert limits.text() == "78.5% / 80.1% -> 92.2%"
    # Tuned on the max-autotune compile: the compiler's kernel is max-autotune's.
    assert kernel_limits(outcome, compile_chosen="max-autotune").max_autotune == 78.5
    # Nothing stored, max-autotune's kernel not timed: only the compiler's figure.
    bare = outcome.model_copy(update={"history": [other], "stored_version": None})
    assert kernel_limits(bare).text() == "78.5% / -"
    # No timing (interpreter mode: bytes only): no figure at all.
    cpu = outcome.model_copy(update={"profile": prof.model_copy(update={"source": "bytes"})})
    assert kernel_limits(cpu).text() == "-"
    record = RunRecord(run_id="t", started="now", agent="search", kernels_dir="k",
                       problems=[ProblemOutcome(model="m", problem="m.py", device="cuda", speed_measured=True,
                                                kernels=[outcome])])
    print_tune_table(record)
    assert "78.5% / 80.1% -> 92.2%" in capsys.readouterr().out


def test_the_tune_table_keeps_every_column_whole_beside_a_training_steps_names(capsys):
    """A training step's backward kernel names run to 140 characters: in a 200-column log the tune table cut
    the model, class and stored columns to an ellipsis (found tuning a decoder layer with a tied head)."""
    from pytest_kernelopt.agents.progress import print_tune_table
    from pytest_kernelopt.runs.records import KernelOutcome, KernelProfile, ProblemOutcome

    name = "triton_per_fused_add_embedding_dense_backward_native_layer_norm_native_layer_norm_backward_view_11__bwd"
    prof = KernelProfile(kernel=name, source="roofline", bottleneck="memory", share=0.099, roofline_pct=61.0)
    outcome = KernelOutcome(kernel=name, fingerprint="f", profile=prof, backward=True, stored_version=3, pinned=True)
    record = RunRecord(run_id="t", started="now", agent="search", kernels_dir="k",
                       problems=[ProblemOutcome(model="emb_attn_train", problem="m.py", device="cuda",
                                                speed_measured=True, kernels=[outcome])])
    print_tune_table(record)
    text = capsys.readouterr().out
    assert "…" not in text
    for word in (f"{name} (backward)", "emb_attn_train", "memory", "9.9%", "v3 (pinned)"):
        assert word in text, word


def test_profile_notes_say_why_figures_are_estimates():
    a = _info(name="k_a")
    cpu = build_profile("m", "cpu", [a], Profiled(measured=False), None, "interpreter mode: no timing")
    assert cpu.kernels[0].note == "interpreter mode: no timing"
    failed = build_profile("m", "cuda", [a], Profiled(measured=False), None, "profiling failed (worker died)")
    assert "profiling failed" in failed.kernels[0].note
    timed = build_profile("m", "cuda", [a], Profiled(measured=True, model_gpu_us=10.0, copy_gbps=4000.0,
                                                     kernels={"k_a": KernelTime(gpu_us=10.0, launches=1)}),
                          None, "Nsight Compute not run (--no-ncu): roofline estimate")
    assert timed.kernels[0].note.startswith("Nsight Compute not run")


def test_progress_messages_stay_one_line_in_a_log(capsys):
    from pytest_kernelopt.agents.progress import RichUI

    text = "settings: default settings (root /a/very/long/path/that/goes/on); kernel store " + "/deep" * 40
    with RichUI(quiet=False) as ui:
        ui.message(text)
    assert capsys.readouterr().err.strip() == text  # not hard-wrapped at the console's width


def test_a_tune_log_line_names_the_candidate_file(tmp_path, capsys):
    """The log names the strategy and the file the run saved, so a line leads to the file."""
    from pytest_kernelopt.agents.progress import RichUI

    run = RunDir.create(tmp_path, RunRecord(run_id="r", started="now", agent="search", kernels_dir="k"))
    file = run.save_candidate("m", "k0", "ab" * 32, "# a candidate\n")
    with RichUI(quiet=False) as ui:
        ui.attempt(Attempt(kernel="k0", origin="launch:XBLOCK=64", sha256="ab" * 32, status="rejected", stage="model",
                           file=file), 1.0)
        ui.attempt(Attempt(kernel="k0", origin="rewrite:eviction", sha256="cd" * 32, status="duplicate"), 1.0)
    run.close()
    first, second = capsys.readouterr().err.strip().splitlines()
    name = first.split("(")[1].split(")")[0]
    assert first.strip() == f"launch:XBLOCK=64 ({name}): rejected at model" and name == Path(file).name
    assert (tmp_path / "r" / "candidates" / "m" / "k0" / name).is_file()
    assert second.strip() == "rewrite:eviction: duplicate"  # stopped before anything was saved: no file


# --- registries: backends, strategies, rewrite rules ---------------------------------------------

def test_the_plan_per_bottleneck_class_comes_from_the_registries():
    from pytest_kernelopt.agents.planner import STRATEGIES

    assert STRATEGIES == {
        "memory": ["rewrite:reverse-pass", "rewrite:streaming-stores", "harvest:forms", "harvest", "rewrite:eviction",
                   "rewrite:approx-div", "launch"],
        "compute": ["harvest:forms", "harvest", "rewrite:approx-div", "launch"],
        "occupancy": ["rewrite:reverse-pass", "rewrite:streaming-stores", "harvest:forms", "harvest", "rewrite:approx-div", "launch"],
        "launch": ["harvest:forms", "harvest", "launch"],
        "unknown": ["harvest:forms", "harvest", "rewrite:eviction", "rewrite:approx-div", "launch"],
    }


def test_backends_are_chosen_by_name_and_an_unknown_one_names_the_choices():
    from pytest_kernelopt.agents.backends import backend, make_coder
    from pytest_kernelopt.settings import AGENT_BACKENDS, argparse_spec, validate

    assert list(AGENT_BACKENDS) == ["search", "anthropic"]  # the values of --agent
    for surface in ("cli", "pytest"):  # what --agent and --kernelopt-agent offer
        assert argparse_spec("agent", surface)[1]["choices"] == ["search", "anthropic"]
    for name in AGENT_BACKENDS:  # each backend's coder goes by its registered name (the run record's agent)
        assert backend(name).coder.name == name
    assert isinstance(make_coder("search", variants=[]), SearchCoder)
    with pytest.raises(UsageError, match="unknown agent backend 'nope' \\(choose from search, anthropic\\)"):
        make_coder("nope")
    with pytest.raises(ValueError, match="unknown agent backend 'nope'"):  # the gate's GateOptions, a worker's job
        validate("agent", "nope")


# --- a backend registered by a test: the command line derives its flag --------------------------

class ThrowawayCoder:
    """The coder of the ``throwaway`` backend that :func:`throwaway_backend` registers."""

    name, model = "throwaway", None
    made: list[dict] = []

    def __init__(self, **options):
        ThrowawayCoder.made.append(options)
        raise UsageError("throwaway backend: made")  # what the constructor got is the point: the run stops here


class ThrowawayOptions(BaseModel):
    depth: int = Field(2, ge=1, description="how deep to look")


BACKEND = Backend(coder=ThrowawayCoder, options=ThrowawayOptions)


@pytest.fixture
def throwaway_backend(monkeypatch, tmp_path):
    """``--agent throwaway``: one line in the registry, its module this test file (``BACKEND`` above)."""
    from pytest_kernelopt import settings

    monkeypatch.setitem(settings.AGENT_BACKENDS, "throwaway", settings.AgentBackend("throwaway", "a test's"))
    monkeypatch.setitem(sys.modules, "pytest_kernelopt.agents.throwaway", sys.modules[__name__])
    monkeypatch.setattr(ThrowawayCoder, "made", [])
    (tmp_path / "sum_reduce.py").write_text((ROOT / "tests" / "problems" / "sum_reduce.py").read_text())
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\ndevice = "cpu"\n')
    monkeypatch.chdir(tmp_path)


def test_a_registered_backend_gets_its_flag_and_its_options(throwaway_backend, capsys, monkeypatch):
    from pytest_kernelopt.cli import main

    monkeypatch.setenv("COLUMNS", "400")  # argparse wraps help at the terminal's width
    with pytest.raises(SystemExit):
        main(["tune", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    assert "--agent {search,anthropic,throwaway}" in helped
    assert "--depth DEPTH --agent throwaway: how deep to look (default 2)" in helped
    assert "--model MODEL --agent anthropic: the model id (default claude-sonnet-4-6)" in helped
    # Given with its backend, the option reaches the coder's constructor as a keyword, typed by its field.
    assert main(["tune", "sum_reduce.py", "--agent", "throwaway", "--depth", "3"]) == 2
    assert ThrowawayCoder.made == [{"depth": 3}]
    assert capsys.readouterr().err.strip().endswith("kernelopt: error: throwaway backend: made")
    assert main(["tune", "sum_reduce.py", "--agent", "throwaway"]) == 2
    assert ThrowawayCoder.made[-1] == {}  # not given: not passed, the constructor's default holds


def test_a_backend_option_given_to_another_backend_is_a_usage_error(throwaway_backend, capsys):
    from pytest_kernelopt.cli import main

    for argv, error in [
        (["--depth", "3"], "--depth applies to --agent throwaway only, not --agent search"),
        (["--agent", "anthropic", "--depth", "3", "--max-usd", "1"],
         "--depth applies to --agent throwaway only, not --agent anthropic"),
        (["--agent", "throwaway", "--model", "m"], "--model applies to --agent anthropic only, not --agent throwaway"),
        (["--agent", "throwaway", "--depth", "0"], "--depth: input should be greater than or equal to 1, not '0'"),
    ]:
        assert main(["tune", "sum_reduce.py", *argv]) == 2, argv
        assert capsys.readouterr().err.strip().splitlines()[-1] == f"kernelopt: error: {error}"
    assert ThrowawayCoder.made == []  # refused before any backend was made


def test_two_backends_may_share_a_flag(throwaway_backend, monkeypatch):
    from pytest_kernelopt import settings
    from pytest_kernelopt.agents.backends import chosen_options, option_flags

    monkeypatch.setitem(settings.AGENT_BACKENDS, "twin", settings.AgentBackend("throwaway", "the same module"))
    shared = option_flags()["--depth"]
    assert [o.backend for o in shared] == ["throwaway", "twin"]
    assert chosen_options("twin", {"--depth": "4"}) == {"depth": 4}
    with pytest.raises(UsageError, match="^--depth applies to --agent throwaway or twin only, not --agent search$"):
        chosen_options("search", {"--depth": "4"})


def test_a_plan_entry_no_strategy_registers_proposes_nothing():
    coder = SearchCoder(variants=[])
    ctx = _ctx().model_copy(update={"strategies": ["no-such-strategy", "rewrite:no-such-rule"]})
    assert coder.propose(ctx) == [] and coder.propose(ctx) == []


def test_the_persistent_rows_variant_holds_a_long_row_on_chip_and_matches_the_looped_kernel(
        interpreter, tmp_path, monkeypatch):
    """Inductor loops over an inner reduction longer than 1024 elements; the persistent-rows harvest variant
    makes it persistent (read once) and it still fits the default compile's kernel as a drop-in."""
    from pytest_kernelopt.agents import harvest
    from pytest_kernelopt.capture import compile_problem
    from pytest_kernelopt.capture.problem import load_problem

    path = tmp_path / "long_rows.py"
    path.write_text("import torch\n\n\nclass Model(torch.nn.Module):\n    def forward(self, x):\n"
                    "        return torch.softmax(x * 2.0, dim=1)\n\n\ndef get_inputs():\n"
                    "    return [torch.randn(4, 2048)]\n\n\ndef get_init_inputs():\n    return []\n")
    problem = load_problem(path)
    (base,) = compile_problem(problem, interpreter).summary().kernels
    assert base.name.startswith("triton_red_")
    # max-autotune's benchmarking is minutes long in the interpreter: the variant's own mode is not under test.
    from pytest_kernelopt.capture.variants import CompileVariant

    monkeypatch.setitem(harvest.VARIANTS, "persistent-rows", CompileVariant("persistent-rows", None, persistent_rows=8192))
    (alt,) = harvest._compile_variant(problem, interpreter, "persistent-rows")
    assert alt.name.startswith("triton_per_")
    found = harvest.Harvested(variant="persistent-rows", name=alt.name, graph=alt.graph, fingerprint=alt.fingerprint,
                              args=[a.name for a in alt.args], written=alt.written_args, layout=harvest.layout(alt),
                              source="")
    assert harvest.matches(base, found)
    # The choices are Inductor's own again afterwards: the next compile loops as before.
    (again,) = compile_problem(problem, interpreter).summary().kernels
    assert again.name.startswith("triton_red_")


def test_tune_searches_no_kernel_where_the_swap_bound_is_under_the_model_gain(tmp_path, monkeypatch):
    """A GEMM-bound model: its one Triton kernel is 10% of the GPU time at 85% of its limit, so the model can run
    at most 1.015x faster by any version of it, under the 2% a version needs. Nothing is screened and the
    kernel's row says why; named with --kernel, it is searched (and here, at 1.5x, stored)."""
    from pytest_kernelopt.agents import profiler

    real = profiler.build_profile

    def gemm_bound(*args, **kwargs):
        profile = real(*args, **kwargs)
        for k in profile.kernels:
            k.share, k.roofline_pct = 0.1, 85.0
        profile.swap_bound = profiler.swap_bound(profile)
        return profile

    monkeypatch.setattr(profiler, "build_profile", gemm_bound)
    session = FakeSession(_inductor_info(), {8: 1.5, 16: 1.5}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path, session)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    (k,) = outcome.kernels
    assert outcome.profile.swap_bound == pytest.approx(1.0152, abs=1e-4)
    assert k.skipped and "at most 1.015x faster" in k.skipped and "2%" in k.skipped and k.stored_version is None
    assert session.calls == []
    events = [json.loads(line) for line in (run.root / "trace.jsonl").read_text().splitlines()]
    assert next(e for e in events if e["event"] == "profile")["data"]["swap_bound"] == pytest.approx(1.0152, abs=1e-4)

    session = FakeSession(_inductor_info(), {8: 1.5, 16: 1.5}, seconds=0.0)
    tuner, run, store = _tuner(tmp_path / "named", session, kernels=[k.kernel])
    (named,) = tuner.tune_problem(_problem(tmp_path / "named")).kernels
    run.close()
    assert named.skipped is None and session.calls


class _Held(FakeSession):
    """A FakeSession that records when it is entered and left, and the kernels its next opening compiles."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.log: list[str] = []

    def __enter__(self):
        self.log.append("enter")
        return self

    def __exit__(self, *exc):
        self.log.append("exit")

    def open(self, budget_s=None):
        self.log.append("open")
        return self.opened


def _harvesting(tmp_path, session, monkeypatch, **options):
    """A tuner whose search backend harvests (its children replaced by a record of the call and the session's
    state then)."""
    from pytest_kernelopt.agents.search import coder as search_coder

    tuner, run, store = _tuner(tmp_path, session, compile_variants=[], **options)  # no compile step's sessions
    coder = SearchCoder(variants=["looped-reductions"])
    harvests: list[tuple[list[str], list[str]]] = []

    def harvest(problem, device, variants, timeout, shape, jobs=None):
        harvests.append((variants, list(session.log)))
        session.log.append("harvest")
        return HarvestResult(wall_seconds=1.5, jobs=1)

    monkeypatch.setattr(search_coder, "harvest", harvest)
    tuner.coder = coder
    return tuner, run, store, harvests


def test_the_harvest_runs_after_the_plan_with_the_session_closed(tmp_path, monkeypatch):
    """On a GPU the plan comes first; the session closes for Nsight Compute and the harvest (their children
    compile, and profile or benchmark, on the GPU, so no memory is held beside them) and opens again on the
    same compile, where the search runs; the counters classify the kernel searched."""
    from pytest_kernelopt.agents import profiler

    session = _Held(_inductor_info(), {8: 1.3}, seconds=0.0)
    tuner, run, _, harvests = _harvesting(tmp_path, session, monkeypatch)
    tuner.options = tuner.options.model_copy(update={"ncu": True})

    def ncu(problem, **kw):
        session.log.append("ncu")
        return {session.info.function: {"dram_pct": 20.0, "sm_pct": 85.0}}, ""

    monkeypatch.setattr(profiler, "ncu_counters", ncu)
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert outcome.error is None and outcome.kernels[0].attempts >= 1
    assert harvests == [(["looped-reductions"], ["enter", "open", "exit", "ncu"])]
    assert session.log[:7] == ["enter", "open", "exit", "ncu", "harvest", "enter", "open"]
    assert session.log.count("open") == 2 and session.log[-1] == "exit"
    (row,) = outcome.profile.kernels
    assert row.source == "ncu" and row.bottleneck == "compute" and row.sm_pct == 85.0
    events = [json.loads(line)["event"] for line in (run.root / "trace.jsonl").read_text().splitlines()]
    order = [e for e in events if e in ("opened", "ncu", "profile", "harvest", "proposals")]
    assert order[:5] == ["opened", "ncu", "harvest", "opened", "profile"] and "proposals" in order[5:]


def test_the_harvest_ends_with_the_run_s_budget_and_is_not_started_once_it_is_spent(tmp_path, monkeypatch):
    """--run-budget-s bounds the preparation: the harvest's children are given what is left of it (on an H100 a
    bf16 softmax step's harvest started 17 s before its run's budget ended and took 31 s, then a second session
    opened); where the compile step and the session's start spent it all, no Nsight Compute child, no harvest and
    no second session: the kernels' rows say the run's budget ended it."""
    from pytest_kernelopt.agents import loop, profiler
    from pytest_kernelopt.agents.search import coder as search_coder

    clock = _Clock(monkeypatch, loop)
    session = _Held(_inductor_info(), {8: 1.3}, seconds=0.0)
    opened = session.open
    session.open = lambda budget_s=None: (setattr(clock, "now", clock.now + 30.0), opened())[1]  # each start takes 30 s
    tuner, run, _, harvests = _harvesting(tmp_path, session, monkeypatch, run_budget_s=100)
    limits: list[float] = []
    monkeypatch.setattr(search_coder, "harvest", lambda problem, device, variants, timeout, shape, jobs=None: (
        limits.append(timeout), HarvestResult(wall_seconds=1.0, jobs=1))[1])
    tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert limits == [70.0] and search_coder.HARVEST_TIMEOUT > 70.0  # 100 s less the first session's 30

    clock.now = 0.0
    session = _Held(_inductor_info(), {8: 1.3}, seconds=0.0)
    opened = session.open
    session.open = lambda budget_s=None: (setattr(clock, "now", clock.now + 30.0), opened())[1]
    tuner, run, _, harvests = _harvesting(tmp_path / "spent", session, monkeypatch, run_budget_s=20)
    tuner.options = tuner.options.model_copy(update={"ncu": True})
    monkeypatch.setattr(profiler, "ncu_counters", lambda *a, **k: pytest.fail("Nsight Compute ran"))
    (problem := tmp_path / "spent" / "m.py").parent.mkdir(exist_ok=True)
    problem.write_text(_problem(tmp_path).read_text())
    outcome = tuner.tune_problem(problem)
    run.close()
    assert harvests == [] and session.log.count("open") == 1 and session.calls == []
    assert [k.skipped for k in outcome.kernels] == ["not reached: run budget: 20 s spent"]
    assert tuner.stop_reason == "run budget: 20 s spent"


def test_a_tune_that_searches_nothing_harvests_nothing(tmp_path, monkeypatch):
    """A kernel at its memory limit is not searched: no harvest child, no Nsight Compute child; the session opens
    once."""
    from pytest_kernelopt.agents import profiler

    real = profiler.build_profile

    def at_limit(*args, **kwargs):
        profile = real(*args, **kwargs)
        for k in profile.kernels:
            k.roofline_pct = 97.0
        return profile

    monkeypatch.setattr(profiler, "build_profile", at_limit)
    monkeypatch.setattr(profiler, "ncu_counters", lambda *a, **k: pytest.fail("Nsight Compute ran"))
    session = _Held(_inductor_info(), {8: 1.3}, seconds=0.0)
    tuner, run, _, harvests = _harvesting(tmp_path, session, monkeypatch)
    tuner.options = tuner.options.model_copy(update={"ncu": True})
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    (k,) = outcome.kernels
    assert k.skipped and harvests == [] and session.log.count("open") == 1 and session.calls == []
    assert tuner.coder.harvested.kernels == []
    assert outcome.profile.kernels[0].note.startswith("Nsight Compute not run: no kernel is searched")
    events = [json.loads(line)["event"] for line in (run.root / "trace.jsonl").read_text().splitlines()]
    assert "harvest" not in events and "ncu" not in events and "profile" in events


def test_a_session_that_compiles_other_kernels_after_the_harvest_is_the_problems_error(tmp_path, monkeypatch):
    """The plan was made on the first opening's kernels: another set when the session opens again is said, not
    searched on."""
    session = _Held(_inductor_info(), {8: 1.3}, seconds=0.0)
    tuner, run, _, _ = _harvesting(tmp_path, session, monkeypatch)
    first = session.opened
    other = type("O", (), {"kernels": [_inductor_info().model_copy(update={"name": "triton_per_fused_other_0"})],
                           "externs": [], "environment": ENV, "seconds": 0.1})()
    opens = iter([first, other])
    session.open = lambda budget_s=None: next(opens)  # type: ignore[method-assign]
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert outcome.error and "compiled other Triton kernels when the session opened again" in outcome.error
    assert "triton_per_fused_other_0" in outcome.error and session.calls == []


def test_a_run_whose_budget_ends_inside_a_kernel_says_the_run_budget_ended_it(tmp_path, monkeypatch):
    """One candidate's check outlasted both the kernel's and the run's budget: the kernel's row names its budget,
    the run's stop names the run's (before, the run said "stopped early: kernel budget", which ends no run)."""
    from pytest_kernelopt.agents import loop

    clock = _Clock(monkeypatch, loop)
    session = _Ticking(_inductor_info(), {8: 1.3, 16: 1.3, 32: 1.3}, seconds=0.2)
    session.clock = clock
    tuner, run, _ = _tuner(tmp_path, session, budget_s=0.1, run_budget_s=5, compile_variants=[])
    (k,) = tuner.tune_problem(_problem(tmp_path)).kernels
    run.close()
    assert k.attempts == 1 and "stopped by the kernel budget" in k.message
    assert tuner.stop_reason == "run budget: 5 s spent"

    # Spent before a round begins (the check at the top of the round): the run ends there too.
    clock.now = 0.0
    session = _Ticking(_inductor_info(), {8: 1.3, 16: 1.3, 32: 1.3}, seconds=0.0)
    session.clock = clock
    tuner, run, _ = _tuner(tmp_path / "top", session, run_budget_s=5, compile_variants=[])
    tuner.coder.propose = lambda ctx: (setattr(clock, "now", clock.now + 10.0), [])[1]  # a round that takes 10 s
    tuner.coder.last_error = "the reply held no python block"  # the next round comes, to find the run spent
    tuner.tune_problem(_problem(tmp_path / "top"))
    run.close()
    assert tuner.stop_reason == "run budget: 5 s spent"


class _Clock:
    """loop.py's clock (the run's budget), moved by hand."""

    def __init__(self, monkeypatch, module):
        import time as real

        self.now = 0.0
        monkeypatch.setattr(module, "time", type("T", (), {"monotonic": lambda _: self.now,
                                                           "time": staticmethod(real.time)})())


class _Ticking(FakeSession):
    """Each check takes 10 s of the run's clock (and ``seconds`` of real time, the kernel's budget)."""

    clock: _Clock

    def verify(self, kernel, source):
        self.clock.now += 10.0
        return super().verify(kernel, source)


def test_what_a_run_stopped_on_its_budget_did_not_reach_is_recorded(tmp_path, monkeypatch):
    """The stopped problem's later kernels are rows skipped "not reached", the problems and declared shapes after
    it are run.json's not_reached and the last lines say so."""
    from pytest_kernelopt.agents import tuning
    from pytest_kernelopt.agents.ui import UI
    from pytest_kernelopt.store import KernelStore

    from pytest_kernelopt.agents import loop

    first, second = _inductor_info(), _inductor_info().model_copy(update={"name": "triton_per_fused_sum_1"})
    session = _Ticking(first, {8: 1.3, 16: 1.3}, seconds=0.0)
    session.clock = _Clock(monkeypatch, loop)
    session.opened.kernels = [first, second]
    session.kernel_info = {first.name: first, second.name: second}.__getitem__
    session.profile = lambda: Profiled(measured=True, model_gpu_us=100.0, copy_gbps=4000.0, kernels={
        first.name: KernelTime(gpu_us=50.0, launches=1), second.name: KernelTime(gpu_us=40.0, launches=1)})
    tuner, run, _ = _tuner(tmp_path, session, run_budget_s=5, compile_variants=[])
    outcome = tuner.tune_problem(_problem(tmp_path))
    run.close()
    assert [k.skipped for k in outcome.kernels] == [None, "not reached: run budget: 5 s spent"]

    shaped = tmp_path / "shaped.py"
    shaped.write_text(_problem(tmp_path).read_text().replace("torch.randn(64, 1000)", "torch.randn(rows, 1000)")
                      + "rows = 64\nSHAPES = {'r64': {}, 'r8': {'rows': 8}}\n")
    calls: list[tuple[str, str | None]] = []

    class Stops(tuning.Tuner):
        def tune_problem(self, problem, shape=None, share=1.0):
            calls.append((Path(problem).stem, shape))
            self.stop_reason = "run budget: 1 s spent"

    monkeypatch.setattr(tuning, "Tuner", Stops)
    lines: list[str] = []
    ui = type("U", (UI,), {"message": lambda self, text: lines.append(text)})()
    record = tuning.tune([shaped, _problem(tmp_path)], TuneOptions(device="cpu"), store=KernelStore(tmp_path / "k"),
                         runs_dir=tmp_path / "runs2", ui=ui)
    assert calls == [("shaped", "r64")] and record.stop_reason == "run budget: 1 s spent"
    assert record.not_reached == ["shaped@r8", "m"]
    assert "stopping: run budget: 1 s spent; not reached: shaped@r8, m" in lines


def test_tune_reads_nsight_counters_at_the_shape_it_tunes(tmp_path, monkeypatch):
    from pytest_kernelopt.agents import profiler

    asked: list[dict] = []
    monkeypatch.setattr(profiler, "ncu_counters", lambda problem, **kw: (asked.append(kw), (None, "stub"))[1])
    shaped = tmp_path / "shaped.py"
    shaped.write_text(_problem(tmp_path).read_text().replace("torch.randn(64, 1000)", "torch.randn(rows, 1000)")
                      + "rows = 64\nSHAPES = {'r64': {}, 'r8': {'rows': 8}}\n")
    session = FakeSession(_inductor_info(), {8: 1.3}, seconds=0.0)
    tuner, run, _ = _tuner(tmp_path, session, compile_variants=[])
    tuner.options = tuner.options.model_copy(update={"ncu": True})
    tuner.tune_problem(shaped, shape="r8")
    run.close()
    assert asked == [{"timeout": 600.0, "variant": None, "shape": "r8"}]
    ncu, = [e for e in map(json.loads, (run.root / "trace.jsonl").read_text().splitlines()) if e["event"] == "ncu"]
    assert ncu["data"]["seconds"] >= 0.0 and ncu["data"]["note"] == "stub"  # the child's time, for what it costs


def test_the_tune_table_names_the_problems_not_tuned_and_claims_nothing_of_them(capsys):
    from pytest_kernelopt.agents.progress import print_tune_table
    from pytest_kernelopt.runs.records import ProblemOutcome

    bad = ProblemOutcome(model="m", problem="m.py", device="cpu", speed_measured=False, shape="b2",
                         error="m.py: the compiled model compiled again for another input draw")
    print_tune_table(RunRecord(run_id="t", started="now", agent="search", kernels_dir="k", problems=[bad]))
    out = capsys.readouterr().out
    assert "not tuned, each for the error in its row: m@b2" in out and "nothing was stored as faster" not in out
    good = bad.model_copy(update={"model": "n", "shape": None, "error": None})
    print_tune_table(RunRecord(run_id="t", started="now", agent="search", kernels_dir="k", problems=[bad, good]))
    out = capsys.readouterr().out
    assert "error in its row: m@b2\n" in out and "nothing was stored as faster" in out
