"""MLflow's span format, as MLflow exports it over OTLP (``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT``).

MLflow JSON-encodes every attribute value: ``mlflow.spanType`` (``"\\"LLM\\""``),
``mlflow.spanInputs`` / ``mlflow.spanOutputs`` (whatever the traced function took and returned),
and the user's own attributes too (``step`` = ``"0"``, ``model`` = ``"\\"gpt-4o\\""``). Trace
tags reach the root only as ``mlflow.traceTag.<key>`` strings (``str(value)``, e.g. ``"False"``).

Two stages:

- :func:`normalize_attributes` (the assembler, once per span, before the sample's identity is
  read): scalar values decoded, and each trace tag the root does not carry as a plain attribute
  copied to its plain name, so ``step`` / ``sample_index`` / ``rollout_n`` / ``validate`` set as
  tags identify the sample like attributes do.
- :func:`read` (the convention reader): the span's kind, I/O, messages, usage and token fields.
  Kinds from ``mlflow.spanType`` (``LLM``, ``CHAT_MODEL`` → generation; ``TOOL`` → tool; any other
  → span); ``UNKNOWN`` (verl never sets a type) by the shapes verl's ops record: a generate op's
  outputs hold ``token_ids`` (and ``prompt_text`` / ``response_text`` with verl's ``token2text``)
  → generation from its token ids; a tool op's inputs hold ``parameters`` and its outputs are
  ``[{"text": ...}, reward, metrics]`` → tool; the agent loop's inputs hold ``kwargs.raw_prompt``
  (role messages) → the span whose input starts the conversation. The OpenAI autologger's
  request/response bodies (``messages`` / ``choices``) are read like any request body; the older
  ``mlflow.chat.messages`` attribute as the call's messages.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_trackio._core.conventions._common import (
    MessageForms,
    is_map,
    normalize_messages,
    parse_json,
)
from otel_trackio._core.values import as_int

PREFIX = "mlflow."
SPAN_TYPE = "mlflow.spanType"
INPUTS = "mlflow.spanInputs"
OUTPUTS = "mlflow.spanOutputs"
REQUEST_ID = "mlflow.traceRequestId"
TRACE_TAG_PREFIX = "mlflow.traceTag."
MODEL = "mlflow.llm.model"
TOKEN_USAGE = "mlflow.chat.tokenUsage"
CHAT_MESSAGES = "mlflow.chat.messages"
#: bookkeeping MLflow writes on its spans that says nothing the Trace does not show already
_BOOKKEEPING = (
    "mlflow.spanLogLevel",
    "mlflow.spanFunctionName",
    "mlflow.message.format",
    "mlflow.chat.tools",
    "mlflow.spanType",
)

SPAN_KINDS = {"LLM": "generation", "CHAT_MODEL": "generation", "TOOL": "tool"}
UNKNOWN = "UNKNOWN"


class MlflowAttributes(dict[str, Any]):
    """A span's attributes after :func:`normalize_attributes` (so it is never done twice)."""


def is_mlflow(attrs: Mapping[str, Any]) -> bool:
    """True for a span MLflow made (it always writes its request id and span type)."""
    return REQUEST_ID in attrs or SPAN_TYPE in attrs


def _scalar(value: Any) -> Any:
    """A JSON-encoded scalar decoded (``"0"`` → 0, ``"\\"x\\""`` → ``"x"``); anything else (a
    JSON object or list, plain text) unchanged."""
    if not isinstance(value, str) or not value:
        return value
    try:
        decoded = json.loads(value)
    except ValueError:
        return value
    if decoded is None or isinstance(decoded, (dict, list)):
        return value
    return decoded


def _tag_value(value: Any) -> Any:
    """A trace tag (``str(value)`` of the caller's value) back as that value where it can be
    told: JSON scalars, Python's ``True`` / ``False``; else the text."""
    if value in ("True", "False"):
        return value == "True"
    return _scalar(value)


def normalize_attributes(attrs: Mapping[str, Any]) -> Mapping[str, Any]:
    """An MLflow span's attributes with scalar values decoded and the trace tags the span does
    not carry as plain attributes added under their own names (MLflow's own ``mlflow.*`` tags
    excepted). Any other span's attributes come back as they are (two lookups)."""
    if isinstance(attrs, MlflowAttributes) or not is_mlflow(attrs):
        return attrs
    out = MlflowAttributes()
    tags: dict[str, Any] = {}
    for key, value in attrs.items():
        if key.startswith(TRACE_TAG_PREFIX):
            name = key[len(TRACE_TAG_PREFIX) :]
            if name and not name.startswith(PREFIX):
                tags[name] = _tag_value(value)
                continue
        out[key] = value if key in (INPUTS, OUTPUTS) else _scalar(value)
    for name, value in tags.items():
        if name not in out and value is not None:
            out[name] = value
    return out


@dataclass(slots=True)
class MlflowView:
    """What an MLflow span says, in the terms :func:`..read_span_facts` fills.

    ``input`` / ``output`` are the span's I/O (None where the span's messages or token ids give
    it instead); ``token_fields`` the token ids and decoded texts of a verl generate op, as the
    attributes the token reader knows (``prompt_ids``, ``token_ids``, ``prompt_text``, ...);
    ``conversation_start`` the agent loop's prompt messages.
    """

    kind: str | None = None
    input: Any = None
    output: Any = None
    messages: MessageForms = field(default_factory=MessageForms)
    usage: dict[str, int] | None = None
    token_fields: dict[str, Any] = field(default_factory=dict)
    consumed: set[str] = field(default_factory=set)


