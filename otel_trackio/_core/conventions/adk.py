"""Google ADK's own span format (ADK 1.x, and 2.x with ``ADK_TELEMETRY_SCHEMA_VERSION_OPT_IN=1``).

ADK's ``call_llm`` span carries the whole model call as JSON:

- ``gcp.vertex.agent.llm_request``: ``{"model", "config": {"system_instruction", "tools", ...},
  "contents": [{"role": "user" | "model", "parts": [...]}]}``;
- ``gcp.vertex.agent.llm_response``: ``{"content": {"role": "model", "parts": [...]},
  "usage_metadata": {"prompt_token_count", "candidates_token_count", "total_token_count", ...}}``;

with Gemini's parts: ``{"text"}`` (``"thought": true`` marks reasoning), ``{"function_call":
{"id", "name", "args"}}``, ``{"function_response": {"id", "name", "response"}}``. Its tool spans
carry ``gcp.vertex.agent.tool_call_args`` / ``gcp.vertex.agent.tool_response``. Every span may
also carry empty ``{}`` placeholders of the keys above; they are consumed, never content.

:func:`read` gives the messages in the common OTel-parts form (Gemini's ``model`` role is
``assistant``); :func:`usage` the token counts of ``usage_metadata``. The tool keys are read by
the tool input/output precedence (:data:`TOOL_ARGS_KEY`, :data:`TOOL_RESPONSE_KEY`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from otel_trackio._core.conventions._common import (
    MessageForms,
    Messages,
    is_map,
    normalize_turns,
    parse_json,
)
from otel_trackio._core.values import as_int, as_text

REQUEST_KEY = "gcp.vertex.agent.llm_request"
RESPONSE_KEY = "gcp.vertex.agent.llm_response"
TOOL_ARGS_KEY = "gcp.vertex.agent.tool_call_args"
TOOL_RESPONSE_KEY = "gcp.vertex.agent.tool_response"
#: ADK's name for the span wrapping parallel tool calls: no tool call of its own.
MERGED_TOOLS = "(merged tools)"
#: What ADK writes in a key that has nothing to say on this span.
_NOTHING = ("", "{}", "N/A")
_USAGE = (
    ("input_tokens", "prompt_token_count"),
    ("output_tokens", "candidates_token_count"),
    ("total_tokens", "total_token_count"),
    ("cache_read_input_tokens", "cached_content_token_count"),
    ("reasoning_output_tokens", "thoughts_token_count"),
)


_CONTENT_KEYS = (REQUEST_KEY, RESPONSE_KEY, TOOL_ARGS_KEY, TOOL_RESPONSE_KEY)


def says_nothing(key: str, value: Any) -> bool:
    """True for ADK's empty ``{}`` / ``N/A`` value of one of its content keys."""
    return key in _CONTENT_KEYS and value in _NOTHING


def read(attrs: Mapping[str, Any], consumed: set[str]) -> MessageForms:
    """System, input and output messages from ADK's request and response JSON."""
    for key in _CONTENT_KEYS:
        if says_nothing(key, attrs.get(key)):
            consumed.add(key)
    request = parse_json(attrs.get(REQUEST_KEY))
    response = parse_json(attrs.get(RESPONSE_KEY))
    system: Messages = []
    inputs = outputs = None
    if is_map(request):
        consumed.add(REQUEST_KEY)
        config = request.get("config")
        if is_map(config) and config.get("system_instruction") is not None:
            text = _content_text(config["system_instruction"])
            if text:
                system = [{"role": "system", "content": text}]
        contents = request.get("contents")
        if isinstance(contents, list):
            inputs = [turn for content in contents for turn in content_turns(content, "user")]
    if is_map(response):
        consumed.add(RESPONSE_KEY)
        content = response.get("content")
        if is_map(content):
            outputs = content_turns(content, "assistant")
            finish = response.get("finish_reason")
            if outputs and finish:
                outputs[-1]["finish_reason"] = as_text(finish)
    return MessageForms(system, inputs, outputs)


def model(attrs: Mapping[str, Any]) -> str | None:
    """The model named in ADK's request JSON, if any."""
    request = parse_json(attrs.get(REQUEST_KEY))
    name = request.get("model") if is_map(request) else None
    return name if isinstance(name, str) and name else None


def usage(attrs: Mapping[str, Any]) -> dict[str, int] | None:
    """The token counts of the response's ``usage_metadata``; None without them."""
    response = parse_json(attrs.get(RESPONSE_KEY))
    metadata = response.get("usage_metadata") if is_map(response) else None
    if not is_map(metadata):
        return None
    counts = {}
    for target, key in _USAGE:
        value = as_int(metadata.get(key))
        if value is not None:
            counts[target] = value
    if "input_tokens" not in counts and "output_tokens" not in counts:
        return None
    counts.setdefault(
        "total_tokens", counts.get("input_tokens", 0) + counts.get("output_tokens", 0)
    )
    return counts


def _content_text(value: Any) -> str:
    """A system instruction (text, a Content, a list of parts or texts) as its text."""
    if isinstance(value, str):
        return value
    if is_map(value):
        return _content_text(value.get("parts", value.get("text", "")))
    if isinstance(value, list):
        return "\n".join(text for item in value if (text := _content_text(item)))
    return as_text(value)


def is_content(value: Any) -> bool:
    """True for a Gemini Content (``{"role"?, "parts": [...]}``), as ADK's log events carry."""
    return is_map(value) and isinstance(value.get("parts"), list)


def content_turns(content: Any, default_role: str) -> Messages:
    """One Gemini Content as messages: its parts as OTel parts, tool results as tool turns; its
    own role wins (ADK sends the model's earlier turns as ``gen_ai.user.message`` events)."""
    if not is_map(content):
        return []
    role = as_text(content.get("role")) or default_role
    parts = content.get("parts")
    otel_parts = [_part(p) for p in parts] if isinstance(parts, list) else []
    return normalize_turns({"role": role, "parts": otel_parts}, default_role)


def _part(part: Any) -> Any:
    if not is_map(part):
        return part
    call = part.get("function_call")
    if is_map(call):
        return {
            "type": "tool_call",
            "id": call.get("id"),
            "name": call.get("name"),
            "arguments": call.get("args"),
        }
    answer = part.get("function_response")
    if is_map(answer):
        return {
            "type": "tool_call_response",
            "id": answer.get("id"),
            "response": answer.get("response"),
        }
    text = part.get("text")
    if isinstance(text, str):
        if part.get("thought"):
            return {"type": "reasoning", "content": text}
        return {"type": "text", "content": text}
    return dict(part)


def function_response(value: Any) -> Any:
    """A whole FunctionResponse (``{"id", "name", "response"}``, as OpenInference-ADK records a
    tool's output) reduced to its ``response``; anything else unchanged."""
    if (
        is_map(value)
        and "response" in value
        and "name" in value
        and value.keys()
        <= {
            "id",
            "name",
            "response",
            "will_continue",
            "scheduling",
            "parts",
        }
    ):
        return value["response"]
    return value


def is_merged_tools(attrs: Mapping[str, Any]) -> bool:
    """True for ADK's span around parallel tool calls (``gen_ai.tool.name="(merged tools)"``)."""
    return attrs.get("gen_ai.tool.name") == MERGED_TOOLS
