# Every target creates .venv with `python3 -m venv` when missing and installs the project
# (editable) with what it needs, so `make demo` and `make test` work on a fresh machine.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed
# OpenLLMetry 0.62 (OTel JSON form) beside the 0.40 of the test extra (flattened form): the same
# distribution, so it goes in its own folder, put on the path only by tests/test_instrumentations.py.
OPENLLMETRY_JSON := opentelemetry-instrumentation-openai==0.62.4 opentelemetry-semantic-conventions-ai==0.5.1

.PHONY: venv demo test lint bench clean

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/openllmetry-0.62 $(OPENLLMETRY_JSON)
	touch $(STAMP)

venv: $(STAMP)

demo: $(STAMP)
	$(PY) examples/rollout_demo.py

test: $(STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q

bench: $(STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
