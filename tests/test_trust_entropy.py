"""Entropy no candidate can predict or pin, and weights the verifier varies (issue 40, classes 2 and 3).

Attacks, each rejected, with the unedited dump still ``correct`` in the same session:

* a kernel with a model weight folded in as constants (conv_relu_bias's extra bias, exact on
  the problem's own weights): the session's other seeds and every draw perturb the weights;
* a kernel that knows the session's seeds (as an agent that read them in three rejections
  did) and is exact only on the inputs they draw: every check adds a plain draw under a seed
  drawn from the OS for that check, and its stress draws are fresh too.

And: a restarted worker draws new seeds; a pinned seed only adds seeds (``exact`` is
``kernelopt verify``'s reproduction); each check's draws have a root of their own; the
reason agents read names no seed (tested on the cascade's own rejections).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning",
                                        "ignore:invalid value encountered:RuntimeWarning")

ROOT = Path(__file__).resolve().parent.parent
CONV = ROOT / "tests" / "problems" / "conv_relu_bias.py"

SCALE_SHIFT = '''"""One pointwise kernel on the input alone: 2x + 1 (no weights)."""
import torch


class Model(torch.nn.Module):
    def forward(self, x):
        return x * 2.0 + 1.0


def get_inputs():
    return [torch.randn(4, 16)]


def get_init_inputs():
    return []
'''


def _numbers_after_seed_words(text: str) -> set[int]:
    return {int(n) for n in re.findall(r"seeds?\s*[:=(]?\s*(\d+)", text)}


def _assert_no_seed(verdict) -> str:
    """The agents' reason: none of the verdict's seeds, nor any number a seed word names in the raw reason."""
    agent = verdict.reason_for_agents()
    raw = _numbers_after_seed_words(verdict.reason)
    assert raw, verdict.reason  # the raw reason did name seeds (this test can fail)
    secret = {*verdict.seeds, verdict.seed, verdict.check_seed, *raw} - {None}
    for n in secret:
        assert not re.search(rf"(?<!\d){n}(?!\d)", agent), (n, agent)
    assert not _numbers_after_seed_words(agent), agent
    return agent


# --- weights ---------------------------------------------------------------------------

def test_perturbed_weights_vary_every_parameter_and_keep_buffers_structure(interpreter):
    import torch

    from pytest_kernelopt.capture.problem import perturb_weights

    def model():
        torch.manual_seed(0)
        m = torch.nn.Sequential(torch.nn.Linear(8, 8), torch.nn.LayerNorm(8), torch.nn.BatchNorm1d(8))
        m[2].running_mean.copy_(torch.tensor([0.0, -1.0, 2.0, 0.0, float("inf"), -3.0, 0.5, 0.0]))
        m.register_buffer("mask", torch.tensor([0.0, float("-inf"), 0.0]))
        return m.eval()

    own, a, b, again = model(), model(), model(), model()
    perturb_weights(a, 5)
    perturb_weights(b, 6)
    perturb_weights(again, 5)
    for (name, p0), pa, pb, p5 in zip(own.named_parameters(), a.parameters(), b.parameters(), again.parameters()):
        # LayerNorm's ones and zeros vary too; one seed, one set of weights; two seeds, two sets.
        assert (pa != p0).all() and not torch.equal(pa, pb) and torch.equal(pa, p5), name
    bn0, bn = own[2], a[2]
    assert (bn.running_var > 0).all() and not torch.equal(bn.running_var, bn0.running_var)
    assert torch.equal(bn.running_mean.sign(), bn0.running_mean.sign())  # zeros, signs, inf keep their places
    assert torch.isinf(bn.running_mean[4]) and torch.equal(a.mask, own.mask)
    assert torch.equal(bn.num_batches_tracked, bn0.num_batches_tracked)  # integer buffers untouched

    # A tensor kept as a plain attribute (a temperature the serving code may change) varies like a buffer: a
    # candidate with `tl.load(temp) * 0.0 + 2.0` passed every check while the attribute never varied. One that
    # shares memory with a parameter changes with it, and integer ones stay.
    from pytest_kernelopt.capture.problem import tensor_attributes

    plain = model()
    plain.temp, plain.index, plain.view = torch.full((1,), 2.0), torch.arange(3), plain[0].weight.t()
    assert tensor_attributes(plain) == [plain.temp]
    perturb_weights(plain, 5)
    assert 2.0 * 2 ** -0.5 <= float(plain.temp) <= 2.0 * 2 ** 0.5 and float(plain.temp) != 2.0
    assert torch.equal(plain.index, torch.arange(3)) and torch.equal(plain.view, plain[0].weight.t())


def _folded_bias(dump: str, bias: list[float]) -> str:
    """The dump with its load of the per-channel bias replaced by the problem's own values as constants."""
    line = next(ln for ln in dump.splitlines() if "tl.load(in_ptr1" in ln)
    target = re.match(r"\s*(tmp\d+) = ", line).group(1)
    index = re.search(r"tl\.load\(in_ptr1 \+ \((\w+)\)", line).group(1)
    chain = "0.0"
    for c, value in enumerate(bias):
        chain = f"tl.where({index} == {c}, {float(value)!r}, {chain})"
    indent = line[: len(line) - len(line.lstrip())]
    return dump.replace(line, f"{indent}{target} = {chain}")


