"""The Vercel AI SDK, offline: the stored conversation is what the agent did.

One Node process (``tests/js/ai_sdk_agent.mjs``: ``ai`` 7 + ``@ai-sdk/otel`` through the official
OTel JS SDK and its OTLP/HTTP protobuf exporter) runs, for each of the SDK's two telemetry
integrations, 2 steps x 4 samples under a ``rollout`` root (``step``, ``sample_index``,
``reward``) into a real receiver on loopback, one Trackio run per integration:

- ``legacy``: ``registerTelemetry(new LegacyOpenTelemetry())``, the ``ai.*`` spans every AI SDK
  4 to 6 application emits (``ai.generateText`` > ``ai.generateText.doGenerate`` > ``ai.toolCall``);
- ``otel``: ``registerTelemetry(new OpenTelemetry())``, OTel GenAI spans (``invoke_agent`` >
  ``step N`` > ``chat`` / ``execute_tool``).

The model is the SDK's scripted ``MockLanguageModelV4``; sample ``i`` is scenario ``i``:
``generateText`` and ``streamText`` with two sequential tool rounds, and each with two parallel
tool calls. Every Trace read back from Trackio storage must hold the system prompt, the question,
each tool call (name, arguments, id) and each result paired by id, the answer — once each, in
order, as the SDK reports its steps; the model calls as generations with their model and usage
(summed once: the agent span's totals do not count again); tools as tools with their arguments
and results; and a header with no ``ai.*`` bookkeeping, only the user's ``reward``.

The JS dependencies are installed with ``npm ci`` from the committed lockfile into
``tests/js/node_modules`` (again only when the lockfile changed). Skipped only without ``node``.
"""

from __future__ import annotations

import json
import shutil
import uuid
from typing import Any

import pytest
from conftest import npm_ci, read_traces, run_node_script, stored
from test_conventions import SAMPLE, facts_of, one_trace, traced

from otel_trackio._core.convert import METADATA_KEYS
from otel_trackio._core.values import as_text

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

STEPS = 2
INTEGRATIONS = ("legacy", "otel")
MODEL = "mock-model"
SYSTEM = "be brief"


def _call(call_id: str, tool: str, **arguments: Any) -> dict[str, Any]:
    return {"id": call_id, "tool": tool, "input": arguments}


#: sample_index → what the scripted model does (rounds of tool calls, then the answer)
SCENARIOS: list[dict[str, Any]] = [
    {
        "call": "generateText",
        "question": "what is 2+2, and then 3+3?",
        "rounds": [
            [_call("call_1", "calculator", expr="2+2")],
            [_call("call_2", "calculator", expr="3+3")],
        ],
        "answer": "4, then 6",
        "usage": {"input": 11, "output": 7},
    },
    {
        "call": "streamText",
        "question": "how warm is it in Paris, plus 1?",
        "rounds": [
            [_call("call_w", "weather", city="Paris")],
            [_call("call_c", "calculator", expr="5+1")],
        ],
        "answer": "Paris is at 5 degrees, 6 with one more",
        "usage": {"input": 13, "output": 5},
    },
    {
        "call": "generateText",
        "question": "2+2 and the weather in Rome, at once",
        "rounds": [
            [_call("call_a", "calculator", expr="2+2"), _call("call_b", "weather", city="Rome")]
        ],
        "answer": "4; Rome is at 4 degrees",
        "usage": {"input": 17, "output": 3},
    },
    {
        "call": "streamText",
        "question": "the weather in Paris and in Rome, at once",
        "rounds": [
            [_call("call_p", "weather", city="Paris"), _call("call_r", "weather", city="Rome")]
        ],
        "answer": "Paris 5, Rome 4",
        "usage": {"input": 19, "output": 2},
    },
]
for _scenario in SCENARIOS:
    _scenario["system"] = SYSTEM

