"""Hand-built spans (real SDK, real Trackio storage) for every GenAI convention form.

Event forms, multimodal and reasoning parts, OpenInference/OpenLLMetry extras, precedence, the
conversation merge, token ids decoded on the export thread, and bad input (truncated JSON, huge
values, odd shapes) that must never raise nor lose the sample.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from conftest import read_traces
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.trace import Tracer

from otel_trackio import TrackioSettings, TrackioSpanExporter
from otel_trackio._core.conventions import read_span_facts
from otel_trackio._core.records import SpanRecord

SAMPLE = {"step": 2, "sample_index": 0}


@contextmanager
def traced(project: str, **exporter_kwargs: Any) -> Iterator[tuple[Tracer, TrackioSpanExporter]]:
    """A tracer whose spans go through a TrackioSpanExporter (run ``r``) into real storage."""
    exporter = TrackioSpanExporter(project=project, name="r", **exporter_kwargs)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    try:
        yield provider.get_tracer("test"), exporter
    finally:
        provider.shutdown()


def one_trace(project: str) -> dict:
    traces = read_traces(project, "r")
    assert len(traces) == 1, traces
    return traces[0]


def generation(trace: dict) -> dict:
    (span,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    return span


def facts_of(attributes: dict[str, Any], events: tuple = (), **options: Any):
    span = SpanRecord(1, 2, "s", 0, 1, attributes=attributes, events=events)
    return read_span_facts(span, TrackioSettings(**options))


# -- OTel GenAI JSON attributes: every part type ------------------------------------------------


def test_json_attributes_with_every_part_type(project):
    parts_in = [
        {
            "role": "user",
            "parts": [
                {"type": "text", "content": "what is in these?"},
                {"type": "blob", "mime_type": "image/png", "modality": "image", "content": "iVBO"},
                {
                    "type": "uri",
                    "mime_type": "image/jpeg",
                    "modality": "image",
                    "uri": "https://x/y",
                },
                {"type": "file", "file_id": "file-1"},
                {"type": "hologram", "beam": 3},
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "id": "c9", "result": {"ok": 1}}],
        },
    ]
    parts_out = [
        {
            "role": "assistant",
            "parts": [
                {"type": "reasoning", "content": "think first"},
                {"type": "server_tool_call", "id": "s1", "name": "web_search"},
                {"type": "server_tool_call_response", "id": "s1", "response": "found"},
                {"type": "text", "content": "a cat"},
                {"type": "tool_call", "id": "c10", "name": "zoom", "arguments": {"x": 1}},
            ],
            "finish_reason": "tool_calls",
        }
    ]
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.request.model", "m")
                span.set_attribute(
                    "gen_ai.system_instructions", json.dumps([{"type": "text", "content": "sys"}])
                )
                span.set_attribute("gen_ai.input.messages", json.dumps(parts_in))
                span.set_attribute("gen_ai.output.messages", json.dumps(parts_out))
    trace = one_trace(project)
    system, user, tool, assistant = trace["messages"]
    assert system == {"role": "system", "content": "sys"}
    assert user["content"] == [
        {"type": "text", "text": "what is in these?"},
        # media: an inline image that is none says so; a URL is the link the page draws; a
        # file says what it was (tests/test_images.py: images that are images)
        {"type": "text", "text": "[image/png, 3 B: not a readable image]"},
        {"type": "image_url", "image_url": {"url": "https://x/y"}},
        {"type": "text", "text": "[file: file-1]"},
        {"type": "hologram", "beam": 3},  # unknown part kept as it came
    ]
    assert tool == {"role": "tool", "content": '{"ok": 1}', "tool_call_id": "c9"}
    assert assistant["reasoning_content"] == "think first"
    assert assistant["content"] == [
        parts_out[0]["parts"][1],
        parts_out[0]["parts"][2],
        {"type": "text", "text": "a cat"},
    ]
    assert assistant["tool_calls"] == [
        {"id": "c10", "type": "function", "function": {"name": "zoom", "arguments": '{"x": 1}'}}
    ]
    span = generation(trace)
    assert span["output"][0]["finish_reason"] == "tool_calls"
    assert span["input"][0] == system
    assert "gen_ai.input.messages" not in span["metadata"]


# -- event forms --------------------------------------------------------------------------------


def test_per_message_events_and_choice(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.add_event("gen_ai.system.message", {"content": "be brief"})
                span.add_event("gen_ai.user.message", {"content": "2+2?"})
                span.add_event(
                    "gen_ai.assistant.message",
                    {
                        "tool_calls": json.dumps(
                            [
                                {
                                    "id": "c1",
                                    "type": "function",
                                    "function": {"name": "calc", "arguments": '{"e":"2+2"}'},
                                }
                            ]
                        )
                    },
                )
                span.add_event("gen_ai.tool.message", {"content": "4", "id": "c1"})
                span.add_event(
                    "gen_ai.choice",
                    {"index": 0, "finish_reason": "stop", "message": json.dumps({"content": "4!"})},
                )
                span.add_event("custom.note", {"x": 1})
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "2+2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "c1",
                    "type": "function",
                    "function": {"name": "calc", "arguments": '{"e":"2+2"}'},
                }
            ],
        },
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
        {"role": "assistant", "content": "4!"},
    ]
    # Events turned into messages are not repeated in metadata; other events stay.
    assert [e["name"] for e in generation(trace)["metadata"]["events"]] == ["custom.note"]


def test_flat_choice_event_and_content_events():
    facts = facts_of(
        {"gen_ai.request.model": "m"},
        events=(
            _event("gen_ai.content.prompt", {"gen_ai.prompt": '[{"role":"user","content":"hi"}]'}),
            _event("gen_ai.content.completion", {"gen_ai.completion": "hello"}),
        ),
    )
    assert facts.kind == "generation"
    assert facts.input_messages == [{"role": "user", "content": "hi"}]
    assert facts.output_messages == [{"role": "assistant", "content": "hello"}]
    facts = facts_of(
        {},
        events=(
            _event("gen_ai.user.message", {"content": "q"}),
            _event("gen_ai.choice", {"message.role": "assistant", "message.content": "a"}),
        ),
    )
    assert facts.output_messages == [{"role": "assistant", "content": "a"}]


def test_operation_details_event(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.usage.input_tokens", 0)
                span.set_attribute("gen_ai.usage.output_tokens", 3)
                span.add_event(
                    "gen_ai.client.inference.operation.details",
                    {
                        "gen_ai.input.messages": json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": "hi"}]}]
                        ),
                        "gen_ai.output.messages": json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": "yo"}]}]
                        ),
                    },
                )
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "yo"},
    ]
    # Zero is a real token count.
    assert generation(trace)["usage"] == {"input_tokens": 0, "output_tokens": 3, "total_tokens": 3}


def _event(name: str, attributes: dict[str, Any]):
    from otel_trackio._core.records import EventRecord

    return EventRecord(name, 0, attributes)


# -- OpenInference and OpenLLMetry extras -------------------------------------------------------


def test_openinference_contents_cost_and_tool_span(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("llm") as span:
                span.set_attributes(
                    {
                        "openinference.span.kind": "LLM",
                        "llm.model_name": "oi-model",
                        "llm.input_messages.0.message.role": "user",
                        "llm.input_messages.0.message.contents.0.message_content.type": "text",
                        "llm.input_messages.0.message.contents.0.message_content.text": "see",
                        "llm.input_messages.0.message.contents.1.message_content.type": "image",
                        "llm.input_messages.0.message.contents.1.message_content.image.image.url": (
                            "https://img"
                        ),
                        "llm.output_messages.0.message.role": "assistant",
                        "llm.output_messages.0.message.content": "a dog",
                        "llm.token_count.prompt": 5,
                        "llm.token_count.completion": 2,
                        "llm.cost.prompt": 0.25,
                        "llm.cost.completion": 0.5,
                    }
                )
            with tracer.start_as_current_span("lookup") as span:
                span.set_attributes(
                    {
                        "openinference.span.kind": "TOOL",
                        "tool.name": "lookup",
                        "input.value": '{"q": "dog"}',
                        "input.mime_type": "application/json",
                        "output.value": "{not json",
                        "output.mime_type": "text/plain",
                    }
                )
    trace = one_trace(project)
    assert trace["messages"] == [
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "see"},
                {"type": "image_url", "image_url": {"url": "https://img"}},
            ],
        },
        {"role": "assistant", "content": "a dog"},
    ]
    span = generation(trace)
    assert span["model"] == "oi-model"
    assert span["usage"] == {"input_tokens": 5, "output_tokens": 2, "total_tokens": 7}
    assert span["cost_usd"] == pytest.approx(0.75)
    assert "cost_usd" not in trace["metadata"]  # the Cost chip sums the spans
    (tool,) = [s for s in trace["spans"] if s["kind"] == "tool"]
    assert tool["input"] == {"q": "dog"}
    assert tool["output"] == "{not json"
    assert tool["metadata"]["tool.name"] == "lookup"


def test_traced_decorator_style_spans(project):
    """Issue 4's ``traced()`` writes OpenInference input/output JSON values and span kinds."""
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("agent") as root:
            root.set_attributes(
                {
                    **SAMPLE,
                    "openinference.span.kind": "CHAIN",
                    "input.value": '{"task": "add"}',
                    "input.mime_type": "application/json",
                    "output.value": '"done"',
                    "output.mime_type": "application/json",
                }
            )
            with tracer.start_as_current_span("policy") as span:
                span.set_attributes(
                    {
                        "openinference.span.kind": "LLM",
                        "input.value": json.dumps(
                            {"messages": [{"role": "user", "content": "add 1 and 2"}]}
                        ),
                        "input.mime_type": "application/json",
                        "output.value": json.dumps("3"),
                        "output.mime_type": "application/json",
                    }
                )
            with tracer.start_as_current_span("add") as span:
                span.set_attributes(
                    {
                        "openinference.span.kind": "TOOL",
                        "input.value": '{"a": 1, "b": 2}',
                        "input.mime_type": "application/json",
                        "output.value": "3",
                        "output.mime_type": "application/json",
                    }
                )
    trace = one_trace(project)
    kinds = {s["name"]: s["kind"] for s in trace["spans"]}
    assert kinds == {"agent": "span", "policy": "generation", "add": "tool"}
    assert trace["messages"] == [
        {"role": "user", "content": "add 1 and 2"},
        {"role": "assistant", "content": "3"},
    ]
    root = next(s for s in trace["spans"] if s["name"] == "agent")
    assert root["input"] == {"task": "add"} and root["output"] == "done"
    add = next(s for s in trace["spans"] if s["name"] == "add")
    assert add["input"] == {"a": 1, "b": 2}


