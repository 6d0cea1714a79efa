"""Figure 15: ``otel-trackio ingest`` of a Collector ``file`` exporter output, against
``otel-trackio serve`` taking the same requests over OTLP/HTTP (JSON), in one run.

The workload's 5-span samples are recorded with the SDK and written as the Collector writes them
(one OTLP/JSON export request of 512 spans per line, ids in hex) until the file reaches ``--mb``.
Arm A: ``otel-trackio ingest FILE`` as a process, until it exits (everything stored, the run
finished). Arm B: ``otel-trackio serve`` started, every line POSTed as it is (one client), then
stopped, until it says everything is stored. Both count their Traces in storage. The last line
printed is the figure: spans per second of each, and their ratio.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGET_RATIO = 1.0  # ingest at least as fast as the receiver on the same spans
_IDS = {"traceId", "spanId", "parentSpanId"}


def _hex_ids(node: object) -> object:
    if isinstance(node, dict):
        return {
            k: base64.b64decode(v).hex() if k in _IDS and isinstance(v, str) else _hex_ids(v)
            for k, v in node.items()
        }
    if isinstance(node, list):
        return [_hex_ids(v) for v in node]
    return node


def write_collector_file(path: Path, megabytes: float) -> int:
    """The workload as Collector lines until ``path`` holds ``megabytes``; the span count."""
    import _workload as w
    from google.protobuf.json_format import MessageToDict
    from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    spans = 0
    first = 0
    with path.open("w") as out:
        while out.tell() < megabytes * 1e6:
            w.emit_workload(tracer, 200, first=first)
            first += 200
            finished = list(memory.get_finished_spans())
            memory.clear()
            for i in range(0, len(finished), 512):
                message = encode_spans(finished[i : i + 512])
                line = MessageToDict(message, use_integers_for_enums=True)
                out.write(json.dumps(_hex_ids(line), separators=(",", ":")) + "\n")
            spans += len(finished)
    return spans


def ingest_arm(path: Path, folder: str) -> float:
    env = dict(os.environ, TRACKIO_DIR=folder, TRACKIO_DISABLE_TELEMETRY="1")
    started = time.perf_counter()
    subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_trackio",
            "ingest",
            str(path),
            "--project",
            "ingest",
            "--name",
            "r",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    return time.perf_counter() - started


def receiver_arm(path: Path, folder: str) -> float:
    import _workload as w
    import requests

    os.environ["TRACKIO_DIR"] = folder
    started = time.perf_counter()
    receiver = w.Receiver("serve")
    session = requests.Session()
    with path.open("rb") as lines:
        for line in lines:
            response = session.post(
                f"{receiver.url}/v1/traces",
                data=line,
                headers={"Content-Type": "application/json"},
                timeout=120,
            )
            response.raise_for_status()
    receiver.stop()
    return time.perf_counter() - started


def stored(folder: str, project: str) -> int:
    import sqlite3

    with sqlite3.connect(Path(folder) / f"{project}.db") as db:
        return int(db.execute("SELECT count(*) FROM traces").fetchone()[0])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=100.0, help="size of the Collector file")
    args = parser.parse_args()

    import _workload as w

    with tempfile.TemporaryDirectory(prefix="otel-trackio-bench-ingest-") as work:
        path = Path(work) / "traces.jsonl"
        spans = write_collector_file(path, args.mb)
        size = path.stat().st_size / 1e6
        ingest_dir, serve_dir = Path(work) / "a", Path(work) / "b"
        ingest_dir.mkdir()
        serve_dir.mkdir()
        ingest_seconds = ingest_arm(path, str(ingest_dir))
        serve_seconds = receiver_arm(path, str(serve_dir))
        traces = (stored(str(ingest_dir), "ingest"), stored(str(serve_dir), "serve"))
    ingest_rate, serve_rate = spans / ingest_seconds, spans / serve_seconds
    ratio = ingest_rate / serve_rate
    met = ratio >= TARGET_RATIO and traces[0] == traces[1]
    print(
        f"a {size:.0f} MB Collector file, {spans:,} spans ({traces[0]:,} / {traces[1]:,} Traces "
        f"stored): ingest {ingest_rate:,.0f} spans/s ({ingest_seconds:.1f} s), serve over "
        f"OTLP/HTTP JSON {serve_rate:,.0f} spans/s ({serve_seconds:.1f} s): "
        f"{ratio:.2f}x (target >= {TARGET_RATIO:.1f}x)"
    )
    w.write_result(
        "15. otel-trackio ingest / otel-trackio serve, spans per second, same spans",
        f"{ratio:.2f}x ({ingest_rate:,.0f} vs {serve_rate:,.0f} spans/s)",
        f">= {TARGET_RATIO:.1f}x, the same Traces",
        met,
    )


if __name__ == "__main__":
    main()