#: what each integration names its spans
NAMES = {
    "legacy": {
        "generateText": ("ai.generateText", "ai.generateText.doGenerate"),
        "streamText": ("ai.streamText", "ai.streamText.doStream"),
        "tool": lambda name: "ai.toolCall",
    },
    "otel": {
        "generateText": (f"invoke_agent {MODEL}", f"chat {MODEL}"),
        "streamText": (f"invoke_agent {MODEL}", f"chat {MODEL}"),
        "tool": lambda name: f"execute_tool {name}",
    },
}
#: the span metadata attribute naming a tool run's call id
TOOL_ID = {"legacy": "ai.toolCall.id", "otel": "gen_ai.tool.call.id"}


@pytest.fixture(scope="module")
def runs() -> dict[str, Any]:
    """Run every scenario of both integrations once: {"reports": what the SDK did per
    (integration, step, sample_index), "traces": integration → the Traces stored}."""
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    npm_ci()
    from otel_trackio.receiver import OTLPReceiver

    project = f"test-ai-sdk-{uuid.uuid4().hex[:12]}"
    receiver = OTLPReceiver(project, "r", port=0, grpc_port=0, summary_interval=0).start()
    try:
        plan = {
            "endpoint": receiver.url,
            "steps": STEPS,
            "integrations": list(INTEGRATIONS),
            "scenarios": SCENARIOS,
        }
        result = run_node_script(node, "ai_sdk_agent.mjs", plan)
    finally:
        receiver.stop()
    assert result.returncode == 0, result.stderr[-4000:]
    reports = {}
    for line in result.stdout.splitlines():
        report = json.loads(line)
        reports[report["integration"], report["step"], report["sample_index"]] = report
    traces = {name: read_traces(project, name) for name in INTEGRATIONS}
    return {"reports": reports, "traces": traces}


def expected_conversation(scenario: dict[str, Any], report: dict[str, Any]) -> list[dict]:
    """What the agent did, from the SDK's own report of its steps: system, question, each
    step's tool calls and their results (by id, in call order), the answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": scenario["system"]},
        {"role": "user", "content": scenario["question"]},
    ]
    for step in report["steps"]:
        if not step["toolCalls"]:
            messages.append({"role": "assistant", "content": step["text"]})
            continue
        calls = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["tool"], "arguments": json.dumps(c["input"])},
            }
            for c in step["toolCalls"]
        ]
        # a tool-call turn without text: content null, as the OpenAI API has it
        messages.append({"role": "assistant", "content": step["text"] or None, "tool_calls": calls})
        results = {r["id"]: r["output"] for r in step["toolResults"]}
        for c in step["toolCalls"]:
            messages.append(
                {"role": "tool", "tool_call_id": c["id"], "content": as_text(results[c["id"]])}
            )
    return messages


def tokens(trace: dict) -> dict[str, int]:
    """The sample's usage as Trackio shows it (its Tokens chip): every span's own usage summed."""
    total: dict[str, int] = {}
    for span in trace["spans"]:
        for key, value in span.get("usage", {}).items():
            total[key] = total.get(key, 0) + value
    return total


def _sample(runs: dict[str, Any], integration: str, index: int) -> list[tuple[dict, dict]]:
    """(stored Trace, the SDK's report) of scenario ``index`` at every step."""
    traces = [t for t in runs["traces"][integration] if t["metadata"]["sample_index"] == index]
    assert [t["step"] for t in traces] == list(range(STEPS))
    return [(t, runs["reports"][integration, t["step"], index]) for t in traces]


def test_every_sample_once_at_its_step(runs):
    for integration in INTEGRATIONS:
        traces = runs["traces"][integration]
        assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
            (step, i) for step in range(STEPS) for i in range(len(SCENARIOS))
        ], integration
        assert not [t for t in traces if t["metadata"].get("partial")]


CASES = [(integration, i) for integration in INTEGRATIONS for i in range(len(SCENARIOS))]
IDS = [f"{integration}-{i}-{SCENARIOS[i]['call']}" for integration, i in CASES]


@pytest.mark.parametrize(("integration", "index"), CASES, ids=IDS)
def test_conversation_is_what_the_agent_did(runs, integration, index):
    scenario = SCENARIOS[index]
    for trace, report in _sample(runs, integration, index):
        assert report["text"] == scenario["answer"]
        assert [[c["id"] for c in s["toolCalls"]] for s in report["steps"][:-1]] == [
            [c["id"] for c in r] for r in scenario["rounds"]
        ]
        assert stored(trace) == expected_conversation(scenario, report), json.dumps(
            trace["messages"], indent=1
        )


