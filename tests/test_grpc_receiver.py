"""OTLP/gRPC into the receiver, with the clients people already run: the official Python gRPC
exporters (traces, metrics, logs; gzip), ``opentelemetry-instrument``'s default (gRPC to
4317), a sample half over gRPC and half over HTTP, and the refusals the exporters act on
(``UNAUTHENTICATED``, ``RESOURCE_EXHAUSTED``, ``INVALID_ARGUMENT``, ``UNAVAILABLE`` then a retry
stored once). Everything is counted in real Trackio storage by (step, sample_index)."""

from __future__ import annotations

import json
import logging
import os
import shutil
import socket
import subprocess
import sys
import threading
from pathlib import Path

import grpc
import pytest
from conftest import JS, SERVE, npm_ci, read_logs, read_traces, wait_until
from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
    OTLPSpanExporter as HTTPSpanExporter,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_trackio.receiver._grpc import _RETRY_INFO

REPO = Path(__file__).resolve().parent.parent
TRACE_EXPORT = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


def _keys(traces: list[dict]) -> list[tuple[int, int]]:
    return sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)


def _rollouts(provider: TracerProvider, steps: int, samples: int) -> None:
    tracer = provider.get_tracer("rollout")
    for step in range(steps):
        for i in range(samples):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": i, "reward": i % 2}
            ):
                with tracer.start_as_current_span("chat policy") as chat:
                    chat.set_attribute("gen_ai.operation.name", "chat")
                    chat.set_attribute("gen_ai.usage.input_tokens", 10)
                    chat.set_attribute(
                        "gen_ai.input.messages",
                        json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}]
                        ),
                    )


def _grpc_provider(endpoint: str, **options) -> TracerProvider:
    provider = TracerProvider(resource=Resource.create({"service.name": "grpc-worker"}))
    exporter = OTLPSpanExporter(endpoint=endpoint, insecure=True, **options)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64))
    return provider


def _raw_call(endpoint: str, payload: bytes, metadata=()) -> grpc.RpcError | bytes:
    """One Export call with bytes as they are (no client-side checks)."""
    with grpc.insecure_channel(endpoint.removeprefix("http://")) as channel:
        call = channel.unary_unary(TRACE_EXPORT)
        try:
            return call(payload, metadata=metadata, timeout=30)
        except grpc.RpcError as exc:
            return exc


