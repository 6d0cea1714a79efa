"""pydantic-ai, the real framework, offline: every instrumentation version it offers.

A scripted ``FunctionModel`` calls one tool, then two tools in parallel, then answers;
``Agent.instrument_all(InstrumentationSettings(version=v))`` records it under
``otel_trackio.rollout()``. The conversation read back from real Trackio storage must be what the
agent did (its own message history), turn by turn: parallel results one tool message each with
its id, tool results a tool message whatever role the version sends them in (``user`` before
version 6), tool spans with their arguments and results (``tool_arguments``/``tool_response`` in
version 2), and the usage of the three model calls once.
"""

from __future__ import annotations

import json
import typing
import warnings
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import read_traces, trace_usage
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from pydantic_ai import Agent
from pydantic_ai.messages import (
    ModelMessage,
    ModelRequest,
    ModelResponse,
    SystemPromptPart,
    TextPart,
    ToolCallPart,
    ToolReturnPart,
    UserPromptPart,
)
from pydantic_ai.models.function import AgentInfo, FunctionModel
from pydantic_ai.models.instrumented import InstrumentationSettings

from otel_trackio import TrackioSpanExporter, rollout

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

#: every instrumentation data format this pydantic-ai offers (2..6 in 2.68)
VERSIONS = typing.get_args(typing.get_type_hints(InstrumentationSettings)["version"])
SAMPLES = 2


def scripted(messages: list[ModelMessage], info: AgentInfo) -> ModelResponse:
    """Weather in Paris; then weather and time in Rome, in parallel; then the answer."""
    turn = sum(isinstance(m, ModelResponse) for m in messages)
    if turn == 0:
        return ModelResponse(parts=[ToolCallPart("weather", {"city": "Paris"}, tool_call_id="c1")])
    if turn == 1:
        return ModelResponse(
            parts=[
                ToolCallPart("weather", {"city": "Rome"}, tool_call_id="c2"),
                ToolCallPart("clock", {"city": "Rome"}, tool_call_id="c3"),
            ]
        )
    return ModelResponse(parts=[TextPart("Sunny in both; noon in Rome.")])


def agent() -> Agent[None, str]:
    agent = Agent(FunctionModel(scripted), system_prompt="be brief")

    @agent.tool_plain
    def weather(city: str) -> str:
        return f"Sunny in {city}"

    @agent.tool_plain
    def clock(city: str) -> str:
        return f"noon in {city}"

    return agent


def openai_messages(history: list[ModelMessage]) -> list[dict[str, Any]]:
    """The agent's own message history as the OpenAI-style turns a Trace stores."""
    out: list[dict[str, Any]] = []
    for message in history:
        if isinstance(message, ModelRequest):
            for part in message.parts:
                if isinstance(part, SystemPromptPart):
                    out.append({"role": "system", "content": part.content})
                elif isinstance(part, UserPromptPart):
                    out.append({"role": "user", "content": part.content})
                elif isinstance(part, ToolReturnPart):
                    out.append(
                        {"role": "tool", "content": part.content, "tool_call_id": part.tool_call_id}
                    )
        else:
            calls = [p for p in message.parts if isinstance(p, ToolCallPart)]
            text = "".join(p.content for p in message.parts if isinstance(p, TextPart))
            # a tool-call turn without text: content null, as the OpenAI API has it
            turn: dict[str, Any] = {"role": "assistant", "content": text or (None if calls else "")}
            if calls:
                turn["tool_calls"] = [
                    {
                        "id": c.tool_call_id,
                        "type": "function",
                        "function": {"name": c.tool_name, "arguments": json.dumps(c.args)},
                    }
                    for c in calls
                ]
            out.append(turn)
    return out


@pytest.fixture
def instrument_all() -> Iterator[Any]:
    """``Agent.instrument_all(settings)`` for the test, off again afterwards."""

    def apply(settings: InstrumentationSettings) -> None:
        Agent.instrument_all(settings)

    yield apply
    Agent.instrument_all(False)


def test_versions_known():
    assert set(VERSIONS) >= {2, 3, 4, 5, 6}


@pytest.mark.parametrize("version", VERSIONS)
def test_pydantic_ai_conversation_per_instrumentation_version(
    project, version, instrument_all, tracer_provider
):
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(TrackioSpanExporter(project, name="r")))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # versions 2-4 are deprecated
        instrument_all(InstrumentationSettings(tracer_provider=provider, version=version))
    runs = []
    try:
        for index in range(SAMPLES):
            with rollout(0, index, tracer_provider=provider):
                runs.append(agent().run_sync("weather and time?"))
    finally:
        provider.shutdown()
    traces = read_traces(project, "r")
    assert [t["metadata"]["sample_index"] for t in traces] == list(range(SAMPLES))
    for trace, run in zip(traces, runs, strict=True):
        expected = openai_messages(run.all_messages())
        assert [m["role"] for m in expected] == [
            "system", "user", "assistant", "tool", "assistant", "tool", "tool", "assistant",
        ]  # fmt: skip
        assert trace["messages"] == expected, json.dumps(trace["messages"], indent=1)
        kinds = [s["kind"] for s in trace["spans"]]
        assert (kinds.count("generation"), kinds.count("tool")) == (3, 3)
        usage = run.usage
        assert trace_usage(trace)["input_tokens"] == usage.input_tokens
        assert trace_usage(trace)["output_tokens"] == usage.output_tokens
        tools = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert [(t["input"], t["output"]) for t in tools] == [
            ({"city": "Paris"}, "Sunny in Paris"),
            ({"city": "Rome"}, "Sunny in Rome"),
            ({"city": "Rome"}, "noon in Rome"),
        ]
        for span in trace["spans"]:  # read into fields, not repeated in metadata
            assert not {"tool_arguments", "tool_response", "gen_ai.request.model"} & set(
                span["metadata"]
            )