@pytest.mark.parametrize(("integration", "index"), CASES, ids=IDS)
def test_kinds_model_usage_and_tool_io(runs, integration, index):
    scenario = SCENARIOS[index]
    agent_name, call_name = NAMES[integration][scenario["call"]]
    tool_name = NAMES[integration]["tool"]
    calls = [c for r in scenario["rounds"] for c in r]
    per_call = {
        "input_tokens": scenario["usage"]["input"],
        "output_tokens": scenario["usage"]["output"],
        "total_tokens": scenario["usage"]["input"] + scenario["usage"]["output"],
    }
    model_calls = len(scenario["rounds"]) + 1
    for trace, report in _sample(runs, integration, index):
        spans = trace["spans"]
        generations = [s for s in spans if s["kind"] == "generation"]
        assert [s["name"] for s in generations] == [call_name] * model_calls, spans
        for span in generations:
            assert span["model"] == MODEL
            assert span["usage"] == per_call
        usage = {k: v * model_calls for k, v in per_call.items()}
        assert tokens(trace) == usage  # the agent span's totals are not added
        assert report["usage"]["totalTokens"] == usage["total_tokens"]
        # The agent span: the question in, the answer out; its totals in its metadata (Trackio's
        # Tokens chip sums the spans' own usage: the model calls').
        (agent,) = [s for s in spans if s["name"] == agent_name]
        assert agent["kind"] == "span"
        assert agent["input"] == [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": scenario["question"]},
        ]
        assert agent["output"][0]["role"] == "assistant"
        assert agent["output"][0]["content"] == scenario["answer"]
        assert "usage" not in agent
        assert agent["metadata"]["usage"] == usage
        # Each tool run: a tool with its arguments and result, under the model call that asked.
        tools = {s["metadata"][TOOL_ID[integration]]: s for s in spans if s["kind"] == "tool"}
        assert sorted(tools) == sorted(c["id"] for c in calls)
        results = {r["id"]: r["output"] for s in report["steps"] for r in s["toolResults"]}
        for call in calls:
            span = tools[call["id"]]
            assert span["name"] == tool_name(call["tool"])
            assert (span["input"], span["output"]) == (call["input"], results[call["id"]])
            if integration == "legacy":
                (parent,) = [s for s in generations if s["id"] == span["parent_id"]]
                assert call["id"] in json.dumps(parent["output"])
        assert {s["kind"] for s in spans} == {"span", "generation", "tool"}


@pytest.mark.parametrize("integration", INTEGRATIONS)
def test_header_holds_only_the_users_fields(runs, integration):
    for trace in runs["traces"][integration]:
        meta = trace["metadata"]
        assert set(meta) - METADATA_KEYS == {"reward"}, sorted(meta)
        assert meta["reward"] == 1
        assert meta["search"] == "reward=1"
        if integration == "legacy":
            # The SDK's bookkeeping stays on its spans; what a field now says is not repeated.
            for span in trace["spans"]:
                assert not {
                    "ai.operationId",
                    "operation.name",
                    "ai.prompt.messages",
                    "ai.response.text",
                    "ai.usage.inputTokens",
                    "ai.toolCall.args",
                    "ai.model.id",
                } & set(span["metadata"]), span


# -- Hand-built ai.* spans: the older forms (ai 3/4) and the odd cases a real run does not reach --

AI4_MESSAGES = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": [{"type": "text", "text": "2+2?"}]},
    {
        "role": "assistant",
        "content": [
            {"type": "reasoning", "text": "add them"},
            {"type": "tool-call", "toolCallId": "c1", "toolName": "calc", "args": {"expr": "2+2"}},
        ],
    },
    {
        "role": "tool",
        "content": [{"type": "tool-result", "toolCallId": "c1", "toolName": "calc", "result": 4}],
    },
]
CALC_C1 = {
    "id": "c1",
    "type": "function",
    "function": {"name": "calc", "arguments": '{"expr": "2+2"}'},
}


