"""A setting's default, bounds and help are written once (pytest_kernelopt.settings), and every
surface follows: the kernelopt subcommands, the pytest options, [tool.kernelopt], and the
options models of the verifier and the tuning loop."""

from __future__ import annotations

import argparse
import copy
import inspect
from pathlib import Path
from typing import Any

import pytest

from pytest_kernelopt import cli, config, plugin, settings
from pytest_kernelopt.agents.loop import TuneOptions
from pytest_kernelopt.agents.planner import MIN_SHARE
from pytest_kernelopt.config import Config
from pytest_kernelopt.errors import UsageError
from pytest_kernelopt.verify.options import SpeedPolicy, VerifyOptions


@pytest.fixture(autouse=True)
def _interpreter_before_triton():
    """Overrides the suite's fixture of that name: nothing here imports torch or triton."""


class _Group:
    """Stands in for pytest's option group: records what ``pytest_addoption`` adds."""

    def __init__(self) -> None:
        self.options: dict[str, dict[str, Any]] = {}

    def addoption(self, *names: str, **kwargs: Any) -> None:
        assert len(names) == 1
        self.options[names[0]] = kwargs

    def getgroup(self, name: str, description: str = "") -> _Group:
        assert name == "kernelopt"
        return self


def pytest_options() -> dict[str, dict[str, Any]]:
    group = _Group()
    plugin.pytest_addoption(group)  # type: ignore[arg-type]
    return group.options


# `kernelopt bench --timeout` bounds a whole problem (default: no limit): another setting under the same flag.
OTHER_SETTING = {("bench", "--timeout")}


def subcommand_flags() -> dict[str, dict[str, argparse.Action]]:
    """{subcommand: {flag: action}} of the kernelopt command line."""
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {name: {flag: action for action in p._actions for flag in action.option_strings}
            for name, p in sub.choices.items()}


def test_every_flag_of_a_setting_gets_its_default_and_help_from_the_field():
    seen: set[str] = set()
    for command, flags in subcommand_flags().items():
        for name in settings.CLI_SETTINGS:
            action = flags.get(settings.cli_flag(name))
            if action is None or (command, settings.cli_flag(name)) in OTHER_SETTING:
                continue
            seen.add(name)
            # A [tool.kernelopt] key has no default on the command line: unset means "from the settings".
            expected = None if name in settings.TOML_KEYS else settings.default(name)
            assert action.default == expected, (command, name)
            if name not in ("kernels_dir",):  # report and publish give the store another default
                assert settings.FIELDS[name].description in action.help, (command, name)
    assert seen == set(settings.CLI_SETTINGS), "a setting with a flag that no subcommand takes"


def test_every_pytest_option_is_a_setting_and_follows_its_field():
    options = pytest_options()
    assert list(options) == [settings.pytest_option(n) for n in settings.PYTEST_SETTINGS]
    for name in settings.PYTEST_SETTINGS:
        spec = options[settings.pytest_option(name)]
        assert settings.FIELDS[name].description.replace("%", "%%") in spec["help"], name
        if spec.get("action") != "store_true" or name in settings.TOML_KEYS:
            extra = settings.FIELDS[name].json_schema_extra
            expected = (None if name in settings.TOML_KEYS else extra.get("pytest_default", settings.default(name)))
            assert spec["default"] == expected, name


def test_a_changed_default_and_help_reach_every_parser(monkeypatch: pytest.MonkeyPatch):
    changed = copy.deepcopy(settings.FIELDS["seeds"])
    changed.default, changed.description = 7, "seeds, as changed in one place"
    monkeypatch.setitem(settings.FIELDS, "seeds", changed)
    commands = [c for c, flags in subcommand_flags().items() if "--seeds" in flags]
    assert sorted(commands) == ["accept", "refresh", "tune", "verify"]
    for command in commands:
        action = subcommand_flags()[command]["--seeds"]
        assert action.default == 7
        assert action.help == "seeds, as changed in one place, 1 to 1000 (default 7)"
    option = pytest_options()["--kernelopt-seeds"]
    assert option["default"] == 7 and option["help"] == "seeds, as changed in one place, 1 to 1000 (default 7)"
    assert cli.build_parser().parse_args(["verify", "p.py", "--kernel", "k", "--candidate", "c.py"]).seeds == 7


def test_bounds_come_from_the_field(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]):
    """The command line refuses what the field refuses, with its one-line error and exit 2."""
    parser = cli.build_parser()
    base = ["verify", "p.py", "--kernel", "k", "--candidate", "c.py"]
    for flag, value, words in [("--seeds", "1001", "must be between 1 and 1000, not 1001"),
                               ("--seeds", "x", "not a whole number: 'x'"),
                               ("--seed", "-1", "must be between 0 and 2^63 - 1, not -1"),
                               ("--timeout", "nan", "must be a positive, finite number of seconds, not 'nan'")]:
        with pytest.raises(SystemExit) as exit_:
            parser.parse_args([*base, flag, value])
        assert exit_.value.code == cli.EXIT_USAGE
        assert f"kernelopt: error: argument {flag}: {words}" in capsys.readouterr().err
    for name, value in [("seeds", 1001), ("seed", -1), ("timeout", float("nan"))]:
        with pytest.raises(ValueError):
            VerifyOptions(**{name: value})
    with pytest.raises(ValueError):
        SpeedPolicy(max_slowdown=1.0)