def test_openllmetry_entities_and_kinds():
    tool = facts_of(
        {
            "traceloop.span.kind": "tool",
            "traceloop.entity.input": '{"args": [1], "kwargs": {}}',
            "traceloop.entity.output": '"ok"',
        }
    )
    assert (tool.kind, tool.input, tool.output) == ("tool", {"args": [1], "kwargs": {}}, "ok")
    workflow = facts_of({"traceloop.span.kind": "workflow", "gen_ai.usage.prompt_tokens": 3})
    assert workflow.kind == "span"  # agent/workflow spans repeat usage: never a generation
    chat = facts_of(
        {
            "llm.request.type": "chat",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": json.dumps([{"type": "text", "text": "hi"}]),
            "gen_ai.completion.0.role": "assistant",
            "gen_ai.completion.0.content": "hey",
            "gen_ai.usage.cost": 0.01,
        }
    )
    assert chat.kind == "generation"
    assert chat.input_messages == [{"role": "user", "content": "hi"}]
    assert chat.cost_usd == 0.01


def test_precedence_when_a_span_carries_several_forms():
    facts = facts_of(
        {
            "gen_ai.operation.name": "chat",
            "openinference.span.kind": "TOOL",
            "gen_ai.input.messages": '[{"role":"user","parts":[{"type":"text","content":"otel"}]}]',
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "openinference",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "oi answer",
            "gen_ai.prompt.0.role": "user",
            "gen_ai.prompt.0.content": "openllmetry",
            "gen_ai.usage.input_tokens": 1,
            "gen_ai.usage.prompt_tokens": 2,
            "llm.token_count.prompt": 3,
            "gen_ai.request.model": "req",
            "gen_ai.response.model": "resp",
            "llm.model_name": "oi",
        }
    )
    assert facts.kind == "generation"
    assert facts.input_messages == [{"role": "user", "content": "otel"}]
    assert facts.output_messages == [{"role": "assistant", "content": "oi answer"}]
    assert facts.usage["input_tokens"] == 1
    assert facts.model == "resp"
    # Every form read is consumed, so none floods the span metadata.
    assert {"llm.input_messages.0.message.content", "gen_ai.prompt.0.content"} <= facts.consumed


