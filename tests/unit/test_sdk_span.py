"""The fast reader of SDK spans (``_codec/sdk.span_row``) gives what the public API gives."""

from __future__ import annotations

from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import (
    NonRecordingSpan,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    TraceFlags,
)

from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._codec import spool as codec
from otel_trackio._codec.sdk import (
    attributes_view,
    public_span_row,
    record_from_readable_span,
    span_row,
)
from otel_trackio._engine.open_spans import OpenSpans


def _spans() -> list[ReadableSpan]:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc", "k": 1}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("scope-a")
    remote = SpanContext(0xABC, 0xDEF, is_remote=True, trace_flags=TraceFlags(TraceFlags.SAMPLED))
    with tracer.start_as_current_span(
        "rollout",
        context=trace.set_span_in_context(NonRecordingSpan(remote)),
        attributes={"step": 3, "sample_index": 7, "tags": ["a", "b"], "ok": True},
        kind=SpanKind.SERVER,
    ):
        with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute("gen_ai.input.messages", "x" * 3000)
            chat.add_event("gen_ai.choice", {"index": 0, "message": "hi"}, timestamp=123)
            chat.add_event("bare")
            chat.set_status(Status(StatusCode.ERROR, "boom"))
        with tracer.start_as_current_span("ok", kind=SpanKind.CONSUMER) as ok:
            ok.set_status(Status(StatusCode.OK))
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return spans


def test_the_fast_reader_and_the_public_api_give_the_same_rows() -> None:
    spans = _spans()
    assert len(spans) == 3
    for span in spans:
        fast, fast_resource = span_row(span)
        public, public_resource = public_span_row(span)
        assert fast == public
        assert fast_resource is public_resource
    rows = {row[2]: row for row, _ in map(span_row, spans)}
    assert rows["rollout"][6] is True  # a remote parent
    assert rows["chat"][9:12] == (2, "boom", SpanKind.CLIENT.value)
    assert rows["chat"][8] == (
        ("gen_ai.choice", 123, {"index": 0, "message": "hi"}),
        ("bare", rows["chat"][8][1][1], {}),
    )
    assert rows["ok"][9] == 1


def test_hand_made_and_foreign_spans_are_read_through_the_public_api() -> None:
    made = ReadableSpan(
        "made",
        context=SpanContext(1, 2, is_remote=False),
        attributes={"sample_index": 1},
        events=(),
        start_time=5,
        end_time=9,
    )
    assert span_row(made)[0] == public_span_row(made)[0]
    assert "sample_index" in attributes_view(made)

    class Foreign(ReadableSpan):
        """A ReadableSpan whose fields are not where the SDK keeps them."""

        def __init__(self) -> None:
            pass

        name = "foreign"  # type: ignore[assignment]
        context = SpanContext(3, 4, is_remote=False)  # type: ignore[assignment]
        parent = None  # type: ignore[assignment]
        status = Status(StatusCode.UNSET)  # type: ignore[assignment]
        events = ()  # type: ignore[assignment]
        instrumentation_scope = None  # type: ignore[assignment]
        resource = Resource.create({})  # type: ignore[assignment]
        start_time = 1  # type: ignore[assignment]
        end_time = 2  # type: ignore[assignment]
        attributes = MappingProxyType({"sample_index": 4})  # type: ignore[assignment]
        kind = SpanKind.INTERNAL  # type: ignore[assignment]

    row, _ = span_row(Foreign())
    assert row[:5] == (3, 4, "foreign", 1, 2)
    assert row[7] == {"sample_index": 4}
    assert "sample_index" in attributes_view(Foreign())
    # The offload path's batch reader takes the public accessors for it too, beside SDK spans.
    spans = [*_spans(), Foreign()]
    _, decoded = codec.decode_spans(codec.encode_sdk_spans(spans))
    assert decoded == [record_from_readable_span(s) for s in spans]


def test_records_and_spool_rows_round_trip() -> None:
    spans = _spans()
    _, decoded = codec.decode_spans(codec.encode_sdk_spans(spans))
    direct = [record_from_readable_span(s) for s in spans]
    assert decoded == direct
    chat = next(r for r in direct if r.name == "chat")
    assert (chat.status, chat.status_description, chat.kind) == ("error", "boom", "CLIENT")
    assert chat.resource == {**chat.resource, "service.name": "svc", "k": 1}
    assert [e.name for e in chat.events] == ["gen_ai.choice", "bare"]
    assert chat.scope == "scope-a"


