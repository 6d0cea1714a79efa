"""Framework dialects, chat-template markup and the sample-level model-call rules, on hand-built
spans.

The shapes are those the real frameworks send (tests/frameworks/test_frameworks.py runs the
frameworks themselves); here each rule is pinned down on its own, with the odd cases a framework run
does not reach: unknown blocks, parse failures, wrappers without a real call, value-only calls.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from conftest import read_traces, stored, trace_usage
from test_conventions import SAMPLE, _event, facts_of, one_trace, traced

from otel_trackio._core.conventions import chat_markup, dialects

# -- Strands / Bedrock content blocks --------------------------------------------------------------

TOOL_USE = {"toolUse": {"toolUseId": "t1", "name": "calculator", "input": {"expr": "2+2"}}}
TOOL_RESULT = {"toolResult": {"toolUseId": "t1", "status": "success", "content": [{"text": "4"}]}}
CALL_T1 = {
    "id": "t1",
    "type": "function",
    "function": {"name": "calculator", "arguments": '{"expr": "2+2"}'},
}


def test_bedrock_blocks_become_tool_calls_and_results():
    facts = facts_of(
        {"gen_ai.operation.name": "chat"},
        events=(
            _event("gen_ai.user.message", {"content": '[{"text": "2+2?"}]'}),
            _event("gen_ai.assistant.message", {"content": json.dumps([TOOL_USE])}),
            _event("gen_ai.tool.message", {"content": json.dumps([TOOL_RESULT])}),
            _event("gen_ai.choice", {"message": '[{"text": "4"}]', "finish_reason": "end_turn"}),
        ),
    )
    function = {"name": "calculator", "arguments": '{"expr": "2+2"}'}
    assert facts.input_messages == [
        {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": None, "tool_calls": [CALL_T1]},
        {"role": "tool", "content": "4", "tool_call_id": "t1"},
    ]
    assert CALL_T1["function"] == function
    assert facts.output_messages == [
        {"role": "assistant", "content": "4", "finish_reason": "end_turn"}
    ]


def test_unknown_blocks_and_shapes_are_kept_as_they_came():
    image = {"image": {"format": "png", "source": {"bytes": "<1 bytes>"}}}
    assert dialects.content_parts([TOOL_USE, image])[1] == image
    odd = [{"toolUse": 5}, {"toolResult": {"content": 7}}]
    assert dialects.content_parts(odd)[0] == {"toolUse": 5}
    assert dialects.content_parts([{"text": "a", "extra": 1}, TOOL_USE])[0] == {
        "text": "a",
        "extra": 1,
    }
    assert dialects.block_text([{"text": "a"}, {"json": {"b": 1}}]) == 'a\n{"b": 1}'
    assert dialects.block_text([{"text": "a"}, {"other": 1}]) == [{"text": "a"}, {"other": 1}]
    assert dialects.block_text("plain") == "plain"


def test_strands_latest_tool_result_in_a_user_message_is_a_tool_message():
    facts = facts_of(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(
                [
                    {
                        "role": "user",
                        "parts": [
                            {"type": "tool_call_response", "id": "t1", "response": [{"text": "4"}]}
                        ],
                    }
                ]
            ),
        }
    )
    assert facts.input_messages == [{"role": "tool", "content": "4", "tool_call_id": "t1"}]


# -- smolagents -----------------------------------------------------------------------------------


def _openinference_inputs(messages: list[tuple[str, str]]) -> dict[str, Any]:
    attrs: dict[str, Any] = {"openinference.span.kind": "LLM"}
    for i, (role, text) in enumerate(messages):
        attrs[f"llm.input_messages.{i}.message.role"] = role
        attrs[f"llm.input_messages.{i}.message.contents.0.message_content.type"] = "text"
        attrs[f"llm.input_messages.{i}.message.contents.0.message_content.text"] = text
    return attrs


def test_smolagents_roles():
    call = [{"id": "c1", "type": "function", "function": {"name": "f", "arguments": {"x": 1}}}]
    two = [*call, {"id": "c2", "type": "function", "function": {"name": "g", "arguments": {}}}]
    facts = facts_of(
        _openinference_inputs(
            [
                ("user", "task"),
                ("tool-call", f"Calling tools:\n{call}"),
                ("tool-response", "Observation:\n1"),
                ("tool-call", f"Calling tools:\n{two}"),
                ("tool-response", "Observation:\nboth"),  # one text for two calls: no id
                ("tool-call", "Calling tools:\n[{'id': 'c3', 'type': 'function'"),  # cut
                ("tool-response", "Call id: c3\nError:\nboom"),
            ]
        )
    )
    roles = [(m["role"], m.get("tool_call_id")) for m in facts.input_messages]
    assert roles == [
        ("user", None),
        ("assistant", None),
        ("tool", "c1"),
        ("assistant", None),
        ("tool", None),
        ("assistant", None),
        ("tool", "c3"),
    ]
    assert facts.input_messages[1]["tool_calls"][0]["function"] == {
        "name": "f",
        "arguments": '{"x": 1}',
    }
    assert facts.input_messages[2]["content"] == "Observation:\n1"  # the text as sent
    assert [c["id"] for c in facts.input_messages[3]["tool_calls"]] == ["c1", "c2"]
    # A rendering that does not parse stays the text it was.
    assert facts.input_messages[5]["content"].startswith("Calling tools:\n[{'id'")
    assert "tool_calls" not in facts.input_messages[5]


def test_python_literal_is_bounded():
    assert dialects.python_literal("[{'a': (1, 2)}]") == [{"a": (1, 2)}]
    assert dialects.python_literal("[" * 50 + "]" * 50) is None  # too deep for a call list
    assert dialects.python_literal("__import__('os')") is None
    assert dialects.python_literal("x" * 200_000) is None


# -- LiteLLM --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        ("acompletion", "generation"),
        ("atext_completion", "generation"),
        ("aresponses", "generation"),
        ("aanthropic_messages", "generation"),
        ("aembedding", "span"),
        ("arerank", "span"),
    ],
)
def test_litellm_call_types(operation, kind):
    assert facts_of({"gen_ai.operation.name": operation}).kind == kind


def test_litellm_function_call_fills_an_empty_output():
    attrs = {
        "gen_ai.operation.name": "chat",
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [], "finish_reason": "tool_calls"}]
        ),
        "gen_ai.completion.0.function_call.name": "calculator",
        "gen_ai.completion.0.function_call.arguments": '{"expr": "2+2"}',
    }
    (message,) = facts_of(attrs).output_messages
    assert message["tool_calls"] == [{**CALL_T1, "id": ""}]
    # An output that has something keeps it; the extra attributes stay where they were.
    attrs["gen_ai.output.messages"] = '[{"role": "assistant", "content": "hi"}]'
    facts = facts_of(attrs)
    assert facts.output_messages == [{"role": "assistant", "content": "hi"}]


def test_litellm_on_the_sample_root_is_noted(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout") as root:
            root.set_attributes(
                {
                    **SAMPLE,
                    "litellm.call_id": "x",
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": '[{"role": "user", "content": "hi"}]',
                }
            )
            with tracer.start_as_current_span("litellm_request") as span:
                span.set_attributes({"litellm.call_id": "y", "gen_ai.operation.name": "chat"})
    spans = {s["name"]: s for s in one_trace(project)["spans"]}
    assert "USE_OTEL_LITELLM_REQUEST_SPAN" in spans["rollout"]["metadata"]["otel_trackio.note"]
    assert "otel_trackio.note" not in spans["litellm_request"]["metadata"]


# -- which generations are model calls ------------------------------------------------------------

REPR = "ChatMessage(role=<MessageRole.USER: 'user'>, blocks=[TextBlock(text='hi')])"


def _llm(tracer, name: str, attributes: dict[str, Any]):
    return tracer.start_as_current_span(
        name, attributes={"openinference.span.kind": "LLM", **attributes}
    )


def _real_call(tracer, usage: int = 3) -> None:
    with _llm(
        tracer,
        "inner",
        {
            "llm.input_messages.0.message.role": "user",
            "llm.input_messages.0.message.content": "hi",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.content": "hello",
            "llm.token_count.prompt": usage,
            "llm.token_count.completion": 1,
        },
    ):
        pass


def test_wrapper_and_preparation_spans_are_no_model_calls(project):
    """LlamaIndex's shape: an outer LLM span around the real one and a preparation LLM span,
    both with only Python reprs in their values."""
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with _llm(
                tracer,
                "prepare",
                {
                    "input.value": json.dumps(
                        {"tools": ["<FunctionTool>"], "chat_history": [REPR]}
                    ),
                    "input.mime_type": "application/json",
                    "output.value": json.dumps({"messages": [REPR]}),
                    "output.mime_type": "application/json",
                },
            ):
                pass
            with _llm(
                tracer,
                "outer",
                {
                    "input.value": json.dumps({"messages": [REPR]}),
                    "input.mime_type": "application/json",
                    "output.value": "assistant: hello",
                    "llm.token_count.prompt": 3,  # a wrapper repeating its child's usage
                },
            ):
                _real_call(tracer)
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    kinds = {s["name"]: s["kind"] for s in trace["spans"]}
    assert kinds == {"rollout": "span", "prepare": "span", "outer": "span", "inner": "generation"}
    assert trace_usage(trace) == {"input_tokens": 3, "output_tokens": 1, "total_tokens": 4}
    outer = next(s for s in trace["spans"] if s["name"] == "outer")
    assert outer["output"] == "assistant: hello"  # the span still shows what it carried


def test_value_only_calls_next_to_a_real_one(project):
    """A ``traced()`` policy next to an instrumented call: its chat-shaped values still add
    turns; values that are no chat request/response (its arguments) do not."""
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with _llm(
                tracer,
                "policy",
                {
                    "input.value": json.dumps({"messages": [{"role": "user", "content": "q"}]}),
                    "output.value": "a",
                },
            ):
                pass
            with _llm(tracer, "scored", {"input.value": '{"question": "q"}', "output.value": "a2"}):
                pass
            with _llm(tracer, "args", {"input.value": '{"question": "q"}', "output.value": "{}"}):
                pass
            _real_call(tracer)
    trace = one_trace(project)
    assert trace["messages"] == [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "a"},
        {"role": "assistant", "content": "a2"},
        {"role": "user", "content": "hi"},
        {"role": "assistant", "content": "hello"},
    ]
    kinds = {s["name"]: s["kind"] for s in trace["spans"]}
    assert kinds["policy"] == kinds["scored"] == "generation" and kinds["args"] == "span"


def test_value_only_calls_alone_give_the_conversation(project):
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with _llm(tracer, "policy", {"input.value": '{"question": "q"}', "output.value": "a"}):
                pass
    (trace,) = read_traces(project, "r")
    assert trace["messages"] == [
        {"role": "user", "content": '{"question": "q"}'},
        {"role": "assistant", "content": "a"},
    ]


# -- Google ADK ------------------------------------------------------------------------------------
# (tests/frameworks/test_adk.py runs ADK itself; these are the shapes it sends, one rule each)

ADK_REQUEST = {
    "model": "gemini-test",
    "config": {"system_instruction": {"parts": [{"text": "be brief"}]}, "tools": []},
    "contents": [
        {"role": "user", "parts": [{"text": "2+2?"}]},
        {
            "role": "model",
            "parts": [
                {"text": "let me add", "thought": True},
                {"function_call": {"id": "c1", "name": "calc", "args": {"expr": "2+2"}}},
                {"function_call": {"id": "c2", "name": "calc", "args": {"expr": "3+3"}}},
            ],
        },
        {
            "role": "user",
            "parts": [
                {"function_response": {"id": "c1", "name": "calc", "response": {"result": "4"}}},
                {"function_response": {"id": "c2", "name": "calc", "response": {"result": "6"}}},
            ],
        },
    ],
}
ADK_CALLS = [
    {"id": f"c{i}", "type": "function", "function": {"name": "calc", "arguments": arguments}}
    for i, arguments in ((1, '{"expr": "2+2"}'), (2, '{"expr": "3+3"}'))
]
ADK_TURNS = [
    {"role": "user", "content": "2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": ADK_CALLS,
        "reasoning_content": "let me add",
    },
    {"role": "tool", "content": '{"result": "4"}', "tool_call_id": "c1"},
    {"role": "tool", "content": '{"result": "6"}', "tool_call_id": "c2"},
]
ADK_RESPONSE = {
    "content": {"role": "model", "parts": [{"text": "4 and 6"}]},
    "finish_reason": "STOP",
    "usage_metadata": {"prompt_token_count": 9, "candidates_token_count": 2},
}


def test_adk_call_llm_json_is_the_model_call():
    """ADK's 1.x format: the request and response JSON on ``call_llm`` are its messages (Gemini's
    ``model`` role is the assistant), model and usage; ADK's empty ``{}`` keys are no content."""
    facts = facts_of(
        {
            "gcp.vertex.agent.llm_request": json.dumps(ADK_REQUEST),
            "gcp.vertex.agent.llm_response": json.dumps(ADK_RESPONSE),
            "gcp.vertex.agent.tool_response": "{}",
            "gen_ai.system": "gcp.vertex.agent",
        }
    )
    assert facts.kind == "generation"
    assert facts.system_messages == [{"role": "system", "content": "be brief"}]
    assert facts.input_messages == ADK_TURNS
    assert facts.output_messages == [
        {"role": "assistant", "content": "4 and 6", "finish_reason": "STOP"}
    ]
    assert (facts.model, facts.usage) == (
        "gemini-test",
        {"input_tokens": 9, "output_tokens": 2, "total_tokens": 11},
    )
    assert {
        "gcp.vertex.agent.llm_request",
        "gcp.vertex.agent.llm_response",
        "gcp.vertex.agent.tool_response",
    } <= facts.consumed


