"""Build one sample's chat conversation from its model calls.

System instructions come first (each distinct one once). Then the calls are merged in start
order: each call's input + output is aligned against the conversation so far (a longest-matching
alignment, like ``diff``) and only the turns the alignment does not match are added, in place.
So a multi-turn agent whose latest call repeats the whole history gives exactly that history;
turns an earlier call had and a later one dropped (a summarised tool result, another branch) are
kept where they were; and a message genuinely sent twice (the user says "go on" twice) stays
twice, because alignment matches messages one to one instead of collapsing equal ones.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping
from difflib import SequenceMatcher
from typing import Any

from .conventions import SpanFacts
from .conventions._common import parse_json

#: message keys kept in the conversation (span outputs keep everything, e.g. ``finish_reason``).
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")


_KEPT = frozenset(MESSAGE_KEYS)


def _clean(message: Mapping[str, Any]) -> dict[str, Any]:
    if message.keys() <= _KEPT:
        return dict(message)
    return {k: message[k] for k in MESSAGE_KEYS if k in message}


def _message_key(message: Mapping[str, Any]) -> Hashable:
    """Identity of a message for alignment: role, text, tool calls (arguments compared as JSON)."""
    content = message.get("content") or ""
    if not message.get("tool_calls") and isinstance(content, str):
        return (message.get("role"), content, message.get("tool_call_id"))  # the common, cheap case
    calls = [
        [
            c.get("id"),
            (c.get("function") or {}).get("name"),
            parse_json((c.get("function") or {}).get("arguments")),
        ]
        for c in message.get("tool_calls") or ()
        if isinstance(c, Mapping)
    ]
    return json.dumps(
        [message.get("role"), message.get("content") or "", calls, message.get("tool_call_id")],
        sort_keys=True,
        default=str,
    )


def _merge(
    conversation: list[dict[str, Any]], keys: list[Hashable], turns: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]], list[Hashable]]:
    new_keys = [_message_key(m) for m in turns]
    if new_keys[: len(keys)] == keys:
        return turns, new_keys  # the usual multi-turn case: this call repeats the history
    matcher = SequenceMatcher(None, keys, new_keys, autojunk=False)
    merged: list[dict[str, Any]] = []
    merged_keys: list[Hashable] = []
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            # The later call's copy wins: it is the fuller record of the same turn.
            merged.extend(turns[j1:j2])
            merged_keys.extend(new_keys[j1:j2])
            continue
        merged.extend(conversation[i1:i2])
        merged_keys.extend(keys[i1:i2])
        merged.extend(turns[j1:j2])
        merged_keys.extend(new_keys[j1:j2])
    return merged, merged_keys


def build_conversation(calls: Iterable[SpanFacts]) -> list[dict[str, Any]]:
    """Merge the model calls of a sample (in start order) into one OpenAI-style message list."""
    system: list[dict[str, Any]] = []
    system_keys: set[Hashable] = set()
    conversation: list[dict[str, Any]] = []
    keys: list[Hashable] = []
    for call in calls:
        turns: list[dict[str, Any]] = []
        for message in [*call.system_messages, *(call.input_messages or ())]:
            if message.get("role") == "system":
                key = _message_key(message)
                if key not in system_keys:
                    system_keys.add(key)
                    system.append(_clean(message))
            else:
                turns.append(_clean(message))
        turns.extend(_clean(m) for m in call.output_messages or ())
        if turns:
            conversation, keys = _merge(conversation, keys, turns)
    return system + conversation
