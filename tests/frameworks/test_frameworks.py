"""Real agent frameworks, offline: the stored conversation is what the framework sent the model.

Each (framework, telemetry mode) runs ``tests/framework_agents.py`` in its own process (the way a
user runs it: ``otel_trackio.configure()``, 2 steps x 3 samples under ``rollout()``) against a
scripted loopback OpenAI-compatible server: the model calls ``calculator`` with
``{"expr": "2+2"}``, the tool answers "4", the model answers. Every Trace read back from real
Trackio storage must hold exactly the last request the framework sent plus the model's answer
(system, user, assistant tool call with name/arguments/id, tool result with that id, final
answer — once each, in order), the right span kinds, and the usage of exactly two model calls.

Versions (the ``framework-tests`` extra): litellm 1.110.2, strands-agents 1.62.0, smolagents
1.26.0 + openinference-instrumentation-smolagents 0.1.43, llama-index-core 0.14.25 +
openinference-instrumentation-llama-index 4.6.1; in the agent stacks' environment
(``.venv/genai-stacks``): agent-framework-core 1.23.0 + agent-framework-openai 1.17.0, and a
loop on the ``openai`` client recorded with opentelemetry-util-genai 1.3b0's ``TelemetryHandler``;
the OpenAI Agents SDK 0.24.0 + openinference-instrumentation-openai-agents 2.6.0; LangGraph 1.2.22
+ langchain-openai 1.7.4 + openinference-instrumentation-langchain 0.1.80.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import read_traces, root_span_id, stored, trace_usage
from fake_openai_server import (
    INPUT_TOKENS,
    MODEL,
    OUTPUT_TOKENS,
    FakeOpenAIServer,
    Reply,
    reply_for,
    tool_call_message,
)
from framework_agents import QUESTION, SAMPLES, STEPS, SYSTEM

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

HERE = Path(__file__).resolve().parents[1]  # tests/
ARGUMENTS = '{"expr": "2+2"}'
CALL = {
    "id": "call_1",
    "type": "function",
    "function": {"name": "calculator", "arguments": ARGUMENTS},
}
#: the conversation every framework's sample must store (smolagents aside, see its test)
EXPECTED = [
    {"role": "system", "content": SYSTEM},
    {"role": "user", "content": QUESTION},
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "answer to: 4"},
]
USAGE = {
    "input_tokens": 2 * INPUT_TOKENS,
    "output_tokens": 2 * OUTPUT_TOKENS,
    "total_tokens": 2 * (INPUT_TOKENS + OUTPUT_TOKENS),
}

# (framework, mode) → the environment the framework reads its telemetry mode from.
LITELLM_SPAN = {"USE_OTEL_LITELLM_REQUEST_SPAN": "true"}
GENAI_LATEST = {"OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental"}
MODES: dict[tuple[str, str], dict[str, str]] = {
    ("litellm", "span"): LITELLM_SPAN,
    ("litellm", "span-genai-latest"): {**LITELLM_SPAN, **GENAI_LATEST},
    ("litellm", "async"): LITELLM_SPAN,
    ("strands", "default"): {},
    ("strands", "genai-latest-events"): GENAI_LATEST,
    ("strands", "genai-latest-attributes"): {
        "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental,gen_ai_span_attributes_only"
    },
    ("llama_index", "stream"): {},
    ("llama_index", "no-stream"): {},
    ("agent_framework", "attributes"): {},
    ("agent_framework", "events"): {},
    ("agent_framework", "genai-latest"): GENAI_LATEST,
    **{
        ("util_genai", capture): {
            **GENAI_LATEST,
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": capture,
        }
        for capture in ("SPAN_ONLY", "SPAN_AND_EVENT", "EVENT_ONLY")
    },
}
#: frameworks that run in the agent stacks' own environment (`make test-packages` makes it)
STACKS_PYTHON = HERE.parent / ".venv" / "genai-stacks" / "bin" / "python"
IN_STACKS = frozenset({"agent_framework", "util_genai", "openai_agents", "langgraph"})


def run_framework(
    framework: str, mode: str, project: str, reply: Reply = reply_for
) -> tuple[list[dict], list[dict[str, Any]]]:
    """Run one framework/mode in a child process; (Traces stored, request bodies received)."""
    with FakeOpenAIServer(reply) as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "USE_OTEL"))},
            **MODES.get((framework, mode), {}),
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        python = STACKS_PYTHON if framework in IN_STACKS else Path(sys.executable)
        assert python.exists(), f"{python} is missing: `make test-packages` makes it"
        result = subprocess.run(
            [
                str(python),
                str(HERE / "framework_agents.py"),
                framework,
                mode,
                project,
                server.base_url,
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        requests = list(server.requests)
    assert result.returncode == 0, result.stderr[-4000:]
    assert "BLOCKED" not in result.stderr, result.stderr[-4000:]  # nothing left the loopback
    return read_traces(project), requests


def sent(request: dict[str, Any], answer: dict[str, Any]) -> list[dict[str, Any]]:
    """What a framework sent in its last request, plus the model's answer, as OpenAI messages
    with text-only content as a string (the form a Trace stores)."""
    out = []
    for message in [*request["messages"], answer]:
        content = message.get("content")
        if isinstance(content, list):
            content = "\n".join(p["text"] for p in content if p.get("type", "text") == "text")
        if not content:  # a tool-call turn without text is stored as OpenAI sends it: null
            content = None if message.get("tool_calls") else ""
        m = {"role": message["role"], "content": content}
        if message.get("tool_calls"):
            m["tool_calls"] = [
                {"id": c["id"], "type": "function", "function": dict(c["function"])}
                for c in message["tool_calls"]
            ]
        if message.get("tool_call_id"):
            m["tool_call_id"] = message["tool_call_id"]
        out.append(m)
    return out


def check_samples(traces: list[dict], requests: list[dict[str, Any]], answer: Reply) -> None:
    """6 Traces (2 steps x 3 samples), each storing its last request + the model's answer."""
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s, i) for s in range(STEPS) for i in range(SAMPLES)
    ]
    assert len(requests) == 2 * len(traces)
    for trace, last in zip(traces, requests[1::2], strict=True):
        assert stored(trace) == sent(last, answer(last)), json.dumps(trace["messages"], indent=1)
        assert not trace["metadata"].get("partial"), trace["metadata"]