def test_adk_events_carry_gemini_contents_whose_own_role_wins():
    """ADK's log events (1.x format, capture on) hold Gemini Contents; the model's earlier turns
    come as ``gen_ai.user.message`` events with role ``model``."""
    events = [
        _event("gen_ai.system.message", {"content": "be brief"}),
        *(_event("gen_ai.user.message", {"content": c}) for c in ADK_REQUEST["contents"]),
        _event("gen_ai.choice", {"content": ADK_RESPONSE["content"], "index": 0}),
    ]
    facts = facts_of({"gen_ai.operation.name": "generate_content"}, events=tuple(events))
    assert facts.input_messages == ADK_TURNS
    assert facts.output_messages == [{"role": "assistant", "content": "4 and 6"}]


@pytest.mark.parametrize(
    "events",
    [
        # ADK without content capture
        (
            ("gen_ai.system.message", {"content": "<elided>"}),
            ("gen_ai.user.message", {"content": "<elided>"}),
            ("gen_ai.choice", {"content": "<elided>", "index": 0}),
        ),
        # openai-v2's per-message events without content capture: no content at all
        (
            ("gen_ai.user.message", {"gen_ai.system": "openai"}),
            ("gen_ai.tool.message", {"id": "c1"}),
            (
                "gen_ai.choice",
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant"}},
            ),
        ),
    ],
    ids=["elided", "left-out"],
)
def test_placeholders_are_no_messages(events):
    """Message events whose content is a placeholder or left out are no messages: a model call
    with nothing else keeps model and usage, no conversation, and a note saying why."""
    facts = facts_of(
        {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 3},
        events=tuple(_event(name, attributes) for name, attributes in events),
    )
    assert (facts.kind, facts.input_messages, facts.output_messages) == ("generation", None, None)
    assert not facts.system_messages and facts.input is None and facts.output is None
    assert "not captured" in facts.extra_metadata["otel_trackio.note"]
    # Real content next to a placeholder is kept, and a tool call without content is a message.
    call = {"role": "assistant", "tool_calls": [{"id": "c1", "function": {"name": "calc"}}]}
    facts = facts_of(
        {"gen_ai.operation.name": "chat"},
        events=(
            _event("gen_ai.system.message", {"content": "<elided>"}),
            _event("gen_ai.user.message", {"content": "2+2?"}),
            _event("gen_ai.assistant.message", call),
        ),
    )
    assert [m["role"] for m in facts.input_messages] == ["user", "assistant"]


