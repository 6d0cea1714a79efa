"""Turn an assembled sample into a Trackio Trace dict: ``messages``, ``spans`` and ``metadata``.

Pure: plain data in, plain dicts out, no Trackio import (``_trackio`` logs the dicts).
"""

from __future__ import annotations

import time
from typing import Any

from ._conversation import build_conversation, settle_model_calls
from ._records import SpanRecord
from ._samples import Sample
from ._values import as_text, attribute_json, limit, storable
from .conventions import SpanFacts, read_span_facts
from .settings import TrackioSettings

TraceDict = dict[str, Any]


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


def sample_to_trace(sample: Sample, settings: TrackioSettings | None = None) -> TraceDict:
    """Convert one sample to a Trace dict (logged at ``sample.identity.step``)."""
    settings = settings or TrackioSettings()
    spans = sorted(sample.spans, key=lambda s: (s.start_ns, s.end_ns))
    ids = {s.span_id for s in spans}
    root = sample.root
    facts = [read_span_facts(s, settings) for s in spans]
    settle_model_calls(spans, facts)  # wrapper LLM spans are no model calls: before the kinds
    span_dicts = [
        _translate_span(s, f, root, ids, settings) for s, f in zip(spans, facts, strict=True)
    ]
    generations = [f for f in facts if f.kind == "generation"]
    messages = build_conversation(generations, settings.token_decoder)
    if not messages and root is not None:
        root_facts = facts[spans.index(root)]
        messages = _fallback_messages(root_facts)
    messages = [limit(_show_tool_calls(m), settings.max_value_chars) for m in messages]
    return storable(
        {
            "messages": messages,
            "spans": span_dicts,
            "metadata": _translate_metadata(sample, spans, span_dicts, generations),
        }
    )


def bare_trace(sample: Sample, error: str) -> TraceDict:
    """The least a sample can be logged as when full conversion failed: its span names and ids."""
    return storable(
        {
            "messages": [],
            "spans": [
                {
                    "id": f"{s.span_id:016x}",
                    "parent_id": None,
                    "name": str(s.name),
                    "kind": "span",
                }
                for s in sample.spans
            ],
            "metadata": {
                "step": sample.identity.step,
                "trace_id": f"{sample.identity.trace_id:032x}",
                "partial": sample.identity.partial,
                "conversion_error": error,
            },
        }
    )


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
        messages.append({"role": "user", "content": as_text(facts.input)})
    if facts.output is not None:
        messages.append({"role": "assistant", "content": as_text(facts.output)})
    return messages


def _translate_span(
    span: SpanRecord,
    facts: SpanFacts,
    root: SpanRecord | None,
    ids: set[int],
    settings: TrackioSettings,
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
        out["input"] = limit(facts.input, settings.max_value_chars)
    if facts.output is not None:
        out["output"] = limit(facts.output, settings.max_value_chars)
    if facts.provider is not None:
        metadata["provider"] = facts.provider
    metadata["otel.span_kind"] = span.kind
    for key, value in span.attributes.items():
        if key not in facts.consumed:
            metadata[key] = limit(attribute_json(value), settings.max_value_chars)
    for key, value in facts.extra_metadata.items():
        metadata[key] = limit(attribute_json(value), settings.max_value_chars)
    events = [
        {
            "name": e.name,
            "time": iso_time(e.time_ns),
            "attributes": attribute_json(dict(e.attributes)),
        }
        for i, e in enumerate(span.events)
        if e.name != "exception" and i not in facts.consumed_events
    ]
    if events:
        metadata["events"] = limit(events, settings.max_value_chars)
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
    spans: list[SpanRecord],
    span_dicts: list[dict[str, Any]],
    generations: list[SpanFacts],
) -> dict[str, Any]:
    identity = sample.identity
    meta: dict[str, Any] = {"step": identity.step}
    if identity.sample_index is not None:
        meta["sample_index"] = attribute_json(identity.sample_index)
    if identity.rollout_n is not None:
        meta["rollout_n"] = attribute_json(identity.rollout_n)
    if identity.validate is not None:
        meta["validate"] = attribute_json(identity.validate)
    meta["trace_id"] = f"{identity.trace_id:032x}"
    if identity.root_span_id is not None:
        meta["root_span_id"] = f"{identity.root_span_id:016x}"
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
    if identity.partial:
        meta["partial"] = True
        meta["partial_reason"] = identity.partial_reason
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
