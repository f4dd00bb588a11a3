"""pytest plugin: ``pytest --kernelopt`` re-verifies committed kernels and models.

This module is a table of contents: options here, every hook hands over to the
:class:`~pytest_kernelopt.gate.GateSession` created at configure time (which registers
itself for the items' reports: ``pytest_runtest_logreport`` is told no config to find
the gate by). It imports neither torch nor triton, so plain ``pytest`` stays fast.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

_SESSION = pytest.StashKey[Any]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("kernelopt", "kernel optimization gate (pytest-kernelopt)")
    group.addoption("--kernelopt", action="store_true", help="collect and verify committed kernels and models")
    group.addoption("--kernelopt-device", choices=["auto", "cuda", "cpu"], default=None,
                    help="device (default: [tool.kernelopt] device, else auto)")
    group.addoption("--kernelopt-problems", nargs="+", metavar="GLOB", default=None,
                    help="problem files (overrides [tool.kernelopt] problems)")
    group.addoption("--kernelopt-strict", action="store_true",
                    help="stale kernels fail even where [tool.kernelopt] allow_stale = true (they fail by default)")
    group.addoption("--kernelopt-allow-stale", action="store_true", default=None,
                    help="skip, with a note, committed kernels that cannot be verified at the problem's shape (stale, "
                         "or no longer generated) instead of failing them (default: [tool.kernelopt] allow_stale, "
                         "else false)")
    group.addoption("--kernelopt-base-ref", metavar="REF", default=None,
                    help="also compare each model with its problem file at git revision REF, measured side by side")
    group.addoption("--kernelopt-max-slowdown", type=float, default=0.01, metavar="FRACTION",
                    help="fail only when the 95%% CI's upper bound is below 1 - FRACTION, 0 <= FRACTION < 1 "
                         "(default 0.01)")
    group.addoption("--kernelopt-max-regression", type=float, default=0.05, metavar="FRACTION",
                    help="fail the model item when its speedup falls below the one recorded in model.json (this "
                         "environment) by more than FRACTION, 0 <= FRACTION < 1 (default 0.05)")
    group.addoption("--kernelopt-seeds", type=int, default=3, metavar="N",
                    help="input seeds per check, 1 to 1000 (default 3)")
    group.addoption("--kernelopt-seed", type=int, default=None, metavar="S",
                    help="reproduce a gate run: derive every session's input seeds, fills and draws from S "
                         "(default: drawn from the OS per problem; a failure names the seed it ran with)")
    group.addoption("--kernelopt-timeout", type=float, default=600.0, metavar="SECONDS",
                    help="seconds per isolated check (default 600)")
    group.addoption("--kernelopt-shard", metavar="K/N", default=None,
                    help="check only the problems of shard K of N (by a hash of the model id; see README)")
    group.addoption("--kernelopt-json", metavar="PATH", default=None,
                    help="write every gate item's result to PATH as JSON (merge shards with `kernelopt merge`)")
    group.addoption("--kernelopt-tune", action="store_true",
                    help="before checking a problem, run `kernelopt tune` on it: versions the cascade accepts are "
                         "stored and then gated like any committed kernel")
    group.addoption("--kernelopt-agent", choices=["search", "anthropic"], default="search",
                    help="--kernelopt-tune: the agent backend (default search; anthropic needs ANTHROPIC_API_KEY)")
    group.addoption("--kernelopt-budget-s", type=float, default=300.0, metavar="SECONDS",
                    help="--kernelopt-tune: device seconds per kernel (default 300)")
    group.addoption("--kernelopt-refresh", action="store_true",
                    help="before checking a problem whose committed kernels are stale (a compiler upgrade, a changed "
                         "model), run `kernelopt refresh` on it: each stale kernel's recipe is replayed on the new "
                         "compiler kernel and stored when the cascade passes it, else the kernel is retired")
    group.addoption("--kernelopt-open-pr", action="store_true",
                    help="--kernelopt-tune or --kernelopt-refresh: after the run, for each problem whose items all passed, commit what its "
                         "tuning stored to branch kernelopt/<model>/<kernel>, push, and open or update a pull request "
                         "(GITHUB_TOKEN; without one, print where to open it)")
    group.addoption("--kernelopt-report", metavar="PATH", default=None,
                    help="write a Markdown report of the gate run to PATH: what was checked, verdicts, speedups, "
                         "failures with their stage and reason")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "kernelopt: items generated by pytest-kernelopt")
    if config.getoption("kernelopt"):
        from .gate import GateSession

        config.stash[_SESSION] = GateSession(config)  # bad settings or options: pytest.UsageError
        config.stash[_SESSION].start()  # the items' reports; problem files outside pytest's own paths


def _gate(config: pytest.Config) -> Any:
    return config.stash.get(_SESSION, None)


@pytest.hookimpl(wrapper=True)
def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> Any:
    collected = yield
    gate = _gate(parent.config)
    return collected if gate is None else gate.collect_file(file_path, parent, collected)


def pytest_report_header(config: pytest.Config) -> list[str]:
    gate = _gate(config)
    return gate.header_lines() if gate is not None else []


def pytest_sessionfinish(session: pytest.Session) -> None:
    if (gate := _gate(session.config)) is not None:
        gate.finish(session)  # verification workers stopped; --kernelopt-json, --kernelopt-report


# --- pytest-xdist (a dependency; optional hooks, so that -p no:xdist still works) ---------

@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    if config.getoption("kernelopt"):
        from .gate.xdist import auto_workers

        return auto_workers(config)  # -n auto: one worker per GPU on a CUDA run
    return None


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    if (gate := _gate(node.config)) is not None:
        gate.workers.configure_node(node)  # the worker's GPU, before it starts


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    if (gate := _gate(node.config)) is not None:
        gate.workers.node_down(node)  # its GPU is free for a replacement


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    if (gate := _gate(config)) is not None:
        gate.write_summary(terminalreporter)