def test_openinference_hidden_values_are_no_messages():
    """OpenInference with ``OPENINFERENCE_HIDE_INPUTS``/``_OUTPUTS`` writes ``__REDACTED__``."""
    facts = facts_of(
        {
            "openinference.span.kind": "LLM",
            "input.value": "__REDACTED__",
            "output.value": "__REDACTED__",
            "llm.token_count.prompt": 3,
        }
    )
    assert (facts.kind, facts.input_messages, facts.output_messages) == ("generation", None, None)
    assert facts.input is None and facts.output is None
    assert "not captured" in facts.extra_metadata["otel_trackio.note"]


def test_adk_merged_tools_span_is_no_tool_call_and_function_responses_are_their_response():
    merged = facts_of(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "(merged tools)",
            "gcp.vertex.agent.tool_call_args": "N/A",
        }
    )
    assert merged.kind == "span" and merged.input is None
    # OpenInference-ADK records a tool's output as the whole FunctionResponse.
    tool = facts_of(
        {
            "openinference.span.kind": "TOOL",
            "input.value": '{"expr": "2+2"}',
            "output.value": '{"id": "c1", "name": "calc", "response": {"result": "4"}}',
        }
    )
    assert (tool.input, tool.output) == ({"expr": "2+2"}, {"result": "4"})


