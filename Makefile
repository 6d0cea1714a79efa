# Every target creates .venv with `python3 -m venv` when missing and installs into it what that
# target needs, so `make demo` and `make test` work on a fresh machine, in either order:
#   make demo  -> the plain install (`pip install -e .`: OpenTelemetry SDK, Trackio, orjson)
#   make test  -> the test toolchain (`pip install -e ".[test]"`) and the two side folders below
# Each install has its own stamp in the one .venv; the test install includes the demo's.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
DEMO_STAMP := $(VENV)/.installed-demo
TEST_STAMP := $(VENV)/.installed-test
# OpenLLMetry 0.62 (OTel JSON form) beside the 0.40 of the test extra (flattened form): the same
# distribution, so it goes in its own folder, put on the path only by tests/frameworks/test_instrumentations.py.
OPENLLMETRY_JSON := opentelemetry-instrumentation-openai==0.62.4 opentelemetry-semantic-conventions-ai==0.5.1
# openai-v2 2.3b0 (one GenAI log event per message) beside the 2.4b0 of the test extra, likewise;
# it calls wrapt 1.x's keyword API, so that wrapt goes in its folder too.
OPENAI_V2_EVENTS := opentelemetry-instrumentation-openai-v2==2.3b0 wrapt==1.17.3
# verl's wheel (1.7 MB, not installed): tests/frameworks/test_verl.py runs its real verl/utils/rollout_trace.py.
VERL_WHEEL := verl==0.9.1
# The agent stacks that cannot share the test install: google-adk 2.13 pins opentelemetry-sdk<=1.44,
# util-genai 1.3b0 is newer than the 1.1b0 openai-v2 2.4b0 needs; the OpenAI Agents SDK and
# LangGraph (with OpenInference's instrumentors) resolve there too, on openai 3. They resolve together in an
# environment of their own (with otel-trackio from this checkout and the OTLP/gRPC exporter), where
# tests/frameworks/test_adk.py and test_frameworks.py run them; only `make test-packages` makes it.
STACKS_ENV := $(VENV)/genai-stacks
STACKS_STAMP := $(STACKS_ENV)/.installed
STACKS_PACKAGES := google-adk==2.13.0 openinference-instrumentation-google-adk==1.0.5 \
	agent-framework-core==1.23.0 agent-framework-openai==1.17.0 opentelemetry-util-genai==1.3b0 \
	openai==3.57.0 opentelemetry-exporter-otlp-proto-grpc==1.44.0 \
	openai-agents==0.24.0 openinference-instrumentation-openai-agents==2.6.0 \
	langgraph==1.2.22 langchain-openai==1.7.4 openinference-instrumentation-langchain==0.1.80

# The real verl 0.9.1 on CPU torch 2.13.0 (this machine's wheel; plain `torch` pulls CUDA), with the
# two packages its agent loop imports but its wheel does not declare, and otel-trackio from this
# checkout (and the OTLP/HTTP exporter verl's workers send to a receiver with): tests/frameworks/test_verl.py
# runs verl's own agent loop, Tracking and plugin loading there; only
# `make test-packages` makes it.
VERL_ENV := $(VENV)/verl-env
VERL_STAMP := $(VERL_ENV)/.installed
VERL_PACKAGES := torch==2.13.0 verl==0.9.1 cachetools fastapi opentelemetry-exporter-otlp-proto-http

# The real TRL 1.16 (transformers 5.25) on CPU torch 2.13.0, with otel-trackio from this checkout:
# tests/frameworks/test_trl.py runs examples/trl_grpo.py there (GRPO with TRL's own Trackio
# logging, one and two processes); only `make test-packages` makes it.
TRL_ENV := $(VENV)/trl-env
TRL_STAMP := $(TRL_ENV)/.installed
TRL_PACKAGES := torch==2.13.0 trl==1.16.0 transformers==5.25.0 accelerate==1.16.0 datasets

.PHONY: venv demo test test-packages lint bench clean

$(PY):
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip

$(DEMO_STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet -e .
	touch $@

$(TEST_STAMP): pyproject.toml Makefile | $(PY)
	$(PY) -m pip install --quiet -e ".[test]"
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/openllmetry-0.62 $(OPENLLMETRY_JSON)
	$(PY) -m pip install --quiet --no-deps --upgrade --target $(VENV)/openai-v2-2.3 $(OPENAI_V2_EVENTS)
	$(PY) -m pip download --quiet --no-deps --dest $(VENV)/verl-0.9.1 $(VERL_WHEEL)
	touch $@ $(DEMO_STAMP)

$(VERL_STAMP): pyproject.toml Makefile | $(PY)
	$(PYTHON) -m venv $(VERL_ENV)
	$(VERL_ENV)/bin/python -m pip install --quiet -e . $(VERL_PACKAGES)
	touch $@

$(TRL_STAMP): pyproject.toml Makefile | $(PY)
	$(PYTHON) -m venv $(TRL_ENV)
	$(TRL_ENV)/bin/python -m pip install --quiet -e . $(TRL_PACKAGES)
	touch $@

$(STACKS_STAMP): pyproject.toml Makefile | $(PY)
	$(PYTHON) -m venv $(STACKS_ENV)
	$(STACKS_ENV)/bin/python -m pip install --quiet -e . $(STACKS_PACKAGES)
	touch $@

venv: $(TEST_STAMP)

demo: $(DEMO_STAMP)
	$(PY) examples/rollout_demo.py

test: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy
	$(PY) -m pytest -q -m "not real_packages"

# The suites that drive third-party packages whole (agent frameworks, Ray, verl, MLflow, the AI
# SDK on Node, Chromium, Google ADK, Agent Framework, TRL): slower, and CI runs them after `make test`.
test-packages: $(TEST_STAMP) $(STACKS_STAMP) $(VERL_STAMP) $(TRL_STAMP)
	$(PY) -m pytest -q -m real_packages

lint: $(TEST_STAMP)
	$(PY) -m ruff check .
	$(PY) -m mypy

bench: $(TEST_STAMP)
	$(PY) bench/run_all.py

clean:
	rm -rf $(VENV) .pytest_cache .ruff_cache
