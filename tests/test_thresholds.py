"""Per-model speed tolerances and accepted regressions (``gate/thresholds.py``): how
``[tool.kernelopt]`` gives them, how the gate's speed checks use them, and where a reviewer
sees them (terminal, JSON, Markdown). No compile here: the checks run on fakes with the
timings a GPU would measure (interpreter mode measures none)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from pytest_kernelopt.config import load_config
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.gate.checks import Checks
from pytest_kernelopt.gate.failure import GateFailure
from pytest_kernelopt.gate.output import summary_lines
from pytest_kernelopt.gate.problems import Problem
from pytest_kernelopt.runs.gate_result import GateResult, GateSettings, ItemResult, ResultEnvironment, \
    item_from_properties
from pytest_kernelopt.gate.thresholds import ACCEPT_MAX_DAYS, SpeedRules
from pytest_kernelopt.records import Timing
from pytest_kernelopt.report.gate import render_gate_report
from pytest_kernelopt.verify.options import SpeedPolicy

pytest_plugins = ["pytester"]

TODAY = date(2026, 12, 4)
MODELS = ["softmax_rows", "rms_norm", "sum_reduce"]


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here compiles."""


def timing(speedup: float, low: float, high: float) -> Timing:
    return Timing(baseline_ms=1.0, candidate_ms=1.0 / speedup, speedup=speedup, ci_low=low, ci_high=high, pairs=50)


SLOWER_3PCT = timing(0.97, 0.965, 0.975)  # 3% slower, beyond noise
SLOWER_10PCT = timing(0.90, 0.895, 0.905)


def project(tmp_path: Path, tables: str) -> Any:
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nproblems = ["models/*.py"]\n' + tables)
    return load_config(tmp_path)


def rules(tmp_path: Path, tables: str, *, on: date = TODAY, models: list[str] = MODELS) -> SpeedRules:
    return SpeedRules(SpeedPolicy(), project(tmp_path, tables), models, on=on)


ACCEPT_SOFTMAX = """
[tool.kernelopt.accepted_regressions.softmax_rows]
max_slowdown = 0.08
reason = "torch 2.15's reduction order; fixed upstream in pytorch#1234"
by = "alice, 2026-12-01"
expires = 2026-12-31
"""


# --- [tool.kernelopt]: shapes, and one line naming the file and the key for anything else -----------

def test_tables_load_into_the_settings(tmp_path: Path) -> None:
    config = project(tmp_path, '[tool.kernelopt.thresholds."softmax_*"]\nmax_slowdown = 0.05\n' + ACCEPT_SOFTMAX)
    assert config.thresholds["softmax_*"].max_slowdown == 0.05 and config.thresholds["softmax_*"].max_regression is None
    entry = config.accepted_regressions["softmax_rows"]
    assert (entry.max_slowdown, entry.expires, entry.by) == (0.08, date(2026, 12, 31), "alice, 2026-12-01")


