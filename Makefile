# Two commands on a fresh machine: `make serve` and `make test`. Each bootstraps .venv.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
HOST   ?= 127.0.0.1
PORT   ?= 8000
# Dev/CI pin torch to the CPU build on this machine's disk (requirements-dev.txt);
# the package itself keeps torch>=2.6 open for users.
SERVE_STAMP := $(VENV)/.serve-installed
DEV_STAMP   := $(VENV)/.dev-installed
# Two workers; each takes the next test or xdist group as it frees up (loadgroup), slow tests first
# (tests/conftest.py). Budget on the 2-core box: `make test` <= 10 min, `make test-fast` <= 3 min (docs/testing.md).
PYTEST_ARGS ?= -n 2 --dist loadgroup
# Line coverage of the three packages may not drop below this (benchmarks/README.md, "Test suite").
COVERAGE_FLOOR ?= 95

.PHONY: serve test test-fast coverage lint browser-deps bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip

$(SERVE_STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q -e .
	touch $@

$(DEV_STAMP): pyproject.toml requirements-dev.txt | $(BIN)/python
	$(BIN)/pip install -q -r requirements-dev.txt
	$(BIN)/pip install -q -e '.[train,dev]'
	touch $(SERVE_STAMP) $@

serve: $(SERVE_STAMP)
	$(BIN)/recipe-advisor serve --host $(HOST) --port $(PORT)

# Debian's chromium for the real-browser test (Playwright drives it; no browser download),
# and curl for the README's curl examples, which a test runs against a live server.
browser-deps:
	@if ! command -v chromium >/dev/null 2>&1 || ! command -v curl >/dev/null 2>&1; then \
	  if [ "$$(id -u)" = 0 ]; then apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium curl >/dev/null; \
	  else echo "missing chromium/curl: sudo apt-get install chromium curl (tests/e2e/test_browser.py, tests/e2e/test_readme_curl_examples.py)"; fi; fi

lint: $(DEV_STAMP)
	$(BIN)/ruff check .

# Everything: what CI runs (.ci/run).
test: $(DEV_STAMP) browser-deps lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(PYTEST_ARGS)

# The inner loop: no multi-process or index-wide tests (marked slow, or found starting the trainer).
test-fast: $(DEV_STAMP) lint
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(PYTEST_ARGS) -m "not slow"

# Everything, with line coverage of service/, trainer/ and recipe_index/ (trainer processes included) and its floor.
coverage: $(DEV_STAMP) browser-deps
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest $(PYTEST_ARGS) --cov --cov-report=term:skip-covered \
	  --cov-fail-under=$(COVERAGE_FLOOR)

bench: $(DEV_STAMP)
	$(BIN)/python benchmarks/validate_speed.py

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .coverage .coverage.*
