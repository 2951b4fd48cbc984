# Two commands set everything up and run:
#   make sweep   -> the quickstart sweep (local Ray, CPU, W&B offline)
#   make test    -> the default (fast) test suite
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
TORCH_CONSTRAINTS ?= requirements/cpu.txt
PIP_CONSTRAINT_FLAG := $(if $(TORCH_CONSTRAINTS),-c $(TORCH_CONSTRAINTS),)
SPEC ?= sweeps/quickstart.yaml

.PHONY: venv sweep test test-slow bench clean

$(BIN)/.installed: pyproject.toml requirements/cpu.txt
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(if $(TORCH_CONSTRAINTS),$(BIN)/pip install -q $(PIP_CONSTRAINT_FLAG) torch,)
	$(BIN)/pip install -q $(PIP_CONSTRAINT_FLAG) -e ".[sweep,dev]"
	touch $@

venv: $(BIN)/.installed

sweep: venv
	WANDB_MODE=$${WANDB_MODE:-offline} $(BIN)/python sweeps/launch.py $(SPEC)

test: venv
	$(BIN)/python -m pytest -q

test-slow: venv
	$(BIN)/python -m pytest -q -m slow

bench: venv
	$(BIN)/python benchmarks/decode_speed.py --quick --output bench-out
	$(BIN)/python benchmarks/attention_step.py --quick --output bench-out

clean:
	rm -rf $(VENV) sweep-results bench-out