def test_ai4_model_call_args_result_and_prompt_tokens():
    facts = facts_of(
        {
            "ai.operationId": "ai.generateText.doGenerate",
            "operation.name": "ai.generateText.doGenerate agent",
            "resource.name": "agent",
            "ai.telemetry.functionId": "agent",
            "ai.model.id": "gpt-x",
            "ai.model.provider": "openai.chat",
            "ai.prompt.format": "messages",
            "ai.prompt.messages": json.dumps(AI4_MESSAGES),
            "ai.response.text": "4",
            "ai.response.finishReason": "stop",
            "ai.usage.promptTokens": 9,
            "ai.usage.completionTokens": 0,
        }
    )
    assert facts.kind == "generation"
    assert (facts.model, facts.provider) == ("gpt-x", "openai.chat")
    assert facts.usage == {"input_tokens": 9, "output_tokens": 0, "total_tokens": 9}
    assert facts.system_messages == [{"role": "system", "content": "be brief"}]
    assert facts.input_messages == [
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [CALC_C1],
            "reasoning_content": "add them",
        },
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
    ]
    assert facts.output_messages == [{"role": "assistant", "content": "4", "finish_reason": "stop"}]
    assert "ai.prompt.format" not in facts.consumed  # not represented: stays on the span
    assert {
        "ai.operationId",
        "operation.name",
        "resource.name",
        "ai.usage.promptTokens",
    } <= facts.consumed
    assert "ai.telemetry.functionId" not in facts.consumed


def test_ai4_response_tool_calls_with_args_text_and_reasoning():
    calls = [
        {
            "toolCallType": "function",
            "toolCallId": "c1",
            "toolName": "calc",
            "args": '{"expr": "2+2"}',
        }
    ]
    facts = facts_of(
        {
            "ai.operationId": "ai.streamText.doStream",
            "ai.prompt.messages": json.dumps(AI4_MESSAGES[:2]),
            "ai.response.text": "let me add",
            "ai.response.reasoning": "2 and 2",
            "ai.response.toolCalls": json.dumps(calls),
        }
    )
    assert facts.output_messages == [
        {
            "role": "assistant",
            "content": "let me add",
            "tool_calls": [CALC_C1],
            "reasoning_content": "2 and 2",
        }
    ]


def test_ai3_result_attributes_and_a_prompt_text():
    facts = facts_of(
        {
            "ai.operationId": "ai.generateText",
            "ai.prompt": json.dumps({"system": "be brief", "prompt": "hi"}),
            "ai.result.text": "hello",
            "ai.finishReason": "stop",
            "ai.usage.promptTokens": 3,
            "ai.usage.completionTokens": 1,
        }
    )
    assert facts.kind == "span"  # the whole call: its usage is its steps', counted there
    assert facts.input == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]
    assert facts.output == [{"role": "assistant", "content": "hello", "finish_reason": "stop"}]


def test_system_messages_in_the_prompt():
    system = [{"role": "system", "content": "be brief"}, {"role": "system", "content": "be kind"}]
    facts = facts_of(
        {
            "ai.operationId": "ai.streamText",
            "ai.prompt": json.dumps({"system": system, "prompt": "hi"}),
        }
    )
    assert facts.system_messages == system
    assert facts.input_messages == [{"role": "user", "content": "hi"}]


def test_the_whole_call_answers_with_its_text_not_every_steps_calls():
    calls = [{"toolCallId": "c1", "toolName": "calc", "input": {"expr": "2+2"}}]
    facts = facts_of(
        {
            "ai.operationId": "ai.generateText",
            "ai.prompt": json.dumps({"messages": [{"role": "user", "content": "2+2?"}]}),
            "ai.response.text": "4",
            "ai.response.toolCalls": json.dumps(calls),
        }
    )
    assert facts.output == [{"role": "assistant", "content": "4"}]
    assert "ai.response.toolCalls" not in facts.consumed  # kept on the span: the calls it made