def test_toml_keys_flags_and_pytest_options_agree():
    # [tool.kernelopt]: the Config model's keys and defaults, and the keys its error message lists.
    assert set(settings.TOML_KEYS) == {"problems", "kernels_dir", "device", "allow_stale", "thresholds",
                                      "accepted_regressions"}
    defaults = Config()
    for key in settings.TOML_KEYS:
        assert getattr(defaults, key) == settings.default(key), key
    assert config.DEVICES == ("auto", "cuda", "cpu")
    # Both a flag and a pytest option: the same name, kernelopt- in front.
    for name in set(settings.CLI_SETTINGS) & set(settings.PYTEST_SETTINGS):
        assert settings.pytest_option(name) == "--kernelopt-" + settings.cli_flag(name).removeprefix("--"), name
    # The pytest dest is what the gate reads: kernelopt_<setting> for every shared setting.
    for name in set(settings.CLI_SETTINGS) & set(settings.PYTEST_SETTINGS):
        assert settings.pytest_option(name).removeprefix("--").replace("-", "_") == f"kernelopt_{name}"
    # Defaults that differ between surfaces are declared on the field, not typed twice.
    pytest_only_defaults = {n for n in settings.PYTEST_SETTINGS if "pytest_default" in settings.FIELDS[n].json_schema_extra}
    assert pytest_only_defaults == {"timeout"}


def test_unknown_toml_key_lists_the_settings_keys(tmp_path: Path):
    (tmp_path / "pyproject.toml").write_text('[tool.kernelopt]\nkernel_dir = "k"\n')
    with pytest.raises(UsageError) as err:
        config.load_config(tmp_path)
    assert f"known: {', '.join(sorted(settings.TOML_KEYS))};" in str(err.value)


def test_options_models_take_their_defaults_from_the_settings():
    verify = VerifyOptions()
    for name in ("seeds", "seed", "timeout", "allow_reduced_precision"):
        assert getattr(verify, name) == settings.default(name), name
    for name in ("max_slowdown", "max_regression"):
        assert getattr(verify.speed, name) == settings.default(name), name
    tune = TuneOptions(device="cpu")
    for name in ("budget_s", "run_budget_s", "min_share"):
        assert getattr(tune, name) == settings.default(name), name
    assert tune.verify == verify  # seeds, seed, timeout: the verifier's, from the settings
    assert settings.default("min_share") == MIN_SHARE


def test_no_flag_of_a_setting_is_typed_again():
    """cli.py and plugin.py add a setting's flag only through the settings module."""
    sources = {"cli.py": inspect.getsource(cli), "plugin.py": inspect.getsource(plugin)}
    for name in settings.FIELDS:
        extra = settings.FIELDS[name].json_schema_extra
        for flag in (extra["cli"], extra["pytest"]):
            if flag is None:
                continue
            for file, text in sources.items():
                typed = sum(text.count(f'{call}("{flag}"') for call in ("add_argument", "addoption"))
                assert typed == sum(1 for _, other in OTHER_SETTING if other == flag and file == "cli.py"), (file, flag)


def test_the_gates_option_rules_are_read_from_the_field(monkeypatch: pytest.MonkeyPatch):
    """A pytest option's check and the words of its usage error come from the setting's field: a bound
    changed there changes both (no second copy of the rule in the gate or the command line)."""
    from pytest_kernelopt.gate import options as gate_options

    assert settings.rule_text("seeds") == "must be a whole number from 1 to 1000"
    assert settings.rule_text("seed") == "must be a whole number from 0 up to 2**63"
    assert settings.rule_text("max_slowdown") == "must be a fraction from 0 up to, not including, 1"
    assert settings.rule_text("budget_s") == settings.rule_text("timeout") == \
        "must be a positive, finite number of seconds"
    changed = copy.deepcopy(settings.FIELDS["budget_s"])
    changed.metadata.append(next(m for m in settings.FIELDS["seeds"].metadata if hasattr(m, "le")))  # le=1000
    monkeypatch.setitem(settings.FIELDS, "budget_s", changed)
    assert gate_options._checked("budget_s", 5.0) == 5.0
    with pytest.raises(UsageError, match=r"^--kernelopt-budget-s 2000.0: must be a positive"):
        gate_options._checked("budget_s", 2000.0)
    with pytest.raises(ValueError):
        settings.validate("min_share", 1.0)  # `kernelopt tune --min-share` asks the field too


def test_options_are_frozen_and_cross_a_process_boundary_whole():
    from pytest_kernelopt.agents.multi_gpu import WorkerJob

    options = TuneOptions(device="cpu", budget_s=5.0, kernels=["k"], compile_variants=[],
                          verify=VerifyOptions(seeds=2, seed=9, timeout=7.0, speed=SpeedPolicy(max_slowdown=0.2)))
    job = WorkerJob(problems=[Path("p.py")], options=options, agent="search", kernels_dir=Path("/k"),
                    runs_dir=Path("/r"))
    assert WorkerJob.model_validate_json(job.model_dump_json()) == job
    with pytest.raises(ValueError):
        options.budget_s = 1.0  # type: ignore[misc]
    with pytest.raises(ValueError, match="never an exact replay"):
        TuneOptions(device="cpu", verify=VerifyOptions(seed=1, exact=True))
