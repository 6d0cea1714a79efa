"""Read GenAI facts off one span: kind, model, usage, cost, input/output and chat messages.

Pure functions over a :class:`SpanRecord`. Messages come out in OpenAI chat shape
(``{role, content, tool_calls?, tool_call_id?}``). See ``shared/conventions.md`` for the sources.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from ._records import SpanRecord

GENERATION_OPERATIONS = frozenset({"chat", "text_completion", "generate_content"})
TOOL_OPERATIONS = frozenset({"execute_tool"})


@dataclass(slots=True)
class SpanFacts:
    """What the converter needs from a span, whatever convention carried it.

    ``consumed`` names the attributes already represented here, so they are not repeated in the
    span's metadata.
    """

    kind: str = "span"
    model: str | None = None
    provider: str | None = None
    usage: dict[str, int] | None = None
    cost_usd: float | None = None
    input: Any = None
    output: Any = None
    system_messages: list[dict[str, Any]] = field(default_factory=list)
    input_messages: list[dict[str, Any]] | None = None
    output_messages: list[dict[str, Any]] | None = None
    consumed: set[str] = field(default_factory=set)


def read_span_facts(span: SpanRecord) -> SpanFacts:
    """Collect kind, model, usage and messages from a span's attributes."""
    attrs = span.attributes
    facts = SpanFacts()
    operation = attrs.get("gen_ai.operation.name")
    if operation in GENERATION_OPERATIONS:
        facts.kind = "generation"
    elif operation in TOOL_OPERATIONS:
        facts.kind = "tool"
    model = attrs.get("gen_ai.response.model") or attrs.get("gen_ai.request.model")
    if model is not None:
        facts.model = str(model)
    provider = attrs.get("gen_ai.provider.name") or attrs.get("gen_ai.system")
    if provider is not None:
        facts.provider = str(provider)
    facts.usage = _read_usage(attrs, facts.consumed)
    if (
        facts.kind == "span"
        and (facts.usage is not None or facts.model is not None)
        and ("gen_ai.input.messages" in attrs or "gen_ai.output.messages" in attrs or facts.usage)
    ):
        facts.kind = "generation"
    _read_genai_messages(attrs, facts)
    _read_io(attrs, facts)
    return facts


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, float) and value == value and abs(value) < 1e18:
        return int(value)
    if isinstance(value, str):
        try:
            return int(value.strip())
        except ValueError:
            return None
    return None


def _read_usage(attrs: Mapping[str, Any], consumed: set[str]) -> dict[str, int] | None:
    usage: dict[str, int] = {}
    for target, keys in (
        ("input_tokens", ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens")),
        ("output_tokens", ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens")),
        ("total_tokens", ("gen_ai.usage.total_tokens", "llm.usage.total_tokens")),
    ):
        for key in keys:
            value = _as_int(attrs.get(key))
            if value is not None:
                usage[target] = value
                consumed.add(key)
                break
    if not usage:
        return None
    if "total_tokens" not in usage and ("input_tokens" in usage or "output_tokens" in usage):
        usage["total_tokens"] = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    return usage


def parse_json(value: Any) -> Any:
    """Decode a JSON string (twice when it was double-encoded); other values pass through."""
    for _ in range(2):
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text or text[0] not in '[{"':
            return value
        try:
            value = json.loads(text)
        except ValueError:
            return value
    return value


def _read_genai_messages(attrs: Mapping[str, Any], facts: SpanFacts) -> None:
    system = attrs.get("gen_ai.system_instructions")
    if system is not None:
        facts.consumed.add("gen_ai.system_instructions")
        parts = parse_json(system)
        content = _parts_to_content(parts if isinstance(parts, list) else [parts])
        facts.system_messages = [{"role": "system", "content": content}]
    for key, target in (("gen_ai.input.messages", "input"), ("gen_ai.output.messages", "output")):
        raw = attrs.get(key)
        if raw is None:
            continue
        facts.consumed.add(key)
        parsed = parse_json(raw)
        if isinstance(parsed, list):
            messages = [_genai_message(m) for m in parsed]
        else:
            role = "user" if target == "input" else "assistant"
            messages = [{"role": role, "content": str(raw)}]
        if target == "input":
            facts.input_messages = messages
        else:
            facts.output_messages = messages


def _genai_message(message: Any) -> dict[str, Any]:
    if not isinstance(message, Mapping):
        return {"role": "user", "content": _text(message)}
    role = str(message.get("role") or "user")
    parts = message.get("parts")
    if not isinstance(parts, list):
        content = message.get("content")
        return {"role": role, "content": _text(content) if content is not None else ""}
    out: dict[str, Any] = {"role": role}
    tool_calls = []
    content_parts = []
    for part in parts:
        if not isinstance(part, Mapping):
            content_parts.append(part)
            continue
        ptype = part.get("type")
        if ptype == "tool_call":
            arguments = part.get("arguments")
            tool_calls.append(
                {
                    "id": str(part.get("id") or ""),
                    "type": "function",
                    "function": {
                        "name": str(part.get("name") or ""),
                        "arguments": arguments
                        if isinstance(arguments, str)
                        else json.dumps(arguments, ensure_ascii=False, default=str),
                    },
                }
            )
        elif ptype == "tool_call_response":
            if part.get("id") is not None:
                out["tool_call_id"] = str(part.get("id"))
            response = part.get("response", part.get("result"))
            content_parts.append({"type": "text", "content": _text(response)})
        else:
            content_parts.append(part)
    out["content"] = _parts_to_content(content_parts)
    if tool_calls:
        out["tool_calls"] = tool_calls
    if message.get("name") is not None:
        out["name"] = str(message["name"])
    if message.get("finish_reason") is not None:
        out["finish_reason"] = str(message["finish_reason"])
    return out


def _parts_to_content(parts: list[Any]) -> Any:
    """Text parts join into one string; anything else keeps its part list."""
    texts = []
    for part in parts:
        if isinstance(part, Mapping) and part.get("type") in ("text", None) and "content" in part:
            texts.append(_text(part.get("content")))
        elif isinstance(part, str):
            texts.append(part)
        else:
            return [
                p if isinstance(p, Mapping) else {"type": "text", "content": _text(p)}
                for p in parts
            ]
    return "\n".join(texts)


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _read_io(attrs: Mapping[str, Any], facts: SpanFacts) -> None:
    for key in ("input.value", "gen_ai.tool.call.arguments", "traceloop.entity.input"):
        if key in attrs:
            facts.input = parse_json(attrs[key])
            facts.consumed.add(key)
            break
    for key in ("output.value", "gen_ai.tool.call.result", "traceloop.entity.output"):
        if key in attrs:
            facts.output = parse_json(attrs[key])
            facts.consumed.add(key)
            break
    if facts.input is None and facts.input_messages is not None:
        facts.input = facts.system_messages + facts.input_messages
    if facts.output is None and facts.output_messages is not None:
        facts.output = facts.output_messages