@pytest.mark.parametrize(("tables", "key", "words"), [
    ("[tool.kernelopt.thresholds.softmax_rows]\nmax_slowdwn = 0.05\n", "thresholds.softmax_rows.max_slowdwn",
     "unknown key (known: max_slowdown, max_regression)"),
    ('[tool.kernelopt.thresholds."softmax_*"]\nmax_slowdown = 1.5\n', 'thresholds."softmax_*".max_slowdown',
     "less than 1, not 1.5"),
    ("[tool.kernelopt.thresholds.softmax_rows]\nmax_regression = -0.1\n", "thresholds.softmax_rows.max_regression",
     "greater than or equal to 0"),
    ("thresholds = 0.05\n", "thresholds", "must be a table of tables"),
    ("[tool.kernelopt.thresholds]\nsoftmax_rows = 0.05\n", "thresholds.softmax_rows", "must be a table"),
    (ACCEPT_SOFTMAX.replace('reason = "torch', 'why = "torch'), "accepted_regressions.softmax_rows.why",
     "unknown key"),
    (ACCEPT_SOFTMAX.replace("expires = 2026-12-31\n", ""), "accepted_regressions.softmax_rows.expires",
     "missing (each such table gives max_slowdown, reason, by, expires)"),
    (ACCEPT_SOFTMAX.replace("2026-12-31", '"when it is fixed"'), "accepted_regressions.softmax_rows.expires",
     "valid date"),
    (ACCEPT_SOFTMAX.replace('"alice, 2026-12-01"', '"  "'), "accepted_regressions.softmax_rows.by", "must not be empty"),
    (ACCEPT_SOFTMAX.replace("0.08", "0"), "accepted_regressions.softmax_rows.max_slowdown", "greater than 0"),
], ids=["unknown_key", "out_of_range", "negative", "not_a_table", "value_not_a_table", "accept_unknown_key",
        "accept_no_expiry", "accept_expiry_not_a_date", "accept_by_empty", "accept_nothing"])
def test_bad_tables_are_one_line_naming_file_and_key(tmp_path: Path, tables: str, key: str, words: str) -> None:
    with pytest.raises(UsageError) as err:
        project(tmp_path, tables)
    message = str(err.value)
    assert message.startswith(f"{tmp_path / 'pyproject.toml'}: [tool.kernelopt] {key}: "), message
    assert words in message and "\n" not in message


# --- names: each must be a problem of the run; expiry within reach --------------------------------------

def test_a_name_that_matches_no_problem_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match=r"pyproject.toml: \[tool.kernelopt\] thresholds.softmax_row: matches no "
                                         r"problem of the run \(rms_norm, softmax_rows, sum_reduce\)"):
        rules(tmp_path, "[tool.kernelopt.thresholds.softmax_row]\nmax_slowdown = 0.05\n")
    with pytest.raises(UsageError, match=r"accepted_regressions.softmax_rows: names no problem of the run"):
        rules(tmp_path, ACCEPT_SOFTMAX, models=["rms_norm"])


def test_an_id_wins_over_a_glob_and_two_globs_for_one_model_are_an_error(tmp_path: Path) -> None:
    found = rules(tmp_path, '[tool.kernelopt.thresholds."*"]\nmax_slowdown = 0.02\n'
                            "[tool.kernelopt.thresholds.softmax_rows]\nmax_slowdown = 0.05\n")
    assert {m: (t.max_slowdown, t.max_regression, t.key) for m, t in found.settings_thresholds().items()} == {
        "rms_norm": (0.02, 0.05, "*"), "softmax_rows": (0.05, 0.05, "softmax_rows"), "sum_reduce": (0.02, 0.05, "*")}
    with pytest.raises(UsageError, match=r'thresholds."s\*": matches softmax_rows, and so does thresholds."\*_rows"'):
        rules(tmp_path, '[tool.kernelopt.thresholds."s*"]\nmax_slowdown = 0.02\n'
                        '[tool.kernelopt.thresholds."*_rows"]\nmax_slowdown = 0.05\n')


def test_an_acceptance_cannot_be_meant_for_good(tmp_path: Path) -> None:
    far = TODAY + timedelta(days=ACCEPT_MAX_DAYS + 1)
    with pytest.raises(UsageError, match=rf"accepted_regressions.softmax_rows.expires: {far} is more than "
                                         rf"{ACCEPT_MAX_DAYS} days away"):
        rules(tmp_path, ACCEPT_SOFTMAX.replace("2026-12-31", str(far)))


# --- decisions ------------------------------------------------------------------------------------------

def slower(model: str, speed: SpeedRules, t: Timing = SLOWER_3PCT) -> str | None:
    return speed.judge(model, lambda policy: policy.slower(t), lambda: f"{model}: slower: {t.speedup:.3f}x")


