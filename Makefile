# `make run` and `make test` bootstrap .venv on a fresh machine.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed

.PHONY: run test bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --upgrade pip
	# torch and torchvision resolve together from the registry (CUDA build; it runs on CPU).
	$(PY) -m pip install -e ".[test]"
	touch $(STAMP)

run: $(STAMP)
	$(VENV)/bin/train fit --config configs/experiment/digits.yaml

test: $(STAMP)
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) -m benchmarks

clean:
	rm -rf runs lightning_logs .pytest_cache
