"""Figure 6: OTLP receiver throughput vs the in-process exporter, same workload.

Receiver arm: an ``OTLPReceiver`` (port 0, loopback) in this process; 4 client processes each
emit a quarter of the samples through the official ``OTLPSpanExporter`` (HTTP/protobuf) behind a
``BatchSpanProcessor`` and shut down; then the receiver stops (every Trace written). In-process
arm: one process emits all samples into ``BatchSpanProcessor(TrackioSpanExporter)`` and shuts
down. Both are timed from the first span to Traces durable in storage, and both check the stored
count. Throughput ratio = in-process seconds / receiver seconds (target >= 0.5). The last line
printed is the figure.

Figure 6d: the same receiver arm with the 4 clients on the official OTLP/gRPC exporter, as a ratio
of the OTLP/HTTP arm's throughput (target >= 0.9), and the receiver's CPU per span of each.

Figures 6b/6c: a single-process client's time from its sample's root reaching ``otel-trackio
serve`` to the sample readable in Trackio's storage, p50/p99/max over every sample (target: p99
and max <= 1 s), as the machine is (6b) and with ``--burners`` busy loops (6c); see
:func:`time_to_queryable`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

TARGET = 0.5
GRPC_TARGET = 0.9  # figure 6d: OTLP/gRPC keeps the receiver's OTLP/HTTP throughput
LATENCY_TARGET = 1.0  # seconds, figures 6b/6c
CLIENTS = 4
PROJECT = "bench-receiver"


def _client(url: str, first: int, samples: int, protocol: str = "http") -> None:
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    if protocol == "grpc":
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=url, insecure=True, timeout=120)
    else:
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import (
            OTLPSpanExporter as HTTPSpanExporter,
        )

        exporter = HTTPSpanExporter(endpoint=url + "/v1/traces", timeout=120)
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-client"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=65536))
    w.emit_workload(provider.get_tracer("bench"), samples, first)
    provider.force_flush(600_000)  # drain the backlog fully (shutdown alone gives up after 30 s)
    provider.shutdown()
    w.cleanup()  # this client's own (unused) temp Trackio folder


def receiver_arm(samples: int, protocol: str = "http") -> tuple[float, int, float]:
    """(seconds, Traces stored, the receiver's CPU seconds) with 4 clients over ``protocol``."""
    from otel_trackio.receiver import OTLPReceiver

    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        receiver = OTLPReceiver(PROJECT, name, port=0, grpc_port=0, summary_interval=0).start()
    per = samples // CLIENTS
    env = dict(os.environ)
    url = receiver.grpc_endpoint if protocol == "grpc" else receiver.url
    cpu0 = time.process_time()
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--client",
                url,
                str(k * per),
                str(per),
                protocol,
            ],
            env=env,
        )
        for k in range(CLIENTS)
    ]
    codes = [p.wait() for p in procs]
    with w.quiet_stdout():
        receiver.stop()
    seconds = time.perf_counter() - t0
    cpu = time.process_time() - cpu0
    assert codes == [0] * CLIENTS, f"client exit codes {codes}"
    return seconds, w.count_traces(PROJECT, name), cpu


def inprocess_arm(samples: int) -> tuple[float, int]:
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_trackio import TrackioSpanExporter

    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        exporter = TrackioSpanExporter(project=PROJECT, name=name)
        provider = TracerProvider()
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=65536))
        t0 = time.perf_counter()
        w.emit_workload(provider.get_tracer("bench"), samples)
        provider.force_flush(
            600_000
        )  # drain the backlog fully (shutdown alone gives up after 30 s)
        provider.shutdown()
        seconds = time.perf_counter() - t0
    return seconds, w.count_traces(PROJECT, name)


class _Burners:
    """``count`` processes spinning ``while 1: pass`` (the CPU busy), stopped on exit."""

    def __init__(self, count: int) -> None:
        self.count = count
        self._procs: list[subprocess.Popen[bytes]] = []

    def __enter__(self) -> _Burners:
        self._procs = [
            subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(self.count)
        ]
        return self

    def __exit__(self, *exc: object) -> None:
        for proc in self._procs:
            proc.kill()
            proc.wait()


