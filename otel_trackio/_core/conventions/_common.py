"""Shared helpers: JSON decoding that never fails, OpenAI-shaped messages, flattened attributes.

Every convention reader ends in :func:`normalize_message`, so a message looks the same whichever
convention carried it: ``{role, content, tool_calls?, tool_call_id?, name?, reasoning_content?,
finish_reason?}`` with ``content`` a string, or a list of parts when it holds more than text.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, TypeGuard

import orjson

from otel_trackio._core.conventions import dialects
from otel_trackio._core.values import as_text

Messages = list[dict[str, Any]]


@dataclass(frozen=True, slots=True)
class MessageForms:
    """What one convention found on a span: system messages, input messages, output messages
    (``None`` where that convention carried nothing); ``placeholders``: it also carried messages
    whose content was left out (capture off), which are not among them."""

    system: Messages = field(default_factory=list)
    inputs: Messages | None = None
    outputs: Messages | None = None
    placeholders: bool = False


#: What instrumentations write in place of content they were told not to capture: ADK's and the
#: OTel GenAI packages' ``<elided>``, OpenInference's ``__REDACTED__``.
PLACEHOLDER_TEXTS = frozenset({"<elided>", "__REDACTED__"})
#: Roles that mean the assistant: Gemini's ``model`` (ADK, OpenInference-ADK, Gemini events).
ASSISTANT_ROLES = {"model": "assistant"}
TEXT_PART_TYPES = frozenset({"text", "input_text", "output_text"})
# message keys read on every message; anything else sends it through the slower optional reads.
_PLAIN_KEYS = frozenset({"role", "parts", "content", "tool_calls", "tool_call_id", "id"})


def is_map(value: Any) -> TypeGuard[Mapping[str, Any]]:
    """``isinstance(value, Mapping)``, fast for the plain dicts JSON gives."""
    return type(value) is dict or isinstance(value, Mapping)


def parse_json(value: Any) -> Any:
    """Decode a JSON string (twice when it was double-encoded); anything else, or invalid or
    truncated JSON, comes back unchanged, so the raw text is kept."""
    for _ in range(2):
        if not isinstance(value, str):
            return value
        text = value.strip()
        if not text or text[0] not in '[{"':
            return value
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError:
            # orjson refuses NaN literals and very deep nesting, which json may still read.
            try:
                value = json.loads(text)
            except (ValueError, RecursionError):
                return value
    return value


def arguments_text(arguments: Any) -> str:
    """Tool call arguments as the JSON string OpenAI uses (strings are kept verbatim)."""
    if isinstance(arguments, str):
        return arguments
    if arguments is None:
        return "{}"
    return json.dumps(arguments, ensure_ascii=False, default=str)


def tool_call(call: Any) -> dict[str, Any]:
    """One tool call in OpenAI shape, from the OpenAI, OTel part or flat ``{id,name,arguments}``
    form."""
    if not isinstance(call, Mapping):
        return {
            "id": "",
            "type": "function",
            "function": {"name": as_text(call), "arguments": "{}"},
        }
    function = call.get("function")
    if is_map(function):
        name, arguments = function.get("name"), function.get("arguments")
    else:
        name, arguments = call.get("name"), call.get("arguments")
    return {
        "id": as_text(call.get("id")),
        "type": "function",
        "function": {"name": as_text(name), "arguments": arguments_text(arguments)},
    }


def parts_to_content(parts: Sequence[Any]) -> Any:
    """Text-only parts join into one string; otherwise a part list (text as OpenAI text parts,
    every other part, known or not, kept as it came)."""
    texts: list[str] = []
    for part in parts:
        text = _part_text(part)
        if text is None:
            break
        texts.append(text)
    else:
        return "\n".join(texts)
    out: list[Any] = []
    for part in parts:
        text = _part_text(part)
        out.append({"type": "text", "text": text} if text is not None else part)
    return out


def _part_text(part: Any) -> str | None:
    if isinstance(part, str):
        return part
    if is_map(part) and part.get("type", "text") in TEXT_PART_TYPES:
        for key in ("content", "text"):
            text = part.get(key)
            if isinstance(text, str):
                return text
    return None


def _message_parts(message: Mapping[str, Any]) -> tuple[list[Any] | None, Any]:
    """(the message's parts, or None; its parsed ``content`` when it has no ``parts``).

    OTel ``parts`` as they are; a ``content`` list (OpenAI content parts, or a framework's
    blocks, see :func:`.dialects.content_parts`) as parts too.
    """
    parts = message.get("parts")
    if isinstance(parts, list):
        return parts, None
    raw = parse_json(message.get("content"))
    if isinstance(raw, list):
        return dialects.content_parts(raw), None
    return None, raw


def _is_tool_response(part: Any) -> bool:
    return is_map(part) and part.get("type") == "tool_call_response"


def normalize_message(message: Any, default_role: str = "user") -> dict[str, Any]:
    """Any message form (OTel ``parts``, OpenAI ``content``/``tool_calls``, plain text) in
    OpenAI shape. Never raises; unknown parts are kept in ``content``.

    One message in, one out: a message holding several tool results is split by
    :func:`normalize_turns`, which the readers use.
    """
    if not is_map(message):
        return {"role": default_role, "content": as_text(message)}
    role = as_text(message.get("role")) or default_role
    out: dict[str, Any] = {"role": ASSISTANT_ROLES.get(role, role)}
    raw_calls = message.get("tool_calls")
    tool_calls = (
        [] if raw_calls is None else [tool_call(c) for c in _as_list(parse_json(raw_calls))]
    )
    reasoning: list[str] = []
    parts, raw = _message_parts(message)
    if parts is not None:
        kept: list[Any] = []
        responses = 0
        for part in parts:
            ptype = part.get("type") if is_map(part) else None
            if ptype == "tool_call":
                tool_calls.append(tool_call(part))
            elif ptype == "tool_call_response":
                responses += 1
                if part.get("id") is not None:
                    out["tool_call_id"] = as_text(part.get("id"))
                kept.append(as_text(dialects.block_text(part.get("response", part.get("result")))))
            elif ptype == "reasoning":
                reasoning.append(as_text(part.get("content")))
            else:
                kept.append(part)
        if responses and responses == len(kept) and out["role"] == "user":
            out["role"] = "tool"  # tool results sent in a user message are a tool message
        content: Any = parts_to_content(kept)
    else:
        content = as_text(raw)
    if tool_calls and content == "":
        content = None  # a tool-call turn without text: OpenAI's own form, nothing written in
    out["content"] = content
    if tool_calls:
        out["tool_calls"] = tool_calls
    call_id = message.get("tool_call_id")
    if call_id is None and out["role"] == "tool":
        call_id = message.get("id")
    if call_id is not None:
        out["tool_call_id"] = as_text(call_id)
    if not message.keys() <= _PLAIN_KEYS:
        for key in ("name", "finish_reason"):
            if message.get(key) not in (None, ""):
                out[key] = as_text(message.get(key))
        for key in ("reasoning_content", "reasoning"):
            if isinstance(message.get(key), str):
                reasoning.append(message[key])
    if reasoning:
        out["reasoning_content"] = "\n".join(reasoning)
    return out


def normalize_turns(message: Any, default_role: str) -> list[dict[str, Any]]:
    """One message as the turns it holds: each tool result (``tool_call_response`` part) its own
    ``{role: "tool", tool_call_id, content}`` message, in order, so parallel tool calls keep
    every id; the other parts stay together, in place, with the message's role. A message of
    tool results only is tool messages whatever its role (older instrumentations send them as
    ``user``)."""
    if not is_map(message):
        return [normalize_message(message, default_role)]
    parts, _ = _message_parts(message)
    responses = 0 if parts is None else sum(1 for p in parts if _is_tool_response(p))
    if parts is None or responses == 0 or len(parts) == 1:
        return [normalize_message(message, default_role)]
    base = {k: v for k, v in message.items() if k not in ("parts", "content", "tool_call_id")}
    turns: list[dict[str, Any]] = []
    run: list[Any] = []
    for part in parts:
        if _is_tool_response(part):
            if run:
                turns.append(normalize_message({**base, "parts": run}, default_role))
                run = []
            turns.append(normalize_message({"role": "tool", "parts": [part]}, "tool"))
        else:
            run.append(part)
    if run:
        turns.append(normalize_message({**base, "parts": run}, default_role))
    return turns


def normalize_messages(value: Any, default_role: str) -> list[dict[str, Any]]:
    """A message list from a JSON string, list or single message; raw text becomes one message."""
    parsed = parse_json(value)
    if isinstance(parsed, list):
        return [turn for m in parsed for turn in normalize_turns(m, default_role)]
    if isinstance(parsed, Mapping) and ("role" in parsed or "parts" in parsed):
        return normalize_turns(parsed, default_role)
    return [{"role": default_role, "content": as_text(parsed)}]


def _as_list(value: Any) -> list[Any]:
    if value is None:
        return []
    if isinstance(value, list):
        return value
    if isinstance(value, tuple):
        return list(value)
    return [value]


def unflatten(attrs: Mapping[str, Any], prefix: str, consumed: set[str]) -> list[dict[str, Any]]:
    """``prefix.0.a.b = v`` attributes as ``[{"a": {"b": v}}]``; numeric segments become lists.

    Only keys whose first segment after ``prefix`` is an index are read (and marked consumed).
    """
    root: dict[str, Any] = {}
    for key, value in attrs.items():
        if not key.startswith(prefix):
            continue
        path = key[len(prefix) :].split(".")
        if not path[0].isdigit():
            continue
        consumed.add(key)
        node = root
        for segment in path[:-1]:
            child = node.get(segment)
            if not isinstance(child, dict):
                child = node[segment] = {}
            node = child
        node[path[-1]] = value
    listed = _listify(root)
    return [m for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []


def _listify(node: Any) -> Any:
    if not isinstance(node, dict):
        return node
    if node and all(k.isdigit() for k in node):
        return [_listify(node[k]) for k in sorted(node, key=int)]
    return {k: _listify(v) for k, v in node.items()}
