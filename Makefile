# Set-up and checks. `make demo` and `make test` create the virtual environment on first use.
# torch 2.13.0 is pinned for the dev environment: on the CI/dev machines pip takes a CPU
# build of exactly that version from local disk; any other request may pull a multi-GB CUDA build.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
DEV_PINS := torch==2.13.0 "triton>=3.7,<3.8"

.PHONY: venv demo test test-fast clean

venv: $(STAMP)

$(STAMP): pyproject.toml Makefile
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q $(DEV_PINS)
	$(BIN)/python -m pip install -q -e ".[dev]"
	touch $(STAMP)

# The main job on the bundled example problems: list kernels, dump them, verify a dump
# (interpreter mode without a GPU).
demo: $(STAMP)
	$(BIN)/python -m pytest_kernelopt.demo

test: $(STAMP)
	$(BIN)/python -m pytest -n 2 -q

test-fast: $(STAMP)
	$(BIN)/python -m pytest -q -m "not slow"

clean:
	rm -rf $(VENV) build *.egg-info
