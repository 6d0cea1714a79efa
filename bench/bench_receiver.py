"""Figure 6: OTLP receiver throughput vs the in-process exporter, same workload.

Receiver arm: an ``OTLPReceiver`` (port 0, loopback) in this process; 4 client processes each
emit a quarter of the samples through the official ``OTLPSpanExporter`` (HTTP/protobuf) behind a
``BatchSpanProcessor`` and shut down; then the receiver stops (every Trace written). In-process
arm: one process emits all samples into ``BatchSpanProcessor(TrackioSpanExporter)`` and shuts
down. Both are timed from the first span to Traces durable in storage, and both check the stored
count. Throughput ratio = in-process seconds / receiver seconds (target >= 0.5). The last line
printed is the figure.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

TARGET = 0.5
CLIENTS = 4
PROJECT = "bench-receiver"


def _client(url: str, first: int, samples: int) -> None:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider(resource=Resource.create({"service.name": "bench-client"}))
    provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=120), max_queue_size=65536
        )
    )
    w.emit_workload(provider.get_tracer("bench"), samples, first)
    provider.force_flush(600_000)  # drain the backlog fully (shutdown alone gives up after 30 s)
    provider.shutdown()
    w.cleanup()  # this client's own (unused) temp Trackio folder


def receiver_arm(samples: int) -> tuple[float, int]:
    from otel_trackio.receiver import OTLPReceiver

    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        receiver = OTLPReceiver(PROJECT, name, port=0, summary_interval=0).start()
    per = samples // CLIENTS
    env = dict(os.environ)
    t0 = time.perf_counter()
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                os.path.abspath(__file__),
                "--client",
                receiver.url,
                str(k * per),
                str(per),
            ],
            env=env,
        )
        for k in range(CLIENTS)
    ]
    codes = [p.wait() for p in procs]
    with w.quiet_stdout():
        receiver.stop()
    seconds = time.perf_counter() - t0
    assert codes == [0] * CLIENTS, f"client exit codes {codes}"
    return seconds, w.count_traces(PROJECT, name)


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


def time_to_queryable(samples: int) -> list[float]:
    """Seconds from a sample's root reaching ``otel-trackio serve`` (its export call returned:
    the receiver has it) to the sample being readable in Trackio's storage, for a single-process
    client with the official exporter, one sample at a time."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    server = w.Receiver(f"{PROJECT}-latency-{uuid.uuid4().hex[:6]}")
    try:
        provider = TracerProvider(resource=Resource.create({"service.name": "one-client"}))
        exporter = OTLPSpanExporter(endpoint=server.url + "/v1/traces", timeout=60)
        provider.add_span_processor(SimpleSpanProcessor(exporter))  # each span sent as it ends
        tracer = provider.get_tracer("bench")
        delays = []
        for i in range(samples):
            w.emit_sample(tracer, i, 0)  # returns once the root was accepted
            arrived = time.perf_counter()
            while w.count_traces(server.project, "r") <= i:
                if time.perf_counter() - arrived > 30:
                    break
                time.sleep(0.01)
            delays.append(time.perf_counter() - arrived)
        provider.shutdown()
    finally:
        server.stop()
    return delays


def main() -> None:
    if len(sys.argv) == 5 and sys.argv[1] == "--client":
        _client(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]))
        return
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=4000)
    args = parser.parse_args()
    n = args.samples - args.samples % CLIENTS

    delays = sorted(time_to_queryable(20))
    worst, median = delays[-1], delays[len(delays) // 2]
    print(
        f"single-process OTLP client: root accepted -> sample queryable, median {median:.2f} s, "
        f"worst {worst:.2f} s of {len(delays)}",
        file=sys.stderr,
    )
    w.write_result(
        "6b. single-process OTLP client (default grace): root accepted -> sample queryable, "
        "worst of 20",
        f"{worst:.2f} s (median {median:.2f} s)",
        "<= 1 s",
        worst <= 1.0,
    )
    t_in, stored_in = inprocess_arm(n)
    t_rx, stored_rx = receiver_arm(n)
    print(
        f"in-process {t_in:.2f} s ({stored_in} Traces stored), receiver with {CLIENTS} OTLP/HTTP "
        f"client processes {t_rx:.2f} s ({stored_rx} Traces stored)",
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
    w.cleanup()
    missing = (
        ""
        if complete
        else f"; Traces stored {stored_rx}/{n} (receiver), {stored_in}/{n} (in-process)"
    )
    print(
        f"OTLP receiver / in-process throughput, {n:,} samples: {ratio:.2f}x "
        f"({n * 5 / t_rx:,.0f} vs {n * 5 / t_in:,.0f} spans/s{missing}; target >= 0.5x)"
    )


if __name__ == "__main__":
    main()