def test_a_models_own_threshold_changes_the_decision_for_it_alone(tmp_path: Path) -> None:
    speed = rules(tmp_path, "[tool.kernelopt.thresholds.softmax_rows]\nmax_slowdown = 0.05\n")
    assert slower("softmax_rows", speed) is None  # 3% slower: within its 5%
    with pytest.raises(GateFailure, match=r"rms_norm: slower: 0.970x$"):
        slower("rms_norm", speed)  # the run's 1%
    with pytest.raises(GateFailure, match=r"softmax_rows: slower: 0.900x; gated at its own tolerances: max slowdown "
                                          r"5%, max regression 5% \(\[tool.kernelopt.thresholds.softmax_rows\]"):
        slower("softmax_rows", speed, SLOWER_10PCT)
    # The regression against model.json's record follows the model's own max_regression too.
    speed = rules(tmp_path, "[tool.kernelopt.thresholds.softmax_rows]\nmax_regression = 0.15\n")
    recorded = timing(1.07, 1.06, 1.08)
    assert speed.policy("softmax_rows").against_recorded(SLOWER_10PCT.model_copy(
        update={"speedup": 0.98, "ci_low": 0.975, "ci_high": 0.985}), recorded) == (False, None)
    assert speed.policy("rms_norm").against_recorded(SLOWER_10PCT.model_copy(
        update={"speedup": 0.98, "ci_low": 0.975, "ci_high": 0.985}), recorded) == (True, None)


def test_an_accepted_regression_passes_within_its_bound_and_says_so(tmp_path: Path) -> None:
    speed = rules(tmp_path, ACCEPT_SOFTMAX)
    story = slower("softmax_rows", speed)
    assert story == ("softmax_rows: slower: 0.970x: accepted up to 8% slower until 2026-12-31 by alice, 2026-12-01: "
                     "torch 2.15's reduction order; fixed upstream in pytorch#1234")
    assert slower("softmax_rows", speed, timing(1.0, 0.99, 1.01)) is None  # not needed: nothing to say
    with pytest.raises(GateFailure):
        slower("rms_norm", speed)  # another model's acceptance does nothing here


def test_beyond_its_bound_an_accepted_regression_fails_naming_it(tmp_path: Path) -> None:
    with pytest.raises(GateFailure) as err:
        slower("softmax_rows", rules(tmp_path, ACCEPT_SOFTMAX), SLOWER_10PCT)
    assert str(err.value).startswith("softmax_rows: slower: 0.900x; beyond the regression accepted in "
                                     "[tool.kernelopt.accepted_regressions.softmax_rows] in ")
    assert "(up to 8% slower, until 2026-12-31: torch 2.15's" in str(err.value)


def test_an_expired_acceptance_accepts_nothing_and_fails_the_model(tmp_path: Path) -> None:
    speed = rules(tmp_path, ACCEPT_SOFTMAX, on=date(2027, 1, 1))
    assert rules(tmp_path, ACCEPT_SOFTMAX, on=date(2026, 12, 31)).expired("softmax_rows") is None  # its last day
    note = speed.expired("softmax_rows")
    assert note is not None and note.startswith("softmax_rows: the accepted regression "
                                                "[tool.kernelopt.accepted_regressions.softmax_rows] in ")
    assert "expired on 2026-12-31" in note and "remove it, or renew it" in note
    with pytest.raises(GateFailure, match="slower: 0.970x; softmax_rows: the accepted regression"):
        slower("softmax_rows", speed)


# --- through the gate's checks: status, JSON, terminal, report ------------------------------------------

class FakeItem:
    store_check = False  # the store-wide check is ModelItem's of the first problem file (test_plugin.py)

    def __init__(self, problem: Problem):
        self.problem = problem
        self.user_properties: list[tuple[str, Any]] = []

    def prop(self, key: str, value: Any) -> None:
        self.user_properties.append(("kernelopt_" + key, value))

    def result(self, outcome: str) -> ItemResult:
        props = {k.removeprefix("kernelopt_"): v for k, v in self.user_properties}
        result = item_from_properties(f"models/{self.problem.id}.py::model", outcome, {"item": "model", **props})
        assert result is not None
        return result