@pytest.fixture(scope="module")
def conv(interpreter):
    """(kernel name, unedited dump, an open two-seed session) of conv_relu_bias's bias epilogue, as the
    session's worker compiled it (no second compile in this process)."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    with VerifySession(CONV, interpreter, VerifyOptions(seeds=2)) as session:
        name = next(n for n in session.kernels if "relu" in n)
        yield name, render_dump(session.kernels[name], CONV.stem), session


@pytest.mark.slow
def test_a_bias_folded_in_as_constants_is_rejected(conv):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.verify import source_of

    name, dump, session = conv
    own = load_problem(CONV).build_model("cpu").extra_bias.detach().reshape(-1).tolist()
    folded = _folded_bias(dump, own)
    assert folded != dump and "in_ptr1 +" not in folded.split("def run")[0].split("tmp0 =")[1]
    # Exact on the problem's own weights: what the verifier judged alone before weights varied.
    verdict = session.verify(name, source_of(folded, "folded_bias.py"))
    assert verdict.status == "rejected" and verdict.reason.startswith("kernel: "), verdict.reason
    assert "outside the allowance" in verdict.reason
    _assert_no_seed(verdict)
    honest = session.verify(name, source_of(dump, "dump.py"))  # every seed's weights put back as they were
    assert honest.status == "correct", honest.reason


# --- inputs an agent learned -------------------------------------------------------------

@pytest.fixture(scope="module")
def scale_shift(tmp_path_factory, interpreter):
    """The dump is of the kernel the session's worker compiled (no second compile in this process)."""
    from pytest_kernelopt.candidate import render_dump
    from pytest_kernelopt.verify import VerifyOptions, VerifySession

    problem = tmp_path_factory.mktemp("entropy") / "scale_shift.py"
    problem.write_text(SCALE_SHIFT)
    with VerifySession(problem, interpreter, VerifyOptions(seeds=2)) as session:
        (name, info), = session.kernels.items()
        yield problem, name, render_dump(info, problem.stem), session


def _exact_only_on(dump: str, firsts: list[float]) -> str:
    """Right where the input's first element is one the session's seeds draw, 1 off everywhere else."""
    lines = dump.splitlines()
    at = max(i for i, line in enumerate(lines) if "tl.store(" in line)
    store = lines[at]
    indent = store[: len(store) - len(store.lstrip())]
    value = re.search(r"tl\.store\([^,]+, (tmp\d+)", store).group(1)
    known = " | ".join(f"(first == {v!r})" for v in firsts)
    lines[at:at] = [f"{indent}first = tl.load(in_ptr0)", f"{indent}{value} = tl.where({known}, {value}, {value} + 1.0)"]
    return "\n".join(lines) + "\n"