def _adk_call(tracer, name: str, attributes: dict[str, Any]):
    usage = {"gen_ai.usage.input_tokens": 9, "gen_ai.usage.output_tokens": 2}
    return tracer.start_as_current_span(
        name, attributes={"gen_ai.request.model": "gemini-test", **usage, **attributes}
    )


@pytest.mark.parametrize("child_events", [False, True], ids=["bare", "same-messages"])
def test_one_model_call_recorded_twice_counts_once(project, child_events):
    """ADK 1.x: ``generate_content`` (model, usage, maybe the same messages as events) under
    ``call_llm`` (the request and response) is one call: one generation, its tokens once. A
    nested call with other usage is a call of its own."""
    with traced(project) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            with _adk_call(
                tracer,
                "call_llm",
                {
                    "gcp.vertex.agent.llm_request": json.dumps(ADK_REQUEST),
                    "gcp.vertex.agent.llm_response": json.dumps(ADK_RESPONSE),
                },
            ):
                with _adk_call(
                    tracer, "generate_content", {"gen_ai.operation.name": "generate_content"}
                ) as child:
                    for content in ADK_REQUEST["contents"] if child_events else ():
                        child.add_event("gen_ai.user.message", {"content": json.dumps(content)})
            with _adk_call(tracer, "outer", {"gen_ai.operation.name": "chat"}):
                with _adk_call(
                    tracer,
                    "inner",
                    {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 4},
                ):
                    pass
    trace = one_trace(project)
    kinds = {s["name"]: s["kind"] for s in trace["spans"]}
    assert kinds["call_llm"] == "generation" and kinds["generate_content"] == "span"
    assert kinds["outer"] == kinds["inner"] == "generation"
    assert trace_usage(trace)["input_tokens"] == 9 + 9 + 4
    assert stored(trace)[1:] == [*ADK_TURNS, {"role": "assistant", "content": "4 and 6"}]


