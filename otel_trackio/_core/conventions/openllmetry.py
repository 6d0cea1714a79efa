"""OpenLLMetry (Traceloop) flattened attributes: ``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*``.

``gen_ai.prompt.{i}.role|content|tool_call_id``,
``gen_ai.prompt.{i}.tool_calls.{j}.id|name|arguments``
(``gen_ai.completion.{i}`` likewise, plus ``finish_reason``). ``content`` may be a JSON string of
content parts. Kinds come from ``llm.request.type`` and ``traceloop.span.kind``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_trackio._core.conventions._common import MessageForms, normalize_message, unflatten

REQUEST_KINDS = {"chat": "generation", "completion": "generation"}
SPAN_KINDS = {"tool": "tool", "workflow": "span", "task": "span", "agent": "span"}


def kind(attrs: Mapping[str, Any]) -> str | None:
    """The span kind from ``traceloop.span.kind`` or ``llm.request.type``; None when neither."""
    span_kind = attrs.get("traceloop.span.kind")
    if isinstance(span_kind, str):
        return SPAN_KINDS.get(span_kind.lower(), "span")
    request_type = attrs.get("llm.request.type")
    if isinstance(request_type, str):
        return REQUEST_KINDS.get(request_type.lower(), "span")
    return None


def read(attrs: Mapping[str, Any], consumed: set[str]) -> MessageForms:
    """Input and output messages from the flattened attributes; None where absent."""
    prompts = unflatten(attrs, "gen_ai.prompt.", consumed)
    completions = unflatten(attrs, "gen_ai.completion.", consumed)
    inputs = [normalize_message(_message(p), "user") for p in prompts] if prompts else None
    outputs = (
        [normalize_message(_message(c), "assistant") for c in completions] if completions else None
    )
    return MessageForms(inputs=inputs, outputs=outputs)


def _message(flat: dict[str, Any]) -> dict[str, Any]:
    message = dict(flat)
    calls = message.get("tool_calls")
    if isinstance(calls, dict):  # non-numeric keys under tool_calls: keep as one call
        message["tool_calls"] = [calls]
    return message
