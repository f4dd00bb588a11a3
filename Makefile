# Set-up and checks. `make demo` and `make test` create the virtual environment on first use.
# torch 2.13.0 and triton 3.7.x are pinned for the dev environment: a development constraint, not a
# user's (pyproject.toml admits torch >= 2.11, triton >= 3.6). On the CI/dev machines pip takes a CPU
# build of exactly that torch from local disk; elsewhere set TORCH_INDEX=https://download.pytorch.org/whl/cpu
# (ci.yml does), or pip may pull the multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
TORCH_INDEX ?=
DEV_TORCH := torch==2.13.0
DEV_TRITON := "triton>=3.7,<3.8"

.PHONY: venv demo lint test test-fast clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX)) $(DEV_TORCH)
	$(BIN)/python -m pip install -q $(DEV_TRITON)
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The main job on the bundled example problems: list kernels, dump them, verify a dump
# (interpreter mode without a GPU).
demo: $(STAMP)
	$(BIN)/python -m pytest_kernelopt.demo

# ruff and mypy, configured in pyproject.toml (rules, excludes and why): seconds with a warm mypy cache,
# about 30 s without one.
lint: $(STAMP)
	$(BIN)/ruff check
	$(BIN)/mypy

# lint, then the whole suite: about 20 minutes on 2 cores from a clean clone (CI of 3b97386: 1325 s with the install,
# 2026-12-05; on the same kind of machine the tests of 58f72a8 took 20.2 min that evening and 11.2 min of af34e8c's
# that morning, 1335 CPU-s in all: the machines' speed varies; install about 1.1 min, lint about 0.4). Process starts are much of it: each that compiles imports torch and
# Inductor, about 4.5 CPU-s (the tests fork their commands from a pre-imported process: tests/forkserver.py).
# The suite starts hundreds of Python processes: they may cache bytecode (__pycache__/, ignored by git) even where
# the environment says not to (PYTHONDONTWRITEBYTECODE=1 on the CI machines: each process compiled this package's
# modules from source again, about 0.1 CPU-s a start).
test: lint
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 -q

# The tests that compile no model (not marked slow; tests/conftest.py marks those that use a compiling
# fixture): the quick check while editing.
test-fast: $(STAMP)
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -n 2 -q -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info .mypy_cache .ruff_cache