def test_a_spool_entry_holds_odd_ids_and_values_as_they_were() -> None:
    """What MessagePack has no plain form for still round-trips: a trace id no SDK makes (zero,
    wider than 128 bits), an integer attribute beyond 64 bits, a ``str`` subclass, a lone
    surrogate, bytes, and the routes' names."""

    class Label(str):
        pass

    spans = [
        ReadableSpan(
            "odd",
            context=SpanContext(trace_id, 7, is_remote=False),
            start_time=1,
            end_time=2,
            attributes={"big": 1 << 70, "label": Label("x"), "bad": "a\udc80", "raw": b"\x00"},
        )
        for trace_id in (0, 1 << 130, (1 << 128) - 1)
    ]
    route, decoded = codec.decode_spans(codec.encode_sdk_spans(spans, ("p", "r")))
    assert route == ("p", "r")
    assert decoded == [record_from_readable_span(s) for s in spans]
    assert [r.trace_id for r in decoded] == [0, 1 << 130, (1 << 128) - 1]
    assert decoded[0].attributes == {"big": 1 << 70, "label": "x", "bad": "a\udc80", "raw": b"\x00"}


def test_open_spans_read_the_span_id_of_sdk_and_hand_made_spans_alike() -> None:
    """``OpenSpans`` reads an SDK span's id from its context tuple (the fast way) and any other
    span's through the public API; both are the public ``context.span_id``."""
    sdk_spans = _spans()
    made = ReadableSpan("made", context=SpanContext(1, 2, is_remote=False), start_time=5)
    no_context = ReadableSpan("none", context=None)
    open_spans = OpenSpans()
    for span in [*sdk_spans, made, no_context]:
        open_spans.started(span, None)
    assert len(open_spans) == len(sdk_spans) + 1  # a span without a context is not kept
    for span in [*sdk_spans, made]:
        assert span.context is not None
        assert open_spans.lookup(span.context.trace_id, span.context.span_id) is not None
    for span in [*sdk_spans, made, no_context]:
        open_spans.ended(span)
    assert len(open_spans) == 0


def test_the_processor_still_calls_a_batch_on_start_that_does_something(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``TrackioSpanProcessor`` skips ``BatchSpanProcessor.on_start`` only while it is empty:
    an SDK whose on_start does something still has it called, for every span."""
    monkeypatch.setenv("TRACKIO_DIR", str(tmp_path))
    calls: list[str] = []
    exporter = TrackioSpanExporter("p", "fast-start", offload=False, summary=False)
    try:
        fast = TrackioSpanProcessor(exporter)
        assert "on_start" in vars(fast)  # bound straight to the open-span registry

        def on_start(self: Any, span: Any, parent_context: Any = None) -> None:
            calls.append(span.name)

        class Own(TrackioSpanProcessor):
            def on_start(self, span: Any, parent_context: Any = None) -> None:
                calls.append("own " + span.name)
                super().on_start(span, parent_context)

        own = Own(exporter)
        assert "on_start" not in vars(own)  # a subclass's own on_start is kept
        own.on_start(ReadableSpan("x", context=SpanContext(5, 6, is_remote=False)))
        assert calls == ["own x"] and len(exporter.open_spans) == 1
        own.on_end(ReadableSpan("x", context=SpanContext(5, 6, is_remote=False)))
        assert len(exporter.open_spans) == 0
        own.shutdown()
        calls.clear()

        monkeypatch.setattr(BatchSpanProcessor, "on_start", on_start)
        slow = TrackioSpanProcessor(exporter)
        assert "on_start" not in vars(slow)
        provider = TracerProvider()
        provider.add_span_processor(slow)
        with provider.get_tracer("t").start_as_current_span("s"):
            assert len(exporter.open_spans) == 1
        assert calls == ["s"]
        assert len(exporter.open_spans) == 0
        fast.shutdown()
        provider.shutdown()
    finally:
        exporter.shutdown()