# -- Chat-template markup in decoded token ids -----------------------------------------------------

HERMES_CALL = '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+2"}}\n</tool_call>'
CALC_CALL = {
    "id": "",
    "type": "function",
    "function": {"name": "calc", "arguments": '{"expr": "2+2"}'},
}
CHATML_PROMPT = (
    "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n"
    f"<|im_start|>assistant\n{HERMES_CALL}<|im_end|>\n"
    "<|im_start|>user\n<tool_response>\n4\n</tool_response><|im_end|>\n<|im_start|>assistant\n"
)
TURNS = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "2+2?"},
    {"role": "assistant", "content": None, "tool_calls": [CALC_CALL]},
    {"role": "tool", "content": "4"},
]
LLAMA3_PROMPT = (
    "<|begin_of_text|><|start_header_id|>system<|end_header_id|>\n\nbe brief<|eot_id|>"
    "<|start_header_id|>user<|end_header_id|>\n\n2+2?<|eot_id|>"
    "<|start_header_id|>assistant<|end_header_id|>\n\n"
)


@pytest.mark.parametrize(
    ("text", "role", "expected"),
    [
        (CHATML_PROMPT, "user", TURNS),  # ChatML / Qwen, Hermes tool calls and responses
        (LLAMA3_PROMPT, "user", TURNS[:2]),
        (
            "the answer is 4<|im_end|>",
            "assistant",
            [{"role": "assistant", "content": "the answer is 4"}],
        ),
        ("4<|eot_id|>", "assistant", [{"role": "assistant", "content": "4"}]),
        (f"{HERMES_CALL}<|im_end|>", "assistant", [TURNS[2]]),
        # the new end of a continuing call's prompt: Qwen's tool role, the generation prompt
        ("<|im_end|>\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n", "user", [TURNS[3]]),
        ("plain text, no markup", "user", None),
        ("<tool_call> { name : calc } </tool_call>", "assistant", None),  # unreadable: as it came
    ],
    ids=[
        "chatml",
        "llama3",
        "end-token",
        "eot",
        "hermes-reply",
        "continued",
        "plain",
        "unreadable",
    ],
)
def test_chat_markup_reads_as_role_messages(text, role, expected):
    assert chat_markup.messages(text, role) == expected


