"""Framework dialects of the conventions, each a small normaliser to the common message shape.

Agent frameworks emit the OTel GenAI / OpenInference conventions with their own extras. Each
rule here turns one such extra into what the convention readers already understand (OTel
``parts``, OpenAI ``tool_calls``) before :func:`._common.normalize_message` runs, so the
conversation merge never needs to know which framework spoke. Anything a rule does not recognise
comes back unchanged. (No import of ``_common``: it imports this module.)

- **Bedrock / Strands content blocks** (:func:`content_parts`): message content as a list of
  ``{"text"}``, ``{"toolUse": {toolUseId, name, input}}``, ``{"toolResult": {toolUseId, content,
  status}}``, ``{"reasoningContent": ...}`` blocks → ``text``, ``tool_call``,
  ``tool_call_response`` and ``reasoning`` parts (other blocks kept as they came).
- **Text-block lists as tool results** (:func:`block_text`): a tool result made only of
  ``{"text": ...}`` blocks (Strands, Bedrock, LlamaIndex) → that text.
- **smolagents' roles** (:func:`agent_roles`): ``tool-call`` messages (``"Calling tools:\\n"`` + the
  Python repr of the calls) → an assistant turn with those ``tool_calls``; ``tool-response`` → a
  tool message answering the preceding call.
- **LiteLLM** (:func:`function_calls`, :data:`GENERATION_CALL_TYPES`): an output message with no
  parts gets the call LiteLLM wrote only as ``gen_ai.completion.N.function_call.{name,arguments}``;
  its call types (``acompletion``, ``atext_completion``, ...) as ``gen_ai.operation.name`` are
  model calls; ``litellm.*`` attributes on a sample root mean LiteLLM's default mode
  (:func:`wrote_on_root`).
"""

from __future__ import annotations

import ast
from collections.abc import Mapping
from typing import Any

from otel_trackio._core.values import as_text

# -- Bedrock / Strands content blocks ---------------------------------------------------------

_BLOCK_KEYS = frozenset(
    {
        "text",
        "toolUse",
        "toolResult",
        "reasoningContent",
        "image",
        "document",
        "video",
        "json",
        "cachePoint",
        "guardContent",
        "citationsContent",
    }
)


def _is_block(item: Any) -> bool:
    return isinstance(item, Mapping) and len(item) == 1 and next(iter(item)) in _BLOCK_KEYS


def content_parts(content: list[Any]) -> list[Any]:
    """A content list of Bedrock blocks as OTel parts; any other list unchanged.

    Only a list made entirely of one-key blocks (``{"text": ...}``, ``{"toolUse": ...}``, ...)
    with at least one tool or reasoning block is converted: a list of bare ``{"text": ...}``
    blocks already reads as text parts.
    """
    if not any(
        isinstance(item, Mapping)
        and ("toolUse" in item or "toolResult" in item or "reasoningContent" in item)
        for item in content
    ) or not all(_is_block(item) for item in content):
        return content
    return [_block_part(item) for item in content]


def _block_part(block: Mapping[str, Any]) -> Any:
    ((kind, body),) = block.items()
    if not isinstance(body, Mapping):
        return dict(block)
    if kind == "toolUse":
        return {
            "type": "tool_call",
            "id": body.get("toolUseId"),
            "name": body.get("name"),
            "arguments": body.get("input"),
        }
    if kind == "toolResult":
        return {
            "type": "tool_call_response",
            "id": body.get("toolUseId"),
            "response": block_text(body.get("content")),
        }
    if kind == "reasoningContent":
        text = body.get("reasoningText")
        if isinstance(text, Mapping) and isinstance(text.get("text"), str):
            return {"type": "reasoning", "content": text["text"]}
    return dict(block)


def block_text(value: Any) -> Any:
    """A list of ``{"text": ...}`` (and ``{"json": ...}``) blocks as one text; else unchanged."""
    if not isinstance(value, list) or not value:
        return value
    texts: list[str] = []
    for item in value:
        if not isinstance(item, Mapping) or len(item) != 1:
            return value
        if isinstance(item.get("text"), str):
            texts.append(item["text"])
        elif "json" in item:
            texts.append(as_text(item["json"]))
        else:
            return value
    return "\n".join(texts)


# -- smolagents -------------------------------------------------------------------------------

_CALLING_TOOLS = "Calling tools:\n"
_CALL_ID = "Call id: "


