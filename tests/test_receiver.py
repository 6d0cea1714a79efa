"""OTLP/HTTP receiver end to end: official OTLP exporters in, real Trackio storage read back."""

from __future__ import annotations

import gzip
import json
import os
import re
import signal
import subprocess
import sys
import textwrap
import threading
import tracemalloc
import zlib
from pathlib import Path

import pytest
import requests
from conftest import read_logs, read_traces, trackio_dir_path, wait_until
from conftest import trace_id as stored_trace_id
from google.rpc import status_pb2
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.http import Compression
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio.receiver import OTLPReceiver, is_loopback
from otel_trackio.receiver._body import decompress
from otel_trackio.receiver._decode import RequestError, parse_request
from otel_trackio.receiver._limits import ReceiverLimits
from otel_trackio.receiver._summary import Summary, rejected
from otel_trackio.receiver.cli import main as cli_main

REPO = Path(__file__).resolve().parent.parent
PROTOBUF = {"Content-Type": "application/x-protobuf"}

WORKER = textwrap.dedent(
    """
    import sys
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url, worker, samples = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
    provider = TracerProvider(resource=Resource.create({"service.name": f"worker-{worker}"}))
    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=16))
    tracer = provider.get_tracer("rollout-worker")
    for i in range(samples):
        index = worker * samples + i
        with tracer.start_as_current_span(
            "rollout", attributes={"step": i // 10, "sample_index": index}
        ):
            with tracer.start_as_current_span("chat toy") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.usage.input_tokens", index)
    provider.shutdown()
    """
)


def _status(response: requests.Response) -> status_pb2.Status:
    status = status_pb2.Status()
    if "json" in response.headers.get("content-type", ""):
        return status_pb2.Status(**json.loads(response.content))
    status.ParseFromString(response.content)
    return status