def model_check(speed: SpeedRules, model_timing: Timing,
                status: str = "accepted") -> tuple[FakeItem, GateFailure | None]:
    """The model item of a problem with one committed kernel whose model runs at ``model_timing``."""
    problem = Problem(path=Path("models/softmax_rows.py"), id="softmax_rows", kernels=["k0"], loaded=True,
                      infos={"k0": SimpleNamespace(fingerprint="f0")})
    manifest = SimpleNamespace(fingerprint="f0", old_fingerprints=lambda: None, active=1)
    store = SimpleNamespace(
        active_file=lambda model, kernel: SimpleNamespace(manifest=manifest, source="def k0(): pass\n",
                                                          path=Path("kernels/softmax_rows/k0/v1.py")),
        model_record=lambda model: SimpleNamespace(baselines={}, compile_at=None), compile_variant=lambda model, shape=None: None,
        kernel_names=lambda model: ["k0"], model_dir=lambda model: Path("kernels") / model)
    verdict = SimpleNamespace(status=status, reason="model stage: error 3e-02 exceeds the allowed 4e-06", errors=[], speed_measured=True, environment=None, stages=[],
                              wall_seconds=1.0, model_timing=model_timing, base_timing=None, base_run=None)
    session = SimpleNamespace(verify_model=lambda replacements, base_problem, base_kernels=None: verdict,
                              opened=SimpleNamespace(min_bytes=0))
    sessions = SimpleNamespace(get=lambda problem, item: session)
    checks = Checks(strict=True, rules=speed, store=lambda: store, sessions=sessions,  # type: ignore[arg-type]
                    base=None, before=lambda problem, item: None)
    item = FakeItem(problem)
    try:
        checks.model(item)  # type: ignore[arg-type]
    except GateFailure as exc:
        return item, exc
    return item, None


def test_the_gate_marks_what_an_acceptance_let_pass_in_json_terminal_and_report(tmp_path: Path) -> None:
    speed = rules(tmp_path, ACCEPT_SOFTMAX + "[tool.kernelopt.thresholds.rms_norm]\nmax_slowdown = 0.05\n")
    item, failure = model_check(speed, SLOWER_3PCT)
    assert failure is None
    passed = item.result("passed")
    assert passed.status == "accepted-regression"
    assert passed.accepted_regression is not None and passed.accepted_regression.startswith(
        "softmax_rows: committed kernels make the model slower: 0.970x (95% CI [0.965, 0.975]): accepted up to 8%")
    # Without the acceptance the same timing fails; beyond its bound too.
    assert model_check(rules(tmp_path, ""), SLOWER_3PCT)[1] is not None
    assert "beyond the regression accepted" in str(model_check(speed, SLOWER_10PCT)[1])
    # Numerics are never accepted: a rejection fails, however small the slowdown.
    rejected = model_check(speed, SLOWER_3PCT, status="rejected")[1]
    assert rejected is not None and "rejected at model stage" in str(rejected) and "accepted" not in str(rejected)
    # Expired: the model item fails even where nothing was slower.
    expired = rules(tmp_path, ACCEPT_SOFTMAX, on=date(2027, 1, 2))
    assert "expired on 2026-12-31" in str(model_check(expired, timing(1.0, 0.99, 1.01))[1])

    settings = GateSettings(seeds=3, timeout=600, max_slowdown=0.01, strict=True,
                            thresholds=speed.settings_thresholds(), accepted_regressions=speed.settings_accepted())
    result = GateResult(created=datetime(2026, 12, 4, 12, tzinfo=timezone.utc), problems=["rms_norm", "softmax_rows"],
                        environment=ResultEnvironment(device="cuda", torch="2.15.0", triton="3.9.0", python="3.12.3"),
                        settings=settings, items=[passed])
    again = GateResult.model_validate_json(result.model_dump_json())  # the JSON carries both
    assert again.settings.thresholds["rms_norm"].max_slowdown == 0.05
    assert again.settings.accepted_regressions["softmax_rows"].expires == date(2026, 12, 31)
    assert again.items[0].status == "accepted-regression"

    lines = summary_lines(result)
    row = next(line for line in lines if line.startswith("models/softmax_rows.py"))
    assert row.endswith("passed (accepted regression)")
    assert any(line.startswith("models/softmax_rows.py: ACCEPTED REGRESSION: softmax_rows: committed kernels make "
                               "the model slower") for line in lines)
    assert "kernelopt: thresholds: max slowdown 1.0%, max regression 5.0%; own ([tool.kernelopt.thresholds]): " \
           "rms_norm 5.0%, 5.0%" in lines
    assert any(line.startswith("kernelopt: ACCEPTED REGRESSION softmax_rows: up to 8.0% slower until 2026-12-31 "
                               "(by alice, 2026-12-01)") for line in lines)

    text = render_gate_report(result)
    assert "| `models/softmax_rows.py` | passed (accepted regression) |" in text
    assert "| `rms_norm` | 5.0% | 5.0% | `rms_norm` |" in text
    accepted = text.split("## Accepted regressions", 1)[1].split("## Models", 1)[0]
    row = next(line for line in accepted.splitlines() if line.startswith("| `softmax_rows` |"))
    assert "| up to 8.0% slower | 2026-12-31 |" in row and "**USED**" in row and "pytorch#1234" in row
    later = result.model_copy(update={"created": datetime(2027, 1, 2, tzinfo=timezone.utc), "items": []})
    assert "**EXPIRED: fails the model**" in render_gate_report(later)