# -- the conversation ---------------------------------------------------------------------------


def _chat(tracer: Tracer, inputs: list[dict], output: str) -> None:
    with tracer.start_as_current_span("chat") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.input.messages", json.dumps(inputs))
        span.set_attribute(
            "gen_ai.output.messages", json.dumps([{"role": "assistant", "content": output}])
        )


def test_conversation_keeps_repeats_and_unrepeated_turns(project):
    sys_msg = {"role": "system", "content": "s"}
    go = {"role": "user", "content": "go on"}
    a1 = {"role": "assistant", "content": "one"}
    a2 = {"role": "assistant", "content": "two"}
    note = {"role": "user", "content": "(summary of one)"}
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            _chat(tracer, [sys_msg, go], "one")
            _chat(tracer, [sys_msg, go, a1, go], "two")  # the user said "go on" twice
            _chat(tracer, [sys_msg, note], "three")  # history summarised: earlier turns dropped
    messages = one_trace(project)["messages"]
    assert messages == [
        sys_msg,
        go,
        a1,
        go,
        a2,
        note,
        {"role": "assistant", "content": "three"},
    ]


def test_no_model_call_falls_back_to_root_io(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout") as root:
            root.set_attributes({**SAMPLE, "input.value": "question", "output.value": "answer"})
            with tracer.start_as_current_span("reward"):
                pass
    assert one_trace(project)["messages"] == [
        {"role": "user", "content": "question"},
        {"role": "assistant", "content": "answer"},
    ]


# -- token ids ----------------------------------------------------------------------------------


def _decoder(calls: list[str]) -> Callable[[list[int]], str]:
    def decode(ids: list[int]) -> str:
        calls.append(threading.current_thread().name)
        return "".join(chr(ord("a") + i) for i in ids)

    return decode


def test_token_ids_decoded_on_the_export_thread(project, tracer_provider):
    calls: list[str] = []
    exporter = TrackioSpanExporter(project=project, name="r", token_decoder=_decoder(calls))
    provider = tracer_provider
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    with tracer.start_as_current_span("rollout", attributes=SAMPLE):
        with tracer.start_as_current_span("generate") as span:
            span.set_attribute("prompt_ids", [0, 1, 2])
            span.set_attribute("response_ids", [3, 4])
    assert calls == []  # nothing decoded on the rollout thread
    provider.shutdown()
    assert calls and threading.current_thread().name not in calls
    trace = one_trace(project)
    span = generation(trace)
    assert (span["input"], span["output"]) == ("abc", "de")
    assert span["metadata"]["prompt_ids.count"] == 3
    assert "prompt_ids" not in span["metadata"]
    assert trace["messages"] == [
        {"role": "user", "content": "abc"},
        {"role": "assistant", "content": "de"},
    ]


def test_token_id_attribute_names_are_configurable(project):
    calls: list[str] = []
    with traced(
        project,
        token_decoder=_decoder(calls),
        token_id_attributes={"rl.prompt_tokens": "input", "rl.completion_tokens": "output"},
    ) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("gen") as span:
                span.set_attribute("rl.prompt_tokens", [7])
                span.set_attribute("rl.completion_tokens", [8])
                span.set_attribute("prompt_ids", [9])  # no longer a token id attribute
    span = generation(one_trace(project))
    assert (span["input"], span["output"]) == ("h", "i")
    assert span["metadata"]["prompt_ids"] == [9]


def test_failing_decoder_keeps_the_sample(project):
    def broken(ids: list[int]) -> str:
        raise ValueError("no vocab")

    with traced(project, token_decoder=broken) as (tracer, exporter):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("gen") as span:
                span.set_attribute("response_ids", [1, 2])
    span = generation(one_trace(project))
    assert span["metadata"]["response_ids"] == [1, 2]
    assert "no vocab" in span["metadata"]["response_ids.decode_error"]
    assert exporter.stats.conversion_errors == 0


# -- bad input ----------------------------------------------------------------------------------


def test_truncated_json_keeps_the_raw_text(project):
    cut = '[{"role":"user","parts":[{"type":"text","content":"a long que'
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.input.messages", cut)
                span.set_attribute("gen_ai.output.messages", '{"role": "assistant", "parts": [')
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "user", "content": cut},
        {"role": "assistant", "content": '{"role": "assistant", "parts": ['},
    ]


