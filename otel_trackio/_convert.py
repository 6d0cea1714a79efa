"""Turn an assembled sample into a Trackio Trace dict: ``messages``, ``spans`` and ``metadata``.

Pure: plain data in, plain dicts out, no Trackio import. The sink wraps the dict in
``trackio.Trace``.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from ._assembly import IDENTITY_ATTRIBUTES, Sample
from ._conversation import build_conversation
from ._records import SpanRecord
from .conventions import DEFAULT_TOKEN_ID_ATTRIBUTES, ReadOptions, SpanFacts, read_span_facts
from .conventions._common import as_int

TraceDict = dict[str, Any]

DEFAULT_MAX_VALUE_CHARS = 64 * 1024


@dataclass(frozen=True, slots=True)
class ConvertOptions:
    """How spans are read: attribute names, value size limit, optional token decoder."""

    step_attribute: str = "step"
    sample_attribute: str = "sample_index"
    max_value_chars: int = DEFAULT_MAX_VALUE_CHARS
    token_decoder: Callable[[Sequence[int]], str] | None = None
    token_id_attributes: Mapping[str, str] = field(
        default_factory=lambda: dict(DEFAULT_TOKEN_ID_ATTRIBUTES)
    )


def parse_step(value: Any) -> int | None:
    """A step from an attribute value: ints, integral floats and strings of ints; else None.

    Steps outside the signed 64-bit range are None too: SQLite cannot store them, and Trackio
    would drop the whole log entry in its background thread.
    """
    if isinstance(value, float) and not value.is_integer():
        return None  # 2.5 is no step; as_int would truncate it
    step = as_int(value)
    if step is None or not -_INT64 <= step < _INT64:
        return None
    return step


def iso_time(ns: int) -> str:
    """Nanoseconds since the epoch as ISO-8601 UTC with microseconds and a ``Z``."""
    global _iso_second
    seconds, rest = divmod(int(ns), 1_000_000_000)
    cached_seconds, prefix = _iso_second
    if seconds != cached_seconds:
        # The spans of a sample mostly share a second: format the date part once per second.
        t = time.gmtime(seconds)
        prefix = (
            f"{t.tm_year:04d}-{t.tm_mon:02d}-{t.tm_mday:02d}T"
            f"{t.tm_hour:02d}:{t.tm_min:02d}:{t.tm_sec:02d}."
        )
        _iso_second = (seconds, prefix)
    return f"{prefix}{rest // 1000:06d}Z"


# (seconds, "YYYY-MM-DDTHH:MM:SS.") of the last second formatted by iso_time (one tuple, swapped
# atomically, so concurrent exporters at worst format a second twice).
_iso_second: tuple[int | None, str] = (None, "")


def sample_to_trace(sample: Sample, step: int, options: ConvertOptions | None = None) -> TraceDict:
    """Convert one sample to a Trace dict logged at ``step``."""
    options = options or ConvertOptions()
    spans = sorted(sample.spans, key=lambda s: (s.start_ns, s.end_ns))
    ids = {s.span_id for s in spans}
    root = sample.root
    read_options = ReadOptions(options.token_decoder, options.token_id_attributes)
    facts = [read_span_facts(s, read_options) for s in spans]
    span_dicts = [
        _translate_span(s, f, root, ids, options) for s, f in zip(spans, facts, strict=True)
    ]
    generations = [f for f in facts if f.kind == "generation"]
    messages = build_conversation(generations)
    if not messages and root is not None:
        root_facts = facts[spans.index(root)]
        messages = _fallback_messages(root_facts)
    messages = [_limit(_show_tool_calls(m), options.max_value_chars) for m in messages]
    return storable(
        {
            "messages": messages,
            "spans": span_dicts,
            "metadata": _translate_metadata(sample, step, spans, span_dicts, generations, options),
        }
    )


_INT64 = 2**63


def storable(value: Any) -> Any:
    """``value`` in a form Trackio can serialise; the same object when it already is.

    Trackio round-trips every log entry through orjson. When orjson takes the value as it is
    (nearly always), nothing is copied; otherwise :func:`_storable` repairs it.
    """
    try:
        orjson.dumps(value)
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError
        return _storable(value)
    return value


def _storable(value: Any) -> Any:
    """Make a Trace dict serialisable by Trackio (orjson): no lone surrogates, ints within 64 bits.

    Trackio drops a whole metric key it cannot serialise, which would lose every sample logged
    with this one, so non-UTF-8 text is replaced (``\ufffd``) and huge ints become strings.
    """
    if isinstance(value, str):
        if value.isascii():
            return value
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:
            return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
        return value
    if isinstance(value, bool) or value is None or isinstance(value, float):
        return value
    if isinstance(value, int):
        return value if -_INT64 <= value < _INT64 else str(value)
    if isinstance(value, dict):
        return {_storable(str(k)): _storable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_storable(v) for v in value]
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    return _storable(str(value))


def _show_tool_calls(message: dict[str, Any]) -> dict[str, Any]:
    """Give an assistant turn that only calls tools a one-line text of its calls.

    Trackio's trace table previews the first assistant message's ``content``; in an agent that
    is usually a tool-call turn with no text, shown as "(no assistant response)" on every row.
    The ``tool_calls`` themselves are kept unchanged.
    """
    calls = message.get("tool_calls")
    if message.get("role") != "assistant" or not calls or message.get("content"):
        return message
    rendered = []
    for call in calls:
        function = call.get("function") if isinstance(call, dict) else None
        if isinstance(function, dict):
            rendered.append(f"{function.get('name', '')}({function.get('arguments', '')})")
    if not rendered:
        return message
    return {**message, "content": "[tool call] " + "; ".join(rendered)}


def _fallback_messages(facts: SpanFacts) -> list[dict[str, Any]]:
    messages = []
    if facts.input is not None:
        messages.append({"role": "user", "content": _as_text(facts.input)})
    if facts.output is not None:
        messages.append({"role": "assistant", "content": _as_text(facts.output)})
    return messages


def _as_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def _translate_span(
    span: SpanRecord,
    facts: SpanFacts,
    root: SpanRecord | None,
    ids: set[int],
    options: ConvertOptions,
) -> dict[str, Any]:
    parent_id: str | None = None
    metadata: dict[str, Any] = {}
    if span is not root and span.parent_id is not None and not span.parent_is_remote:
        if span.parent_id in ids:
            parent_id = f"{span.parent_id:016x}"
        elif root is not None:
            # A missing middle span: hang it under the sample root, keep the real parent id.
            parent_id = f"{root.span_id:016x}"
            metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
        else:
            metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
    elif span.parent_id is not None:
        metadata["otel.parent_span_id"] = f"{span.parent_id:016x}"
    out: dict[str, Any] = {
        "id": f"{span.span_id:016x}",
        "parent_id": parent_id,
        "name": span.name,
        "kind": facts.kind,
        "start_time": iso_time(span.start_ns),
        "end_time": iso_time(span.end_ns),
        "duration_ms": max(0.0, (span.end_ns - span.start_ns) / 1e6),
        "status": "error" if span.status == "error" else "success",
    }
    error = _error_text(span)
    if error is not None:
        out["error"] = error
    if facts.model is not None:
        out["model"] = facts.model
    if facts.usage is not None:
        out["usage"] = dict(facts.usage)
    if facts.cost_usd is not None:
        out["cost_usd"] = facts.cost_usd
    if facts.input is not None:
        out["input"] = _limit(facts.input, options.max_value_chars)
    if facts.output is not None:
        out["output"] = _limit(facts.output, options.max_value_chars)
    if facts.provider is not None:
        metadata["provider"] = facts.provider
    metadata["otel.span_kind"] = span.kind
    for key, value in span.attributes.items():
        if key not in facts.consumed:
            metadata[key] = _limit(_json_safe(value), options.max_value_chars)
    for key, value in facts.extra_metadata.items():
        metadata[key] = _limit(_json_safe(value), options.max_value_chars)
    events = [
        {"name": e.name, "time": iso_time(e.time_ns), "attributes": _json_safe(dict(e.attributes))}
        for i, e in enumerate(span.events)
        if e.name != "exception" and i not in facts.consumed_events
    ]
    if events:
        metadata["events"] = _limit(events, options.max_value_chars)
    out["metadata"] = metadata
    return out


def _error_text(span: SpanRecord) -> str | None:
    if span.status != "error":
        return None
    for event in span.events:
        if event.name == "exception":
            kind = event.attributes.get("exception.type")
            message = event.attributes.get("exception.message")
            text = ": ".join(str(x) for x in (kind, message) if x)
            if text:
                return text
    if span.status_description:
        return span.status_description
    return str(span.attributes.get("error.type") or "error")


def _translate_metadata(
    sample: Sample,
    step: int,
    spans: list[SpanRecord],
    span_dicts: list[dict[str, Any]],
    generations: list[SpanFacts],
    options: ConvertOptions,
) -> dict[str, Any]:
    identity = sample.identity
    meta: dict[str, Any] = {"step": step}
    sample_index = identity.get(options.sample_attribute)
    if sample_index is not None:
        meta["sample_index"] = _json_safe(sample_index)
    for key in IDENTITY_ATTRIBUTES:
        if key in identity:
            meta[key] = _json_safe(identity[key])
    trace_id = identity.get("_trace") or (spans[0].trace_id if spans else 0)
    meta["trace_id"] = f"{int(trace_id):032x}"
    root_id = identity.get("_root")
    if root_id is not None:
        meta["root_span_id"] = f"{int(root_id):016x}"
    service = _service_name(spans)
    if service is not None:
        meta["service_name"] = service
    meta["status"] = "error" if any(d["status"] == "error" for d in span_dicts) else "success"
    if sample.root is not None:
        meta["duration_ms"] = max(0.0, (sample.root.end_ns - sample.root.start_ns) / 1e6)
    elif spans:
        start = min(s.start_ns for s in spans)
        end = max(s.end_ns for s in spans)
        meta["duration_ms"] = max(0.0, (end - start) / 1e6)
    usage = _sum_usage(generations)
    if usage is not None:
        meta["usage"] = usage
    cost = [f.cost_usd for f in generations if f.cost_usd is not None]
    if cost:
        meta["cost_usd"] = sum(cost)
    meta["span_count"] = len(spans)
    if sample.partial:
        meta["partial"] = True
        meta["partial_reason"] = sample.reason
    return meta


def _service_name(spans: list[SpanRecord]) -> str | None:
    for span in spans:
        name = span.resource.get("service.name")
        if name is not None:
            return str(name)
    return None


def _sum_usage(generations: list[SpanFacts]) -> dict[str, int] | None:
    totals: dict[str, int] = {}
    for facts in generations:
        for key, value in (facts.usage or {}).items():
            totals[key] = totals.get(key, 0) + value
    return totals or None


def _json_safe(value: Any) -> Any:
    """Attribute values as JSON: sequences to lists, bytes summarised, other objects as text."""
    if value is None or isinstance(value, (str, bool, int)):
        return value
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, Mapping):
        return {str(k): _json_safe(v) for k, v in value.items()}
    if isinstance(value, (bytes, bytearray, memoryview)):
        return f"<{len(value)} bytes>"
    if isinstance(value, (list, tuple, set, frozenset)):
        return [_json_safe(v) for v in value]
    return str(value)


def _limit(value: Any, max_chars: int) -> Any:
    """Cut long strings (and the strings inside containers) with a marker saying how much."""
    if isinstance(value, (list, dict)):
        try:
            # No string inside can be longer than the whole serialised value.
            if len(orjson.dumps(value)) <= max_chars:
                return value
        except (TypeError, ValueError):
            pass
    if not _too_long(value, max_chars):
        return value  # the common case: nothing to cut, so nothing to copy
    if isinstance(value, str):
        if len(value) <= max_chars:
            return value
        cut = len(value) - max_chars
        return f"{value[:max_chars]}…[otel-trackio cut {cut} chars]"
    if isinstance(value, list):
        return [_limit(v, max_chars) for v in value]
    if isinstance(value, dict):
        return {k: _limit(v, max_chars) for k, v in value.items()}
    return value


def _too_long(value: Any, max_chars: int) -> bool:
    """True when ``_limit`` would cut something in ``value`` (a walk that allocates nothing)."""
    if isinstance(value, str):
        return len(value) > max_chars
    if isinstance(value, list):
        for item in value:
            if _too_long(item, max_chars):
                return True
        return False
    if isinstance(value, dict):
        for item in value.values():
            if _too_long(item, max_chars):
                return True
        return False
    return False
