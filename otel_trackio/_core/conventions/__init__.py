"""A span's GenAI facts, whatever convention carried them: :func:`read_span_facts`.

One small module per convention (``otel_genai``, ``openinference``, ``openllmetry``, ``ai_sdk``,
``tokens``);
this module applies the precedence when a span carries several forms (first one present wins,
per field):

- kind: ``gen_ai.operation.name`` (LiteLLM's call types such as ``acompletion`` included) >
  ``openinference.span.kind`` > ``traceloop.span.kind`` > ``llm.request.type`` > the AI SDK's
  ``ai.operationId`` > inferred (messages, usage or token ids present → generation);
- messages (system, input and output each on their own): OTel JSON attributes > OTel span
  events > OTel log events joined to the span (each: ``...operation.details``, then per-message
  events, then ``gen_ai.content.*``) > OpenInference
  ``llm.*_messages`` > OpenLLMetry ``gen_ai.prompt/completion.N`` > the AI SDK's
  ``ai.prompt.messages`` / ``ai.prompt`` and ``ai.response.*`` > a generation's
  ``input.value``/``output.value`` (a request/response body or text) > decoded token ids;
- model: ``gen_ai.response.model`` > ``gen_ai.request.model`` > ``llm.model_name`` >
  ``ai.response.model`` > ``ai.model.id``; provider: ``gen_ai.provider.name`` > ``gen_ai.system``
  > ``llm.provider`` > ``llm.system`` > ``ai.model.provider`` (attributes
  equal to the value chosen are consumed; one that differs, e.g. a request model other than the
  response model, stays in metadata);
- usage: ``gen_ai.usage.input/output_tokens`` > ``gen_ai.usage.prompt/completion_tokens`` >
  ``llm.token_count.prompt/completion`` > ``ai.usage.*`` (keys holding the value chosen are
  consumed, as for the model); cost: ``gen_ai.usage.cost.amount`` (in USD or without a
  currency) > ``llm.cost.total`` > ``gen_ai.usage.cost`` >
  ``llm.cost.prompt + llm.cost.completion``;
- tool input/output: ``gen_ai.tool.call.arguments/result`` > pydantic-ai's older
  ``tool_arguments``/``tool_response`` > the AI SDK's ``ai.toolCall.args/result`` >
  ``input.value``/``output.value`` > ``traceloop.entity.input/output`` > the span's messages (one
  message: its content).

Framework dialects (Strands/Bedrock blocks, smolagents' roles, LiteLLM's extras) are normalised
by :mod:`.dialects` inside the readers. MLflow's span format (:mod:`.mlflow`: JSON-encoded
``mlflow.spanInputs``/``spanOutputs``, ``mlflow.spanType``, ``mlflow.chat.tokenUsage``) comes last
in each field's precedence, so a span that also carries a convention's attributes reads as that.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_trackio._core.conventions import (
    adk,
    ai_sdk,
    chat_markup,
    dialects,
    mlflow,
    openinference,
    openllmetry,
    otel_genai,
    tokens,
)
from otel_trackio._core.conventions._common import (
    PLACEHOLDER_TEXTS,
    Messages,
    normalize_message,
    normalize_messages,
    parse_json,
)
from otel_trackio._core.records import SpanRecord
from otel_trackio._core.values import as_float, as_int, as_text
from otel_trackio._settings import TrackioSettings

__all__ = [
    "NOTE_KEY",
    "NO_CONTENT_NOTE",
    "SpanFacts",
    "messages_may_follow_as_log_events",
    "parse_json",
    "read_span_facts",
]

_DEFAULT_SETTINGS = TrackioSettings()

GENERATION_OPERATIONS = frozenset(
    {"chat", "text_completion", "generate_content", "completion"} | dialects.GENERATION_CALL_TYPES
)
TOOL_OPERATIONS = frozenset({"execute_tool"})
MODEL_KEYS = (
    "gen_ai.response.model",
    "gen_ai.request.model",
    "llm.model_name",
    "llm.response.model",
    *ai_sdk.MODEL_KEYS,
    mlflow.MODEL,
)
PROVIDER_KEYS = (
    "gen_ai.provider.name",
    "gen_ai.system",
    "llm.provider",
    "llm.system",
    *ai_sdk.PROVIDER_KEYS,
)
#: where a span's notes go in its metadata
NOTE_KEY = "otel_trackio.note"
#: span metadata note on a model call whose instrumentation sent placeholders for its messages
NO_CONTENT_NOTE = (
    "message content not captured (the instrumentation sent placeholders): turn content capture"
    " on, see docs/conventions.md#content-capture"
)
#: span metadata note on a sample root LiteLLM wrote its model-call attributes onto
LITELLM_ROOT_NOTE = (
    "LiteLLM wrote a model call's attributes onto this sample root (its default mode: onto the"
    " current span, after the call, so calls that finished after the root ended are lost); set"
    " USE_OTEL_LITELLM_REQUEST_SPAN=true for one span per call"
)


@dataclass(slots=True)
class SpanFacts:
    """What the converter needs from a span, whatever convention carried it.

    ``consumed`` names the attributes (and ``consumed_events`` the event indexes) already
    represented here, so they are not repeated in the span's metadata; ``extra_metadata`` holds
    notes to add there (token counts, decode errors).

    For the sample-level rules (:mod:`.._conversation`): ``value_sides`` names the sides whose
    messages a generation took from its input/output values (no message attributes), and
    ``loose_sides`` those of them whose value was no chat request/response (arguments, Python
    reprs); ``prompt_ids`` / ``response_ids`` are the token ids the input / output messages were
    decoded from, ``prompt_text`` / ``response_text`` the text they decoded to (markup and all).
    """

    kind: str = "span"
    model: str | None = None
    provider: str | None = None
    usage: dict[str, int] | None = None
    cost_usd: float | None = None
    input: Any = None
    output: Any = None
    system_messages: Messages = field(default_factory=list)
    input_messages: Messages | None = None
    output_messages: Messages | None = None
    consumed: set[str] = field(default_factory=set)
    consumed_events: set[int] = field(default_factory=set)
    extra_metadata: dict[str, Any] = field(default_factory=dict)
    value_sides: set[str] = field(default_factory=set)
    loose_sides: set[str] = field(default_factory=set)
    prompt_ids: list[int] | None = None
    response_ids: list[int] | None = None
    prompt_text: str | None = None
    response_text: str | None = None

    @property
    def has_own_messages(self) -> bool:
        """True when the span carries messages of its own (message attributes, events or token
        ids), not only ones read from its input/output values."""
        own_input = bool(self.system_messages) or self.input_messages is not None
        return (own_input and "input" not in self.value_sides) or (
            self.output_messages is not None and "output" not in self.value_sides
        )


def messages_may_follow_as_log_events(span: SpanRecord) -> bool:
    """True for a model call (``gen_ai.operation.name`` a generation) that carries no messages
    of its own, in attributes or span events. Under the OTel GenAI conventions its messages,
    when captured, then come as log events, which another processor exports on its own
    schedule (the SDK's ``BatchLogRecordProcessor``: every second, and at shutdown)."""
    operation = span.attributes.get("gen_ai.operation.name")
    if not isinstance(operation, str) or operation not in GENERATION_OPERATIONS:
        return False
    if any(event.name.startswith("gen_ai.") for event in span.events):
        return False
    return not any(key.startswith(_MESSAGE_KEYS) for key in span.attributes)


def read_span_facts(span: SpanRecord, settings: TrackioSettings | None = None) -> SpanFacts:
    """Collect kind, model, usage, cost, input/output and chat messages from one span.

    ``settings`` gives the token decoder and the token id attributes.
    """
    settings = settings or _DEFAULT_SETTINGS
    attrs = mlflow.normalize_attributes(span.attributes)
    view = mlflow.read(attrs)
    facts = SpanFacts()
    facts.model = _first_text(attrs, MODEL_KEYS, facts.consumed)
    facts.provider = _first_text(attrs, PROVIDER_KEYS, facts.consumed)
    facts.usage = _read_usage(attrs, facts.consumed)
    facts.cost_usd = _read_cost(attrs, facts.consumed)
    found_messages = _read_messages(span, attrs, facts, view)
    if adk.REQUEST_KEY in attrs or adk.RESPONSE_KEY in attrs:
        facts.model = facts.model or adk.model(attrs)
        facts.usage = facts.usage or adk.usage(attrs)
    text = tokens.read(
        {**attrs, **view.token_fields} if view is not None and view.token_fields else attrs,
        settings.token_decoder,
        settings.token_id_attributes,
        facts.consumed,
        facts.extra_metadata,
    )
    if view is not None:
        facts.consumed.update(view.consumed)
        if facts.usage is None:
            facts.usage = view.usage
    kind = _explicit_kind(attrs) or (view.kind if view is not None else None)
    if kind is None:
        kind = "generation" if found_messages or facts.usage or text.found else "span"
    facts.kind = kind
    _read_io(attrs, facts, view)
    if kind == "generation":
        _messages_from_io(facts, text)
    if text.input is not None:
        _fill(facts, "input", text.input, "prompt text")
    if text.output is not None:
        _fill(facts, "output", text.output, "response text")
    if settings.sample_attribute in attrs and dialects.wrote_on_root(attrs):
        facts.extra_metadata[NOTE_KEY] = LITELLM_ROOT_NOTE
    return facts


def _first_text(attrs: Mapping[str, Any], keys: tuple[str, ...], consumed: set[str]) -> str | None:
    """The first non-empty value among ``keys``; every key holding that same value is consumed
    (it is the field now), a key holding another value stays in metadata (it is information)."""
    found: str | None = None
    for key in keys:
        value = attrs.get(key)
        if value is None or value == "":
            continue
        text = as_text(value)
        if found is None:
            found = text
        if text == found:
            consumed.add(key)
    return found


def _explicit_kind(attrs: Mapping[str, Any]) -> str | None:
    operation = attrs.get("gen_ai.operation.name")
    if isinstance(operation, str):
        if operation in GENERATION_OPERATIONS:
            return "generation"
        if operation in TOOL_OPERATIONS and not adk.is_merged_tools(attrs):
            return "tool"
        return "span"
    return openinference.kind(attrs) or openllmetry.kind(attrs) or ai_sdk.kind(attrs)


_USAGE_KEYS: tuple[tuple[str, tuple[str, ...]], ...] = (
    (
        "input_tokens",
        (
            "gen_ai.usage.input_tokens",
            "gen_ai.usage.prompt_tokens",
            "llm.token_count.prompt",
            *ai_sdk.USAGE_KEYS["input_tokens"],
        ),
    ),
    (
        "output_tokens",
        (
            "gen_ai.usage.output_tokens",
            "gen_ai.usage.completion_tokens",
            "llm.token_count.completion",
            *ai_sdk.USAGE_KEYS["output_tokens"],
        ),
    ),
    (
        "total_tokens",
        (
            "gen_ai.usage.total_tokens",
            "llm.usage.total_tokens",
            "llm.token_count.total",
            *ai_sdk.USAGE_KEYS["total_tokens"],
        ),
    ),
    (
        "cache_read_input_tokens",
        (
            "gen_ai.usage.cache_read.input_tokens",
            "gen_ai.usage.cache_read_input_tokens",
            "llm.token_count.prompt_details.cache_read",
            *ai_sdk.USAGE_KEYS["cache_read_input_tokens"],
        ),
    ),
    (
        "cache_write_input_tokens",
        (
            "gen_ai.usage.cache_write.input_tokens",
            "gen_ai.usage.cache_creation.input_tokens",
            "gen_ai.usage.cache_creation_input_tokens",
            "llm.token_count.prompt_details.cache_write",
        ),
    ),
    (
        "reasoning_output_tokens",
        (
            "gen_ai.usage.reasoning.output_tokens",
            "llm.token_count.completion_details.reasoning",
            *ai_sdk.USAGE_KEYS["reasoning_output_tokens"],
        ),
    ),
)


_ALL_USAGE_KEYS = frozenset(key for _, keys in _USAGE_KEYS for key in keys)


def _read_usage(attrs: Mapping[str, Any], consumed: set[str]) -> dict[str, int] | None:
    if _ALL_USAGE_KEYS.isdisjoint(attrs):  # most spans carry no token count at all
        return None
    usage: dict[str, int] = {}
    for target, keys in _USAGE_KEYS:
        for key in keys:
            raw = attrs.get(key)
            if raw is None:
                continue
            value = as_int(raw)
            if value is None:  # 0 is a real count
                continue
            usage.setdefault(target, value)
            if value == usage[target]:  # the same count under another name is consumed too
                consumed.add(key)
    if "input_tokens" not in usage and "output_tokens" not in usage:
        return usage or None
    if "total_tokens" not in usage:
        usage["total_tokens"] = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    return usage


_COST_KEYS = ("llm.cost.total", "gen_ai.usage.cost", "gen_ai.cost.total")
_COST_PART_KEYS = ("llm.cost.prompt", "llm.cost.completion")
# The GenAI conventions' newest form: an amount with its currency and where it came from.
_COST_AMOUNT = "gen_ai.usage.cost.amount"
_COST_CURRENCY = "gen_ai.usage.cost.currency"
_ALL_COST_KEYS = frozenset((*_COST_KEYS, *_COST_PART_KEYS, _COST_AMOUNT))


def _read_cost(attrs: Mapping[str, Any], consumed: set[str]) -> float | None:
    """The span's cost in US dollars (Trackio's cost column), or None; an amount in another
    currency stays on its span."""
    if _ALL_COST_KEYS.isdisjoint(attrs):  # most spans carry no cost
        return None
    amount = as_float(attrs.get(_COST_AMOUNT))
    currency = attrs.get(_COST_CURRENCY)
    if amount is not None and (currency is None or str(currency).upper() == "USD"):
        consumed.update((_COST_AMOUNT, _COST_CURRENCY))
        return amount
    for key in _COST_KEYS:
        value = as_float(attrs.get(key))
        if value is not None:
            consumed.add(key)
            return value
    parts = [as_float(attrs.get(k)) for k in _COST_PART_KEYS]
    if any(p is not None for p in parts):
        return sum(p for p in parts if p is not None)
    return None


_FLAT_PREFIXES = (
    "llm.input_messages.",
    "llm.output_messages.",
    "gen_ai.prompt.",
    "gen_ai.completion.",
)


def _read_messages(
    span: SpanRecord, attrs: Mapping[str, Any], facts: SpanFacts, view: mlflow.MlflowView | None
) -> bool:
    """Fill system/input/output messages by precedence; True when any form was found."""
    sources = [otel_genai.read_attributes(attrs, facts.consumed)]
    if span.events:
        # The span's own events, then the log events joined to it (the assembler keeps them last).
        own = sum(1 for e in span.events if not e.from_log)
        events = span.events
        sources.append(otel_genai.read_events(events[:own], facts.consumed_events))
        if own < len(events):
            sources.append(otel_genai.read_events(events[own:], facts.consumed_events, own))
    if any(key.startswith(_FLAT_PREFIXES) for key in attrs):  # one cheap pass for both readers
        sources.append(openinference.read(attrs, facts.consumed))
        sources.append(openllmetry.read(attrs, facts.consumed))
    if ai_sdk.OPERATION_KEY in attrs:
        sources.append(ai_sdk.read(attrs, facts.consumed))
    if adk.REQUEST_KEY in attrs or adk.RESPONSE_KEY in attrs:
        sources.append(adk.read(attrs, facts.consumed))
    if view is not None:
        sources.append(view.messages)
    for found in sources:
        if found.placeholders:
            facts.extra_metadata[NOTE_KEY] = NO_CONTENT_NOTE
        if found.system and not facts.system_messages:
            facts.system_messages = found.system
        if found.inputs is not None and facts.input_messages is None:
            facts.input_messages = found.inputs
        if found.outputs is not None and facts.output_messages is None:
            facts.output_messages = found.outputs
    if facts.output_messages:
        facts.output_messages = dialects.function_calls(
            facts.output_messages, attrs, facts.consumed
        )
    return bool(
        facts.system_messages
        or facts.input_messages is not None
        or facts.output_messages is not None
    )


_INPUT_KEYS = ("input.value", "traceloop.entity.input")
_OUTPUT_KEYS = ("output.value", "traceloop.entity.output")
#: attribute names and prefixes that carry a model call's messages on its span, in any convention
#: (see :func:`messages_may_follow_as_log_events`)
_MESSAGE_KEYS = (
    otel_genai.SYSTEM_KEY,
    otel_genai.INPUT_KEY,
    otel_genai.OUTPUT_KEY,
    *_FLAT_PREFIXES,
    *_INPUT_KEYS,
    *_OUTPUT_KEYS,
    "gen_ai.prompt",  # the older one-attribute forms
    "gen_ai.completion",
    "ai.prompt",
    "ai.response",
    "events",  # pydantic-ai before its instrumentation version 2
    adk.REQUEST_KEY,
    mlflow.PREFIX,
)
# pydantic-ai's instrumentation version 2 names its tool I/O ``tool_arguments`` / ``tool_response``.
_TOOL_INPUT_KEYS = (
    "gen_ai.tool.call.arguments",
    "tool_arguments",
    ai_sdk.TOOL_INPUT_KEY,
    adk.TOOL_ARGS_KEY,
    *_INPUT_KEYS,
)
_TOOL_OUTPUT_KEYS = (
    "gen_ai.tool.call.result",
    "tool_response",
    ai_sdk.TOOL_OUTPUT_KEY,
    adk.TOOL_RESPONSE_KEY,
    *_OUTPUT_KEYS,
)


def _value(attrs: Mapping[str, Any], key: str) -> Any:
    mime = attrs.get(f"{key.rsplit('.', 1)[0]}.mime_type") if key.endswith(".value") else None
    if isinstance(mime, str) and not mime.endswith("json"):
        return attrs[key]  # declared text: keep it even when it looks like JSON
    return parse_json(attrs[key])


def _read_io(attrs: Mapping[str, Any], facts: SpanFacts, view: mlflow.MlflowView | None) -> None:
    """Input/output by precedence (MLflow's ``spanInputs``/``spanOutputs`` last). A tool span's
    messages (e.g. Strands' events) are its I/O only when no tool attribute gave it; any other
    span's messages always are."""
    tool = facts.kind == "tool"
    for side, keys in (
        ("input", _TOOL_INPUT_KEYS if tool else (*_INPUT_KEYS, "gen_ai.tool.call.arguments")),
        ("output", _TOOL_OUTPUT_KEYS if tool else (*_OUTPUT_KEYS, "gen_ai.tool.call.result")),
    ):
        for key in keys:
            if key not in attrs or adk.says_nothing(key, attrs[key]):
                continue
            if isinstance(attrs[key], str) and attrs[key] in PLACEHOLDER_TEXTS:
                facts.consumed.add(key)  # e.g. OpenInference's hidden inputs: no content
                facts.extra_metadata[NOTE_KEY] = NO_CONTENT_NOTE
                break
            setattr(facts, side, _value(attrs, key))
            facts.consumed.add(key)
            if key.endswith(".value"):
                facts.consumed.add(f"{key[: -len('.value')]}.mime_type")
            break
    if view is not None:
        if facts.input is None:
            facts.input = view.input
        if facts.output is None:
            facts.output = view.output
    inputs = facts.system_messages + (facts.input_messages or [])
    if tool:
        if facts.input is None and inputs:
            facts.input = _tool_value(inputs)
        if facts.output is None and facts.output_messages:
            facts.output = _tool_value(facts.output_messages)
        facts.output = adk.function_response(dialects.block_text(facts.output))
        return
    if facts.input_messages is not None or facts.system_messages:
        facts.input = inputs
    if facts.output_messages is not None:
        facts.output = facts.output_messages


def _tool_value(messages: Messages) -> Any:
    """A tool's arguments or result from the messages its span carried: one message's content
    (JSON decoded), else the messages."""
    if len(messages) == 1:
        return parse_json(messages[0].get("content"))
    return messages


def _messages_from_io(facts: SpanFacts, text: tokens.TokenText) -> None:
    """A generation without message attributes: messages from its request/response bodies
    (``input.value``, a ``traced()`` call's arguments, ...) or from decoded token ids."""
    if facts.input_messages is None:
        if facts.input is not None and not facts.system_messages:
            facts.input_messages, chat = _request_messages(facts.input)
            _from_value(facts, "input", chat)
        elif text.input is not None:
            facts.input_messages = _decoded_messages(text.input, "user")
            facts.prompt_ids, facts.prompt_text = text.input_ids, text.input
    if facts.output_messages is None:
        if facts.output is not None:
            message, chat = _response_message(facts.output)
            facts.output_messages = [message]
            _from_value(facts, "output", chat)
        elif text.output is not None:
            facts.output_messages = _decoded_messages(text.output, "assistant")
            facts.response_ids, facts.response_text = text.output_ids, text.output
    system = [m for m in facts.input_messages or [] if m.get("role") == "system"]
    if system and not facts.system_messages:
        facts.system_messages = system
        facts.input_messages = [m for m in facts.input_messages or [] if m.get("role") != "system"]


def _decoded_messages(text: str, role: str) -> Messages:
    """Text decoded from token ids as messages: the turns its chat-template markup renders, else
    one message of ``role``."""
    parsed = chat_markup.messages(text, role)
    return parsed if parsed is not None else [{"role": role, "content": text}]


def _from_value(facts: SpanFacts, side: str, chat: bool) -> None:
    facts.value_sides.add(side)
    if not chat:
        facts.loose_sides.add(side)


def _request_messages(value: Any) -> tuple[Messages, bool]:
    """(messages, whether ``value`` was a chat request: role messages or a prompt text)."""
    if isinstance(value, Mapping):
        for key in ("messages", "input", "prompt"):
            if key in value:
                return _request_messages(value[key])
    if (
        isinstance(value, list)
        and value
        and all(isinstance(m, Mapping) and "role" in m for m in value)
    ):
        return normalize_messages(value, "user"), True
    return [{"role": "user", "content": as_text(value)}], isinstance(value, str)


def _response_message(value: Any) -> tuple[dict[str, Any], bool]:
    """(the reply, whether ``value`` was a chat response: a completion body, a message or text)."""
    if isinstance(value, Mapping):
        choices = value.get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], Mapping):
            choice = choices[0]
            if isinstance(choice.get("message"), Mapping):
                message = normalize_message(choice["message"], "assistant")
            else:
                message = {"role": "assistant", "content": as_text(choice.get("text"))}
            if choice.get("finish_reason") is not None:
                message["finish_reason"] = as_text(choice["finish_reason"])
            return message, True
        if "role" in value or "parts" in value:
            return normalize_message(value, "assistant"), True
    return {"role": "assistant", "content": as_text(value)}, isinstance(value, str)


def _fill(facts: SpanFacts, side: str, text: str, label: str) -> None:
    if getattr(facts, side) is None:
        setattr(facts, side, text)
    else:
        facts.extra_metadata[label] = text