def read(attrs: Mapping[str, Any]) -> MlflowView | None:
    """The MLflow view of a span (None for a span MLflow did not make)."""
    if not is_mlflow(attrs):
        return None
    attrs = normalize_attributes(attrs)
    view = MlflowView()
    view.consumed.update(k for k in _BOOKKEEPING if k in attrs)
    inputs = parse_json(attrs.get(INPUTS))
    outputs = parse_json(attrs.get(OUTPUTS))
    view.consumed.update(k for k in (INPUTS, OUTPUTS) if k in attrs)
    declared = parse_json(attrs.get(SPAN_TYPE))
    span_type = declared.upper() if isinstance(declared, str) else UNKNOWN
    view.input, view.output = inputs, outputs
    if span_type != UNKNOWN:
        view.kind = SPAN_KINDS.get(span_type, "span")
    else:
        _read_shapes(view, inputs, outputs)
    if view.kind == "generation":
        _request_parameters(view, attrs, inputs)
    view.usage = _usage(attrs.get(TOKEN_USAGE))
    if view.usage is not None:
        view.consumed.add(TOKEN_USAGE)
    messages = attrs.get(CHAT_MESSAGES)
    if messages is not None:
        view.consumed.add(CHAT_MESSAGES)
        view.messages = _chat_messages(messages)
    return view


def _read_shapes(view: MlflowView, inputs: Any, outputs: Any) -> None:
    """Kind and fields of a span of type ``UNKNOWN`` (verl's ops) from what it recorded."""
    if is_map(outputs) and "token_ids" in outputs:  # a generate op (TokenOutput)
        view.kind = "generation"
        fields = view.token_fields
        if is_map(inputs) and "prompt_ids" in inputs:
            fields["prompt_ids"] = inputs["prompt_ids"]
        fields["token_ids"] = outputs["token_ids"]
        for key in ("prompt_text", "response_text"):
            if isinstance(outputs.get(key), str):
                fields[key] = outputs[key]
        view.input = None  # the prompt is its token ids (decoded), not the call's arguments
        view.output = None
        return
    if is_map(inputs) and "parameters" in inputs and _is_tool_result(outputs):
        view.kind = "tool"
        view.input = parse_json(inputs["parameters"])
        response = outputs[0]
        view.output = response.get("text") if isinstance(response.get("text"), str) else response
        return
    prompt = _raw_prompt(inputs)
    if prompt is not None:
        view.kind = "span"
        messages = normalize_messages(prompt, "user")
        view.messages = MessageForms(
            system=[m for m in messages if m.get("role") == "system"],
            inputs=[m for m in messages if m.get("role") != "system"],
        )
        if is_map(outputs) and isinstance(outputs.get("response_text"), str):
            view.output = outputs["response_text"]


def _is_tool_result(outputs: Any) -> bool:
    """verl's ``(ToolResponse, reward, metrics)`` as JSON: ``[{"text": ...}, reward, metrics]``."""
    return (
        isinstance(outputs, list)
        and len(outputs) == 3
        and is_map(outputs[0])
        and "text" in outputs[0]
    )


def _raw_prompt(inputs: Any) -> list[Any] | None:
    """The role messages of an agent loop's ``kwargs.raw_prompt`` (also at the top level)."""
    if not is_map(inputs):
        return None
    kwargs = inputs.get("kwargs")
    for holder in (kwargs, inputs):
        if is_map(holder):
            prompt = parse_json(holder.get("raw_prompt"))
            if (
                isinstance(prompt, list)
                and prompt
                and all(is_map(m) and "role" in m for m in prompt)
            ):
                return prompt
    return None


def _request_parameters(view: MlflowView, attrs: Mapping[str, Any], inputs: Any) -> None:
    """The autologger copies the request's keyword arguments (``model``, ``temperature``,
    ``tools``, ...) onto the span as plain attributes: they are the input, not user fields."""
    if not is_map(inputs):
        return
    for key in inputs:
        if key in attrs and not key.startswith(PREFIX):
            view.consumed.add(key)


def _usage(value: Any) -> dict[str, int] | None:
    """``mlflow.chat.tokenUsage`` (``{"input_tokens", "output_tokens", "total_tokens"}``)."""
    parsed = parse_json(value)
    if not is_map(parsed):
        return None
    usage: dict[str, int] = {}
    for key in ("input_tokens", "output_tokens", "total_tokens"):
        count = as_int(parsed.get(key))
        if count is not None:
            usage[key] = count
    if not usage:
        return None
    if "total_tokens" not in usage:
        usage["total_tokens"] = usage.get("input_tokens", 0) + usage.get("output_tokens", 0)
    return usage


def _chat_messages(value: Any) -> MessageForms:
    """``mlflow.chat.messages`` (the request's messages, then the reply): the reply is the
    output, everything before it the input."""
    messages = normalize_messages(value, "user")
    if messages and messages[-1].get("role") == "assistant":
        return MessageForms(inputs=messages[:-1], outputs=messages[-1:])
    return MessageForms(inputs=messages)
