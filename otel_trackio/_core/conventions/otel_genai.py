"""OTel GenAI semantic conventions: JSON message attributes and the span event forms.

Attributes: ``gen_ai.system_instructions``, ``gen_ai.input.messages``, ``gen_ai.output.messages``
(JSON strings of ``{role, parts}``). Events, newest first:
``gen_ai.client.inference.operation.details`` (the same attributes), the deprecated per-message
events ``gen_ai.{system,user,assistant,tool}.message`` and ``gen_ai.choice``,
and the older ``gen_ai.content.prompt``/``gen_ai.content.completion``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from otel_trackio._core.conventions import adk
from otel_trackio._core.conventions._common import (
    PLACEHOLDER_TEXTS,
    MessageForms,
    Messages,
    normalize_message,
    normalize_messages,
    normalize_turns,
    parse_json,
    parts_to_content,
)
from otel_trackio._core.records import EventRecord
from otel_trackio._core.values import json_safe

SYSTEM_KEY = "gen_ai.system_instructions"
INPUT_KEY = "gen_ai.input.messages"
OUTPUT_KEY = "gen_ai.output.messages"
DETAILS_EVENT = "gen_ai.client.inference.operation.details"
EVALUATION_EVENT = "gen_ai.evaluation.result"
"""A score of the span it is on (v1.38): a span event, or a log record with that span's context."""
EVALUATION_NAME = "gen_ai.evaluation.name"
EVALUATION_SCORE = "gen_ai.evaluation.score.value"
EVALUATION_LABEL = "gen_ai.evaluation.score.label"
MESSAGE_EVENTS = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
}


def system_messages(value: Any) -> Messages:
    """``gen_ai.system_instructions`` (a list of parts, or text) as one system message."""
    parsed = parse_json(value)
    if (
        isinstance(parsed, list)
        and parsed
        and all(isinstance(p, Mapping) and "role" in p for p in parsed)
    ):
        return [normalize_message(m, "system") for m in parsed]
    parts = parsed if isinstance(parsed, list) else [parsed]
    return [{"role": "system", "content": parts_to_content(parts)}]


def read_attributes(attrs: Mapping[str, Any], consumed: set[str]) -> MessageForms:
    """System, input and output messages from the JSON attributes; None where absent."""
    system: Messages = []
    if attrs.get(SYSTEM_KEY) is not None:
        consumed.add(SYSTEM_KEY)
        system = system_messages(attrs[SYSTEM_KEY])
    inputs = outputs = None
    if attrs.get(INPUT_KEY) is not None:
        consumed.add(INPUT_KEY)
        inputs = normalize_messages(attrs[INPUT_KEY], "user")
    if attrs.get(OUTPUT_KEY) is not None:
        consumed.add(OUTPUT_KEY)
        outputs = normalize_messages(attrs[OUTPUT_KEY], "assistant")
    return MessageForms(system, inputs, outputs)


def read_events(
    events: Sequence[EventRecord], consumed_events: set[int], offset: int = 0
) -> MessageForms:
    """System, input and output messages from the event forms; the events used are marked (by
    index in ``events`` plus ``offset``)."""
    system: Messages = []
    inputs: Messages | None = None
    outputs: Messages | None = None
    for index, event in enumerate(events):
        if event.name != DETAILS_EVENT:
            continue
        found = read_attributes(event.attributes, set())
        if found.system or found.inputs is not None or found.outputs is not None:
            consumed_events.add(offset + index)
            system = system or found.system
            inputs = inputs if inputs is not None else found.inputs
            outputs = outputs if outputs is not None else found.outputs
    if inputs is not None or outputs is not None:
        return MessageForms(system, inputs, outputs)
    per_message: Messages = []
    choices: Messages = []
    placeholders = False
    for index, event in enumerate(events):
        attrs = event.attributes
        if event.name in MESSAGE_EVENTS:
            consumed_events.add(offset + index)
            role = MESSAGE_EVENTS[event.name]
            content = parse_json(attrs.get("content"))
            if adk.is_content(content):
                turns = adk.content_turns(content, role)
            else:
                turns = normalize_turns({"role": role, **attrs}, role)
            kept = [turn for turn in turns if not content_left_out(turn)]
            placeholders = placeholders or len(kept) < len(turns)
            per_message.extend(kept)
        elif event.name == "gen_ai.choice":
            consumed_events.add(offset + index)
            choice = _choice(attrs)
            if content_left_out(choice):
                placeholders = True
            else:
                choices.append(choice)
        elif event.name == "gen_ai.content.prompt" and "gen_ai.prompt" in attrs:
            consumed_events.add(offset + index)
            inputs = normalize_messages(attrs["gen_ai.prompt"], "user")
        elif event.name == "gen_ai.content.completion" and "gen_ai.completion" in attrs:
            consumed_events.add(offset + index)
            outputs = normalize_messages(attrs["gen_ai.completion"], "assistant")
    if per_message:
        system = [m for m in per_message if m["role"] == "system"]
        inputs = [m for m in per_message if m["role"] != "system"]
    if choices:
        outputs = choices
    return MessageForms(system, inputs, outputs, placeholders)


def content_left_out(message: Mapping[str, Any]) -> bool:
    """True for a message event with its content left out (capture off): no tool calls and a
    content that is empty or a placeholder (``<elided>``)."""
    content = message.get("content")
    return not message.get("tool_calls") and (
        content is None
        or content == ""
        or (isinstance(content, str) and content in PLACEHOLDER_TEXTS)
    )


def _choice(attrs: Mapping[str, Any]) -> dict[str, Any]:
    content = parse_json(attrs.get("content"))
    if adk.is_content(content):  # a model reply is one turn
        message: Any = next(iter(adk.content_turns(content, "assistant")), {})
    else:
        message = parse_json(attrs.get("message"))
    if not isinstance(message, Mapping):
        flat = {k[len("message.") :]: v for k, v in attrs.items() if k.startswith("message.")}
        message = flat or {"content": message}
    out = normalize_message({"role": "assistant", **message}, "assistant")
    if attrs.get("finish_reason") is not None:
        out["finish_reason"] = str(attrs["finish_reason"])
    return out


def from_chat_message(message: Mapping[str, Any]) -> dict[str, Any]:
    """A chat message as chat templates take it (``role``, ``content`` text or parts,
    ``tool_calls``, a tool result's ``tool_call_id``) as an OTel GenAI message
    (``{role, parts}``), for :data:`INPUT_KEY` / :data:`OUTPUT_KEY`."""
    content = message.get("content")
    parts = [{"type": "text", "content": content}] if isinstance(content, str) else content
    if message.get("role") == "tool":
        response = content if isinstance(content, str) else json_safe(content)
        call_id = message.get("tool_call_id")
        parts = [{"type": "tool_call_response", "id": call_id, "response": response}]
    out = {"role": message.get("role"), "parts": json_safe(parts or [])}
    if message.get("tool_calls"):
        out["parts"] = [
            *out["parts"],
            *(
                {
                    "type": "tool_call",
                    "id": _field(call, "id"),
                    "name": _field(_field(call, "function") or {}, "name"),
                    "arguments": _field(_field(call, "function") or {}, "arguments"),
                }
                for call in message["tool_calls"]
            ),
        ]
    return out


def _field(value: Any, name: str) -> Any:
    if isinstance(value, Mapping):
        return value.get(name)
    return getattr(value, name, None)


def evaluation(attributes: Mapping[str, Any]) -> tuple[str, Any, str | None] | None:
    """An evaluation result's ``(name, score, label)`` from its event attributes: the score a
    number (else None), the label a text (else None); None when it has neither. Unnamed, it is
    ``evaluation``."""
    score = attributes.get(EVALUATION_SCORE)
    if isinstance(score, bool) or not isinstance(score, (int, float)):
        score = None
    label = attributes.get(EVALUATION_LABEL)
    label = label if isinstance(label, str) and label else None
    if score is None and label is None:
        return None
    name = attributes.get(EVALUATION_NAME)
    return (name if isinstance(name, str) and name else "evaluation"), score, label