@pytest.mark.slow
def test_a_kernel_exact_only_on_the_session_inputs_is_rejected_by_the_fresh_draws(scale_shift):
    from pytest_kernelopt.capture.problem import load_problem
    from pytest_kernelopt.verify import source_of

    problem, name, dump, session = scale_shift
    session.open()  # the seeds it prepares are the ones an agent learned
    firsts = [float(load_problem(problem).make_inputs(s, "cpu")[0].reshape(-1)[0]) for s in session.seeds]
    fitted = _exact_only_on(dump, firsts)
    verdict = session.verify(name, source_of(fitted, "fitted.py"))
    assert verdict.status == "rejected", verdict.reason
    # The session's own seeds passed: only a draw made for this check caught it.
    assert verdict.reason.startswith("kernel: draw '"), verdict.reason
    agent = _assert_no_seed(verdict)
    assert agent.startswith("kernel: draw '") and "input seed <hidden>" in agent, agent
    honest = session.verify(name, source_of(dump, "dump.py"))
    assert honest.status == "correct", honest.reason
    # Each check's draws have a root of their own, from the OS.
    assert honest.check_seed != verdict.check_seed and honest.seeds == verdict.seeds


@pytest.mark.slow
def test_a_restarted_worker_draws_new_seeds(scale_shift, interpreter):
    from pytest_kernelopt.verify import VerifyOptions, VerifySession, source_of

    problem, name, dump, session = scale_shift
    first = session.verify(name, source_of(dump, "dump.py"))
    session._worker.kill()  # as a candidate that crashed it would
    second = session.verify(name, source_of(dump, "dump.py"))
    assert first.status == second.status == "correct", (first.reason, second.reason)
    assert session.restarts >= 1 and set(second.seeds).isdisjoint(first.seeds) and second.seed != first.seed
    # A human asking for reproduction gets the same seeds back on a restart (what open() draws then).
    again = VerifySession(problem, interpreter, VerifyOptions(seeds=2, seed=77, exact=True))
    before = list(again.seeds)
    again._draw_seeds()
    assert again.seeds == before and again.seed == 77


# --- seeds and options -------------------------------------------------------------------

def test_a_pinned_seed_only_adds_seeds_and_check_entropy_stays_fresh():
    from pytest_kernelopt.verify.options import VerifyOptions, seeds_from

    pinned = VerifyOptions(seeds=2, seed=7)  # the gate, accept, tune, refresh
    a, b = pinned.session_seeds(), pinned.session_seeds()
    assert a.pinned == 7 and a.seeds[:2] == b.seeds[:2] == seeds_from(7, 2)
    assert len(a.seeds) == 4 and a.seeds[2:] != b.seeds[2:] and a.root != b.root
    assert pinned.check_entropy(a, 0) != pinned.check_entropy(a, 0)  # from the OS, per check
    exact = VerifyOptions(seeds=2, seed=7, exact=True)  # kernelopt verify --seed 7
    e = exact.session_seeds()
    assert e.seeds == seeds_from(7, 2) and e.root == 7 and e.pinned is None
    assert exact.check_entropy(e, 3) == exact.check_entropy(exact.session_seeds(), 3) != exact.check_entropy(e, 4)
    assert VerifyOptions(check_seed=11).check_entropy(VerifyOptions().session_seeds(), 5) == 11


def test_only_kernelopt_verify_reproduces_a_seed_exactly(monkeypatch, tmp_path):
    """accept stores a kernel: its --seed adds seeds to fresh ones, like the gate's."""
    import pytest_kernelopt.verify as verify
    from pytest_kernelopt import cli

    seen = []

    class Stop(Exception):
        pass

    class Session:
        def __init__(self, problem, device, options, **kwargs):
            seen.append(options)
            raise Stop

    monkeypatch.setattr(verify, "VerifySession", Session)
    problem = tmp_path / "p.py"
    problem.write_text(SCALE_SHIFT)
    candidate = tmp_path / "c.py"
    candidate.write_text("x = 1\n")
    for command in ("verify", "accept"):
        store = ["--kernels-dir", str(tmp_path / "k")] if command == "accept" else []
        args = cli.build_parser().parse_args([command, str(problem), "--kernel", "k", "--candidate", str(candidate),
                                              "--seed", "5", "--device", "cpu", *store])
        with pytest.raises(Stop):
            cli.cmd_verify_or_accept(args)
    assert [(o.seed, o.exact) for o in seen] == [(5, True), (5, False)]