def test_huge_values_are_cut_with_a_marker(project):
    huge = "x" * 5000
    with traced(project, max_value_chars=1000) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute(
                    "gen_ai.input.messages",
                    json.dumps([{"role": "user", "parts": [{"type": "text", "content": huge}]}]),
                )
                span.set_attribute("gen_ai.output.messages", huge)  # not JSON: raw, cut
    trace = one_trace(project)
    marker = "x" * 1000 + "…[otel-trackio cut 4000 chars]"
    assert trace["messages"][0]["content"] == marker
    assert trace["messages"][1]["content"] == marker
    assert generation(trace)["input"][0]["content"] == marker


@pytest.mark.parametrize(
    "attributes",
    [
        {"gen_ai.input.messages": "[1, null, true]"},
        {"gen_ai.input.messages": '[{"role": 5, "parts": "nope"}]'},
        {"gen_ai.input.messages": '[{"parts": [1, {"type": "tool_call"}, null]}]'},
        {"gen_ai.output.messages": '[{"tool_calls": 7, "content": {"a": 1}}]'},
        {"gen_ai.system_instructions": "42"},
        {"llm.input_messages.0.message": "flat", "llm.input_messages.x.message.role": "u"},
        {"llm.output_messages.0.message.tool_calls.0.tool_call": "odd"},
        {"gen_ai.prompt.0.tool_calls.a.name": "f", "gen_ai.completion.3.content": "late"},
        {"input.value": '"' * 3, "input.mime_type": 7},
        {"prompt_ids": "[1, 2", "response_ids": [1.5, 2], "token_ids": [True]},
        {"gen_ai.input.messages": "[" * 5000 + "]" * 5000},
    ],
)
def test_odd_shapes_never_raise_nor_lose_the_sample(project, attributes):
    with traced(project, token_decoder=lambda ids: "t") as (tracer, exporter):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attributes(attributes)
    trace = one_trace(project)
    assert exporter.stats.conversion_errors == 0
    assert len(trace["spans"]) == 2
    assert all(isinstance(m, dict) and "role" in m for m in trace["messages"])


