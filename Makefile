# Two commands set everything up and run:
#   make sweep   -> the quickstart sweep (local Ray, CPU, W&B offline)
#   make test    -> the default (fast) test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CONSTRAINTS ?= requirements/cpu.txt
PIP_CONSTRAINT_FLAG := $(if $(TORCH_CONSTRAINTS),-c $(TORCH_CONSTRAINTS),)
# Where torch comes from, beside the public index: a wheel index with CPU builds of torch, which pip
# prefers to the public index's build of the same release (2.13.0+cpu sorts above 2.13.0). On Linux
# x86-64 PyTorch's CPU index: the public index's Linux wheel is a CUDA build that brings some GB of
# nvidia-* packages. Elsewhere none (macOS: the public index's wheel is a CPU build). `make venv
# TORCH_INDEX=` takes the public index's build; `TORCH_INDEX=https://download.pytorch.org/whl/cu130`
# a CUDA one. requirements/torch_index.py leaves the index out, so that torch comes from the public
# index, where it does not answer one request within TORCH_INDEX_TIMEOUT seconds (rather than pip
# retrying every package's page), and where pip's own find-links already hold the wheel it serves.
# A node with an NVIDIA driver (nvidia-smi lists a GPU) takes the public index's build, a CUDA one
# on Linux, and after the install requirements/torch_cuda.py checks that it can use the GPU (or
# stops with the one command that installs a build the driver runs).
NVIDIA_GPUS := $(shell nvidia-smi -L 2>/dev/null | grep -c '^GPU')
ifeq ($(shell uname -sm),Linux x86_64)
ifeq ($(NVIDIA_GPUS),0)
TORCH_INDEX ?= https://download.pytorch.org/whl/cpu
endif
endif
TORCH_INDEX_TIMEOUT ?= 5
# the option that adds TORCH_INDEX to a pip command ($(1): that venv's pip), or nothing
TORCH_FROM = $$($(PYTHON) requirements/torch_index.py --timeout $(TORCH_INDEX_TIMEOUT) --pip $(1) \
	$(PIP_CONSTRAINT_FLAG) -- $(TORCH_INDEX))
# the versions tested (CONTRIBUTING.md, "The lock"); `make venv LOCK=` installs without it
LOCK ?= requirements/lock.txt
# the lock less its torch line: torch comes from TORCH_CONSTRAINTS (the CPU pin) or from a GPU user
LOCK_FLAG := $(if $(LOCK),-c $(VENV)/lock-constraints.txt,)
LOCK_CHECK_SKIP := $(if $(filter requirements/cpu.txt,$(TORCH_CONSTRAINTS)),,--skip torch)
SPEC ?= sweeps/quickstart.yaml

.PHONY: venv install-public-index lock test-latest sweep test test-fast test-slow lint format bench docs docs-build docs-results clean

$(BIN)/.installed: pyproject.toml requirements/cpu.txt requirements/tools.txt $(LOCK)
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q -c requirements/tools.txt --upgrade pip
	$(if $(LOCK),grep -v '^torch==' $(LOCK) > $(VENV)/lock-constraints.txt,)
	$(if $(TORCH_CONSTRAINTS),$(BIN)/pip install -q $(PIP_CONSTRAINT_FLAG) $(LOCK_FLAG) $(call TORCH_FROM,$(BIN)/pip) torch,)
	$(BIN)/pip install -q $(PIP_CONSTRAINT_FLAG) $(LOCK_FLAG) -e ".[sweep,dev,docs]"
	$(if $(LOCK),$(BIN)/python requirements/check_lock.py $(LOCK) $(LOCK_CHECK_SKIP),)
	$(if $(filter-out 0,$(NVIDIA_GPUS)),$(BIN)/python requirements/torch_cuda.py,)
	touch $@

venv: $(BIN)/.installed

# `make venv` as on a machine whose pip sees only the public package index: in a fresh clone of
# this repository's HEAD in a temporary folder, with no pip configuration, no local wheel folders
# and an empty pip cache; then torch and the project imported, and the folder removed. It prints how
# long it took and which torch it installed (benchmarks/README.md, "Durations"). Downloads every
# package, on Linux where PyTorch's CPU index is out of reach the public index's CUDA build of
# torch (some GB): not part of .ci/run.
install-public-index:
	bash requirements/install_public_index.sh $(PYTHON)

# requirements/lock.txt made again from pyproject.toml's sweep, dev and docs extras, each package at
# its newest release within the bounds (`make lock LOCK_UPGRADE=` keeps the current pins where they
# still fit), torch at requirements/cpu.txt's pin, its CPU build (from TORCH_INDEX, or a CPU wheel
# pip is configured to find); for this Python and platform. Then `make venv` installs it.
LOCK_VENV ?= .venv-lock
LOCK_UPGRADE ?= --upgrade
lock:
	$(PYTHON) -m venv $(LOCK_VENV)
	$(LOCK_VENV)/bin/pip install -q -c requirements/tools.txt --upgrade pip pip-tools
	CUSTOM_COMPILE_COMMAND="make lock" $(LOCK_VENV)/bin/pip-compile --quiet $(LOCK_UPGRADE) \
		$(call TORCH_FROM,$(LOCK_VENV)/bin/pip) \
		--extra sweep --extra dev --extra docs -c requirements/cpu.txt --strip-extras \
		--allow-unsafe --no-emit-index-url --no-emit-find-links -o requirements/lock.txt pyproject.toml