@pytest.mark.parametrize(
    ("output", "content"),
    [
        ({"type": "text", "value": "4"}, "4"),
        ({"type": "json", "value": {"n": 4}}, '{"n": 4}'),
        ({"type": "error-text", "value": "boom"}, "boom"),
        ({"type": "error-json", "value": {"error": "boom"}}, '{"error": "boom"}'),
        (
            {
                "type": "content",
                "value": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
            },
            "a\nb",
        ),
        ({"type": "execution-denied", "reason": "not allowed"}, "not allowed"),
        ("plain", "plain"),
    ],
)
def test_tool_result_output_forms(output, content):
    message = {
        "role": "tool",
        "content": [{"type": "tool-result", "toolCallId": "c1", "output": output}],
    }
    facts = facts_of(
        {
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.prompt.messages": json.dumps([message]),
        }
    )
    assert facts.input_messages == [{"role": "tool", "content": content, "tool_call_id": "c1"}]


def test_cut_attributes_keep_their_raw_text():
    """An attribute cut at the span's length limit fails to parse: its text is kept."""
    cut_prompt = json.dumps(AI4_MESSAGES)[:60]
    cut_calls = '[{"toolCallId":"c1","toolName":"calc","inp'
    facts = facts_of(
        {
            "ai.operationId": "ai.generateText.doGenerate",
            "ai.prompt.messages": cut_prompt,
            "ai.response.toolCalls": cut_calls,
        }
    )
    assert facts.input_messages == [{"role": "user", "content": cut_prompt}]
    assert facts.output_messages == [{"role": "assistant", "content": cut_calls}]


def test_tool_run_and_other_operations():
    tool = facts_of(
        {
            "ai.operationId": "ai.toolCall",
            "operation.name": "ai.toolCall",
            "ai.toolCall.name": "calc",
            "ai.toolCall.id": "c1",
            "ai.toolCall.args": '{"expr":"2+2"}',
            "ai.toolCall.result": "4",
        }
    )
    assert (tool.kind, tool.input, tool.output) == ("tool", {"expr": "2+2"}, "4")
    assert {"ai.toolCall.args", "ai.toolCall.result", "operation.name"} <= tool.consumed
    embed = facts_of({"ai.operationId": "ai.embed.doEmbed", "ai.values": ['"hi"']})
    assert (embed.kind, embed.input_messages, embed.output_messages) == ("span", None, None)
    # Another convention's kind wins: gen_ai.operation.name says what the span is.
    both = facts_of({"ai.operationId": "ai.toolCall", "gen_ai.operation.name": "chat"})
    assert both.kind == "generation"


def test_ai_attributes_stay_out_of_the_header(project):
    """On the sample root (an AI SDK call run as the rollout itself) and as numbers on its
    children, ``ai.*`` is the SDK's bookkeeping, never a user field; except the user's own
    values the SDK carries (ai 4 to 6 ``telemetry.metadata``, ai 7 ``runtimeContext``)."""
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span(
            "ai.generateText",
            attributes={
                **SAMPLE,
                "ai.operationId": "ai.generateText",
                "operation.name": "ai.generateText agent",
                "resource.name": "agent",
                "ai.telemetry.functionId": "agent",
                "ai.settings.maxRetries": 2,
                "ai.prompt": json.dumps({"prompt": "2+2?"}),
                "ai.response.text": "4",
                "ai.telemetry.metadata.experiment": "baseline",
                "reward": 1.0,
            },
        ):
            with tracer.start_as_current_span(
                "ai.generateText.doGenerate",
                attributes={
                    "ai.operationId": "ai.generateText.doGenerate",
                    "ai.prompt.messages": json.dumps([{"role": "user", "content": "2+2?"}]),
                    "ai.response.text": "4",
                    "ai.response.msToFirstChunk": 3.5,
                    "ai.usage.inputTokens": 5,
                    "ai.usage.outputTokens": 1,
                    "ai.usage.inputTokenDetails.noCacheTokens": 5,
                    "ai.settings.context.attempt": 2,
                },
            ):
                pass
    trace = one_trace(project)
    user = {k: v for k, v in trace["metadata"].items() if k not in METADATA_KEYS}
    assert user == {
        "ai.telemetry.metadata.experiment": "baseline",
        "reward": 1,
        "ai.settings.context.attempt": 2,
    }
    assert tokens(trace) == {"input_tokens": 5, "output_tokens": 1, "total_tokens": 6}
    assert trace["messages"] == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"},
    ]
