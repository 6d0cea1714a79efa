"""The record codec (``otel_trackio._codec``): SDK spans, OTLP spans and spool bytes give the same
records, with one status and kind table; the stats survive the offload checkpoint whole."""

from __future__ import annotations

import dataclasses

import pytest
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from otel_trackio._codec import spool
from otel_trackio._codec.otlp import decode_traces
from otel_trackio._codec.sdk import record_from_readable_span
from otel_trackio._codec.tables import SPAN_KINDS, STATUS_NAMES, kind_from_otlp, status_name
from otel_trackio._engine.stats import ExportStats


def _sdk_spans() -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "codec"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("codec-scope")
    kinds = list(SpanKind)
    codes = [StatusCode.UNSET, StatusCode.OK, StatusCode.ERROR]
    with tracer.start_as_current_span("rollout", attributes={"step": 3, "sample_index": 1}):
        for i, kind in enumerate(kinds):
            with tracer.start_as_current_span(f"child{i}", kind=kind) as span:
                span.add_event("e", {"k": i})
                code = codes[i % 3]
                span.set_status(Status(code, "bad" if code is StatusCode.ERROR else None))
    provider.shutdown()
    return list(memory.get_finished_spans())


def _comparable(record) -> dict:
    out = dataclasses.asdict(record)
    out["attributes"] = dict(out["attributes"])
    out["resource"] = dict(out["resource"])
    out["events"] = [(e["name"], e["time_ns"], dict(e["attributes"])) for e in out["events"]]
    return out


def test_sdk_span_spool_bytes_and_otlp_give_the_same_records():
    spans = _sdk_spans()
    from_sdk = [record_from_readable_span(s) for s in spans]
    assert {r.kind for r in from_sdk} == set(SPAN_KINDS)
    assert {r.status for r in from_sdk} == set(STATUS_NAMES)

    _, from_sdk_bytes = spool.decode_spans(spool.encode_sdk_spans(spans))
    _, from_record_bytes = spool.decode_spans(spool.encode_records(from_sdk))
    from_otlp = [r for rs in decode_traces(encode_spans(spans)).by_route.values() for r in rs]

    expected = [_comparable(r) for r in from_sdk]
    assert [_comparable(r) for r in from_sdk_bytes] == expected
    assert [_comparable(r) for r in from_record_bytes] == expected
    assert [_comparable(r) for r in from_otlp] == expected


@pytest.mark.parametrize("code", [-1, 3, 99])
def test_unknown_codes_read_as_the_defaults(code):
    assert status_name(code) == "unset"
    assert kind_from_otlp(code + 10) == "INTERNAL"
    assert kind_from_otlp(0) == "INTERNAL"  # OTLP's "unspecified"


def test_export_stats_round_trip_through_a_checkpoint_dict():
    stats = ExportStats(*range(1, len(dataclasses.fields(ExportStats)) + 1))
    saved = {**stats.as_dict(), "entries": 7, "torn_entries": 1}  # a drainer adds its own keys
    assert ExportStats.from_dict(saved) == stats
    doubled = {k: 2 * v for k, v in stats.as_dict().items()}
    # Steps are a range: the earliest first step and the latest last step, not sums.
    doubled.update(first_step=stats.first_step, last_step=stats.last_step)
    assert ExportStats.total([stats, stats]).as_dict() == doubled


def test_spool_payloads_hold_plain_values_whatever_subclass_a_library_used():
    """A library may set a ``str`` subclass (smolagents' ``AgentText``), an ``IntEnum`` or a
    named tuple as an attribute value: written as the plain value, so the drainer, which
    refuses every class but its own records, reads it back."""
    import collections
    import enum

    from otel_trackio._codec import spool as codec
    from otel_trackio._core.records import SpanRecord

    class AgentText(str):
        def __init__(self, value: str) -> None:
            self.raw = value

    class Level(enum.IntEnum):
        HIGH = 3

    pair = collections.namedtuple("pair", "a b")
    record = SpanRecord(
        1, 2, "root", 0, 10,
        attributes={"answer": AgentText("4"), "level": Level.HIGH, "both": pair(1, 2)},
    )  # fmt: skip
    _, (back,) = codec.decode_spans(codec.encode_records([record]))
    assert back.attributes == {"answer": "4", "level": 3, "both": (1, 2)}
    assert [type(v) for v in back.attributes.values()] == [str, int, tuple]


def test_a_payload_of_another_shape_is_unreadable_not_a_crash() -> None:
    """Data that reads (MessagePack of this format) but is not what its kind holds is refused as
    unreadable (the drainer skips and counts it) rather than raising anything else."""
    import msgpack

    from otel_trackio._codec.packing import FORMAT, UnreadablePayload

    shapes = {
        spool.decode_spans: [[None, None], {}, [1, 2, 3]],  # rows of 14 fields
        spool.decode_events: [[None, None], [1]],
        spool.decode_metrics: [[None, None], "not bytes"],
        spool.decode_flush: ["one", {}, []],
        spool.decode_open_spans: [{"a": 1}],
    }
    for decode, value in shapes.items():
        with pytest.raises(UnreadablePayload):
            decode(msgpack.packb([FORMAT, value]))
    attributes_as_list = [
        [None, None],
        {},
        [b"\x00" * 16, 1, "n", 0, 1, None, False, [1, 2], None, 0, None, 0, 0, None],
    ]
    with pytest.raises(UnreadablePayload, match="attributes are not a map"):
        spool.decode_spans(msgpack.packb([FORMAT, attributes_as_list]))
