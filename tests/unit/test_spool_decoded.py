"""Span entries kept decoded for the drain of the same process (``otel_trackio/_spool/decoded.py``).

That the receiver's drain takes them, and keeps nothing of a refused request:
``test_grpc_receiver.py``.
"""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_trackio._codec import spool as codec
from otel_trackio._codec.otlp import decode_traces
from otel_trackio._spool.decoded import DecodedEntries


def _request() -> trace_service_pb2.ExportTraceServiceRequest:
    """An OTLP request of two samples with every kind of attribute value and an event."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"trackio.run": "kept", "n": 3}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(2):
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": i}):
            with tracer.start_as_current_span(
                "chat",
                attributes={"f": 0.5, "b": True, "list": [1, 2], "texts": ["a", "é"], "s": "x"},
            ) as span:
                span.add_event("tool", {"args": '{"x": 1}'})
    wire = encode_spans(memory.get_finished_spans()).SerializeToString()
    return trace_service_pb2.ExportTraceServiceRequest.FromString(wire)


def test_kept_records_are_what_decoding_the_entry_gives_taken_once_within_the_bound() -> None:
    decoded = decode_traces(_request())
    [(route, records)] = decoded.by_route.items()
    payload = codec.encode_records(records, route)
    kept = DecodedEntries(max_spans=4)
    assert kept.keep(payload, (route, records))
    assert kept.spans == 4
    # What the drain takes is what decoding the entry's bytes gives.
    assert kept.take(payload) == codec.decode_spans(payload)
    assert kept.take(payload) is None  # once: an entry handed over again is decoded again
    assert (kept.taken, kept.spans) == (1, 0)
    # Past the bound an entry is not kept (the drain decodes it); a failed append is forgotten.
    assert kept.keep(payload, (route, records))
    other = codec.encode_records(records[:1], route)
    assert not kept.keep(other, (route, records[:1]))
    assert not kept.keep(payload, (route, records))  # the same bytes twice: kept once
    kept.forget(payload)
    assert (kept.taken, kept.spans) == (1, 0)
