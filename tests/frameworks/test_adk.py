"""Google ADK 2.13, the real package, in both of its span formats, offline.

``tests/adk_agent.py`` runs ADK's ``LlmAgent`` with a ``BaseLlm`` that scripts Gemini's side (the
calculator agent: sample 0 calls one tool, sample 1 two in parallel) in the ADK folder's own
environment (``.venv/genai-stacks``, made by ``make test-packages``: ADK pins
``opentelemetry-sdk<=1.44``), in process or through ``otel-trackio serve`` over OTLP/gRPC. ADK's
span format and content capture are chosen with ADK's own variables, as a user sets them. Every
Trace read back from real Trackio storage must hold the conversation the agent had (the system
instruction ADK sent, the question, the model's tool calls with their ids, each tool result as a
``tool`` message paired to its call, the answer), one tool span per call with its input and
output where ADK records them, and the model and usage of exactly two model calls.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import read_traces, stored, trace_usage

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

HERE = Path(__file__).resolve().parents[1]  # tests/
ADK_PYTHON = HERE.parent / ".venv" / "genai-stacks" / "bin" / "python"
MODEL = "gemini-test"
QUESTION = "what is 2+2?"
ANSWER = "the answer is 4"
CALLS = [[("call_1", "2+2", "4")], [("call_1", "2+2", "4"), ("call_2", "3+3", "6")]]
TOKENS = {"input_tokens": 11, "output_tokens": 7, "total_tokens": 18}

CAPTURE = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"
FORMAT_1X = {"ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN": "1"}


def run_agent(project: str, env: dict[str, str], mode: str = "plain", endpoint: str = "") -> list:
    """Run the agent in ADK's environment; the JSON line it printed per sample."""
    if not ADK_PYTHON.exists():
        pytest.fail(f"{ADK_PYTHON} is missing: `make test-packages` makes it")
    result = subprocess.run(
        [
            str(ADK_PYTHON),
            str(HERE / "adk_agent.py"),
            mode,
            project,
            *([endpoint] * bool(endpoint)),
        ],
        env={
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "ADK_"))},
            **env,
        },
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return [json.loads(line) for line in result.stdout.splitlines() if line.startswith("{")]


def expected_conversation(sample: dict[str, Any]) -> list[dict[str, Any]]:
    calls = CALLS[sample["sample_index"]]
    return [
        {"role": "system", "content": sample["system"]},
        {"role": "user", "content": QUESTION},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": call_id,
                    "type": "function",
                    "function": {"name": "calculator", "arguments": json.dumps({"expr": expr})},
                }
                for call_id, expr, _ in calls
            ],
        },
        *(
            {"role": "tool", "tool_call_id": call_id, "content": json.dumps({"result": result})}
            for call_id, _, result in calls
        ),
        {"role": "assistant", "content": ANSWER},
    ]


def check_traces(
    project: str, samples: list[dict[str, Any]], *, tool_io: bool = True, content: bool = True
) -> list[dict]:
    """Every sample once, with its conversation, tool spans and two model calls."""
    traces = read_traces(project)
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s["step"], s["sample_index"]) for s in samples
    ]
    for trace, sample in zip(traces, samples, strict=True):
        assert sample["answer"] == ANSWER
        messages = json.dumps(trace["messages"], indent=1)
        if content:
            assert stored(trace) == expected_conversation(sample), messages
        else:  # nothing captured: nothing made up
            assert trace["messages"] == [], messages
        generations = [s for s in trace["spans"] if s["kind"] == "generation"]
        assert len(generations) == 2, [(s["name"], s["kind"]) for s in trace["spans"]]
        assert all(g["model"] == MODEL and g["usage"] == TOKENS for g in generations)
        assert trace_usage(trace) == {k: 2 * v for k, v in TOKENS.items()}
        tools = sorted(
            (s for s in trace["spans"] if s["kind"] == "tool"), key=lambda s: s["start_time"]
        )
        calls = CALLS[sample["sample_index"]]
        assert [t["name"] for t in tools] == ["execute_tool calculator"] * len(calls)
        if tool_io:
            assert [(t["input"], t["output"]) for t in tools] == [
                ({"expr": expr}, {"result": result}) for _, expr, result in calls
            ]
        assert "model" not in {m["role"] for m in trace["messages"]}
    return traces