def _spans(count: int, open_root: bool = False):
    """Finished SDK spans of ``count`` samples (root + one child each) from a real tracer."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(count):
        root = tracer.start_span("rollout", attributes={"step": 1, "sample_index": i})
        with otel_trace.use_span(root, end_on_exit=False):
            with tracer.start_as_current_span(f"child-{i}"):
                pass
        if not open_root:
            root.end()
    return list(memory.get_finished_spans())


def test_four_processes_with_the_official_exporter_give_exactly_one_trace_per_sample(
    project, start_receiver
):
    receiver = start_receiver()
    env = {**os.environ, "OTEL_SDK_DISABLED": "false"}
    workers = [
        subprocess.Popen([sys.executable, "-c", WORKER, receiver.url, str(k), "50"], env=env)
        for k in range(4)
    ]
    assert [w.wait(timeout=120) for w in workers] == [0, 0, 0, 0]
    receiver.stop()

    traces = read_traces(project, "r")
    assert len(traces) == 200
    indexes = [t["metadata"]["sample_index"] for t in traces]
    assert sorted(indexes) == list(range(200))
    for trace in traces:
        meta = trace["metadata"]
        assert not meta.get("partial")
        assert trace["step"] == (meta["sample_index"] % 50) // 10
        assert sorted(s["name"] for s in trace["spans"]) == ["chat toy", "rollout"]
        assert meta["service_name"] == f"worker-{meta['sample_index'] // 50}"
    assert receiver.router.totals().spans == 400


def test_metrics_from_the_official_metric_exporter_land_as_scalars(project, start_receiver):
    receiver = start_receiver()
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=receiver.url + "/v1/metrics", compression=Compression.Gzip),
        export_interval_millis=3_600_000,
    )
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("trainer")
    rollouts = meter.create_counter("rollouts")
    reward = meter.create_histogram("reward")
    rollouts.add(3, {"step": 2, "split": "train"})
    reward.record(0.5, {"step": 2})
    reward.record(1.0, {"step": 2})
    assert provider.force_flush()
    provider.shutdown()
    receiver.stop()

    merged: dict[int, dict] = {}
    for row in read_logs(project, "r"):
        merged.setdefault(row["step"], {}).update(row)
    assert merged[2]["rollouts/split=train"] == 3
    assert merged[2]["reward/mean"] == pytest.approx(0.75)
    assert merged[2]["reward/max"] == pytest.approx(1.0)


def test_json_request_with_hex_ids_routes_by_resource_attributes(project, start_receiver):
    receiver = start_receiver()
    trace_id, root_id, child_id = "5b8efff798038103d269b633813fc60c", "eee19b7ec3c1b174", "1" * 16
    body = {
        "resourceSpans": [
            {
                "resource": {
                    "attributes": [
                        {"key": "trackio.run", "value": {"stringValue": "json-run"}},
                        {"key": "service.name", "value": {"stringValue": "js-agent"}},
                    ]
                },
                "scopeSpans": [
                    {
                        "scope": {"name": "manual"},
                        "spans": [
                            {
                                "traceId": trace_id,
                                "spanId": child_id,
                                "parentSpanId": root_id,
                                "name": "tool",
                                "kind": 1,
                                "startTimeUnixNano": "1700000000100000000",
                                "endTimeUnixNano": "1700000000200000000",
                                "status": {"code": 2, "message": "boom"},
                            },
                            {
                                "traceId": trace_id,
                                "spanId": root_id,
                                "name": "rollout",
                                "startTimeUnixNano": "1700000000000000000",
                                "endTimeUnixNano": "1700000000300000000",
                                "attributes": [
                                    {"key": "step", "value": {"intValue": "7"}},
                                    {"key": "sample_index", "value": {"intValue": 3}},
                                ],
                            },
                        ],
                    }
                ],
            }
        ]
    }
    response = requests.post(receiver.url + "/v1/traces", json=body, timeout=30)
    assert response.status_code == 200
    assert response.headers["content-type"].startswith("application/json")
    assert response.json() == {}

    bad_ids = json.loads(json.dumps(body))
    bad_ids["resourceSpans"][0]["scopeSpans"][0]["spans"][0]["spanId"] = "00" * 8
    del bad_ids["resourceSpans"][0]["scopeSpans"][0]["spans"][1]
    response = requests.post(receiver.url + "/v1/traces", json=bad_ids, timeout=30)
    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] in ("1", 1)
    assert "span_id" in response.json()["partialSuccess"]["errorMessage"]

    summary = {
        "resourceMetrics": [
            {
                "scopeMetrics": [
                    {
                        "metrics": [
                            {"name": "latency", "summary": {"dataPoints": [{"count": "1"}]}},
                            {
                                "name": "score",
                                "gauge": {"dataPoints": [{"asDouble": 0.25, "timeUnixNano": "1"}]},
                            },
                        ]
                    }
                ]
            }
        ]
    }
    response = requests.post(receiver.url + "/v1/metrics", json=summary, timeout=30)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedDataPoints"] in ("1", 1) and "Summary" in partial["errorMessage"]
    receiver.stop()

    assert read_traces(project, "r") == []
    (trace,) = read_traces(project, "json-run")
    assert trace["step"] == 7 and trace["metadata"]["sample_index"] == 3
    assert stored_trace_id(trace) == trace_id
    assert trace["metadata"]["service_name"] == "js-agent"
    spans = {s["name"]: s for s in trace["spans"]}
    assert spans["rollout"]["id"] == root_id
    assert spans["tool"]["parent_id"] == root_id
    assert spans["tool"]["status"] == "error"
    assert any(row.get("score") == 0.25 for row in read_logs(project, "r"))


def test_bad_requests_get_their_status_and_nothing_else_in_flight_is_lost(
    project, start_receiver, tracer_provider
):
    receiver = start_receiver(token="s3cret", max_body_bytes=256 * 1024)
    traces_url = receiver.url + "/v1/traces"
    good_exporter = OTLPSpanExporter(
        endpoint=traces_url,
        compression=Compression.Gzip,
        headers={"Authorization": "Bearer s3cret"},
    )
    provider = tracer_provider
    provider.add_span_processor(
        BatchSpanProcessor(good_exporter, max_export_batch_size=8, schedule_delay_millis=5)
    )
    tracer = provider.get_tracer("good")
    go = threading.Event()

    def produce() -> None:
        go.wait()
        for i in range(60):
            with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
                with tracer.start_as_current_span("chat"):
                    pass

    producer = threading.Thread(target=produce)
    producer.start()
    go.set()

    auth = {"Authorization": "Bearer s3cret"}
    valid = trace_service_pb2.ExportTraceServiceRequest().SerializeToString()
    bomb = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    bomb_body = b"".join(bomb.compress(bytes(1 << 20)) for _ in range(64)) + bomb.flush()
    assert len(bomb_body) < 256 * 1024
    cases = [
        ("malformed protobuf", traces_url, b"\x0a\xff\xff\xff", {**PROTOBUF, **auth}, 400),
        (
            "malformed JSON",
            traces_url,
            b'{"resourceSpans": [',
            {"Content-Type": "application/json", **auth},
            400,
        ),
        ("oversized", traces_url, b"\x00" * (300 * 1024), {**PROTOBUF, **auth}, 413),
        ("gzip bomb", traces_url, bomb_body, {**PROTOBUF, **auth, "Content-Encoding": "gzip"}, 413),
        (
            "broken gzip",
            traces_url,
            b"\x1f\x8b\x08garbage",
            {**PROTOBUF, **auth, "Content-Encoding": "gzip"},
            400,
        ),
        ("wrong type", traces_url, valid, {"Content-Type": "text/plain", **auth}, 415),
        ("unknown coding", traces_url, valid, {**PROTOBUF, **auth, "Content-Encoding": "br"}, 415),
        ("no token", traces_url, valid, PROTOBUF, 401),
        ("wrong token", traces_url, valid, {**PROTOBUF, "Authorization": "Bearer nope"}, 401),
        ("metrics no token", receiver.url + "/v1/metrics", valid, PROTOBUF, 401),
    ]
    for label, url, body, headers, expected in cases:
        response = requests.post(url, data=body, headers=headers, timeout=30)
        assert response.status_code == expected, (label, response.content)
        assert _status(response).message, label  # a readable reason, in the request's encoding
    ok = requests.post(traces_url, data=valid, headers={**PROTOBUF, **auth}, timeout=30)
    assert ok.status_code == 200 and ok.content == b""

    producer.join()
    assert provider.force_flush()
    provider.shutdown()
    receiver.stop()

    traces = read_traces(project, "r")
    assert sorted(t["metadata"]["sample_index"] for t in traces) == list(range(60))
    assert not any(t["metadata"].get("partial") for t in traces)
    totals = receiver.router.totals()
    assert totals.rejected == len(cases)
    assert dict(totals.rejected_why) == {  # the summary names why, by the status answered
        "400 malformed": 3,
        "413 too large": 2,
        "415 unsupported type or encoding": 2,
        "401 no or wrong bearer token": 3,
    }
    assert rejected(totals) == (
        "10 rejected (400 malformed: 3, 401 no or wrong bearer token: 3, 413 too large: 2, "
        "415 unsupported type or encoding: 2)"
    )


@pytest.mark.parametrize("chunked", [False, True], ids=["content-length", "chunked"])
def test_a_body_over_the_default_limit_reads_413_not_a_reset(project, chunked):
    """21 MiB against the default 20 MiB limit, sent whole before reading (what HTTP clients do),
    declared or chunked: the client reads the 413 and its reason, each of five times."""
    receiver = OTLPReceiver(project, "big", port=0, summary_interval=0).start()
    body = b"\x00" * (21 * 1024 * 1024)
    try:
        for _ in range(5):
            data = iter([body[i : i + (1 << 20)] for i in range(0, len(body), 1 << 20)])
            response = requests.post(
                receiver.url + "/v1/traces",
                data=data if chunked else body,
                headers=PROTOBUF,
                timeout=60,
            )
            assert response.status_code == 413, response.content
            assert "limit" in _status(response).message
    finally:
        receiver.stop()
    assert dict(receiver.router.totals().rejected_why) == {"413 too large": 5}


def test_decompression_is_capped_while_streaming():
    mib = ReceiverLimits(max_body_bytes=1 << 20)
    bomb = gzip.compress(bytes(64 << 20), compresslevel=9)
    tracemalloc.start()
    try:
        with pytest.raises(RequestError) as caught:
            decompress(bomb, "gzip", mib)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert caught.value.status == 413
    assert peak < 8 << 20  # never near the 64 MiB the bomb expands to

    payload = b"otlp" * 1000
    assert decompress(zlib.compress(payload), "deflate", mib) == payload
    raw = zlib.compressobj(6, zlib.DEFLATED, -zlib.MAX_WBITS)
    assert decompress(raw.compress(payload) + raw.flush(), "deflate", mib) == payload
    assert decompress(gzip.compress(payload) + gzip.compress(payload), "gzip", mib) == (payload * 2)
    with pytest.raises(RequestError) as caught:
        decompress(gzip.compress(payload)[:-12], "gzip", mib)
    assert caught.value.status == 400


def test_json_ids_must_be_hex():
    body = json.dumps(
        {"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": "not-hex!", "spanId": ""}]}]}]}
    ).encode()
    with pytest.raises(RequestError, match="traceId"):
        parse_request(body, "json", trace_service_pb2.ExportTraceServiceRequest)
    request = parse_request(
        b'{"resourceMetrics": [], "unknownField": 1}',
        "json",
        metrics_service_pb2.ExportMetricsServiceRequest,
    )
    assert list(request.resource_metrics) == []


def test_refuses_a_non_loopback_address_without_a_token(project, capsys):
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0")
    with pytest.raises(ValueError, match="token"):
        OTLPReceiver(project, host="0.0.0.0", port=0)
    serve = ["serve", "--project", project, "--host", "0.0.0.0", "--port", "0", "--grpc-port", "0"]
    assert cli_main(serve) == 2
    assert "without a token" in capsys.readouterr().err
    assert read_traces(project) == []


def test_sigterm_logs_open_samples_as_partial_and_finishes_the_run(project):
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "otel_trackio",
            "serve",
            "--project",
            project,
            "--name",
            "cli",
            "--port",
            "0",
            "--grpc-port",
            "0",
            "--summary-seconds",
            "0.2",
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        url = None
        output: list[str] = []
        for line in server.stdout:
            output.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+) .*'cli'", line)
            if found:
                url = found.group(1)
                break
        assert url, "".join(output)

        spans = _spans(3, open_root=True)  # children only: every root is still running
        assert len(spans) == 3
        exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
        assert exporter.export(spans).name == "SUCCESS"
        exporter.shutdown()

        server.send_signal(signal.SIGTERM)
        rest, _ = server.communicate(timeout=60)
        output.append(rest)
    finally:
        if server.poll() is None:
            server.kill()
    text = "".join(output)
    assert server.returncode == 0, text
    assert "3 spans" in text and "3 samples logged (3 partial)" in text, text

    traces = read_traces(project, "cli")
    assert len(traces) == 3
    for trace in traces:
        assert trace["metadata"]["partial"] is True
        assert trace["metadata"]["partial_reason"] == "flush"
    runs = {r["name"] if isinstance(r, dict) else r for r in _runs(project)}
    assert "cli" in runs


def _runs(project: str) -> list:
    from trackio.sqlite_storage import SQLiteStorage

    return SQLiteStorage.get_runs(project)


def test_resource_attributes_route_to_their_own_project(project, start_receiver):
    receiver = start_receiver()
    other = project + "-other"
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
    provider = TracerProvider(resource=Resource.create({"trackio.project": other}))
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span(
        "rollout", attributes={"step": 1, "sample_index": 0}
    ):
        pass
    provider.shutdown()
    receiver.stop()
    assert read_traces(project) == []
    (trace,) = read_traces(other, "r")
    assert trace["metadata"]["sample_index"] == 0


def test_summary_line_only_while_data_flows(project, start_receiver):
    receiver = start_receiver(sample_grace_seconds=0)
    now = [100.0]
    summary = Summary(receiver.router, clock=lambda: now[0])
    now[0] += 2
    assert summary.line() is None
    spans = _spans(2)
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
    assert exporter.export(spans).name == "SUCCESS"
    wait_until(lambda: receiver.router.totals().samples == 2)  # answered before it drained
    now[0] += 2
    line = summary.line()
    assert line is not None
    assert "2.0 spans/s" in line and "2 samples logged" in line and "0 rejected" in line
    now[0] += 2
    assert summary.line() is None


def test_each_run_keeps_its_own_latest_step_for_step_less_metrics(project, start_receiver):
    """Run A's spans are at step 9; run B's metrics carry no step: they go to B's own clock
    (step 0), never to the step another client's run reached."""
    receiver = start_receiver(name="main")
    spans = TracerProvider(resource=Resource.create({"trackio.run": "a"}))
    spans.add_span_processor(
        SimpleSpanProcessor(OTLPSpanExporter(endpoint=f"{receiver.url}/v1/traces"))
    )
    with spans.get_tracer("t").start_as_current_span(
        "rollout", attributes={"step": 9, "sample_index": 0}
    ):
        pass
    spans.shutdown()
    wait_until(lambda: "a" in SQLiteStorage.get_runs(project) and read_traces(project, "a"))
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{receiver.url}/v1/metrics"), export_interval_millis=600_000
    )
    meters = MeterProvider(metric_readers=[reader], resource=Resource.create({"trackio.run": "b"}))
    meters.get_meter("m").create_counter("episodes").add(1)  # no step
    meters.shutdown()
    receiver.stop()
    assert [t["step"] for t in read_traces(project, "a")] == [9]
    steps = [row["step"] for row in read_logs(project, "b") if "episodes" in row]
    assert steps == [0]