def test_token_ids_decoded_to_markup_give_the_conversation_without_it(project):
    """A custom agent loop that records only token ids, decoded with a ChatML template: roles,
    tool calls and tool results, no markup; the spans keep the decoded text."""
    pieces = {
        1: "<|im_start|>system\nbe brief<|im_end|>\n<|im_start|>user\n2+2?<|im_end|>\n",
        2: "<|im_start|>assistant\n",
        3: HERMES_CALL,
        4: "<|im_end|>",
        5: "\n<|im_start|>tool\n4<|im_end|>\n<|im_start|>assistant\n",
        6: "the answer is 4",
    }

    def decode(ids: list[int]) -> str:
        return "".join(pieces[i] for i in ids)

    with traced(project, token_decoder=decode) as (tracer, _):
        with tracer.start_as_current_span("rollout", attributes=SAMPLE):
            for prompt, response in (([1, 2], [3, 4]), ([1, 2, 3, 4, 5], [6, 4])):
                with tracer.start_as_current_span("generate") as span:
                    span.set_attribute("prompt_ids", prompt)
                    span.set_attribute("response_ids", response)
    trace = one_trace(project)
    assert stored(trace) == [
        *TURNS[:3],
        {"role": "tool", "content": "4"},
        {"role": "assistant", "content": "the answer is 4"},
    ]
    first = next(s for s in trace["spans"] if s["name"] == "generate")
    assert first["output"] == HERMES_CALL + "<|im_end|>"  # the decoded text, as it was