@pytest.mark.parametrize("capture", ["SPAN_ONLY", "SPAN_AND_EVENT", "EVENT_ONLY"])
def test_adk_current_format(project, capture):
    """ADK 2.x's own GenAI spans: the conversation from the span attributes or the log events;
    the span around parallel tool calls (``execute_tool (merged)``) is no third tool call."""
    samples = run_agent(project, {CAPTURE: capture})
    traces = check_traces(project, samples, tool_io=capture != "EVENT_ONLY")  # ADK's choice
    merged = [s for t in traces for s in t["spans"] if s["name"] == "execute_tool (merged)"]
    assert merged and {s["kind"] for s in merged} == {"span"}


@pytest.mark.parametrize("capture", ["", "true"])
def test_adk_1x_format(project, capture):
    """ADK's 1.x span format (``call_llm`` carrying the request and response as JSON) gives the
    same Trace: the placeholder log events (``<elided>``) are no messages, and the
    ``generate_content`` span under each ``call_llm`` is the same call, counted once."""
    samples = run_agent(project, {**FORMAT_1X, CAPTURE: capture})
    traces = check_traces(project, samples)
    for trace in traces:
        calls = [s for s in trace["spans"] if s["name"] == "call_llm"]
        assert [s["kind"] for s in calls] == ["generation"] * 2
        assert "gcp.vertex.agent.llm_request" not in json.dumps([s["metadata"] for s in calls])
        assert "<elided>" not in json.dumps(trace)


def test_adk_without_content_says_so(project):
    """Content capture off in both of ADK's places: model and usage stay, no message is made up
    from the placeholders, and each model call says that its content was not captured."""
    env = {**FORMAT_1X, "ADK_CAPTURE_MESSAGE_CONTENT_IN_SPANS": "false"}
    traces = check_traces(project, run_agent(project, env), tool_io=False, content=False)
    for trace in traces:
        assert "<elided>" not in json.dumps(trace)
        for span in trace["spans"]:
            if span["kind"] == "generation":
                assert "not captured" in span["metadata"]["otel_trackio.note"]


EVENTS_AFTER_SPANS = {CAPTURE: "EVENT_ONLY", "OTEL_BLRP_SCHEDULE_DELAY": "60000"}
"""The conversation only in log events, which the client sends after all its spans (its
tracer provider shuts down first; the log processor waits past the run)."""


@pytest.mark.parametrize(
    "env",
    [{CAPTURE: "SPAN_ONLY"}, FORMAT_1X, EVENTS_AFTER_SPANS],
    ids=["current", "1.x", "events-after-spans"],
)
def test_adk_through_the_receiver_over_grpc(project, start_receiver, env):
    """Through ``otel-trackio serve`` under its default grace: each sample whole, once, its
    log events joined even when every one of them comes after every span."""
    receiver = start_receiver(name="run")
    samples = run_agent(project, env, endpoint=receiver.grpc_endpoint)
    receiver.stop()
    check_traces(project, samples, tool_io=env is not EVENTS_AFTER_SPANS)


def test_openinference_adk(project):
    """openinference-instrumentation-google-adk 1.0.5 writes both model calls onto the agent span
    (upstream): one generation. Its roles are Gemini's ``model``, stored as ``assistant``; a tool's
    output is the function's response, not the whole FunctionResponse around it."""
    samples = run_agent(project, {}, mode="openinference")
    for trace, sample in zip(read_traces(project), samples, strict=True):
        roles = [m["role"] for m in trace["messages"]]
        assert "model" not in roles and roles.count("assistant") >= 2, roles
        assert stored(trace)[:2] == expected_conversation(sample)[:2]
        tools = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert sorted(t["output"]["result"] for t in tools) == sorted(
            r for _, _, r in CALLS[sample["sample_index"]]
        )