def test_the_command_says_its_version(capsys):
    import otel_trackio

    with pytest.raises(SystemExit) as exited:
        cli_main(["--version"])
    assert exited.value.code == 0
    assert capsys.readouterr().out.strip() == f"otel-trackio {otel_trackio.__version__}"


def test_a_clean_stop_keeps_its_runs_for_the_resend_horizon_only(tmp_path):
    """``earlier-runs.json``: the runs a clean stop finished are named to the next starts for
    :data:`RESEND_HORIZON_SECONDS` (a client's resend comes within a minute or two), the most
    recent first, never the current start's own run; past the horizon the file goes."""
    from otel_trackio.receiver._run_names import RESEND_HORIZON_SECONDS, RunNames

    now = [1000.0]
    first = RunNames(tmp_path, resume=False, clock=lambda: now[0])
    first.remember("p", "run-1")
    first.keep_as_earlier()
    now[0] += 60
    second = RunNames(tmp_path, resume=False, clock=lambda: now[0])
    assert second.earlier("p") == ("run-1",)
    second.remember("p", "run-2")
    assert second.earlier("p") == ("run-1",)
    second.keep_as_earlier()
    now[0] += 60
    third = RunNames(tmp_path, resume=False, clock=lambda: now[0])
    assert third.earlier("p") == ("run-2", "run-1")
    assert third.earlier("q") == ()
    now[0] += RESEND_HORIZON_SECONDS - 90  # run-1 stopped past the horizon, run-2 not yet
    assert third.earlier("p") == ("run-2",)
    now[0] += 60
    assert third.earlier("p") == ()
    third.keep_as_earlier()  # nothing left to keep
    assert not (tmp_path / "earlier-runs.json").exists()