def _request(step: int, samples: int) -> bytes:
    """A serialised ExportTraceServiceRequest of ``samples`` one-span samples at ``step``."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    return encode_spans(_spans_of(step, samples)).SerializeToString()


def test_the_official_grpc_exporters_store_whole_samples_metrics_and_log_events(
    project, start_receiver
):
    receiver = start_receiver(name="grpc")
    endpoint = receiver.grpc_endpoint
    provider = _grpc_provider(endpoint, compression=grpc.Compression.Gzip)
    _rollouts(provider, steps=3, samples=8)
    provider.shutdown()

    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=endpoint, insecure=True), export_interval_millis=60_000
    )
    meters = MeterProvider(metric_readers=[reader])
    reward = meters.get_meter("rl").create_histogram("reward")
    for step in range(3):
        reward.record(0.5 + step, {"step": step})
        reader.collect()
    meters.shutdown()

    from opentelemetry._logs import LogRecord, SeverityNumber
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import SimpleLogRecordProcessor

    logs = LoggerProvider()
    logs.add_log_record_processor(
        SimpleLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True))
    )
    logs.get_logger("app").emit(
        LogRecord(body="plain log line", severity_number=SeverityNumber.INFO)
    )
    logs.shutdown()

    wait_until(lambda: receiver.router.totals().log_records >= 1, what="the log record")
    receiver.stop()
    traces = read_traces(project, "grpc")
    assert _keys(traces) == [(s, i) for s in range(3) for i in range(8)]  # once each
    assert all(t["messages"][0]["content"] == f"q{t['metadata']['sample_index']}" for t in traces)
    means = sorted(
        (row["step"], row["reward/mean"])
        for row in read_logs(project, "grpc")
        if "reward/mean" in row
    )
    assert means == [(0, 0.5), (1, 1.5), (2, 2.5)]


@pytest.mark.parametrize(
    "first, grace",
    [("children", None), ("roots", 3.0)],
    ids=["children-first-default-grace", "roots-first-explicit-grace"],
)
def test_a_sample_half_over_grpc_half_over_http_is_one_whole_trace(
    project, start_receiver, first, grace
):
    """Each sample's child over gRPC, its root over HTTP. Children first is the order one SDK
    sends in, and the default grace joins them. Roots first means every child trails its root,
    which the receiver's quick phase cannot see coming (docs/multi-process.md): an explicit
    ``sample_grace_seconds`` holds each root for its child."""
    receiver = start_receiver(name="mixed", sample_grace_seconds=grace)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    _rollouts(provider, steps=2, samples=6)
    spans = memory.get_finished_spans()
    children = [s for s in spans if s.parent is not None]
    roots = [s for s in spans if s.parent is None]
    assert len(children) == len(roots) == 12
    over_grpc = OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
    over_http = HTTPSpanExporter(endpoint=f"{receiver.url}/v1/traces")
    if first == "children":
        assert over_grpc.export(children).name == "SUCCESS"
        assert over_http.export(roots).name == "SUCCESS"
    else:
        assert over_http.export(roots).name == "SUCCESS"
        assert over_grpc.export(children).name == "SUCCESS"
    receiver.stop()
    traces = read_traces(project, "mixed")
    assert _keys(traces) == [(s, i) for s in range(2) for i in range(6)]
    assert all(len(t["spans"]) == 2 and not t["metadata"].get("partial") for t in traces)


def test_refusals_have_the_status_the_exporters_act_on(project, start_receiver):
    receiver = start_receiver(name="refusals", token="s3cret", max_body_bytes=64 * 1024)
    endpoint = receiver.grpc_endpoint
    good = _request(0, 3)
    auth = (("authorization", "Bearer s3cret"),)

    wrong = _raw_call(endpoint, good, (("authorization", "Bearer nope"),))
    assert wrong.code() == grpc.StatusCode.UNAUTHENTICATED
    missing = _raw_call(endpoint, good)
    assert missing.code() == grpc.StatusCode.UNAUTHENTICATED
    garbage = _raw_call(endpoint, b"\xff\xff\xff\x0f not protobuf", auth)
    assert garbage.code() == grpc.StatusCode.INVALID_ARGUMENT
    huge = _raw_call(endpoint, _request(1, 2000), auth)  # over 64 KiB
    assert huge.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
    answer = _raw_call(endpoint, good, auth)
    assert isinstance(answer, bytes)
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(answer)
    assert not response.HasField("partial_success")
    receiver.stop()
    assert _keys(read_traces(project, "refusals")) == [(0, 0), (0, 1), (0, 2)]
    why = dict(receiver.router.totals().rejected_why)  # grpcio refuses the huge one itself
    assert why["401 no or wrong bearer token"] == 2 and why["400 malformed"] == 1, why


def test_a_full_spool_answers_unavailable_with_retry_info_then_the_retry_is_stored_once(
    project, start_receiver
):
    receiver = start_receiver(name="busy", spool_max_mb=0.05, sample_grace_seconds=0)
    pipeline = receiver.router.default.spans
    pipeline._lock.acquire()  # Trackio is slow: nothing drains for now
    try:
        refused = None
        for step in range(40):  # fill the spool past its bound
            answer = _raw_call(receiver.grpc_endpoint, _request(step, 20))
            if isinstance(answer, grpc.RpcError):
                refused = answer
                break
        assert refused is not None, "the spool never filled"
        assert refused.code() == grpc.StatusCode.UNAVAILABLE
        assert _RETRY_INFO in dict(refused.trailing_metadata())
        last = step
        # The official exporter, sending now, is refused too and retries after the delay.
        result: list[str] = []
        sender = threading.Thread(
            target=lambda: result.append(
                OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True, timeout=60)
                .export(_spans_of(last + 100, 200))
                .name
            )
        )
        sender.start()
        wait_until(lambda: receiver.router.totals().busy >= 2, what="the exporter refused")
    finally:
        pipeline._lock.release()
    sender.join(90)
    assert result == ["SUCCESS"]
    receiver.stop()
    keys = _keys(read_traces(project, "busy"))
    expected = [(s, i) for s in range(last) for i in range(20)] + [
        (last + 100, i) for i in range(200)
    ]
    assert keys == expected  # every acknowledged request once, the refused one not at all
    assert receiver.router.decoded.spans == 0  # nothing of the refused ones kept in memory


def _spans_of(step: int, samples: int):
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(samples):
        with tracer.start_as_current_span("rollout", attributes={"step": step, "sample_index": i}):
            pass
    return memory.get_finished_spans()


def test_many_concurrent_grpc_clients_store_every_sample_once(project, start_receiver):
    receiver = start_receiver(name="many")

    def worker(k: int) -> None:
        exporter = OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
        for step in range(5):
            memory = InMemorySpanExporter()
            provider = TracerProvider()
            provider.add_span_processor(SimpleSpanProcessor(memory))
            tracer = provider.get_tracer("t")
            for i in range(4):
                with tracer.start_as_current_span(
                    "rollout", attributes={"step": step, "sample_index": k * 4 + i}
                ):
                    pass
            assert exporter.export(memory.get_finished_spans()).name == "SUCCESS"
        exporter.shutdown()

    threads = [threading.Thread(target=worker, args=(k,)) for k in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    receiver.stop()
    assert _keys(read_traces(project, "many")) == [(s, i) for s in range(5) for i in range(64)]
    # Each request's records went from the gRPC thread to the drain as decoded, not decoded
    # again from their spool entry.
    assert receiver.router.decoded.taken == 16 * 5


def test_grpc_at_the_http_port_gets_a_plain_warning_and_is_counted(project, start_receiver, caplog):
    receiver = start_receiver(name="wrong-port")
    with caplog.at_level(logging.WARNING, logger="otel_trackio.receiver"):
        result = OTLPSpanExporter(endpoint=receiver.url, insecure=True, timeout=5).export(
            _spans_of(0, 1)
        )
    assert result.name == "FAILURE"
    said = [r.getMessage() for r in caplog.records if "OTLP/gRPC (HTTP/2)" in r.getMessage()]
    assert said and receiver.grpc_endpoint in said[0]
    assert "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf" in said[0]
    assert receiver.router.totals().rejected >= 1
    receiver.stop()
    assert read_traces(project, "wrong-port") == []


def _free(port: int) -> bool:
    with socket.socket() as probe:
        try:
            probe.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def test_zero_code_with_the_defaults_reaches_serve_over_grpc(project, trackio_dir, tmp_path):
    """``opentelemetry-instrument`` with only ``OTEL_*_EXPORTER=otlp``: the Python distro sends
    gRPC to localhost:4317, where ``otel-trackio serve`` listens by default."""
    defaults = _free(4317) and _free(4318)
    ports = [] if defaults else ["--port", "0", "--grpc-port", "0"]
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_trackio",
            "serve",
            "--project",
            project,
            "--name",
            "zc",
            *ports,
            "--summary-seconds",
            "0",
        ],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        stdout=subprocess.PIPE,
        text=True,
        cwd=REPO,
    )
    try:
        grpc_url = None
        for line in server.stdout:
            if "listening on" in line:
                grpc_url = line.split(" and ")[1].split()[0]
                break
        assert grpc_url is not None
        app = tmp_path / "app.py"
        app.write_text(
            "from opentelemetry import trace\n"
            "tracer = trace.get_tracer('app')\n"
            "for i in range(6):\n"
            "    with tracer.start_as_current_span('rollout', "
            "attributes={'step': 1, 'sample_index': i}):\n"
            "        with tracer.start_as_current_span('tool'):\n"
            "            pass\n"
        )
        env = {key: value for key, value in os.environ.items() if not key.startswith("OTEL_")}
        env.update(OTEL_TRACES_EXPORTER="otlp", OTEL_METRICS_EXPORTER="otlp")
        env.update(OTEL_LOGS_EXPORTER="otlp")
        if not defaults:
            env["OTEL_EXPORTER_OTLP_ENDPOINT"] = grpc_url
        instrument = Path(sys.executable).parent / "opentelemetry-instrument"
        done = subprocess.run(
            [str(instrument), sys.executable, str(app)],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, done.stderr[-2000:]
    finally:
        server.terminate()
        server.wait(120)
    traces = read_traces(project, "zc")
    assert _keys(traces) == [(1, i) for i in range(6)]
    assert all(len(t["spans"]) == 2 for t in traces)


def test_a_receiver_with_grpc_only_serves_it(project):
    from otel_trackio.receiver import OTLPReceiver

    receiver = OTLPReceiver(project, "grpc-only", port=None, grpc_port=0, summary_interval=0)
    receiver.start()
    try:
        assert receiver.url == ""
        exporter = OTLPSpanExporter(endpoint=receiver.grpc_endpoint, insecure=True)
        assert exporter.export(_spans_of(0, 3)).name == "SUCCESS"
    finally:
        receiver.stop()
    assert _keys(read_traces(project, "grpc-only")) == [(0, 0), (0, 1), (0, 2)]


def test_the_otel_js_sdks_grpc_exporter_stores_whole_samples(project, start_receiver):
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not installed")
    npm_ci()
    receiver = start_receiver(name="js", token="js-token")
    result = subprocess.run(
        [node, str(JS / "grpc_rollouts.mjs"), receiver.grpc_endpoint, "2", "10", "js-token"],
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0 and "exported" in result.stdout, result.stderr[-3000:]
    receiver.stop()
    traces = read_traces(project, "js")
    assert _keys(traces) == [(s, i) for s in range(2) for i in range(10)]
    assert all(
        t["messages"][0]["content"] == f"js q{t['metadata']['sample_index']}" for t in traces
    )
    assert all(len(t["spans"]) == 2 for t in traces)


def test_spans_with_bad_ids_come_back_as_partial_success_over_grpc(project, start_receiver):
    receiver = start_receiver(name="partial")
    request = trace_service_pb2.ExportTraceServiceRequest.FromString(_request(0, 3))
    request.resource_spans[0].scope_spans[0].spans[0].trace_id = b"\0" * 16  # invalid
    answer = _raw_call(receiver.grpc_endpoint, request.SerializeToString())
    assert isinstance(answer, bytes)
    response = trace_service_pb2.ExportTraceServiceResponse.FromString(answer)
    assert response.partial_success.rejected_spans == 1
    assert "trace_id" in response.partial_success.error_message
    receiver.stop()
    assert len(read_traces(project, "partial")) == 2


def test_a_receiver_that_received_nothing_says_where_to_point_the_exporters(project):
    from otel_trackio.receiver import OTLPReceiver

    said: list[str] = []
    receiver = OTLPReceiver(
        project, "idle", port=0, grpc_port=0, summary_interval=0, report=said.append
    ).start()
    receiver.stop()
    (line,) = [line for line in said if "nothing arrived" in line]
    assert receiver.url in line and f"{receiver.grpc_endpoint} (gRPC)" in line


@pytest.mark.parametrize("busy", ["--grpc-port", "--port"])
def test_a_busy_port_is_said_before_any_run_is_opened(project, trackio_dir, busy):
    """``otel-trackio serve`` with a port another program holds: exit 2, one line naming the port,
    the protocol and the flags that help; no run made, no gRPC C-core line."""
    import socket
    import subprocess

    with socket.socket() as holder:
        holder.bind(("127.0.0.1", 0))
        holder.listen()
        taken = str(holder.getsockname()[1])
        other = "--port" if busy == "--grpc-port" else "--grpc-port"
        done = subprocess.run(
            [
                *SERVE[:4],  # python -m otel_trackio serve
                "--project",
                project,
                "--name",
                "busy-port",
                busy,
                taken,
                other,
                "0",
            ],
            env={**os.environ, "TRACKIO_DIR": trackio_dir},
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert done.returncode == 2, done.stderr
    door = "OTLP/gRPC" if busy == "--grpc-port" else "OTLP/HTTP"
    assert done.stderr.splitlines() == [
        f"otel-trackio serve: cannot listen on 127.0.0.1:{taken} for {door}: Address already in "
        f"use (another program has it: {busy} 0 picks a free port, {busy} off turns {door} off)"
    ], done.stderr
    assert not (Path(trackio_dir) / f"{project}.db").exists()  # no run was opened