def time_to_queryable(seconds: float, rate: float, burners: int = 0) -> list[float]:
    """Seconds from a sample's root reaching ``otel-trackio serve`` to the sample being readable
    with ``SQLiteStorage.get_traces``, for every sample of a single-process client: the official
    OTLP/HTTP exporter behind a default ``BatchSpanProcessor`` (5 s delay, 512-span batches), a
    rollout emitting ``rate`` samples/s for ``seconds``; ``burners`` busy loops meanwhile.

    "Reaching" is taken as the start of the export call that carries the root (an upper bound:
    the client's own encoding and the transfer count too). Storage is watched from another thread
    every 10 ms, reading the new rows of the ``traces`` table ``get_traces`` reads (parsing every
    Trace it returns would slow the watch down); at the end ``get_traces`` must return them all.
    """
    import sqlite3
    import threading

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from trackio.sqlite_storage import SQLiteStorage

    sent: dict[int, float] = {}  # sample_index -> when the export call with its root began
    seen: dict[int, float] = {}  # sample_index -> when get_traces first returned it

    class RootsTimed(OTLPSpanExporter):
        def export(self, spans: Any) -> Any:
            began = time.perf_counter()
            for span in spans:
                if span.parent is None:
                    sent[int(span.attributes["sample_index"])] = began
            return super().export(spans)

    server = w.Receiver(f"{PROJECT}-latency-{uuid.uuid4().hex[:6]}")
    stop = threading.Event()

    def watch() -> None:
        last = 0  # the highest rowid read
        query = "SELECT rowid, json_extract(metadata, '$.sample_index') FROM traces WHERE rowid > ?"
        while not stop.wait(0.01):
            path = SQLiteStorage.get_project_db_path(server.project)
            try:
                with sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=5) as db:
                    rows = db.execute(query, (last,)).fetchall()
            except sqlite3.Error:
                continue  # no database or table yet
            now = time.perf_counter()
            for row_id, index in rows:
                last = max(last, row_id)
                if index is not None:
                    seen.setdefault(int(index), now)

    watcher = threading.Thread(target=watch, daemon=True)
    samples = int(seconds * rate)
    try:
        with _Burners(burners):
            provider = TracerProvider(resource=Resource.create({"service.name": "one-client"}))
            exporter = RootsTimed(endpoint=server.url + "/v1/traces", timeout=60)
            provider.add_span_processor(BatchSpanProcessor(exporter))
            tracer = provider.get_tracer("bench")
            watcher.start()
            t0 = time.monotonic()
            for i in range(samples):
                w.emit_sample(tracer, i, i // w.SAMPLES_PER_STEP)
                ahead = (i + 1) / rate - (time.monotonic() - t0)
                if ahead > 0:
                    time.sleep(ahead)  # a rollout at a steady pace
            provider.force_flush(60_000)
            deadline = time.monotonic() + 60
            while len(seen) < samples and time.monotonic() < deadline:
                time.sleep(0.05)
            stop.set()
            watcher.join()
            provider.shutdown()
    finally:
        stop.set()
        server.stop()
    traces = SQLiteStorage.get_traces(server.project, "r")
    stored = {trace["metadata"].get("sample_index") for trace in traces}
    assert set(seen) <= stored, "a row seen is not returned by get_traces"
    missing = samples - len(seen)
    return sorted(seen[i] - sent[i] for i in seen) + [float("inf")] * missing


def _percentile(values: list[float], fraction: float) -> float:
    return values[min(len(values) - 1, int(fraction * len(values)))]


def report_time_to_queryable(seconds: float, rate: float, burners: int) -> None:
    """Figure 6b (and 6c with ``burners``): p50/p99/max of :func:`time_to_queryable`, target
    p99 and max <= 1 s."""
    delays = time_to_queryable(seconds, rate, burners)
    p50, p99, worst = _percentile(delays, 0.5), _percentile(delays, 0.99), delays[-1]
    where = f"with {burners} CPU burners" if burners else "as the machine is"
    load = os.getloadavg()[0]
    print(
        f"single-process OTLP client ({len(delays)} samples at {rate:g}/s, {where}, load "
        f"{load:.1f}): root sent -> sample queryable p50 {p50:.2f} s, p99 {p99:.2f} s, "
        f"max {worst:.2f} s (target p99 and max <= {LATENCY_TARGET:g} s)",
        file=sys.stderr,
    )
    figure = "6c" if burners else "6b"
    w.write_result(
        f"{figure}. single-process OTLP client (BatchSpanProcessor), {where}: root sent -> "
        f"sample queryable, {len(delays)} samples",
        f"p99 {p99:.2f} s, max {worst:.2f} s (p50 {p50:.2f} s)",
        f"p99, max <= {LATENCY_TARGET:g} s",
        p99 <= LATENCY_TARGET and worst <= LATENCY_TARGET,
    )


def main() -> None:
    if len(sys.argv) == 6 and sys.argv[1] == "--client":
        _client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument(
        "--latency-seconds", type=float, default=15, help="figures 6b/6c: how long the client runs"
    )
    parser.add_argument(
        "--latency-rate", type=float, default=40, help="figures 6b/6c: samples per second"
    )
    parser.add_argument(
        "--burners", type=int, default=2, help="figure 6c: busy loops meanwhile (0: no 6c)"
    )
    parser.add_argument(
        "--latency-only", action="store_true", help="figures 6b/6c only (no throughput)"
    )
    args = parser.parse_args()
    n = args.samples - args.samples % CLIENTS

    report_time_to_queryable(args.latency_seconds, args.latency_rate, 0)
    if args.burners:
        report_time_to_queryable(args.latency_seconds, args.latency_rate, args.burners)
    if args.latency_only:
        w.cleanup()
        return
    t_in, stored_in = inprocess_arm(n)
    t_rx, stored_rx, cpu_rx = receiver_arm(n, "http")
    t_grpc, stored_grpc, cpu_grpc = receiver_arm(n, "grpc")
    print(
        f"in-process {t_in:.2f} s ({stored_in} Traces stored), receiver with {CLIENTS} OTLP/HTTP "
        f"client processes {t_rx:.2f} s ({stored_rx} stored, receiver CPU "
        f"{cpu_rx / (n * 5) * 1e6:.0f} us/span), with {CLIENTS} OTLP/gRPC clients "
        f"{t_grpc:.2f} s ({stored_grpc} stored, receiver CPU {cpu_grpc / (n * 5) * 1e6:.0f} "
        "us/span)",
        file=sys.stderr,
    )
    ratio = t_in / t_rx
    complete = stored_in == n and stored_rx == n
    w.write_result(
        f"6. OTLP receiver ({CLIENTS} client processes) / in-process throughput, {n:,} samples",
        f"{ratio:.2f}x",
        ">= 0.5x",
        ratio >= TARGET and complete,
    )
    grpc_ratio = t_rx / t_grpc
    w.write_result(
        f"6d. OTLP/gRPC / OTLP/HTTP receiver throughput ({CLIENTS} clients each), {n:,} samples",
        f"{grpc_ratio:.2f}x (receiver CPU per span {cpu_grpc / max(cpu_rx, 1e-9):.2f}x)",
        ">= 0.9x",
        grpc_ratio >= GRPC_TARGET and stored_grpc == n,
    )
    w.cleanup()
    missing = (
        ""
        if complete
        else f"; Traces stored {stored_rx}/{n} (receiver), {stored_in}/{n} (in-process)"
    )
    print(
        f"OTLP receiver / in-process throughput, {n:,} samples: {ratio:.2f}x "
        f"({n * 5 / t_rx:,.0f} vs {n * 5 / t_in:,.0f} spans/s{missing}; target >= 0.5x); "
        f"gRPC / HTTP {grpc_ratio:.2f}x ({n * 5 / t_grpc:,.0f} spans/s over gRPC)"
    )


if __name__ == "__main__":
    main()