# the tests against the newest releases the bounds in pyproject.toml allow (no lock; torch still
# at requirements/cpu.txt's pin), in a venv of their own that is made anew each time; first it
# prints how those versions differ from the lock. The result goes into CONTRIBUTING.md's table.
LATEST_VENV ?= .venv-latest
LATEST_PYTEST ?= -n 2 --dist loadgroup --durations=15
test-latest:
	rm -rf $(LATEST_VENV)
	$(PYTHON) -m venv $(LATEST_VENV)
	$(LATEST_VENV)/bin/pip install -q -c requirements/tools.txt --upgrade pip
	$(if $(TORCH_CONSTRAINTS),$(LATEST_VENV)/bin/pip install -q $(PIP_CONSTRAINT_FLAG) $(call TORCH_FROM,$(LATEST_VENV)/bin/pip) torch,)
	$(LATEST_VENV)/bin/pip install -q $(PIP_CONSTRAINT_FLAG) -e ".[sweep,dev,docs]"
	$(if $(LOCK),$(LATEST_VENV)/bin/python requirements/check_lock.py $(LOCK) --report,)
	$(WRITE_BYTECODE) $(LATEST_VENV)/bin/python -m pytest -q $(LATEST_PYTEST)

sweep: venv
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python sweeps/launch.py $(SPEC)

# The tests write bytecode even where the environment says not to (PYTHONDONTWRITEBYTECODE=1, as on
# the project's VMs): a later run reuses pytest's rewritten test modules and this checkout's
# compiled modules (collecting test-fast in one process: 14.5 and 15.2 s without them, 7.9 and
# 9.9 s with them, on the 2-core VM), and within one run each of the suite's fresh Python
# processes loads the checkout compiled (~0.25 CPU-s each); the files land in __pycache__/
# folders, which git ignores
WRITE_BYTECODE := PYTHONDONTWRITEBYTECODE=

# A test that hangs fails after this long (pytest-timeout, in the test's own process: the stacks of
# its threads printed, the other tests go on) rather than holding CI until its own limit; the
# slowest default test takes under 2 minutes on the 2-core VM
TEST_TIMEOUT ?= 900

# two workers (pytest-xdist), each with its own private Ray for the Ray tests it is given (started
# once per worker); the slowest tests listed, so a CI log says where the minutes go
test: venv
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -n 2 --dist loadgroup --durations=15 --timeout $(TEST_TIMEOUT)

# the loop for someone changing one module: no Ray, no training, no whole reports, on two workers
# (each collects the suite, ~10 CPU-s of imports, and still the whole is a fifth shorter than one
# process); how long: benchmarks/README.md, "Durations"
test-fast: venv
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow and not ray and not train and not report" --timeout $(TEST_TIMEOUT)

test-slow: venv
	$(WRITE_BYTECODE) $(BIN)/python -m pytest -q -m slow

# what CI checks before the tests: lint (with import order) and formatting, as configured in pyproject.toml
lint: venv
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

format: venv
	$(BIN)/ruff check --fix .
	$(BIN)/ruff format .

bench: venv
	$(BIN)/python benchmarks/decode_speed.py --quick --output bench-out
	$(BIN)/python benchmarks/attention_step.py --quick --output bench-out

# the documentation site (mkdocs.yml): served at http://127.0.0.1:8000 while you edit, or built as CI
# builds it (a broken link, a missing page or an unreadable docstring fails the build)
docs: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve

docs-build: venv
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --site-dir site

# docs/results/$(DOCS_AS)/ regenerated: the sweep's cpu profile from scratch on this machine (3 seeds),
# then its results.csv, results.md, paired_bootstrap.csv and plots copied over the committed ones.
#   make docs-results SWEEP=k_vs_length   (hours on a 2-core CPU: benchmarks/README.md, "Durations";
#                                          fused, into docs/results/k_vs_length_fused/)
#   make docs-results SWEEP=k_vs_length SET=fusion=off   (unfused, into docs/results/k_vs_length/)
#   make docs-results SWEEP=scoring_functions
#   make docs-results SWEEP=memory_distill
#   make docs-results SWEEP=minimal_k     (with its Optuna journal and decode probe table)
# SET: --set overrides, space-separated; DOCS_AS: the folder under docs/results/ (k_vs_length's
# committed example is unfused, its fused run is k_vs_length_fused: neither is written over the other)
SWEEP ?= k_vs_length
SET ?=
DOCS_AS ?= $(if $(filter k_vs_length,$(SWEEP)),$(if $(filter fusion=off,$(SET)),k_vs_length,k_vs_length_fused),$(SWEEP))
docs-results: venv
	rm -rf sweep-results/docs/$(SWEEP)
	@date -u +"start %Y-%m-%dT%H:%M:%SZ"
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python sweeps/launch.py sweeps/$(SWEEP).yaml --profile cpu --output sweep-results/docs $(foreach s,$(SET),--set $(s))
	@date -u +"end   %Y-%m-%dT%H:%M:%SZ"
	mkdir -p docs/results/$(DOCS_AS)
	rm -f docs/results/$(DOCS_AS)/*.png docs/results/$(DOCS_AS)/paired_bootstrap.csv
	cd sweep-results/docs/$(SWEEP) && cp results.csv results.md *.png $$(ls paired_bootstrap.csv optuna.journal decode_probe.json 2>/dev/null) $(CURDIR)/docs/results/$(DOCS_AS)/
	# the copies name the trials' folders relative to the repository (sweep-results/docs/...), not
	# by this machine's absolute path (tests/sweeps/test_house.py holds it)
	sed -i 's#$(CURDIR)/##g' $$(ls docs/results/$(DOCS_AS)/* | grep -v '\.png$$')

# the environments and what the benchmarks and the docs build made; never sweep-results/, where the
# sweeps write their results and checkpoints by default (delete it by hand when they are not wanted)
clean:
	rm -rf $(VENV) $(LATEST_VENV) $(LOCK_VENV) bench-out site
	@if [ -d sweep-results ]; then echo "kept sweep-results/ (the sweeps' results and checkpoints)"; fi
