# Two commands: `make demo` (set-up + the main job) and `make test` (set-up + the tests).
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip

# Real corpora live beside the repository; code finds them through TRANSDUCE_DATA.
ifneq ($(wildcard ../shared/data),)
TRANSDUCE_DATA ?= $(abspath ../shared/data)
export TRANSDUCE_DATA
endif

.PHONY: demo test lint setup clean

# Set-up. Without a GPU, install a CPU build of torch first (the default Linux wheel is a multi-GB CUDA build):
# the 2.13.0+cpu wheel when pip's configured indexes or wheel folders have it (instant here), else PyTorch's CPU
# index. With a GPU, the default (CUDA) build from PyPI is the right one.
$(VENV)/.installed: pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	if ! command -v nvidia-smi >/dev/null 2>&1 && ! $(PY) -c "import torch" 2>/dev/null; then \
	  $(PIP) install -q "torch==2.13.0+cpu" 2>/dev/null \
	  || $(PIP) install -q "torch>=2.2" --index-url https://download.pytorch.org/whl/cpu \
	  || true; \
	fi
	$(PIP) install -q -e ".[test,export,serve,hf,documents,align,argos]"
	touch $@

setup: $(VENV)/.installed

demo: setup
	$(VENV)/bin/transduce demo

lint: setup
	$(VENV)/bin/ruff check src tests benchmarks
	$(VENV)/bin/ruff format --check src tests benchmarks
	$(VENV)/bin/mypy

test: setup lint
	$(PY) -m pytest

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache
