"""The Vercel AI SDK's own ``ai.*`` spans: what every ai 3 to 6 application emits, and ai 7 with its
``LegacyOpenTelemetry`` integration (ai 7's ``OpenTelemetry`` integration speaks the OTel GenAI
conventions, read by :mod:`.otel_genai`).

One span per call, its role in ``ai.operationId`` (:func:`kind`):

- ``ai.generateText.doGenerate`` / ``ai.streamText.doStream`` (and the ``*Object`` twins): one
  model call → a generation. Input: ``ai.prompt.messages`` (``{role, content}``, content a text
  or parts: ``text``, ``reasoning``, ``tool-call {toolCallId, toolName, input}``, ``tool-result
  {toolCallId, toolName, output: {type, value}}``; ai 4 wrote ``args`` / ``result``). Output:
  ``ai.response.text`` + ``ai.response.toolCalls`` (``[{toolCallId, toolName, input}]``) +
  ``ai.response.reasoning`` / ``ai.response.object``, finish reason ``ai.response.finishReason``
  (ai 3: ``ai.result.*``, ``ai.finishReason``).
- ``ai.generateText`` / ``ai.streamText`` / ...: the whole call (several steps) → a span whose
  input is ``ai.prompt`` (``{system, messages}`` or ``{system, prompt}``) and whose output is the
  answer (``ai.response.text``; the calls of every step in ``ai.response.toolCalls`` stay in its
  metadata). Its ``ai.usage.*`` totals its steps: being no generation, it is not summed again.
- ``ai.toolCall`` → a tool; I/O ``ai.toolCall.args`` / ``ai.toolCall.result`` (the readers'
  tool keys, :data:`TOOL_INPUT_KEY`, :data:`TOOL_OUTPUT_KEY`).

Model ``ai.response.model`` > ``ai.model.id``, provider ``ai.model.provider``, usage
``ai.usage.*`` (:data:`USAGE_KEYS`): each after its ``gen_ai.*`` twin, which these spans also
carry. The ``ai`` namespace is the SDK's: none of it is a user field of the Trace header, except
the user's own values it carries (:data:`USER_FIELD_PREFIXES`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_trackio._core.conventions._common import (
    MessageForms,
    Messages,
    is_map,
    normalize_message,
    normalize_messages,
    parse_json,
)
from otel_trackio._core.values import as_text

OPERATION_KEY = "ai.operationId"
#: operations that are one model call
MODEL_CALLS = frozenset(
    {
        "ai.generateText.doGenerate",
        "ai.streamText.doStream",
        "ai.generateObject.doGenerate",
        "ai.streamObject.doStream",
    }
)
TOOL_CALL = "ai.toolCall"
MODEL_KEYS = ("ai.response.model", "ai.model.id")
PROVIDER_KEYS = ("ai.model.provider",)
TOOL_INPUT_KEY = "ai.toolCall.args"
TOOL_OUTPUT_KEY = "ai.toolCall.result"
#: usage field → its ``ai.usage.*`` keys, newest first (ai 4 counted prompt/completion tokens)
USAGE_KEYS: dict[str, tuple[str, ...]] = {
    "input_tokens": ("ai.usage.inputTokens", "ai.usage.promptTokens"),
    "output_tokens": ("ai.usage.outputTokens", "ai.usage.completionTokens"),
    "total_tokens": ("ai.usage.totalTokens",),
    "cache_read_input_tokens": (
        "ai.usage.inputTokenDetails.cacheReadTokens",
        "ai.usage.cachedInputTokens",
    ),
    "reasoning_output_tokens": (
        "ai.usage.outputTokenDetails.reasoningTokens",
        "ai.usage.reasoningTokens",
    ),
}

#: where the SDK puts the user's own values (ai 4 to 6: ``telemetry.metadata``, ai 7:
#: ``runtimeContext``): user fields, unlike the rest of the ``ai`` namespace
USER_FIELD_PREFIXES = ("ai.telemetry.metadata.", "ai.settings.context.")

_PROMPT_MESSAGES = "ai.prompt.messages"
_PROMPT = "ai.prompt"
# (key, ai 3's name of it)
_TEXT = ("ai.response.text", "ai.result.text")
_TOOL_CALLS = ("ai.response.toolCalls", "ai.result.toolCalls")
_OBJECT = ("ai.response.object", "ai.result.object")
_REASONING = ("ai.response.reasoning",)
_FINISH = ("ai.response.finishReason", "ai.finishReason")


def kind(attrs: Mapping[str, Any]) -> str | None:
    """A model call → generation, ``ai.toolCall`` → tool, any other operation → span; None
    without ``ai.operationId``."""
    operation = attrs.get(OPERATION_KEY)
    if not isinstance(operation, str):
        return None
    if operation in MODEL_CALLS:
        return "generation"
    return "tool" if operation == TOOL_CALL else "span"


def read(attrs: Mapping[str, Any], consumed: set[str]) -> MessageForms:
    """System, input and output messages of an ``ai.*`` span (none for a tool run); its
    ``ai.operationId`` and the names repeating it (``operation.name``, ``resource.name``) are
    consumed."""
    operation = attrs.get(OPERATION_KEY)
    if not isinstance(operation, str):
        return MessageForms()
    consumed.add(OPERATION_KEY)
    if as_text(attrs.get("operation.name")).startswith(operation):
        consumed.add("operation.name")  # "<operationId> <functionId>"
    if "resource.name" in attrs and attrs["resource.name"] == attrs.get("ai.telemetry.functionId"):
        consumed.add("resource.name")
    if operation == TOOL_CALL:
        return MessageForms()
    inputs = _prompt(attrs, consumed)
    outputs = _response(attrs, consumed, with_calls=operation in MODEL_CALLS)
    if inputs is None:
        return MessageForms(outputs=outputs)
    system = [m for m in inputs if m.get("role") == "system"]
    return MessageForms(system, [m for m in inputs if m.get("role") != "system"], outputs)


def _prompt(attrs: Mapping[str, Any], consumed: set[str]) -> Messages | None:
    """A model call's ``ai.prompt.messages``, else the whole call's ``ai.prompt``."""
    if attrs.get(_PROMPT_MESSAGES) is not None:
        consumed.add(_PROMPT_MESSAGES)
        return _messages(attrs[_PROMPT_MESSAGES])
    if attrs.get(_PROMPT) is None:
        return None
    consumed.add(_PROMPT)
    prompt = parse_json(attrs[_PROMPT])
    if not is_map(prompt):
        return _messages(prompt)
    messages: Messages = []
    system = prompt.get("system")
    if isinstance(system, str):
        if system:
            messages.append({"role": "system", "content": system})
    elif system is not None:  # ai 6+: system messages (one or a list)
        messages.extend(_messages(system, "system"))
    if prompt.get("messages") is not None:
        messages.extend(_messages(prompt["messages"]))
    elif prompt.get("prompt") is not None:
        messages.extend(_messages(prompt["prompt"]))
    return messages


def _messages(value: Any, default_role: str = "user") -> Messages:
    """AI SDK messages (a JSON list, one message, or a prompt text) in the common shape: each
    tool result its own tool message, paired by its ``toolCallId``."""
    parsed = parse_json(value)
    if isinstance(parsed, list):
        parsed = [_message(m) for m in parsed]
    elif is_map(parsed):
        parsed = _message(parsed)
    return normalize_messages(parsed, default_role)


def _message(message: Any) -> Any:
    """One AI SDK message with its content parts as OTel parts; text content as it is."""
    if not is_map(message) or not isinstance(message.get("content"), list):
        return message
    return {"role": message.get("role"), "parts": [_part(p) for p in message["content"]]}


def _part(part: Any) -> Any:
    if not is_map(part):
        return part
    ptype = part.get("type")
    if ptype == "text":
        return {"type": "text", "content": as_text(part.get("text"))}
    if ptype == "reasoning":
        return {"type": "reasoning", "content": as_text(part.get("text"))}
    if ptype == "tool-call":
        return _tool_call(part)
    if ptype == "tool-result":
        return {
            "type": "tool_call_response",
            "id": part.get("toolCallId"),
            "response": _tool_result(part),
        }
    return dict(part)  # images, files, ...: kept as they came


def _tool_call(call: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_call",
        "id": call.get("toolCallId"),
        "name": call.get("toolName"),
        "arguments": parse_json(call["input"] if "input" in call else call.get("args")),
    }


def _tool_result(part: Mapping[str, Any]) -> Any:
    """A tool result's value: ai 5+'s ``output {type, value}`` (text, json, error-*, content
    parts), ai 4's ``result``."""
    if "output" not in part:
        return part.get("result")
    output = part["output"]
    if not is_map(output) or "type" not in output:
        return output
    value = output.get("value", output.get("reason"))
    if output["type"] == "content" and isinstance(value, list):
        texts = [
            p["text"]
            for p in value
            if is_map(p) and p.get("type") == "text" and isinstance(p.get("text"), str)
        ]
        if len(texts) == len(value):
            return "\n".join(texts)
    return value


def _response(attrs: Mapping[str, Any], consumed: set[str], *, with_calls: bool) -> Messages | None:
    """The assistant turn a call answered with: reasoning, text or object, and (a model call's)
    tool calls; None when the span recorded no output."""
    parts: list[Any] = []
    found = False
    keys = (_REASONING, _TEXT, _OBJECT, *((_TOOL_CALLS,) if with_calls else ()))
    for names in keys:
        key = next((k for k in names if attrs.get(k) is not None), None)
        if key is None:
            continue
        found = True
        consumed.add(key)
        value = attrs[key]
        if names is _TOOL_CALLS:
            calls = parse_json(value)
            if isinstance(calls, list) and all(is_map(c) for c in calls):
                parts.extend(_tool_call(c) for c in calls)
                continue
        elif names is _REASONING:
            parts.append({"type": "reasoning", "content": as_text(value)})
            continue
        if value != "":
            parts.append({"type": "text", "content": as_text(value)})  # text, object, raw calls
    if not found:
        return None
    message: dict[str, Any] = {"role": "assistant", "parts": parts}
    finish = next((k for k in _FINISH if attrs.get(k) is not None), None)
    if finish is not None:
        consumed.add(finish)
        message["finish_reason"] = as_text(attrs[finish])
    return [normalize_message(message, "assistant")]