def _store_processes() -> list[int]:
    """The store processes (``_trackio/store.py``) this test process started."""
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes()
        except OSError:
            continue
        parent = int(stat.rsplit(") ", 1)[1].split()[1])
        state = stat.rsplit(") ", 1)[1].split()[0]
        if parent == os.getpid() and state != "Z" and b"_trackio/store.py" in cmdline:
            found.append(int(entry))
    return found


def test_the_store_process_starts_with_the_receiver_not_with_its_first_write(
    project, start_receiver
):
    """Trackio's write runs in a store process beside the drain; it starts (importing Trackio)
    with the receiver, so the first requests are not written on the drain thread meanwhile."""
    before = set(_store_processes())
    receiver = start_receiver(sample_grace_seconds=0)
    wait_until(lambda: set(_store_processes()) - before, "the receiver's store process", 30)
    [store] = set(_store_processes()) - before
    exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces")
    assert exporter.export(_spans(2)).name == "SUCCESS"
    wait_until(lambda: receiver.router.totals().samples == 2)
    receiver.stop()
    wait_until(lambda: store not in _store_processes(), "the store to end with the receiver", 30)
    assert len(read_traces(project, "r")) == 2


def test_the_router_spools_each_route_and_drains_it_into_its_own_run(project, tmp_path):
    """The Router by itself, without a server: a request decoded into two routes (a resource
    naming ``trackio.run`` and one naming nothing) is spooled as one unit, drained by its own
    thread into one run each, counted, and the spool is gone after a clean shutdown."""
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

    from otel_trackio._codec.otlp import decode_traces
    from otel_trackio.receiver._routing import Router

    spool = tmp_path / "spool"
    router = Router(project, "r", spool=spool, sample_grace_seconds=0)
    try:
        own = _spans_for(Resource.create({"service.name": "a"}), range(3))
        named = _spans_for(Resource.create({"trackio.run": "other"}), range(2))
        outcome = router.export_spans(decode_traces(encode_spans(own + named)))
        assert outcome.rejected == 0 and outcome.message == ""
        assert router.wait_drained(30)
        wait_until(lambda: router.totals().samples == 5, "both routes' samples")
    finally:
        assert router.shutdown()
    assert sorted(t["metadata"]["sample_index"] for t in read_traces(project, "r")) == [0, 1, 2]
    assert sorted(t["metadata"]["sample_index"] for t in read_traces(project, "other")) == [0, 1]
    assert {(s.project, s.run, s.stats.samples_logged) for s in router.run_summaries()} == {
        (project, "r", 3),
        (project, "other", 2),
    }
    assert not spool.exists()


