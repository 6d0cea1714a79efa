"""The receiver's grace rule, both sides, read back from Trackio's storage: a single-process
client's sample goes out as soon as every request the receiver began taking before it completed
is handed over — no timer; a request still coming in holds it back; once spans of one sample come
from two processes, or a log event comes after its sample, samples are held for the grace period
and stay whole.

The grace period (``RECEIVER_GRACE_SECONDS``, the quick phase's longest wait too) is set far
beyond any test's wait, so a sample stored here was released by the rule, not by a clock.
"""

from __future__ import annotations

import socket
import time
from typing import Any

from conftest import read_traces, wait_until
from opentelemetry import propagate
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_span_in_context

from otel_trackio._core.assembly import grace

WAIT = 60.0  # seconds: the most a state may take to show with the CPU busy


def _client(url: str, service: str, *, batch: bool) -> TracerProvider:
    """A process's tracer provider with the official OTLP/HTTP exporter."""
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=30)
    provider.add_span_processor(
        BatchSpanProcessor(exporter, schedule_delay_millis=600_000)
        if batch
        else SimpleSpanProcessor(exporter)
    )
    return provider


def _rows(project: str) -> dict[int, list[dict]]:
    rows: dict[int, list[dict]] = {}
    for trace in read_traces(project, "r"):
        rows.setdefault(trace["metadata"].get("sample_index"), []).append(trace)
    return rows


def _no_timer(monkeypatch: Any) -> None:
    """A grace period no test could wait for: only the rule can release a sample."""
    monkeypatch.setattr(grace, "RECEIVER_GRACE_SECONDS", 600.0)


def test_a_single_process_clients_samples_do_not_wait_for_the_grace_period(
    project, start_receiver, monkeypatch
):
    _no_timer(monkeypatch)  # the old rule held them 0.5 s, then 5 s (here 600 s)
    receiver = start_receiver()
    provider = _client(receiver.url, "one-process", batch=True)  # the SDK's usual setup
    tracer = provider.get_tracer("rollout")
    for i in range(6):
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": i}):
            with tracer.start_as_current_span("chat policy"):
                pass
            with tracer.start_as_current_span("reward"):
                pass
    assert provider.force_flush(30_000)  # every span is in the receiver now
    wait_until(lambda: len(_rows(project)) >= 6, "the samples, not their grace period", 60)
    rows = _rows(project)
    assert sorted(rows) == list(range(6))
    for index, traces in rows.items():
        assert len(traces) == 1, index
        meta = traces[0]["metadata"]
        assert len(traces[0]["spans"]) == 3 and not meta.get("partial"), meta
    provider.shutdown()


def test_spans_of_one_sample_from_two_processes_keep_every_later_sample_whole(
    project, start_receiver, monkeypatch
):
    # Without the switch to the grace period, the quick phase would let every sample below go
    # once its root is in, and the model server's span trailing it would come out on its own.
    monkeypatch.setattr(grace, "RECEIVER_GRACE_SECONDS", 30.0)
    receiver = start_receiver()
    worker = _client(receiver.url, "rollout-worker", batch=False)  # sends each span as it ends
    server = _client(receiver.url, "model-server", batch=True)  # sends when flushed
    tracer, served = worker.get_tracer("rollout"), server.get_tracer("server")
    for i in range(5):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
            carrier: dict[str, str] = {}
            propagate.inject(carrier)  # the call to the model server carries the trace context
            with served.start_as_current_span("chat policy", context=propagate.extract(carrier)):
                pass
            if i == 0:
                assert server.force_flush(30_000)  # the model server's span before the root
            with tracer.start_as_current_span("reward"):
                pass
        # Later samples: the model server's span arrives after its root.
        assert server.force_flush(30_000)
    receiver.stop()  # held samples go out whole
    rows = _rows(project)
    assert set(rows) == set(range(5)), [t["metadata"] for t in read_traces(project, "r")]
    for index, traces in rows.items():
        assert len(traces) == 1, (index, [t["metadata"] for t in traces])
        meta = traces[0]["metadata"]
        assert len(traces[0]["spans"]) == 3 and not meta.get("partial"), meta
        assert sorted(s["name"] for s in traces[0]["spans"]) == ["chat policy", "reward", "rollout"]
    worker.shutdown()
    server.shutdown()


