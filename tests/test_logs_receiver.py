"""``POST /v1/logs``: GenAI events sent as OTLP log records join their samples in the receiver.

Worker processes use the official OTLP/HTTP span and log exporters, their log records reaching
the receiver before or after the spans they belong to; hand-written OTLP JSON covers what the
workers cannot do on purpose (events after the grace period, spans that never come, unsampled
events); and the official ``opentelemetry-proto`` examples of all three signals are accepted.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import requests
from conftest import read_logs, read_traces, root_span_id, trace_id, wait_until
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2

from otel_trackio._core.assembly import PLACEHOLDER_ATTRIBUTE, PLACEHOLDER_NAME
from otel_trackio.receiver import OTLPReceiver

EXAMPLES = Path(__file__).resolve().parent / "data" / "otlp-examples"
JSON = {"Content-Type": "application/json"}

WORKER = textwrap.dedent(
    """
    import sys
    from opentelemetry._logs import LogRecord
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http._log_exporter import OTLPLogExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import BatchLogRecordProcessor, SimpleLogRecordProcessor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor

    url, worker, samples, order = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    resource = Resource.create({"service.name": f"worker-{worker}"})
    tracer_provider = TracerProvider(resource=resource)
    logger_provider = LoggerProvider(resource=resource)
    spans = OTLPSpanExporter(endpoint=url + "/v1/traces", compression=Compression.Gzip)
    logs = OTLPLogExporter(endpoint=url + "/v1/logs", compression=Compression.Gzip)
    later = {"schedule_delay_millis": 600_000}
    if order == "logs-first":  # each log record is posted when emitted, the spans at the end
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
        tracer_provider.add_span_processor(BatchSpanProcessor(spans, **later))
    else:  # each span is posted when it ends (the sample's root too), the log records at the end
        tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
        logger_provider.add_log_record_processor(BatchLogRecordProcessor(logs, **later))
    tracer = tracer_provider.get_tracer("rollout-worker")
    logger = logger_provider.get_logger("genai")
    chat = {"gen_ai.operation.name": "chat"}
    for i in range(samples):
        index = worker * samples + i
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            with tracer.start_as_current_span("chat m", attributes=chat):
                user = {"content": f"q{index}"}
                logger.emit(LogRecord(event_name="gen_ai.user.message", body=user))
                reply = {"role": "assistant", "content": f"a{index}"}
                choice = {"index": 0, "finish_reason": "stop", "message": reply}
                logger.emit(LogRecord(event_name="gen_ai.choice", body=choice))
                logger.emit(LogRecord(body="an ordinary log line"))
    first, second = (
        (logger_provider, tracer_provider)
        if order == "logs-first"
        else (tracer_provider, logger_provider)
    )
    first.shutdown()
    second.shutdown()
    """
)


def _conversation(index: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"q{index}"}, {"role": "assistant", "content": f"a{index}"}]


@pytest.mark.parametrize("orders", [("logs-first", "logs-after")])
def test_workers_log_events_join_their_samples_whatever_arrives_first(
    orders, project, start_receiver
):
    receiver = start_receiver()
    samples = 5
    workers = []
    for k, order in enumerate(orders):
        workers.append(
            subprocess.Popen(
                [sys.executable, "-c", WORKER, receiver.url, str(k), str(samples), order],
                env={**os.environ, "OTEL_SDK_DISABLED": "false"},
            )
        )
        # The next worker once the run has shown log events: from then on its samples wait
        # for them. (Before that a sample goes out as soon as the receiver has its spans;
        # test_receiver_grace.py pins what a log event arriving after it does.)
        wait_until(lambda: receiver.router.default.spans.log_events, "a log event received", 120)
    assert [w.wait(timeout=120) for w in workers] == [0] * len(orders)
    receiver.stop()

    traces = read_traces(project, "r")
    count = samples * len(orders)
    assert sorted(t["metadata"]["sample_index"] for t in traces) == list(range(count))
    for trace in traces:
        meta = trace["metadata"]
        assert not meta.get("partial"), meta
        assert trace["messages"] == _conversation(meta["sample_index"])
        assert sorted(s["name"] for s in trace["spans"]) == ["chat m", "rollout"]
    totals = receiver.router.totals()
    assert (totals.log_events, totals.log_records) == (2 * count, 3 * count)


# -- OTLP JSON written by hand ------------------------------------------------------------------


def _value(value: Any) -> dict[str, Any]:
    if isinstance(value, str):
        return {"stringValue": value}
    if isinstance(value, float):
        return {"doubleValue": value}
    if isinstance(value, int):
        return {"intValue": str(value)}
    if isinstance(value, dict):
        pairs = [{"key": k, "value": _value(v)} for k, v in value.items()]
        return {"kvlistValue": {"values": pairs}}
    if isinstance(value, list):
        return {"arrayValue": {"values": [_value(v) for v in value]}}
    raise TypeError(value)


def _logs(*records: dict[str, Any]) -> dict[str, Any]:
    return {"resourceLogs": [{"resource": {}, "scopeLogs": [{"logRecords": list(records)}]}]}


def _event(trace: str, span: str, name: str, body: dict[str, Any], *, flags: int = 1) -> dict:
    return {
        "traceId": trace,
        "spanId": span,
        "flags": flags,
        "eventName": name,
        "timeUnixNano": "1700000000050000000",
        "body": _value(body),
    }


def _user(trace: str, span: str, text: str, *, flags: int = 1) -> dict:
    return _event(trace, span, "gen_ai.user.message", {"content": text}, flags=flags)


def _spans(*spans: dict[str, Any]) -> dict[str, Any]:
    return {"resourceSpans": [{"resource": {}, "scopeSpans": [{"spans": list(spans)}]}]}


def _span(trace: str, span: str, name: str, parent: str | None = None, **attrs: Any) -> dict:
    out = {
        "traceId": trace,
        "spanId": span,
        "name": name,
        "startTimeUnixNano": "1700000000000000000",
        "endTimeUnixNano": "1700000000100000000",
        "attributes": [{"key": k, "value": _value(v)} for k, v in attrs.items()],
    }
    if parent is not None:
        out["parentSpanId"] = parent
    return out


def _post(receiver: OTLPReceiver, signal: str, body: dict[str, Any]) -> dict[str, Any]:
    response = requests.post(f"{receiver.url}/v1/{signal}", json=body, timeout=30)
    assert response.status_code == 200, response.text
    return response.json()


def _by_trace(project: str) -> dict[str, list[dict]]:
    out: dict[str, list[dict]] = {}
    for trace in read_traces(project, "r"):
        out.setdefault(trace_id(trace), []).append(trace)
    return out


def test_events_after_grace_missing_spans_and_unsampled_events(project, start_receiver):
    receiver = start_receiver(sample_grace_seconds=0)
    late, orphan, alone, dropped = ("a" * 32, "b" * 32, "c" * 32, "d" * 32)
    root, chat, lost = "1" * 16, "2" * 16, "3" * 16
    sample = {"step": 4, "sample_index": 7}

    # 1. The whole sample first (logged at once: no grace period), its event afterwards.
    sample_spans = _spans(_span(late, chat, "chat", root), _span(late, root, "rollout", **sample))
    _post(receiver, "traces", sample_spans)
    _post(receiver, "logs", _logs(_user(late, chat, "too late")))
    # 2. An event of a span that never comes, then its trace's sample.
    _post(receiver, "logs", _logs(_user(orphan, lost, "span lost")))
    _post(receiver, "traces", _spans(_span(orphan, root, "rollout", **sample)))
    # 3. An event whose trace sends nothing else; 4. one flagged unsampled, likewise.
    _post(receiver, "logs", _logs(_user(alone, lost, "alone")))
    _post(receiver, "logs", _logs(_user(dropped, lost, "unsampled", flags=0)))
    # Answered once spooled: wait for the drain thread to log them.
    wait_until(lambda: receiver.router.totals().samples >= 3, "three samples logged")
    assert receiver.router.totals().samples == 3  # 1, its continuation, 2
    receiver.stop()

    rows = _by_trace(project)
    first, continuation = rows[late]
    assert first["messages"] == [] and "partial" not in first["metadata"]
    meta = continuation["metadata"]
    assert (meta["partial_reason"], meta["sample_index"], continuation["step"]) == ("late", 7, 4)
    assert meta["root_span_id"] == root_span_id(first)
    assert continuation["messages"] == [{"role": "user", "content": "too late"}]
    (span,) = continuation["spans"]
    assert (span["id"], span["name"]) == (chat, PLACEHOLDER_NAME)
    assert span["metadata"][PLACEHOLDER_ATTRIBUTE] == "span already logged"

    (whole,) = rows[orphan]
    assert "partial" not in whole["metadata"]  # its root closed the trace: the event went with it
    assert whole["messages"] == [{"role": "user", "content": "span lost"}]
    placeholder = next(s for s in whole["spans"] if s["id"] == lost)
    assert placeholder["metadata"][PLACEHOLDER_ATTRIBUTE] == "span not received"

    (flushed,) = rows[alone]
    assert flushed["metadata"]["partial_reason"] == "flush"
    assert flushed["messages"] == [{"role": "user", "content": "alone"}]

    assert dropped not in rows
    totals = receiver.router.totals()
    assert (totals.log_events, totals.log_events_unsampled) == (4, 1)


def test_events_and_spans_over_concurrent_requests_in_either_order(project, start_receiver):
    """Spans and log events of 20 samples posted in random order over 4 client threads: every
    sample whole, its conversation in message order."""
    import random
    from concurrent.futures import ThreadPoolExecutor

    receiver = start_receiver()
    posts: list[tuple[str, dict[str, Any]]] = []
    for index in range(20):
        trace, root, chat = f"{index + 1:032x}", "1" * 16, "2" * 16
        sample = {"step": 0, "sample_index": index}
        posts.append(("traces", _spans(_span(trace, chat, "chat", root))))
        posts.append(("traces", _spans(_span(trace, root, "rollout", **sample))))
        reply = {"index": 0, "message": {"role": "assistant", "content": f"a{index}"}}
        question = _user(trace, chat, f"q{index}")
        answer = _event(trace, chat, "gen_ai.choice", reply)
        answer["timeUnixNano"] = "1700000000060000000"  # after the question
        posts.append(("logs", _logs(question)))
        posts.append(("logs", _logs(answer)))
    random.Random(17).shuffle(posts)
    with ThreadPoolExecutor(4) as pool:
        list(pool.map(lambda post: _post(receiver, *post), posts))
    receiver.stop()

    traces = read_traces(project, "r")
    assert sorted(t["metadata"]["sample_index"] for t in traces) == list(range(20))
    for trace in traces:
        assert not trace["metadata"].get("partial"), trace["metadata"]
        assert trace["messages"] == _conversation(trace["metadata"]["sample_index"])


def test_protobuf_and_retried_requests(project, start_receiver):
    """A protobuf body, gzip-compressed, sent twice before its span and once after it (an
    exporter retrying after a timeout): each message once."""
    import gzip

    from google.protobuf import json_format

    from otel_trackio.receiver._decode import parse_request

    receiver = start_receiver(sample_grace_seconds=30)
    trace, root = "e" * 32, "1" * 16
    body = json.dumps(_logs(_user(trace, root, "once"))).encode()
    message = parse_request(body, "json", logs_service_pb2.ExportLogsServiceRequest)
    assert json_format.MessageToDict(message)  # the JSON helper and protobuf agree
    data = gzip.compress(message.SerializeToString())
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}

    def send() -> None:
        response = requests.post(receiver.url + "/v1/logs", data=data, headers=headers, timeout=30)
        assert response.status_code == 200
        reply = logs_service_pb2.ExportLogsServiceResponse()
        reply.ParseFromString(response.content)
        assert not reply.HasField("partial_success")

    send()
    send()  # waiting for the span: kept once
    _post(receiver, "traces", _spans(_span(trace, root, "rollout", step=0, sample_index=0)))
    send()  # the span is there (held for 30 s): attached once
    receiver.stop()
    (sample,) = read_traces(project, "r")
    assert sample["messages"] == [{"role": "user", "content": "once"}]


def test_logs_path_has_the_same_limits_and_token(project, start_receiver):
    receiver = start_receiver(token="s3cret", max_body_bytes=1000)
    url = receiver.url + "/v1/logs"
    body = json.dumps(_logs(_user("f" * 32, "1" * 16, "x"))).encode()
    auth = {"Authorization": "Bearer s3cret"}
    assert requests.post(url, data=body, headers=JSON, timeout=30).status_code == 401
    big = json.dumps(_logs(_user("f" * 32, "1" * 16, "x" * 2000))).encode()
    assert requests.post(url, data=big, headers={**JSON, **auth}, timeout=30).status_code == 413
    assert requests.post(url, data=b"{", headers={**JSON, **auth}, timeout=30).status_code == 400
    text = {"Content-Type": "text/plain", **auth}
    assert requests.post(url, data=body, headers=text, timeout=30).status_code == 415
    bad_ids = _logs({**_user("f" * 32, "1" * 16, "x"), "spanId": "abcd"})
    response = requests.post(url, json=bad_ids, headers=auth, timeout=30)
    assert response.status_code == 200
    partial = response.json()["partialSuccess"]
    assert partial["rejectedLogRecords"] == "1" and "span_id" in partial["errorMessage"]
    assert requests.post(url, data=body, headers={**JSON, **auth}, timeout=30).status_code == 200


# -- the official examples ----------------------------------------------------------------------


def _example(name: str) -> bytes:
    return (EXAMPLES / name).read_bytes()


def test_official_opentelemetry_proto_examples_of_all_three_signals(project, start_receiver):
    receiver = start_receiver()
    for signal, name in (
        ("traces", "trace.json"),
        ("metrics", "metrics.json"),
        ("logs", "logs.json"),
        ("logs", "events.json"),
    ):
        response = requests.post(
            f"{receiver.url}/v1/{signal}", data=_example(name), headers=JSON, timeout=30
        )
        assert response.status_code == 200, (name, response.text)
        assert "partialSuccess" not in response.json(), (name, response.text)
    receiver.stop()

    # The span's parent is not in the example: it waits for it, and goes out at shutdown.
    (trace,) = read_traces(project, "r")
    assert [s["name"] for s in trace["spans"]] == ["I'm a server span"]
    assert trace["metadata"]["partial_reason"] == "flush"
    assert trace["metadata"]["service_name"] == "my.service"
    assert trace["messages"] == []  # logs.json names this span, but is no GenAI event
    keys = {key for row in read_logs(project, "r") for key in row}
    for metric in ("my.counter", "my.gauge", "my.histogram", "my.exponential.histogram"):
        assert any(key.startswith(metric) for key in keys), (metric, keys)
    totals = receiver.router.totals()
    assert (totals.log_records, totals.log_events) == (2, 0)


def test_the_official_log_example_as_a_genai_event_joins_the_example_span(project, start_receiver):
    """logs.json carries the trace and span id of trace.json's span and no trace flags (they
    are optional in OTLP): renamed as a GenAI event and sent first, it joins that span."""
    receiver = start_receiver()
    logs = json.loads(_example("logs.json"))
    record = logs["resourceLogs"][0]["scopeLogs"][0]["logRecords"][0]
    record["eventName"] = "gen_ai.user.message"
    _post(receiver, "logs", logs)
    _post(receiver, "traces", json.loads(_example("trace.json")))
    receiver.stop()
    (trace,) = read_traces(project, "r")
    assert trace["messages"] == [{"role": "user", "content": "Example log record"}]
    (span,) = trace["spans"]
    assert span["kind"] == "generation"


@pytest.mark.parametrize("order", ["after", "before", "after-stored"])
def test_an_evaluation_on_another_request_scores_its_sample(project, start_receiver, order):
    """A judge's ``gen_ai.evaluation.result`` log record on a request of its own — after the
    sample's spans, before them, or after the sample was stored (then a continuation row,
    where late spans go) — is in the header, search text and outcome table of its sample."""
    # "after": within a grace period (without one, a run's first sample may be stored before
    # a record that comes after it: then it is the continuation row of "after-stored")
    grace = {"after-stored": 0, "after": 5}.get(order)
    receiver = start_receiver(sample_grace_seconds=grace)
    trace, root, chat = "e" * 32, "1" * 16, "2" * 16
    verdict = _event(trace, chat, "gen_ai.evaluation.result", {})
    verdict["attributes"] = [
        {"key": "gen_ai.evaluation.name", "value": _value("correctness")},
        {"key": "gen_ai.evaluation.score.value", "value": _value(0.25)},
        {"key": "gen_ai.evaluation.score.label", "value": _value("partial")},
    ]
    if order == "before":
        _post(receiver, "logs", _logs(verdict))
    _post(receiver, "traces", _spans(_span(trace, chat, "chat", root)))
    _post(receiver, "traces", _spans(_span(trace, root, "rollout", step=3, sample_index=0)))
    if order == "after-stored":
        wait_until(lambda: receiver.router.totals().samples >= 1, "the sample stored")
    if order != "before":
        _post(receiver, "logs", _logs(verdict))
    receiver.stop()

    stored = read_traces(project, "r")
    scored = [t for t in stored if "correctness" in t["metadata"]]
    assert len(stored) == (2 if order == "after-stored" else 1) and len(scored) == 1, stored
    meta = scored[0]["metadata"]
    assert (meta["correctness"], meta["correctness.label"]) == (0.25, "partial")
    assert "correctness=0.25" in meta["search"]
    assert (scored[0]["step"], meta["sample_index"]) == (3, 0)
    tables = [
        r["rollout/outcomes"]["_value"] for r in read_logs(project, "r") if "rollout/outcomes" in r
    ]
    assert any(row.get("correctness") == 0.25 for rows in tables for row in rows), tables