# -- tool results, tool spans, model attributes ---------------------------------------------------


def _tool_call_part(call_id: str, name: str, city: str) -> dict:
    return {"type": "tool_call", "id": call_id, "name": name, "arguments": {"city": city}}


def _tool_response_part(call_id: str, result: str) -> dict:
    return {"type": "tool_call_response", "id": call_id, "result": result}


@pytest.mark.parametrize("role", ["tool", "user"])
def test_parallel_tool_results_are_one_tool_message_each(project, role):
    """One GenAI message answering two parallel calls (pydantic-ai sends this) is two tool
    messages, each with its own id, in order; older instrumentations send it as ``user``."""
    history = [
        {"role": "user", "parts": [{"type": "text", "content": "weather and time in Rome?"}]},
        {
            "role": "assistant",
            "parts": [
                _tool_call_part("c2", "weather", "Rome"),
                _tool_call_part("c3", "time", "Rome"),
            ],
        },
        {
            "role": role,
            "parts": [_tool_response_part("c2", "Sunny"), _tool_response_part("c3", "noon")],
        },
    ]
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with tracer.start_as_current_span("chat") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.input.messages", json.dumps(history))
                span.set_attribute(
                    "gen_ai.output.messages",
                    json.dumps(
                        [{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]
                    ),
                )
    messages = one_trace(project)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "tool", "tool", "assistant"]
    assert messages[2] == {"role": "tool", "content": "Sunny", "tool_call_id": "c2"}
    assert messages[3] == {"role": "tool", "content": "noon", "tool_call_id": "c3"}


def test_tool_results_beside_other_parts_keep_their_place():
    facts = facts_of(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [
                    {
                        "role": "user",
                        "parts": [
                            _tool_response_part("c1", "4"),
                            {"type": "text", "content": "now double it"},
                        ],
                    },
                    {"role": "user", "parts": [_tool_response_part("c9", "alone")]},
                ]
            ),
        }
    )
    assert facts.input_messages == [
        {"role": "tool", "content": "4", "tool_call_id": "c1"},
        {"role": "user", "content": "now double it"},
        {"role": "tool", "content": "alone", "tool_call_id": "c9"},
    ]


