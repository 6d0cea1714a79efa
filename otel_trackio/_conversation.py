"""Build one sample's chat conversation from its model calls.

The latest model call's input already holds the whole history in a multi-turn agent; earlier
calls may hold turns it does not repeat (a tool result it summarised, another branch). We merge
every call's input and output in order and keep each distinct message once, system first.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from typing import Any

from ._genai import SpanFacts


def _message_key(message: Mapping[str, Any]) -> str:
    return json.dumps(
        [
            message.get("role"),
            message.get("content"),
            message.get("tool_calls"),
            message.get("tool_call_id"),
        ],
        sort_keys=True,
        default=str,
    )


def build_conversation(calls: Iterable[SpanFacts]) -> list[dict[str, Any]]:
    """Merge the model calls of a sample (in start order) into one OpenAI-style message list."""
    system: list[dict[str, Any]] = []
    turns: list[dict[str, Any]] = []
    seen: set[str] = set()
    system_seen: set[str] = set()

    def add(message: dict[str, Any]) -> None:
        key = _message_key(message)
        if message.get("role") == "system":
            if key not in system_seen:
                system_seen.add(key)
                system.append(message)
            return
        if key in seen:
            return
        seen.add(key)
        turns.append(message)

    for call in calls:
        for message in call.system_messages:
            add(message)
        for message in call.input_messages or ():
            add(message)
        for message in call.output_messages or ():
            add(message)
    return system + turns