def test_a_stop_that_saw_the_spool_drained_waits_for_the_writes_of_samples_logged_after(
    project, tmp_path
):
    """Drained is not for good: a sample the spool handed over waits in its pipeline (its
    grace, the next settle), so a stop can see everything drained, and the next moment the
    sample is logged and its write not yet stored. The stop must wait for that write (within
    ``drain_seconds``), not take it for a backlog and leave the sample to the spool. Here the
    write is slow because another process holds Trackio's storage lock for a second; the
    moment the stop first looks is played by one reading of "drained" (the window is too
    short to hit by timing)."""
    import fcntl

    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from trackio.utils import canonical_project_name

    from otel_trackio._codec.otlp import decode_traces
    from otel_trackio.receiver._routing import Router

    router = Router(project, "r", spool=tmp_path / "spool", sample_grace_seconds=0)
    assert router._store.ready(60)  # the write goes to the store process, behind
    real_drained = router.drained
    readings: list[bool] = []

    def drained() -> bool:
        readings.append(True)
        return True if len(readings) == 1 else real_drained()  # first: before the sample logs

    lock_path = trackio_dir_path() / f"{canonical_project_name(project)}.lock"
    with open(lock_path, "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)  # the write waits for it
        router.export_spans(decode_traces(encode_spans(_spans_for(Resource.create(), range(3)))))
        wait_until(lambda: router.backlog()[0] == 0 and not real_drained(), "the write waiting")
        threading.Timer(1.0, lambda: fcntl.flock(lock.fileno(), fcntl.LOCK_UN)).start()
        router.drained = drained  # type: ignore[method-assign]
        assert router.shutdown(drain_seconds=30)
    assert len(readings) > 1
    assert sorted(t["metadata"]["sample_index"] for t in read_traces(project, "r")) == [0, 1, 2]
    assert router.totals().samples == 3


def _spans_for(resource: Resource, indexes: range) -> list:
    """Finished SDK spans of whole samples at step 0 under ``resource``."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for index in indexes:
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            with tracer.start_as_current_span("generate"):
                pass
    provider.shutdown()
    return list(memory.get_finished_spans())