def test_tool_span_io_from_tool_attributes_first():
    """``gen_ai.tool.call.*`` win over the messages a tool span carries as events (Strands);
    pydantic-ai's older ``tool_arguments`` / ``tool_response`` are read too; without either, the
    events' single messages give the I/O."""
    events = (
        _event("gen_ai.tool.message", {"role": "tool", "content": '{"expr": "1+1"}', "id": "c1"}),
        _event("gen_ai.choice", {"message": '[{"text": "2"}]', "id": "c1"}),
    )
    attributes = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "calculator"}
    from_attributes = facts_of(
        {
            **attributes,
            "gen_ai.tool.call.arguments": '{"expr": "2+2"}',
            "gen_ai.tool.call.result": '[{"text": "4"}]',
        },
        events=events,
    )
    version_2 = facts_of({**attributes, "tool_arguments": '{"expr":"2+2"}', "tool_response": "4"})
    for facts in (from_attributes, version_2):
        assert (facts.kind, facts.input, facts.output) == ("tool", {"expr": "2+2"}, "4")
    assert {"tool_arguments", "tool_response"} <= version_2.consumed
    from_events = facts_of(attributes, events=events)
    assert (from_events.input, from_events.output) == ({"expr": "1+1"}, "2")


def test_model_and_provider_attributes_are_not_repeated_in_metadata(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            for request_model in ("m-1", "m"):
                with tracer.start_as_current_span("chat") as span:
                    span.set_attributes(
                        {
                            "gen_ai.operation.name": "chat",
                            "gen_ai.request.model": request_model,
                            "gen_ai.response.model": "m-1",
                            "llm.model_name": "m-1",
                            "gen_ai.provider.name": "openai",
                            "gen_ai.system": "openai",
                        }
                    )
    same, differs = [s for s in one_trace(project)["spans"] if s["kind"] == "generation"]
    for span in (same, differs):
        assert span["model"] == "m-1" and span["metadata"]["provider"] == "openai"
        for key in ("gen_ai.response.model", "llm.model_name", "gen_ai.provider.name"):
            assert key not in span["metadata"], key
        assert "gen_ai.system" not in span["metadata"]
    assert "gen_ai.request.model" not in same["metadata"]
    # The model asked for is information when the reply came from another one: kept.
    assert differs["metadata"]["gen_ai.request.model"] == "m"


# -- token ids, multi-turn ------------------------------------------------------------------------


def test_token_id_turns_read_once_each(project):
    """verl's agent loop: each turn's prompt ids are the previous prompt + response + the new
    turn. Only the new part becomes a turn; the span keeps its whole prompt and raw counts."""
    prompt, reply_1, result, reply_2 = [0, 1], [2, 3], [4], [5, 6]
    turn_2 = prompt + reply_1 + result
    with traced(project, token_decoder=_decoder([])) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            for prompt_ids, response_ids in ((prompt, reply_1), (turn_2, reply_2)):
                with tracer.start_as_current_span("generate") as span:
                    span.set_attribute("prompt_ids", prompt_ids)
                    span.set_attribute("response_ids", response_ids)
            with tracer.start_as_current_span("generate") as span:  # not a continuation
                span.set_attribute("prompt_ids", [9, 9])
                span.set_attribute("response_ids", [8])
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "user", "content": "ab"},
        {"role": "assistant", "content": "cd"},
        {"role": "user", "content": "e"},
        {"role": "assistant", "content": "fg"},
        {"role": "user", "content": "jj"},
        {"role": "assistant", "content": "i"},
    ]
    second = [s for s in trace["spans"] if s["kind"] == "generation"][1]
    assert second["input"] == "abcde"  # what that call got
    assert second["metadata"]["prompt_ids.count"] == 5
    assert second["metadata"]["response_ids.count"] == 2


def test_token_id_continuation_without_new_ids_and_with_a_failing_decoder(project):
    calls: list[str] = []

    def decode(ids: list[int]) -> str:
        if ids == [7]:
            raise ValueError("unknown id")
        return _decoder(calls)(ids)

    with traced(project, token_decoder=decode) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            for prompt_ids, response_ids in (([0], [1]), ([0, 1], [2]), ([0, 1, 2, 7], [3])):
                with tracer.start_as_current_span("generate") as span:
                    span.set_attribute("prompt_ids", prompt_ids)
                    span.set_attribute("response_ids", response_ids)
    messages = one_trace(project)["messages"]
    # The second call adds no new ids: its reply follows the first; the third's new id does
    # not decode alone, so its whole prompt (which does) stays one turn, as before.
    assert messages[:3] == [
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": "b"},
        {"role": "assistant", "content": "c"},
    ]
    assert len(messages) == 5 and messages[-1] == {"role": "assistant", "content": "d"}