def _sample_spans(service: str, index: int) -> list[Any]:
    """One sample's finished SDK spans, in the order they ended: ``chat policy``, ``reward``,
    then the ``rollout`` root."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("rollout")
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
        with tracer.start_as_current_span("chat policy"):
            pass
        with tracer.start_as_current_span("reward"):
            pass
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return spans


def test_a_request_still_coming_in_holds_completed_samples_back(
    project, start_receiver, monkeypatch
):
    """One client's batches sent concurrently (the OTel JS SDK's forceFlush does that): the
    batch with a sample's root is in while the one with its children is still being read. The
    sample waits for that request and comes out whole; its children joining it show the run's
    spans can trail their root, so from then on its samples wait for the grace period."""
    _no_timer(monkeypatch)
    receiver = start_receiver()
    *children, root = _sample_spans("one-process", 0)
    other = _sample_spans("one-process", 1)
    body = encode_spans(children).SerializeToString()
    head = (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1:{receiver.port}\r\n"
        f"Content-Type: application/x-protobuf\r\nContent-Length: {len(body)}\r\n\r\n"
    ).encode()
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces", timeout=30)
    with socket.create_connection(("127.0.0.1", receiver.port), timeout=WAIT) as slow:
        slow.sendall(head + body[: len(body) // 2])  # sample 0's children, half sent
        wait_until(lambda: receiver.router.in_flight.oldest() is not None, "the slow request taken")
        assert exporter.export([root, *other]) == SpanExportResult.SUCCESS
        # Both complete in the receiver: sample 1 whole, sample 0 as its root alone.
        wait_until(lambda: receiver.router.totals().waiting == 2, "both samples held")
        time.sleep(0.3)  # many drain polls: none may release them while a request comes in
        assert receiver.router.totals().waiting == 2
        assert not read_traces(project, "r")
        slow.sendall(body[len(body) // 2 :])
        assert slow.recv(4096).startswith(b"HTTP/1.1 200")
    exporter.shutdown()
    wait_until(lambda: receiver.router.default.spans.grace.trailing_seen, "the join")
    receiver.stop()  # the held samples go out whole
    rows = _rows(project)
    assert sorted(rows) == [0, 1]
    for index, traces in rows.items():
        assert len(traces) == 1, (index, [t["metadata"] for t in traces])
        names = sorted(s["name"] for s in traces[0]["spans"])
        assert names == ["chat policy", "reward", "rollout"], index
        assert not traces[0]["metadata"].get("partial")


def test_a_run_that_shows_log_events_holds_its_samples_for_them(
    project, start_receiver, monkeypatch
):
    """A client whose GenAI log events come after its spans: its first sample goes out as soon
    as its spans are in, so its event comes as a continuation (the quick phase's gap); from
    then on the run's samples wait for their events, and each later one is whole."""
    _no_timer(monkeypatch)
    receiver = start_receiver()
    resource = Resource.create({"service.name": "one-process"})
    spans = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces", timeout=30)
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))  # each span as it ends
    logger_provider = LoggerProvider(resource=resource)
    logs = OTLPLogExporter(endpoint=receiver.url + "/v1/logs", timeout=30)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    tracer, logger = tracer_provider.get_tracer("rollout"), logger_provider.get_logger("genai")
    for index in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            with tracer.start_as_current_span("chat m") as chat:
                pass
        if index == 0:
            wait_until(lambda: len(_rows(project)) == 1, "the first sample stored at once")
        logger.emit(  # after its sample's spans are in the receiver
            LogRecord(
                context=set_span_in_context(chat),
                event_name="gen_ai.user.message",
                body={"content": f"q{index}"},
            )
        )
    receiver.stop()  # the held samples go out whole
    tracer_provider.shutdown()
    logger_provider.shutdown()
    rows = _rows(project)
    assert sorted(rows) == [0, 1, 2]
    first, continuation = sorted(rows[0], key=lambda t: bool(t["metadata"].get("partial")))
    assert first["messages"] == [] and not first["metadata"].get("partial")
    assert continuation["metadata"]["partial_reason"] == "late"
    assert continuation["messages"] == [{"role": "user", "content": "q0"}]
    for index in (1, 2):
        (whole,) = rows[index]
        assert not whole["metadata"].get("partial"), whole["metadata"]
        assert whole["messages"] == [{"role": "user", "content": f"q{index}"}]
