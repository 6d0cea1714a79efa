"""The receiver's grace rule, both sides, read back from Trackio's storage: a single-process
client's samples go out without waiting for the grace period; once spans of one sample come
from two processes, samples are held for it and stay whole."""

from __future__ import annotations

import time

from conftest import read_traces
from opentelemetry import propagate
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

from otel_trackio._engine import grace


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


def test_a_single_process_clients_samples_do_not_wait_for_the_grace_period(
    project, start_receiver, monkeypatch
):
    # A grace period no test could wait for: the samples must go out without it.
    monkeypatch.setattr(grace, "RECEIVER_GRACE_SECONDS", 600.0)
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
    deadline = time.monotonic() + 60
    while len(_rows(project)) < 6:
        assert time.monotonic() < deadline, "the samples waited for the grace period"
        time.sleep(0.05)
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
    # No quick phase to hide behind: without the switch to the grace period, every trailing
    # span below would come out on its own.
    monkeypatch.setattr(grace, "QUICK_GRACE_SECONDS", 0.0)
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