@pytest.mark.slow
def test_an_expired_acceptance_fails_the_gate_on_any_device(pytester: pytest.Pytester) -> None:
    """Interpreter mode times nothing, yet an expired acceptance fails the model item (and is named in the
    terminal, the JSON and the report); a model's own thresholds reach the JSON."""
    from conftest import gate_project

    gate_project(pytester.path, Path(__file__).resolve().parent / "problems" / "elementwise_chain.py")
    with (pytester.path / "pyproject.toml").open("a") as f:
        f.write('[tool.kernelopt.thresholds."elementwise_*"]\nmax_slowdown = 0.05\n'
                '[tool.kernelopt.accepted_regressions.elementwise_chain]\nmax_slowdown = 0.08\n'
                'reason = "a known compiler slowdown"\nby = "bob"\nexpires = 2000-01-31\n')
    result = pytester.runpytest_subprocess("--kernelopt", "--kernelopt-seeds", "1", "-W", "ignore", "-p",
                                           "no:cacheprovider", "--kernelopt-json", "gate.json",
                                           "--kernelopt-report", "gate.md")
    result.assert_outcomes(passed=1, failed=1)  # its one kernel (the compiler's) passes; the model item fails
    out = result.stdout.str()
    assert "[tool.kernelopt.accepted_regressions.elementwise_chain] in " in out and "expired on 2000-01-31" in out
    assert "kernelopt: ACCEPTED REGRESSION elementwise_chain: up to 8.0% slower until 2000-01-31 (by bob)" in out
    gate = GateResult.model_validate_json((pytester.path / "gate.json").read_text())
    assert gate.settings.thresholds["elementwise_chain"].max_slowdown == 0.05
    assert gate.settings.accepted_regressions["elementwise_chain"].reason == "a known compiler slowdown"
    (model,) = [i for i in gate.items if i.item == "model"]
    assert model.outcome == "failed" and "expired on 2000-01-31" in (model.message or "")
    assert "**EXPIRED: fails the model**" in (pytester.path / "gate.md").read_text()