def kinds(trace: dict) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for span in sorted(trace["spans"], key=lambda s: s["start_time"]):
        out.setdefault(span["kind"], []).append(span["name"])
    return out


def check_model_calls(trace: dict, names: list[str]) -> None:
    """Exactly the two model calls are generations, each with its model and usage, summed once."""
    generations = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert sorted(s["name"] for s in generations) == sorted(names), kinds(trace)
    for span in generations:
        assert span["model"] == MODEL
        assert span["usage"]["input_tokens"] == INPUT_TOKENS
        assert span["usage"]["output_tokens"] == OUTPUT_TOKENS
    assert trace_usage(trace) == USAGE


def check_framework(framework: str, mode: str, project: str, call: str) -> list[dict]:
    """Run it; every sample stores what was sent, the two ``call`` spans are the model calls."""
    traces, requests = run_framework(framework, mode, project)
    check_samples(traces, requests, reply_for)
    assert stored(traces[0]) == EXPECTED
    for trace in traces:
        check_model_calls(trace, [call, call])
    return traces


@pytest.mark.parametrize("mode", ["span", "span-genai-latest", "async"])
def test_litellm_one_span_per_call(project, mode):
    call = "chat gpt-test" if "genai" in mode else "litellm_request"
    traces = check_framework("litellm", mode, project, call)
    assert "otel_trackio.note" not in json.dumps([t["spans"] for t in traces])


def test_litellm_default_mode_is_detected(project):
    """LiteLLM's default mode writes each call onto the current span (the sample root) from a
    background thread, after the call: whatever landed before the root ended is kept (as the
    root's model call), the root says so, and nothing is invented."""
    traces, requests = run_framework("litellm", "default", project)
    roots = [t for t in traces if not t["metadata"].get("partial")]
    assert len(roots) == STEPS * SAMPLES
    full = sent(requests[1], reply_for(requests[1]))
    for trace in roots:
        root = next(s for s in trace["spans"] if s["id"] == root_span_id(trace))
        messages = stored(trace)
        # LiteLLM's bookkeeping on the root stays on the span, out of the Trace header.
        assert not [k for k in trace["metadata"] if k.startswith(("litellm", "metadata", "hidden"))]
        if root["kind"] == "generation":  # a call's attributes landed before the root ended
            assert "USE_OTEL_LITELLM_REQUEST_SPAN=true" in root["metadata"]["otel_trackio.note"]
            assert root["usage"]["input_tokens"] == INPUT_TOKENS
            # A true prefix, in order: the first call's, whose tool call LiteLLM recorded without
            # its id, or the whole conversation when the last call's attributes landed.
            assert len(messages) in (3, 5), messages
            expected = list(full)
            if len(messages) == 3:
                expected[2] = {**full[2], "tool_calls": [{**CALL, "id": ""}]}
            assert messages == expected[: len(messages)], messages
        else:
            assert messages == []


@pytest.mark.parametrize("mode", ["default", "genai-latest-events", "genai-latest-attributes"])
def test_strands(project, mode):
    for trace in check_framework("strands", mode, project, "chat"):
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert (tool["name"], tool["input"], tool["output"]) == (
            "execute_tool calculator",
            {"expr": "2+2"},
            "4",
        )


def smolagents_reply(request: dict[str, Any]) -> dict[str, Any]:
    """smolagents' ToolCallingAgent ends by calling its ``final_answer`` tool."""
    if not any(m["role"] == "assistant" for m in request["messages"]):
        return tool_call_message("calculator", ARGUMENTS, "call_1")
    return tool_call_message("final_answer", '{"answer": "answer to: 4"}', "call_2")


