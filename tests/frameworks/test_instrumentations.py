"""Real GenAI instrumentations of the ``openai`` client, against a loopback fake OpenAI server.

The same two-call tool conversation (system "be brief", user "what is 2+2?", the model calls
``calculator``, the tool answers "4", the model says "answer to: 4") is run under each
instrumentation in turn, in one process: each test instruments the client with its own
``TracerProvider`` and uninstruments it afterwards (the generation-span count would double if one
leaked). The Trace read back from real Trackio storage must be the same whichever made the spans.

- ``opentelemetry-instrumentation-openai-v2`` 2.4b0: OTel GenAI JSON attributes.
- ``openinference-instrumentation-openai``: OpenInference flattened ``llm.*`` attributes.
- ``opentelemetry-instrumentation-openai`` 0.40.x (OpenLLMetry): flattened ``gen_ai.prompt.N.*``.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from conftest import read_traces, root_span_id, trace_usage
from fake_openai_server import INPUT_TOKENS, MODEL, OUTPUT_TOKENS, FakeOpenAIServer
from opentelemetry.instrumentation._semconv import _OpenTelemetrySemanticConventionStability
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_trackio import TrackioLogExporter, TrackioSpanExporter

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]
ARGUMENTS = '{"expr": "2+2"}'
EXPECTED_MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is 2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": ARGUMENTS},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "answer to: 4"},
]
# The Trace's conversation: the messages as they were sent (nothing written into a tool-call turn).
EXPECTED_CONVERSATION = EXPECTED_MESSAGES


def _openai_v2() -> Any:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _openinference() -> Any:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


def _openllmetry() -> Any:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    return OpenAIInstrumentor()


INSTRUMENTORS: dict[str, Callable[[], Any]] = {
    "openai-v2": _openai_v2,
    "openinference": _openinference,
    "openllmetry": _openllmetry,
}


@pytest.fixture
def server() -> Iterator[FakeOpenAIServer]:
    with FakeOpenAIServer() as fake:
        yield fake


@pytest.fixture
def genai_env(monkeypatch) -> Callable[[str], None]:
    """Content capture for openai-v2 (read when it instruments), latest GenAI semconv opted in."""

    def apply(capture: str) -> None:
        monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
        monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", capture)
        monkeypatch.setenv("TRACELOOP_TRACE_CONTENT", "true")
        # The opt-in is read once per process; make this test's value the one in force.
        monkeypatch.setattr(_OpenTelemetrySemanticConventionStability, "_initialized", False)

    return apply


def run_conversation(
    instrumentation: str,
    project: str,
    base_url: str,
    *,
    run: str = "conv",
    logs: str | None = None,
) -> dict[str, int]:
    """The two-call tool conversation as one sample at step 1, exported into ``project``/``run``.

    ``logs`` adds a logger provider with a :class:`TrackioLogExporter`: ``"first"`` exports each
    log record as it is emitted (before its span ends), ``"after"`` holds them in a
    ``BatchLogRecordProcessor`` until the whole sample, root included, was exported. Returns the
    log exporter's counts.
    """
    exporter = TrackioSpanExporter(project=project, name=run)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("rollout")
    instrumentor = INSTRUMENTORS[instrumentation]()
    logger_provider = LoggerProvider() if logs else None
    log_exporter = TrackioLogExporter(exporter) if logs else None
    if logger_provider is not None and log_exporter is not None:
        processor = (
            SimpleLogRecordProcessor(log_exporter)
            if logs == "first"
            else BatchLogRecordProcessor(log_exporter, schedule_delay_millis=3_600_000)
        )
        logger_provider.add_log_record_processor(processor)
        instrumentor.instrument(tracer_provider=provider, logger_provider=logger_provider)
    else:
        instrumentor.instrument(tracer_provider=provider)
    try:
        client = openai.OpenAI(base_url=base_url, api_key="test-key", max_retries=0)
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": 0}):
            messages: list[dict[str, Any]] = [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "what is 2+2?"},
            ]
            first = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            call = first.choices[0].message.tool_calls[0]
            messages.append(
                {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {
                                "name": call.function.name,
                                "arguments": call.function.arguments,
                            },
                        }
                    ],
                }
            )
            with tracer.start_as_current_span(
                "execute_tool calculator",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "calculator",
                    "gen_ai.tool.call.id": call.id,
                    "gen_ai.tool.call.arguments": call.function.arguments,
                    "gen_ai.tool.call.result": "4",
                },
            ):
                result = "4"
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
            second = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            assert second.choices[0].message.content == "answer to: 4"
        if logger_provider is not None:
            logger_provider.force_flush()  # "after": now, once the root was exported
    finally:
        instrumentor.uninstrument()
        if logger_provider is not None:
            logger_provider.shutdown()
        provider.shutdown()
    return dataclasses.asdict(log_exporter.stats) if log_exporter is not None else {}


def conversation_traces(instrumentation: str, project: str, base_url: str) -> list[dict]:
    """Run the conversation in this process; the Traces read back from Trackio storage."""
    run_conversation(instrumentation, project, base_url)
    return read_traces(project, "conv")


def _check_span_facts(trace: dict) -> None:
    generations = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert len(generations) == 2, [(s["name"], s["kind"]) for s in trace["spans"]]
    for span in generations:
        assert span["model"] == MODEL
        assert span["usage"]["input_tokens"] == INPUT_TOKENS
        assert span["usage"]["output_tokens"] == OUTPUT_TOKENS
        assert span["usage"]["total_tokens"] == INPUT_TOKENS + OUTPUT_TOKENS
        assert span["parent_id"] == root_span_id(trace)
    assert trace_usage(trace)["input_tokens"] == 2 * INPUT_TOKENS
    (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["input"] == {"expr": "2+2"}
    assert tool["output"] == "4"


def _check_conversation(trace: dict) -> list[dict]:
    """The Trace holds the expected conversation, span facts and per-call input/output; its two
    generation spans, in order."""
    assert trace["messages"] == EXPECTED_CONVERSATION, json.dumps(trace["messages"], indent=1)
    _check_span_facts(trace)
    first, second = sorted(
        (s for s in trace["spans"] if s["kind"] == "generation"), key=lambda s: s["start_time"]
    )
    # A generation's input is its own request; its output the model's reply.
    assert first["input"] == EXPECTED_MESSAGES[:2]
    assert second["input"] == EXPECTED_MESSAGES[:4]
    assert first["output"][0]["tool_calls"] == EXPECTED_MESSAGES[2]["tool_calls"]
    assert second["output"][0]["content"] == "answer to: 4"
    return [first, second]


@pytest.mark.parametrize("instrumentation", list(INSTRUMENTORS))
def test_same_conversation_from_every_instrumentation(instrumentation, project, server, genai_env):
    genai_env("SPAN_ONLY")
    traces = conversation_traces(instrumentation, project, server.base_url)
    assert len(traces) == 1
    trace = traces[0]
    assert trace["step"] == 1
    _check_conversation(trace)


def test_model_call_without_content_keeps_model_and_usage(project, server, genai_env):
    genai_env("NO_CONTENT")
    (trace,) = conversation_traces("openai-v2", project, server.base_url)
    _check_span_facts(trace)
    for span in trace["spans"]:
        if span["kind"] == "generation":
            assert "input" not in span and "output" not in span
    # No content anywhere and the root has no input/output: nothing invented.
    assert trace["messages"] == []


# OpenLLMetry 0.62 writes the OTel JSON form. It is the same distribution as the 0.40 above, so
# `make test` installs it with --no-deps into its own folder (.venv/openllmetry-0.62) and this test
# runs the conversation in a subprocess with that folder first on the path.
OPENLLMETRY_JSON = ROOT / ".venv" / "openllmetry-0.62"

SUBPROCESS_SCRIPT = """
import sys, types
from importlib.metadata import version
# conftest would point TRACKIO_DIR at a new temp folder; this process must use the parent's.
sys.modules["conftest"] = types.SimpleNamespace(read_traces=0, root_span_id=0, trace_usage=0)
import test_instrumentations as t
print(version("opentelemetry-instrumentation-openai"))
t.run_conversation("openllmetry", sys.argv[1], sys.argv[2])
"""


def run_beside(folder: Path, script: str, *args: str, trackio_dir: str) -> list[str]:
    """Run ``script`` in a subprocess with ``folder`` (a side install) first on the path, in
    this session's Trackio folder; its output lines."""
    if not folder.is_dir():
        pytest.skip(f"{folder} missing: run `make test` (it installs it)")
    env = {
        **os.environ,
        "TRACKIO_DIR": trackio_dir,
        "PYTHONPATH": os.pathsep.join([str(folder), str(HERE), str(HERE.parent)]),
    }
    env.pop("OTEL_SEMCONV_STABILITY_OPT_IN", None)
    result = subprocess.run(
        [sys.executable, "-c", script, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout.splitlines()


def test_openllmetry_json_form(project, server, trackio_dir):
    lines = run_beside(
        OPENLLMETRY_JSON, SUBPROCESS_SCRIPT, project, server.base_url, trackio_dir=trackio_dir
    )
    assert lines[0].startswith("0.62"), lines
    (trace,) = read_traces(project, "conv")
    assert trace["messages"] == EXPECTED_CONVERSATION
    _check_span_facts(trace)
    span = next(s for s in trace["spans"] if s["kind"] == "generation")
    assert "gen_ai.input.messages" not in span["metadata"]  # read, not dumped


@pytest.mark.parametrize("logs", ["first", "after"])
@pytest.mark.parametrize("capture", ["EVENT_ONLY", "SPAN_AND_EVENT"])
def test_openai_v2_log_events_give_the_same_conversation(capture, logs, project, server, genai_env):
    """2.4b0 with content in a ``gen_ai.client.inference.operation.details`` log record
    (``EVENT_ONLY``: nothing on the span; ``SPAN_AND_EVENT``: both), its log records exported
    before or after the spans: the same messages as ``SPAN_ONLY``, each once."""
    genai_env(capture)
    stats = run_conversation("openai-v2", project, server.base_url, logs=logs)
    assert stats["genai_events"] == 2 and stats["not_genai"] == 0, stats
    (trace,) = read_traces(project, "conv")
    assert "partial" not in trace["metadata"]
    for span in _check_conversation(trace):
        # The event was read into the span's messages, not repeated in its metadata.
        assert "events" not in span["metadata"], span["metadata"]


# openai-v2 releases before util-genai (2.2b0, 2.3b0) send the content as one log record per
# message (gen_ai.system/user/assistant/tool.message, gen_ai.choice); 2.0b0 and 2.1b0 did the same
# through the Events API, which opentelemetry-api 1.45 no longer has. `make test` installs 2.3b0
# with --no-deps into .venv/openai-v2-2.3 (the same distribution as the 2.4b0 above), and this test
# runs the conversation in a subprocess with that folder first on the path.
OPENAI_V2_EVENTS = ROOT / ".venv" / "openai-v2-2.3"

PER_MESSAGE_SCRIPT = """
import json, os, sys, types
from importlib.metadata import version
sys.modules["conftest"] = types.SimpleNamespace(read_traces=0, root_span_id=0, trace_usage=0)
os.environ["OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"] = "true"
import test_instrumentations as t
print(version("opentelemetry-instrumentation-openai-v2"))
print(json.dumps(t.run_conversation("openai-v2", sys.argv[1], sys.argv[2], logs=sys.argv[3])))
"""


@pytest.mark.parametrize("logs", ["first", "after"])
def test_openai_v2_per_message_log_events(logs, project, server, trackio_dir):
    lines = run_beside(
        OPENAI_V2_EVENTS,
        PER_MESSAGE_SCRIPT,
        project,
        server.base_url,
        logs,
        trackio_dir=trackio_dir,
    )
    assert lines[0].startswith("2.3"), lines
    stats = json.loads(lines[-1])
    # 2 + 4 messages sent, 2 choices received.
    assert stats["genai_events"] == 8 and stats["not_genai"] == 0, stats
    (trace,) = read_traces(project, "conv")
    _check_conversation(trace)