def agent_roles(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """smolagents' own roles as what it sends: ``tool-call`` → assistant, ``tool-response`` → a
    tool result. A ``tool-call`` whose text is smolagents' rendering of its calls becomes those
    calls (the same turn the previous model call output), and the ``tool-response`` after it
    answers that call's id (its text kept as sent) when the step made exactly one call, or
    names it (``Call id: ...``). Messages without these roles pass unchanged."""
    if not any(m.get("role") in ("tool-call", "tool-response") for m in messages):
        return messages
    out: list[dict[str, Any]] = []
    call_ids: list[str] = []
    for message in messages:
        role = message.get("role")
        if role == "tool-call":
            calls = _rendered_calls(_text_of(message.get("content")))
            if calls is None:
                out.append({**message, "role": "assistant"})
                call_ids = []
            else:
                out.append({"role": "assistant", "content": None, "tool_calls": calls})
                call_ids = [as_text(c.get("id")) for c in calls]
        elif role == "tool-response":
            text = _text_of(message.get("content"))
            answer = {**message, "role": "tool"}
            if text is not None and text.startswith(_CALL_ID):
                answer["tool_call_id"] = text[len(_CALL_ID) :].split("\n", 1)[0]
            elif len(call_ids) == 1:
                answer["tool_call_id"] = call_ids[0]
            out.append(answer)
        else:
            out.append(message)
            call_ids = []
    return out


def _text_of(content: Any) -> str | None:
    if isinstance(content, str):
        return content
    if isinstance(content, list) and len(content) == 1 and isinstance(content[0], Mapping):
        text = content[0].get("text")
        return text if isinstance(text, str) else None
    return None


def _rendered_calls(text: str | None) -> list[dict[str, Any]] | None:
    """smolagents' ``"Calling tools:\\n" + str([call.dict(), ...])`` back as OpenAI tool calls."""
    if text is None or not text.startswith(_CALLING_TOOLS):
        return None
    calls = python_literal(text[len(_CALLING_TOOLS) :])
    if not isinstance(calls, list) or not calls:
        return None
    out = []
    for call in calls:
        function = call.get("function") if isinstance(call, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            return None
        out.append(
            {
                "id": call.get("id"),
                "type": "function",
                "function": {"name": function["name"], "arguments": function.get("arguments")},
            }
        )
    return out


_MAX_LITERAL_CHARS = 100_000
_MAX_LITERAL_DEPTH = 20


def python_literal(text: str) -> Any:
    """A Python literal (``repr`` of lists, dicts, strings, numbers) read safely; None when it is
    not one, too long or nested too deep (``ast.literal_eval`` can exhaust the stack)."""
    if len(text) > _MAX_LITERAL_CHARS:
        return None
    depth = deepest = 0
    for char in text:
        if char in "[{(":
            depth += 1
            deepest = max(deepest, depth)
        elif char in "]})":
            depth -= 1
    if deepest > _MAX_LITERAL_DEPTH:
        return None
    try:
        return ast.literal_eval(text.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return None


# -- LiteLLM ----------------------------------------------------------------------------------

#: LiteLLM's call types that are model calls, as it writes them in ``gen_ai.operation.name``
#: (without the GenAI opt-in): each with its async ``a...`` twin.
GENERATION_CALL_TYPES = frozenset(
    name
    for base in (
        "completion",
        "text_completion",
        "responses",
        "anthropic_messages",
        "generate_content",
    )
    for name in (base, f"a{base}")
)


def function_calls(
    outputs: list[dict[str, Any]], attrs: Mapping[str, Any], consumed: set[str]
) -> list[dict[str, Any]]:
    """Output messages with nothing in them, completed with the call LiteLLM recorded only as
    ``gen_ai.completion.N.function_call.name`` / ``.arguments`` (no id: the next model call's
    input, which has it, aligns with this turn and supplies it)."""
    out = outputs
    for index, message in enumerate(outputs):
        prefix = f"gen_ai.completion.{index}.function_call."
        name = attrs.get(f"{prefix}name")
        if name is None or message.get("tool_calls") or message.get("content"):
            continue
        arguments = attrs.get(f"{prefix}arguments")
        function = {"name": as_text(name), "arguments": as_text(arguments) or "{}"}
        call = {"id": "", "type": "function", "function": function}
        if out is outputs:
            out = list(outputs)
        out[index] = {**message, "content": None, "tool_calls": [call]}  # no text: null
        consumed.update((f"{prefix}name", f"{prefix}arguments"))
    return out


#: Top-level keys LiteLLM's default mode also writes onto the span it finds current.
LITELLM_ROOT_NAMESPACES = frozenset({"metadata", "hidden_params"})


def wrote_on_root(attrs: Mapping[str, Any]) -> bool:
    """True when LiteLLM's attributes sit on a span (here: a sample root, which LiteLLM did not
    start): its default mode writes each call onto the *current* span, after the call."""
    return "litellm.call_id" in attrs or "litellm.provider.model" in attrs
