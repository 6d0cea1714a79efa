"""Chat-template markup in text decoded from token ids, read back as role messages.

A rollout that records only token ids (a custom agent loop, verl's ``trace.token2text``) gives
the rendered chat template once decoded: ``<|im_start|>user\\n...<|im_end|>`` (ChatML: Qwen,
Hermes), ``<|start_header_id|>user<|end_header_id|>\\n\\n...<|eot_id|>`` (Llama 3). :func:`messages`
turns such a text into the messages it renders, so the conversation shows roles, not markup:

- each rendered turn is a message with its role (the empty assistant header a prompt ends with,
  the generation prompt, is no turn); text before the first header keeps the caller's role;
- end markers (``<|im_end|>``, ``<|eot_id|>``, ``<|endoftext|>``, ...) are dropped, so a reply
  decoded with its end token reads as its text;
- Hermes tool calls inside an assistant turn (``<tool_call>{"name", "arguments"}</tool_call>``)
  are that turn's ``tool_calls`` (when every one of them reads as JSON);
  ``<tool_response>...</tool_response>`` blocks, and turns with role ``tool`` or ``ipython``, are
  tool messages.

A text with no markup comes back as None: the caller keeps it as it is.
"""

from __future__ import annotations

import json
import re
from typing import Any

_HEADERS = re.compile(
    r"<\|im_start\|>(?P<chatml>[A-Za-z_]+)\n?"
    r"|<\|start_header_id\|>(?P<llama>[A-Za-z_]+)<\|end_header_id\|>(?:\n\n)?"
)
_END_MARKERS = re.compile(
    r"<\|im_end\|>|<\|eot_id\|>|<\|eom_id\|>|<\|endoftext\|>|<\|end_of_text\|>|<\|begin_of_text\|>"
)
_TOOL_CALL = re.compile(r"<tool_call>\s*(.*?)\s*</tool_call>", re.DOTALL)
_TOOL_RESPONSE = re.compile(r"<tool_response>\s*(.*?)\s*</tool_response>", re.DOTALL)
_TOOL_ROLES = frozenset({"tool", "ipython"})


def messages(text: str, default_role: str) -> list[dict[str, Any]] | None:
    """The messages ``text`` renders, or None when it holds no chat-template markup."""
    if "<|" not in text and "<tool_" not in text:
        return None
    headers = list(_HEADERS.finditer(text))
    if not headers and not _END_MARKERS.search(text) and "<tool_" not in text:
        return None
    turns: list[tuple[str, str]] = []
    lead = text[: headers[0].start()] if headers else text
    if _clean(lead):
        turns.append((default_role, lead))
    for index, header in enumerate(headers):
        end = headers[index + 1].start() if index + 1 < len(headers) else len(text)
        role = header.group("chatml") or header.group("llama") or default_role
        turns.append((role, text[header.end() : end]))
    out: list[dict[str, Any]] = []
    for position, (role, body) in enumerate(turns):
        content = _clean(body)
        last = position == len(turns) - 1
        if role == "assistant" and not content and last and headers:
            continue  # the generation prompt a rendered prompt ends with
        out.extend(_turn(role, content))
    if not headers and out == [{"role": default_role, "content": text.strip()}]:
        return None  # nothing it could read: the text stays as it came
    return out


def without_end_tokens(text: str) -> str:
    """``text`` without the end tokens a reply decoded with its stop token carries (and the
    whitespace they leave at its ends); unchanged when it has none."""
    if "<|" not in text or not _END_MARKERS.search(text):
        return text
    return _clean(text)


def _clean(body: str) -> str:
    return _END_MARKERS.sub("", body).strip()


def _turn(role: str, content: str) -> list[dict[str, Any]]:
    if role in _TOOL_ROLES:
        return [{"role": "tool", "content": content}]
    if role == "assistant":
        calls = [_tool_call(m.group(1)) for m in _TOOL_CALL.finditer(content)]
        if calls and all(call is not None for call in calls):
            text = _TOOL_CALL.sub("", content).strip()
            return [{"role": "assistant", "content": text or None, "tool_calls": calls}]
        return [{"role": "assistant", "content": content}]
    responses = _TOOL_RESPONSE.findall(content)
    if responses and not _TOOL_RESPONSE.sub("", content).strip():
        return [{"role": "tool", "content": response} for response in responses]
    return [{"role": role, "content": content}]


def _tool_call(body: str) -> dict[str, Any] | None:
    """A Hermes call (``{"name", "arguments"}`` JSON) in OpenAI shape; None when unreadable (the
    turn then keeps its text as it was)."""
    try:
        call = json.loads(body)
    except ValueError:
        return None
    if not isinstance(call, dict) or not isinstance(call.get("name"), str):
        return None
    arguments = call.get("arguments", {})
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments, ensure_ascii=False)
    return {
        "id": "",
        "type": "function",
        "function": {"name": call["name"], "arguments": arguments},
    }