def test_redaction_keeps_positions_and_hides_every_draw_number():
    from pytest_kernelopt.records import Verdict

    v = Verdict(model="m", kernel="k", candidate="c", candidate_sha256="", status="rejected", seeds=[123456, 654321],
                seed=99999999, check_seed=4242424242,
                reason="kernel: seed 654321, launch 2, written argument out_ptr0: 1 of 64 element(s) outside the "
                       "allowance; model: draw 'fresh' (input seed 777777, inputs ..., transform seed 88888888)")
    agent = v.reason_for_agents()
    assert agent == ("kernel: seed #2, launch 2, written argument out_ptr0: 1 of 64 element(s) outside the allowance; "
                     "model: draw 'fresh' (input seed <hidden>, inputs ..., transform seed <hidden>)")
    assert v.reason.count("654321") == 1  # the verdict itself keeps them, for humans


def test_agent_records_carry_no_seed():
    from pytest_kernelopt.runs.records import Attempt, KernelOutcome, TraceEvent
    from pytest_kernelopt.records import SeedErrors

    raw = "kernel: draw 'mid' (input seed 1849233098, ..., transform seed 77), launch 1"
    a = Attempt(kernel="k", origin="o", sha256="s", status="rejected", reason=raw,
                errors=[SeedErrors(seed=1186088546), SeedErrors(seed=1020076405)])
    assert "1849233098" not in a.reason and [e.seed for e in a.errors] == [1, 2]
    outcome = KernelOutcome(kernel="k", fingerprint="f")
    outcome.message += f"the active v1 was rejected ({raw})"
    assert "1849233098" not in outcome.message
    event = TraceEvent(t=0.0, role="benchmarker", event="verdict", data={"reason": raw, "nested": [{"r": raw}]})
    assert "1849233098" not in event.model_dump_json()


def test_the_gate_hint_reproduces_with_kernelopt_verify():
    from types import SimpleNamespace

    from pytest_kernelopt.gate.failure import reproduce

    hint = reproduce(SimpleNamespace(seed=42, pinned_seed=7, check_seed=9))
    assert "kernelopt verify --seed 42" in hint and "--seed 7" in hint and "check seed 9" in hint
    assert reproduce(SimpleNamespace(seed=None)) == ""


def test_each_seed_has_its_weights_and_a_write_before_a_switch_is_caught(compiled_models, interpreter):
    import torch

    from pytest_kernelopt.verify.prepared import Prepared, weight_sums

    compiled = compiled_models.get(ROOT / "tests" / "problems" / "linear_gelu.py")
    prepared = Prepared(compiled=compiled, device=interpreter, seeds=[11, 22], references={})
    own = [p.detach().clone() for p in compiled.model.parameters()]
    prepared.inputs(11)
    prepared.weights = weight_sums(compiled.model)
    try:
        prepared.inputs(22)
        second = [p.detach().clone() for p in compiled.model.parameters()]
        assert all(not torch.equal(a, b) for a, b in zip(own, second))  # the bias too
        prepared.inputs(11)
        assert all(torch.equal(a, b) for a, b in zip(own, compiled.model.parameters()))
        assert not prepared.restore_weights_if_changed()
        with torch.no_grad():
            compiled.model.proj.bias[0] += 1.0  # as a candidate's stray store would
        prepared.inputs(22)  # the switch puts every weight back: the write must not vanish with it
        assert prepared.restore_weights_if_changed()
        assert all(torch.equal(a, b) for a, b in zip(second, compiled.model.parameters()))
        assert not prepared.restore_weights_if_changed()
    finally:
        prepared.inputs(11)  # the shared compiled model keeps its own weights
