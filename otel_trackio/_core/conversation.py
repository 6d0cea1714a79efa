"""Build one sample's chat conversation from its model calls.

System instructions come first (each distinct one once). Then the calls are merged in start
order: each call's input + output is aligned against the conversation so far (a longest-matching
alignment, like ``diff``) and only the turns the alignment does not match are added, in place.
So a multi-turn agent whose latest call repeats the whole history gives exactly that history;
turns an earlier call had and a later one dropped (a summarised tool result, another branch) are
kept where they were; and a message genuinely sent twice (the user says "go on" twice) stays
twice, because alignment matches messages one to one instead of collapsing equal ones. A tool
call is matched by name and arguments, not id (LiteLLM records a model's call without its id;
the next call's copy, which has it, wins).

Token ids (verl's agent loop): when a call's prompt ids start with an earlier call's prompt +
response ids, that call continues the earlier one: its input is the earlier call's conversation
plus one user turn decoded from the new ids only, instead of the whole prompt decoded again
(without a decoder at hand, e.g. texts decoded by the worker: the new end of the prompt's text,
when it starts with the earlier call's prompt + response text). When the sample's agent span
recorded the prompt as role messages (verl's ``raw_prompt``), those messages stand for the
first token-id call's decoded prompt (``start``): the conversation begins with the system and
user turns as they were, not with the chat template's rendering of them.

Which generations are model calls (:func:`settle_model_calls`, before the merge): a generation
whose messages come only from its input/output values is a *wrapper* when it encloses a
generation with messages of its own (LlamaIndex's outer ``achat``/``astream_chat``): it becomes a
plain span (no turns, no usage). When any generation of the sample has messages of its own, the
value-only ones add no turns from values that are no chat request/response (Python reprs, tool
lists, arguments), and one left with nothing (no turns, usage or token ids) is a plain span too
(LlamaIndex's ``_prepare_chat_with_tools``). A generation directly under a generation with the
same model and usage is the same call recorded twice (ADK 1.x's ``generate_content`` under its
``call_llm``): the record that says no more than the other is a plain span, so the call's tokens
count once.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterable, Mapping, Sequence
from difflib import SequenceMatcher
from typing import Any

from otel_trackio._core.conventions import NO_CONTENT_NOTE, NOTE_KEY, SpanFacts, chat_markup, tokens
from otel_trackio._core.conventions._common import parse_json
from otel_trackio._core.records import SpanRecord
from otel_trackio._settings import TokenDecoder

#: message keys kept in the conversation (span outputs keep everything, e.g. ``finish_reason``).
MESSAGE_KEYS = ("role", "content", "name", "tool_calls", "tool_call_id", "reasoning_content")


_KEPT = frozenset(MESSAGE_KEYS)


def _clean(message: Mapping[str, Any]) -> dict[str, Any]:
    if message.keys() <= _KEPT:
        return dict(message)
    return {k: message[k] for k in MESSAGE_KEYS if k in message}


def _message_key(message: Mapping[str, Any]) -> Hashable:
    """Identity of a message for alignment: role, text, tool calls (name and arguments compared
    as JSON; ids are not compared, some instrumentations record a call without its id)."""
    content = message.get("content") or ""
    if not message.get("tool_calls") and isinstance(content, str):
        return (message.get("role"), content, message.get("tool_call_id"))  # the common, cheap case
    calls = [
        [
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


def build_conversation(
    calls: Iterable[SpanFacts],
    decoder: TokenDecoder | None = None,
    start: Sequence[dict[str, Any]] | None = None,
) -> list[dict[str, Any]]:
    """Merge the model calls of a sample (in start order) into one OpenAI-style message list.

    ``decoder`` (the settings' token decoder) decodes the new ids of a token-id call that
    continues an earlier one; ``start`` (the agent's prompt as role messages) replaces the
    decoded prompt of the first token-id call that continues none.
    """
    system: list[dict[str, Any]] = []
    system_keys: set[Hashable] = set()
    conversation: list[dict[str, Any]] = []
    keys: list[Hashable] = []
    # (prompt + response ids of a token-id call, the turns it ends with, its prompt + response
    # text), in call order
    token_calls: list[_TokenCall] = []
    for call in calls:
        turns: list[dict[str, Any]] = []
        inputs: Sequence[dict[str, Any]] = call.input_messages or ()
        continued = _continued(call, token_calls, decoder)
        if continued is None and start and call.prompt_ids is not None:
            inputs, start = start, None
        for message in [*call.system_messages, *(continued or inputs)]:
            if message.get("role") == "system":
                key = _message_key(message)
                if key not in system_keys:
                    system_keys.add(key)
                    system.append(_clean(message))
            else:
                turns.append(_clean(message))
        turns.extend(_clean(m) for m in call.output_messages or ())
        if call.prompt_ids is not None and call.response_ids is not None:
            texts = (call.prompt_text or "", call.response_text or "")
            token_calls.append((call.prompt_ids + call.response_ids, turns, texts))
        if turns:
            conversation, keys = _merge(conversation, keys, turns)
    return system + conversation


_TokenCall = tuple[list[int], list[dict[str, Any]], tuple[str, str]]


def _continued(
    call: SpanFacts, token_calls: list[_TokenCall], decoder: TokenDecoder | None
) -> list[dict[str, Any]] | None:
    """The input of a token-id call that continues an earlier one (its prompt ids start with
    that call's prompt + response ids): the earlier call's turns, then the new ids as one user
    turn (decoded; without a decoder, the new end of the prompt's text). None when it continues
    none (or the new turn cannot be told)."""
    prompt = call.prompt_ids
    if prompt is None:
        return None
    for ids, turns, texts in reversed(token_calls):
        if len(ids) <= len(prompt) and prompt[: len(ids)] == ids:
            new = prompt[len(ids) :]
            added_text = _new_text(new, decoder, call.prompt_text or "", texts)
            if added_text is None and new:
                return None
            added = chat_markup.messages(added_text, "user") if added_text else []
            if added is None:
                added = [{"role": "user", "content": added_text}]
            return [*turns, *added]
    return None


def _new_text(
    new: list[int], decoder: TokenDecoder | None, prompt_text: str, earlier: tuple[str, str]
) -> str | None:
    """The new ids of a continuing call as text: decoded, else what the prompt's text has after
    the earlier call's prompt and response texts (whitespace where they join aside: decoding
    ids one piece at a time may space them differently)."""
    if not new:
        return ""
    if decoder is not None:
        try:
            return tokens.decode(decoder, new)
        except Exception:  # noqa: BLE001 - a user callable must not cost the sample
            return None
    rest = prompt_text
    for piece in earlier:
        piece = piece.strip()
        rest = rest.lstrip()
        if not piece or not rest.startswith(piece):
            return None
        rest = rest[len(piece) :]
    return rest.strip()


def _one_record_per_call(spans: Sequence[SpanRecord], facts: Sequence[SpanFacts]) -> None:
    """A generation directly under a generation with the same model and usage is one model call
    recorded twice (ADK 1.x: ``generate_content`` under ``call_llm``): the record that says no
    more than the other becomes a plain span, so the call's tokens count once."""
    index = {s.span_id: i for i, s in enumerate(spans)}
    for i, record in enumerate(facts):
        parent_id = spans[i].parent_id
        parent = index.get(parent_id) if parent_id is not None else None
        if parent is None or record.kind != "generation" or not record.usage:
            continue
        first = facts[parent]
        if first.kind != "generation" or (record.model, record.usage) != (first.model, first.usage):
            continue
        if _says_no_more(record, first):
            _second_record(record, first)
        elif _says_no_more(first, record):
            _second_record(first, record)


def _second_record(second: SpanFacts, kept: SpanFacts) -> None:
    """``second`` is a plain span now; its note that content was left out moves to ``kept``
    unless ``kept`` has the content."""
    second.kind = "span"
    if second.extra_metadata.get(NOTE_KEY) == NO_CONTENT_NOTE:
        del second.extra_metadata[NOTE_KEY]
        if not kept.has_own_messages:
            kept.extra_metadata.setdefault(NOTE_KEY, NO_CONTENT_NOTE)


def _says_no_more(record: SpanFacts, first: SpanFacts) -> bool:
    """True when each of ``record``'s system, input and output messages is missing or the same
    as ``first``'s (ADK's events give no reply where its ``call_llm`` span does)."""
    return all(
        not mine or _same_turns(mine, theirs)
        for mine, theirs in (
            (record.system_messages, first.system_messages),
            (record.input_messages, first.input_messages),
            (record.output_messages, first.output_messages),
        )
    )


def _same_turns(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]] | None) -> bool:
    return [_clean(m) for m in a] == [_clean(m) for m in b or []]


def settle_model_calls(spans: Sequence[SpanRecord], facts: Sequence[SpanFacts]) -> None:
    """Decide, for the whole sample, which generations are model calls and which of their
    turns count (rules in the module docstring). ``facts[i]`` belongs to ``spans[i]``; the
    facts are updated in place (kind, messages)."""
    _one_record_per_call(spans, facts)
    generations = [i for i, f in enumerate(facts) if f.kind == "generation"]
    own = [i for i in generations if facts[i].has_own_messages]
    if not own:
        return
    parents = {s.span_id: s.parent_id for s in spans}
    wrappers: set[int] = set()
    for i in own:  # every ancestor of a generation with messages of its own
        parent, seen = spans[i].parent_id, 0
        while parent is not None and parent in parents and seen < len(spans):
            wrappers.add(parent)
            parent, seen = parents[parent], seen + 1
    for i in generations:
        f = facts[i]
        if f.has_own_messages or not (f.value_sides or spans[i].span_id in wrappers):
            continue
        if spans[i].span_id in wrappers:
            f.kind = "span"  # a wrapper around the model call, not a second one
            continue
        if "input" in f.loose_sides:
            f.input_messages = None
        if "output" in f.loose_sides:
            f.output_messages = None
        if f.input_messages is None and f.output_messages is None and not f.usage:
            f.kind = "span"
