"""``otel-trackio ingest``: the OpenTelemetry Collector's ``file`` exporter output into a run.

The files are written as the Collector writes them: one OTLP/JSON export request per line
(camelCase, ids in hex, 64-bit integers as strings, enums as numbers), made from real SDK spans,
log records and metrics by the official OTLP encoders; a sample's spans split across lines and
files; a rotated file gzip-compressed; a line that is not OTLP. The command runs as a user runs
it; everything is counted in Trackio storage by (step, sample_index).
"""

from __future__ import annotations

import base64
import gzip
import json
import subprocess
import sys
from collections import Counter
from pathlib import Path
from typing import Any

from conftest import read_logs, read_traces
from google.protobuf.json_format import MessageToDict
from opentelemetry._logs import LogRecord
from opentelemetry.exporter.otlp.proto.common._log_encoder import encode_logs
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

ROOT = Path(__file__).resolve().parents[1]
_IDS = {"traceId", "spanId", "parentSpanId"}


def collector_line(message: Any) -> str:
    """An OTLP request as the Collector's file exporter writes it: OTLP/JSON on one line."""

    def hex_ids(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) else hex_ids(v)
                for k, v in node.items()
            }
        if isinstance(node, list):
            return [hex_ids(v) for v in node]
        return node

    as_dict = MessageToDict(message, use_integers_for_enums=True)
    return json.dumps(hex_ids(as_dict), separators=(",", ":"))


def recorded_rollout() -> tuple[list[Any], list[Any], Any]:
    """Three steps of four samples (root, a model call with its messages as a GenAI log event,
    a tool call), and a reward counter: spans, log records, metrics, as the SDK recorded them."""
    resource = Resource.create({"service.name": "collected-rollout"})
    spans = InMemorySpanExporter()
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    logs = InMemoryLogRecordExporter()
    logger_provider = LoggerProvider(resource=resource)
    logger_provider.add_log_record_processor(SimpleLogRecordProcessor(logs))
    reader = InMemoryMetricReader()
    meter = MeterProvider(resource=resource, metric_readers=[reader]).get_meter("rl")
    rewards = meter.create_counter("reward_total")
    tracer = tracer_provider.get_tracer("rollout")
    logger = logger_provider.get_logger("genai")
    for step in range(3):
        for index in range(4):
            sample = {"step": step, "sample_index": index}
            with tracer.start_as_current_span("rollout", attributes=sample) as root:
                with tracer.start_as_current_span(
                    "chat m", attributes={"gen_ai.operation.name": "chat"}
                ):
                    logger.emit(
                        LogRecord(
                            event_name="gen_ai.user.message",
                            body={"content": f"question {step}.{index}"},
                        )
                    )
                with tracer.start_as_current_span(
                    "execute_tool calc", attributes={"gen_ai.operation.name": "execute_tool"}
                ):
                    pass
                root.set_attribute("reward", float(index % 2))
            rewards.add(index % 2, {"step": step})
    return list(spans.get_finished_spans()), list(logs.get_finished_logs()), reader


def write_collector_files(folder: Path) -> list[Path]:
    """The files as a Collector with rotation and compression leaves them: an older rotated
    file (gzip) and the current one; each sample's spans split over two lines, the tool calls of
    the last step in the other file; a line that is no OTLP request."""
    spans, logs, reader = recorded_rollout()
    tools = [s for s in spans if s.name.startswith("execute_tool")]
    others = [s for s in spans if not s.name.startswith("execute_tool")]
    older = [
        collector_line(encode_spans(others[:18])),
        collector_line(encode_logs(logs[:6])),
        collector_line(encode_spans(tools[-4:])),
    ]
    current = [
        collector_line(encode_spans(others[18:])),
        "this is not a Collector line",
        collector_line(encode_spans(tools[:-4])),
        collector_line(encode_logs(logs[6:])),
        collector_line(encode_metrics(reader.get_metrics_data())),
    ]
    rotated = folder / "traces-2026-12-05T10-00-00.000.jsonl.gz"
    rotated.write_bytes(gzip.compress(("\n".join(older) + "\n").encode()))
    live = folder / "traces.jsonl"
    live.write_text("\n".join(current) + "\n")
    return [rotated, live]


def ingest(project: str, trackio_dir: str, *files: Path) -> subprocess.CompletedProcess[str]:
    command = [sys.executable, "-m", "otel_trackio", "ingest", *map(str, files)]
    command += ["--project", project, "--name", "collected"]
    env = {"TRACKIO_DIR": trackio_dir, "TRACKIO_DISABLE_TELEMETRY": "1", "PATH": ""}
    return subprocess.run(
        command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False
    )


def test_collector_files_become_the_run_once_however_often_they_are_ingested(
    project, trackio_dir, tmp_path
):
    files = write_collector_files(tmp_path)
    first = ingest(project, trackio_dir, *files)
    assert first.returncode == 0, first.stderr + first.stdout
    said = first.stdout
    assert f"{files[1]}:2: skipped:" in said, said  # the line that is not OTLP, by file and line
    assert "otel-trackio ingest: 8 lines read, 7 requests, 1 line skipped" in said, said
    assert f"12 samples logged to {project!r} run 'collected', steps 0 to 2 (3 steps)" in said

    traces = read_traces(project, "collected")
    identities = Counter((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert identities == Counter({(s, i): 1 for s in range(3) for i in range(4)})
    for trace in traces:  # whole: its spans from several lines and files, its log event
        step, index = trace["step"], trace["metadata"]["sample_index"]
        names = sorted(span["name"] for span in trace["spans"])
        assert names == ["chat m", "execute_tool calc", "rollout"], names
        assert trace["messages"] == [{"role": "user", "content": f"question {step}.{index}"}]
        assert trace["metadata"]["reward"] == float(index % 2)
    assert any("reward_total" in row for row in read_logs(project, "collected"))

    metric_rows = [row for row in read_logs(project, "collected") if "reward_total" in row]

    again = ingest(project, trackio_dir, tmp_path)  # the folder: both files again
    assert again.returncode == 0, again.stderr + again.stdout
    assert f"0 samples logged to {project!r} run 'collected'" in again.stdout, again.stdout
    assert "12 found stored already (kept once)" in again.stdout, again.stdout
    traces = read_traces(project, "collected")
    assert len(traces) == 12, Counter((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert [row for row in read_logs(project, "collected") if "reward_total" in row] == metric_rows


def test_ingest_names_what_it_cannot_read(project, trackio_dir, tmp_path):
    missing = ingest(project, trackio_dir, tmp_path / "nope.jsonl")
    assert missing.returncode == 2 and "no such file" in missing.stderr
    junk = tmp_path / "junk.jsonl"
    # No signal's key (6 + 6), and a request with a field OTLP does not have (ignored, as OTLP
    # receivers ignore unknown fields: an empty request).
    junk.write_text("\n".join(["{}", "[1, 2]"] * 6 + ['{"resourceSpans": [{"bad": 1}]}']) + "\n")
    result = ingest(project, trackio_dir, junk)
    assert result.returncode == 0, result.stderr
    assert result.stdout.count("skipped: no resourceSpans") == 10  # said up to ten, then counted
    assert "12 lines skipped in all (the first 10 said above)" in result.stdout
    assert "13 lines read, 1 request, 12 lines skipped" in result.stdout
