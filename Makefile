# PAVE Dock developer commands. `make run` and `make test` work on a fresh clone:
# each installs what is missing first.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
PYTHON ?= python3
export PAVEDOCK_DATASETS_DIR ?= $(abspath ../shared/datasets)
export HF_HUB_OFFLINE := 1
export TRANSFORMERS_OFFLINE := 1
# Idle OpenMP threads sleep instead of spinning: torch processes sharing the cores stay fast.
export OMP_WAIT_POLICY ?= PASSIVE

.PHONY: install run demo test lint typecheck unit bench bench-full docs clean

$(STAMP): pyproject.toml requirements.lock
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	# The CPU wheel of torch lies on this machine's disk; install it before anything asks for torch.
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q -c requirements.lock -e '.[dev]'
	touch $(STAMP)

install: $(STAMP)

run: install
	$(VENV)/bin/pavedock serve

demo: install
	$(VENV)/bin/pavedock demo

lint: install
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

typecheck: install
	$(VENV)/bin/mypy

unit: install
	$(VENV)/bin/pytest -q

test: lint typecheck unit

docs: install
	$(VENV)/bin/python -c "from app.ml.merging import methods_markdown; import pathlib; pathlib.Path('docs/merge-methods.md').write_text(methods_markdown())"
	$(VENV)/bin/python -c "from app.ml.package_docs import write_reference; import pathlib; write_reference(pathlib.Path('docs/packages.md'))"

bench: install
	$(VENV)/bin/pavedock bench identify --profile quick --out bench-out/identify-quick.json

bench-full: install
	$(VENV)/bin/pavedock bench identify --profile full --out docs/benchmarks/identification.json

clean:
	rm -rf $(VENV) .mypy_cache .ruff_cache .pytest_cache
