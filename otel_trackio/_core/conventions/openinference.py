"""OpenInference (Arize Phoenix) attributes.

``openinference.span.kind`` (LLM, TOOL, CHAIN, ...), ``llm.input_messages.N.message.*`` and
``llm.output_messages.N.message.*`` (``role``, ``content``, ``contents.K.message_content.*``,
``tool_calls.J.tool_call.{id,function.name,function.arguments}``, ``tool_call_id``, ``name``),
``llm.model_name``, ``llm.token_count.*``, ``llm.cost.*``, and ``input.value``/``output.value``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_trackio._core.conventions import dialects
from otel_trackio._core.conventions._common import MessageForms, normalize_turns, unflatten
from otel_trackio._core.values import as_text

SPAN_KINDS = {"LLM": "generation", "TOOL": "tool"}


def kind(attrs: Mapping[str, Any]) -> str | None:
    """LLM → generation, TOOL → tool, any other kind → span; None without the attribute."""
    value = attrs.get("openinference.span.kind")
    if not isinstance(value, str):
        return None
    return SPAN_KINDS.get(value.upper(), "span")


def read(attrs: Mapping[str, Any], consumed: set[str]) -> MessageForms:
    """Input and output messages from ``llm.input_messages`` / ``llm.output_messages``
    (smolagents' own roles read as what it sends, :func:`.dialects.agent_roles`)."""
    inputs = unflatten(attrs, "llm.input_messages.", consumed)
    outputs = unflatten(attrs, "llm.output_messages.", consumed)
    return MessageForms(
        inputs=_messages(inputs, "user") if inputs else None,
        outputs=_messages(outputs, "assistant") if outputs else None,
    )


def _messages(entries: list[dict[str, Any]], default_role: str) -> list[dict[str, Any]]:
    raw = dialects.agent_roles([_message(m) for m in entries])
    return [turn for m in raw for turn in normalize_turns(m or None, default_role)]


def _message(entry: dict[str, Any]) -> dict[str, Any]:
    """One flattened entry as a plain message dict (empty when it holds no ``message``)."""
    flat = entry.get("message")
    if not isinstance(flat, Mapping):
        return {}
    message: dict[str, Any] = {
        k: v for k, v in flat.items() if k not in ("contents", "tool_calls", "function_call_name")
    }
    contents = flat.get("contents")
    if isinstance(contents, list) and "content" not in flat:
        message["content"] = [_content_part(c) for c in contents]
    calls = flat.get("tool_calls")
    if isinstance(calls, list):
        message["tool_calls"] = [_tool_call(c) for c in calls]
    elif flat.get("function_call_name") is not None:
        message["tool_calls"] = [
            {
                "name": flat["function_call_name"],
                "arguments": flat.get("function_call_arguments_json"),
            }
        ]
        message.pop("function_call_arguments_json", None)
    return message


def _content_part(entry: Any) -> Any:
    part = entry.get("message_content") if isinstance(entry, Mapping) else None
    if not isinstance(part, Mapping):
        return entry
    ptype = as_text(part.get("type")) or "text"
    if ptype == "text":
        return {"type": "text", "text": as_text(part.get("text"))}
    if ptype == "image":
        image = part.get("image")
        url = image.get("image", {}).get("url") if isinstance(image, Mapping) else None
        return {"type": "image_url", "image_url": {"url": as_text(url)}}
    return dict(part)


def _tool_call(entry: Any) -> dict[str, Any]:
    call = entry.get("tool_call") if isinstance(entry, Mapping) else None
    if not isinstance(call, Mapping):
        return {"id": "", "name": as_text(entry), "arguments": "{}"}
    function = call.get("function")
    if not isinstance(function, Mapping):
        function = {}
    return {
        "id": call.get("id"),
        "name": function.get("name"),
        "arguments": function.get("arguments"),
    }
