"""MLflow's span format, through the real ``mlflow-tracing`` and its OpenAI autologger.

``tests/mlflow_agent.py`` runs one agent (the fake OpenAI server's calculator dialogue) in a
child process, MLflow exporting over OTLP/HTTP protobuf (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``
+ ``OTEL_EXPORTER_OTLP_TRACES_PROTOCOL=http/protobuf``) into a real OTLP receiver; the same agent
on the OTel GenAI instrumentation (openai-v2) is the reference. mlflow-tracing 3.17.2 (the
``test`` extra). The verl shapes (``UNKNOWN`` spans: generate / tool / agent loop ops) are pinned
down on hand-built MLflow attributes at the end.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from conftest import read_traces, trace_usage
from fake_openai_server import INPUT_TOKENS, OUTPUT_TOKENS, FakeOpenAIServer
from test_conventions import facts_of
from test_frameworks import EXPECTED, stored

from otel_trackio._core.conventions import mlflow
from otel_trackio._core.convert import sample_to_trace
from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import Sample, SampleIdentity

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

pytest.importorskip("mlflow")

HERE = Path(__file__).resolve().parents[1]  # tests/
STEPS, SAMPLES, ROLLOUT_N = 2, 2, 3


def run_agent(mode: str, receiver: Any) -> subprocess.CompletedProcess[str]:
    """The agent in its own process, exporting into ``receiver``; the receiver stopped after
    (it drains: every sample it holds is logged)."""
    with FakeOpenAIServer() as server:
        env = {
            **{k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "MLFLOW_"))},
            "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": f"{receiver.url}/v1/traces",
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": "http/protobuf",
            "OTEL_SEMCONV_STABILITY_OPT_IN": "gen_ai_latest_experimental",
            "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "SPAN_ONLY",
            # mlflow-tracing has no local store: trace tags need a tracking URI to resolve
            # (nothing listens there; tags of a trace in progress stay in memory).
            "MLFLOW_TRACKING_URI": "http://127.0.0.1:9",
            "MLFLOW_DISABLE_TELEMETRY": "true",
            "DO_NOT_TRACK": "true",
            "PYTHONPATH": os.pathsep.join([str(HERE), os.environ.get("PYTHONPATH", "")]),
        }
        result = subprocess.run(
            [sys.executable, str(HERE / "mlflow_agent.py"), mode, server.base_url],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    receiver.stop()
    assert result.returncode == 0, result.stderr[-4000:]
    assert "BLOCKED" not in result.stderr, result.stderr[-4000:]
    return result


def by_identity(traces: list[dict]) -> dict[tuple[int, Any], dict]:
    out = {(t["step"], t["metadata"].get("sample_index")): t for t in traces}
    assert len(out) == len(traces), "a sample stored twice"
    return out


def test_an_autologged_agent_gives_the_conversation_of_its_otel_genai_twin(project, start_receiver):
    """The same agent, MLflow-autologged and OTel-GenAI-instrumented: the same Traces."""
    run_agent("twins", start_receiver(name="mlflow"))
    mlflow_traces = by_identity(read_traces(project, "mlflow"))
    otel_traces = by_identity(read_traces(project, "otel"))
    expected_keys = {(step, index) for step in range(STEPS) for index in range(SAMPLES)}
    assert set(mlflow_traces) == set(otel_traces) == expected_keys
    for key, trace in mlflow_traces.items():
        twin = otel_traces[key]
        assert stored(trace) == stored(twin) == EXPECTED
        meta = trace["metadata"]
        assert meta["status"] == twin["metadata"]["status"] == "reward 1" and "partial" not in meta
        assert meta["rollout_n"] == twin["metadata"]["rollout_n"] == ROLLOUT_N
        assert meta["reward"] == twin["metadata"]["reward"] == 1.0
        assert (
            trace_usage(trace)
            == trace_usage(twin)
            == {
                "input_tokens": 2 * INPUT_TOKENS,
                "output_tokens": 2 * OUTPUT_TOKENS,
                "total_tokens": 2 * (INPUT_TOKENS + OUTPUT_TOKENS),
            }
        )
        # MLflow's bookkeeping stays out of the header; the request's keywords too.
        assert not [k for k in meta if k.startswith("mlflow.")], meta
        assert not {"model", "tools", "temperature"} & set(meta), meta
        kinds = sorted(s["kind"] for s in trace["spans"])
        assert (
            kinds
            == sorted(s["kind"] for s in twin["spans"])
            == [
                "generation",
                "generation",
                "span",
                "tool",
            ]
        )
        (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
        assert tool["input"] == {"expr": "2+2"} and tool["output"] == "4"
        generations = [s for s in trace["spans"] if s["kind"] == "generation"]
        assert {g["model"] for g in generations} == {"gpt-test"}
        for g in generations:
            assert g["usage"]["input_tokens"] == INPUT_TOKENS
            assert not [k for k in g["metadata"] if k.startswith("mlflow.span")], g["metadata"]
        (root,) = [s for s in trace["spans"] if s["parent_id"] is None]
        assert root["input"] == {"question": "what is 2+2?"}
        assert root["output"] == "answer to: 4"


def test_trace_tags_lose_the_roots_in_mlflow_3_13_to_3_17(project, start_receiver):
    """What verl's ``trace.backend=mlflow`` does (identity as trace tags): mlflow-tracing
    3.13-3.17 drops every root carrying tags on export ("Cannot mutate immutable
    BoundedAttributes"). The children still arrive and are stored, as partial Traces with no
    identity: the limit the docs state. (Fails, on purpose, once an MLflow keeps the roots:
    then the docs change.)"""
    result = run_agent("mlflow-tags", start_receiver(name="tags"))
    assert "Cannot mutate immutable BoundedAttributes" in result.stderr
    traces = read_traces(project, "tags")
    assert len(traces) == STEPS * SAMPLES
    for trace in traces:
        assert trace["metadata"]["partial"] is True
        assert "sample_index" not in trace["metadata"]
        assert not [s for s in trace["spans"] if s["name"] == "rollout"]
        assert stored(trace) == EXPECTED  # the model calls still give the conversation


# -- the format itself, on hand-built attributes ------------------------------------------------


def _json(value: Any) -> str:
    return json.dumps(value)


def test_trace_tags_identify_a_root_that_has_no_attributes_for_it():
    raw = {
        "mlflow.traceRequestId": _json("tr-1"),
        "mlflow.spanType": _json("UNKNOWN"),
        "mlflow.traceTag.step": "3",
        "mlflow.traceTag.sample_index": "7",
        "mlflow.traceTag.rollout_n": "1",
        "mlflow.traceTag.validate": "False",
        "mlflow.traceTag.experiment_name": "exp-a",
        "mlflow.traceTag.mlflow.traceName": "agent_loop",
        "reward": "0.5",
    }
    attrs = mlflow.normalize_attributes(raw)
    assert attrs["step"] == 3 and attrs["sample_index"] == 7 and attrs["rollout_n"] == 1
    assert attrs["validate"] is False and attrs["experiment_name"] == "exp-a"
    assert attrs["reward"] == 0.5 and attrs["mlflow.spanType"] == "UNKNOWN"
    assert "traceName" not in attrs and "mlflow.traceName" not in attrs
    assert not [k for k in attrs if k.startswith("mlflow.traceTag.step")]
    # plain attributes win over tags; normalising twice changes nothing
    both = mlflow.normalize_attributes({**raw, "step": "4"})
    assert both["step"] == 4
    assert mlflow.normalize_attributes(both) is both
    other = {"step": "3"}
    assert mlflow.normalize_attributes(other) is other  # not MLflow's: untouched


# verl 0.9.1's ops as MLflow records them (rollout_trace.py, trace.backend=mlflow, token2text).
RAW_PROMPT = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is 2+2?"},
]
PROMPT_1 = "<s>system: be brief\nuser: what is 2+2?\nassistant:"
RESPONSE_1 = ' <tool_call>{"name": "calculator", "arguments": {"expr": "2+2"}}</tool_call>'
TOOL_TURN = "\ntool: 4\nassistant:"
RESPONSE_2 = " 4"
CALCULATOR_CALL = {
    "id": "",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expr": "2+2"}'},
}


def _span(span_id: int, name: str, start: int, attrs: dict[str, Any], parent: int | None = 1):
    base = {"mlflow.traceRequestId": _json("tr-9"), "mlflow.spanType": _json("UNKNOWN")}
    return SpanRecord(
        9,
        span_id,
        name,
        start,
        start + 1,
        parent_id=parent,
        attributes=mlflow.normalize_attributes({**base, **attrs}),
    )


def _generate(span_id: int, start: int, prompt_ids: list[int], token_ids: list[int], texts):
    inputs = {"request_id": "r", "prompt_ids": prompt_ids, "sampling_params": {"t": 1.0}}
    outputs = {"token_ids": token_ids, "log_probs": None, "stop_reason": "completed"}
    if texts is not None:
        outputs.update(prompt_text=texts[0], response_text=texts[1])
    return _span(
        span_id,
        "AsyncLLMServerManager.generate",
        start,
        {"mlflow.spanInputs": _json(inputs), "mlflow.spanOutputs": _json(outputs)},
        parent=2,
    )


def verl_mlflow_sample(texts: bool = True) -> Sample:
    """One ToolAgentLoop sample as verl's mlflow backend records it (root with its tags)."""
    p1, r1, tool, r2 = [1, 2, 3], [4, 5], [6, 7], [8]
    spans = [
        _span(
            1,
            "agent_loop",
            0,
            {"mlflow.traceTag.step": "1", "mlflow.traceTag.sample_index": "5"}
            | {"mlflow.traceTag.rollout_n": "2", "mlflow.traceTag.validate": "False"},
            parent=None,
        ),
        _span(
            2,
            "ToolAgentLoop.run",
            1,
            {
                "mlflow.spanInputs": _json(
                    {"sampling_params": {}, "kwargs": {"raw_prompt": RAW_PROMPT, "index": 5}}
                ),
                "mlflow.spanOutputs": _json(
                    {"prompt_ids": p1, "response_ids": r1 + tool + r2, "num_turns": 3}
                ),
            },
        ),
        _generate(3, 2, p1, r1, (PROMPT_1, RESPONSE_1) if texts else None),
        _span(
            4,
            "CalculatorTool.execute",
            3,
            {
                "mlflow.spanInputs": _json(
                    {"instance_id": "i", "parameters": {"expr": "2+2"}, "kwargs": {}}
                ),
                "mlflow.spanOutputs": _json([{"text": "4", "image": None, "video": None}, 0.0, {}]),
            },
            parent=2,
        ),
        _generate(
            5,
            4,
            p1 + r1 + tool,
            r2,
            (PROMPT_1 + RESPONSE_1 + TOOL_TURN, RESPONSE_2) if texts else None,
        ),
    ]
    root = spans[0]
    identity = SampleIdentity(9, 1, 1, sample_index=5, rollout_n=2, validate=False)
    return Sample(spans, root, identity)


def test_verl_ops_through_mlflow_read_by_their_shapes():
    """verl sets no span type: the generate op is a generation from its token ids (texts from
    ``token2text``), the tool op a tool with its arguments and result, the agent loop's
    ``raw_prompt`` the conversation's start; the tool turn is the new end of the prompt."""
    trace = sample_to_trace(verl_mlflow_sample())
    kinds = {s["name"]: s["kind"] for s in trace["spans"]}
    assert kinds == {
        "agent_loop": "span",
        "ToolAgentLoop.run": "span",
        "AsyncLLMServerManager.generate": "generation",
        "CalculatorTool.execute": "tool",
    }
    assert trace["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is 2+2?"},
        {  # Hermes markup read as the call it is
            "role": "assistant",
            "content": None,
            "tool_calls": [CALCULATOR_CALL],
        },
        {"role": "user", "content": TOOL_TURN.strip()},
        {"role": "assistant", "content": RESPONSE_2},
    ]
    (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["input"] == {"expr": "2+2"} and tool["output"] == "4"
    first = next(s for s in trace["spans"] if s["kind"] == "generation")
    assert first["input"] == PROMPT_1 and first["output"] == RESPONSE_1
    assert first["metadata"]["prompt_ids.count"] == 3
    meta = trace["metadata"]
    assert (meta["step"], meta["sample_index"], meta["rollout_n"]) == (1, 5, 2)
    assert not [k for k in meta if k.startswith("mlflow")], meta


def test_verl_ops_without_token2text_decode_with_the_exporters_decoder():
    from otel_trackio import TrackioSettings

    words = {1: "<s>", 2: "what is", 3: "2+2?", 4: "call", 5: "calc", 6: "tool:", 7: "4", 8: "4!"}

    def decode(ids):
        return " ".join(words[i] for i in ids)

    trace = sample_to_trace(verl_mlflow_sample(texts=False), TrackioSettings(token_decoder=decode))
    assert [m["content"] for m in trace["messages"]] == [
        "be brief",
        "what is 2+2?",
        "call calc",
        "tool: 4",
        "4!",
    ]
    undecoded = sample_to_trace(verl_mlflow_sample(texts=False))
    assert undecoded["messages"][:2] == RAW_PROMPT  # ids alone: the prompt still shows


@pytest.mark.parametrize(
    ("span_type", "kind"),
    [
        ("LLM", "generation"),
        ("CHAT_MODEL", "generation"),
        ("TOOL", "tool"),
        ("AGENT", "span"),
        ("CHAIN", "span"),
        ("RETRIEVER", "span"),
        ("UNKNOWN", "span"),
    ],
)
def test_span_types(span_type, kind):
    attrs = {"mlflow.traceRequestId": _json("tr"), "mlflow.spanType": _json(span_type)}
    assert facts_of(attrs).kind == kind


def test_older_chat_messages_attribute_and_bad_values_never_raise():
    messages = [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    facts = facts_of(
        {
            "mlflow.traceRequestId": _json("tr"),
            "mlflow.spanType": _json("CHAT_MODEL"),
            "mlflow.chat.messages": _json(messages),
            "mlflow.chat.tokenUsage": _json({"input_tokens": 3, "output_tokens": 0}),
        }
    )
    assert facts.input_messages == messages[:1] and facts.output_messages == messages[1:]
    assert facts.usage == {"input_tokens": 3, "output_tokens": 0, "total_tokens": 3}
    for bad in ('{"truncated', "[1, 2", "", "null", "[]", '{"token_ids": "x"}'):
        for key in ("mlflow.spanInputs", "mlflow.spanOutputs", "mlflow.chat.tokenUsage"):
            facts_of({"mlflow.spanType": _json("UNKNOWN"), key: bad})