def test_smolagents(project):
    """smolagents sends the tool call back as assistant text ("Calling tools:\\n[...]", the
    Python repr of the call) and the result as a user "Observation:" text. Stored: the call once,
    as the model made it (name, arguments, id), the observation as that call's tool result, text
    as sent."""
    traces, requests = run_framework("smolagents", "default", project, smolagents_reply)
    assert len(traces) == STEPS * SAMPLES
    for trace, last in zip(traces, requests[1::2], strict=True):
        system, user, call_text, observation = sent(last, smolagents_reply(last))[:4]
        assert call_text["content"] == "Calling tools:\n" + str(
            [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "calculator", "arguments": {"expr": "2+2"}},
                }
            ]
        )
        assert (user["role"], user["content"]) == ("user", f"New task:\n{QUESTION}")
        assert (observation["role"], observation["content"]) == ("user", "Observation:\n4")
        final = smolagents_reply(last)["tool_calls"]
        assert stored(trace) == [
            system,
            user,
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "tool_call_id": "call_1", "content": "Observation:\n4"},
            {"role": "assistant", "content": None, "tool_calls": final},
        ], json.dumps(trace["messages"], indent=1)
        check_model_calls(trace, ["OpenAIModel.generate"] * 2)
        tools = {s["name"]: s for s in trace["spans"] if s["kind"] == "tool"}
        assert set(tools) == {"SimpleTool", "FinalAnswerTool"}
        assert tools["SimpleTool"]["output"] == "4"


@pytest.mark.parametrize("mode", ["stream", "no-stream"])
def test_llama_index(project, mode):
    """LlamaIndex's wrapper LLM spans (``_prepare_chat_with_tools``, the outer ``achat`` /
    ``astream_chat``) hold only Python reprs in ``input.value``/``output.value``: no turns, no
    second model call, no usage counted twice."""
    call = "OpenAILike.astream_chat" if mode == "stream" else "OpenAILike.achat"
    for trace in check_framework("llama_index", mode, project, call):
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert tool["name"] == "FunctionTool.acall"
        names = [s["name"] for s in trace["spans"]]
        assert names.count(call) == 4 and names.count("OpenAILike._prepare_chat_with_tools") == 2


@pytest.mark.parametrize("mode", ["attributes", "events", "genai-latest"])
def test_agent_framework(project, mode):
    """Microsoft Agent Framework's own GenAI spans (``enable_sensitive_data=True``), its messages
    on the spans or also as log events, in its default and its latest GenAI conventions."""
    for trace in check_framework("agent_framework", mode, project, "chat gpt-test"):
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert (tool["name"], tool["input"], tool["output"]) == (
            "execute_tool calculator",
            {"expr": "2+2"},
            "4",
        )


@pytest.mark.parametrize("capture", ["SPAN_ONLY", "SPAN_AND_EVENT", "EVENT_ONLY"])
def test_util_genai_handler(project, capture):
    """opentelemetry-util-genai 1.3b0's ``TelemetryHandler`` in each content capture mode (in
    ``EVENT_ONLY`` the messages come as one log record per call, and the tool has no event)."""
    for trace in check_framework("util_genai", capture, project, "chat gpt-test"):
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        io = (None, None) if capture == "EVENT_ONLY" else ({"expr": "2+2"}, "4")
        assert (tool["name"], tool.get("input"), tool.get("output")) == (
            "execute_tool calculator",
            *io,
        )


def test_openai_agents_sdk(project):
    """The OpenAI Agents SDK on Chat Completions, with OpenInference's processor as its only one:
    its ``generation`` spans are the model calls, the function tool a tool span."""
    for trace in check_framework("openai_agents", "default", project, "generation"):
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert (tool["name"], tool["input"], tool["output"]) == ("calculator", {"expr": "2+2"}, "4")


def test_langgraph(project):
    """LangGraph's ReAct agent through OpenInference's LangChain instrumentor: the ``ChatOpenAI``
    spans are the model calls, the graph's nodes plain spans. The tool turn also keeps the name
    LangChain's ``ToolMessage`` carries (OpenInference records it; the wire has none)."""
    traces, requests = run_framework("langgraph", "default", project)
    check_samples_named(traces, requests)
    for trace in traces:
        check_model_calls(trace, ["ChatOpenAI", "ChatOpenAI"])
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert (tool["name"], tool["input"]) == ("calculator", "2+2")


def check_samples_named(traces: list[dict], requests: list[dict[str, Any]]) -> None:
    """:func:`check_samples`, the tool results also naming their tool (LangChain's messages)."""
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s, i) for s in range(STEPS) for i in range(SAMPLES)
    ]
    for trace, last in zip(traces, requests[1::2], strict=True):
        expected = [
            {**m, "name": "calculator"} if m["role"] == "tool" else m
            for m in sent(last, reply_for(last))
        ]
        assert stored(trace) == expected, json.dumps(trace["messages"], indent=1)
