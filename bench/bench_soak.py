"""Figure 11: the receiver under more load than Trackio stores, for minutes.

``otel-trackio serve`` in its own process; N worker processes, each with the official OTLP/HTTP
span exporter (gzip, the SDK's default ``BatchSpanProcessor``), emit 5-span rollout samples as fast
as they can for ``--seconds``, then shut down (the SDK gives them 30 s to send what is queued).
The receiver spools every request and answers at once; its drain thread stores into Trackio behind.
After the workers are done the receiver is stopped with a long drain deadline; if it still stopped
with a backlog, a second start with the same spool drains the rest.

Measured: samples sent (counted by the workers: roots ended) vs stored (read back), request
latency p99 (each ``export()`` call, timed in the workers), receiver RSS and spool size over time,
and the receiver's sustained storage throughput. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

WORKER = textwrap.dedent(
    """
    import json, sys, time
    sys.path.insert(0, sys.argv[5])
    import _workload as w
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url, worker = sys.argv[1], int(sys.argv[2])
    seconds, rate = float(sys.argv[3]), float(sys.argv[4])
    if sys.argv[6] == "grpc":
        from grpc import Compression
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        options = {"endpoint": url, "insecure": True, "compression": Compression.Gzip}
    else:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        options = {"endpoint": url + "/v1/traces", "compression": Compression.Gzip}
    latencies, exported = [], [0]

    class Timed(OTLPSpanExporter):
        def export(self, spans):
            t0 = time.perf_counter()
            result = super().export(spans)
            latencies.append(time.perf_counter() - t0)
            if result.name == "SUCCESS":
                exported[0] += sum(1 for s in spans if s.parent is None)  # samples delivered
            return result

    provider = TracerProvider(resource=Resource.create({"service.name": f"soak-{worker}"}))
    # A queue deep enough for a burst: a drop here would be the client's, not the receiver's.
    processor = BatchSpanProcessor(
        Timed(**options), max_queue_size=65536
    )
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("soak")
    sent, start = 0, time.monotonic()
    while time.monotonic() - start < seconds:
        w.emit_sample(tracer, worker * 10_000_000 + sent, sent // w.SAMPLES_PER_STEP)
        sent += 1
        ahead = sent / rate - (time.monotonic() - start)
        if ahead > 0:
            time.sleep(ahead)  # a rollout at a steady pace, not a span storm
    provider.shutdown()  # the SDK's own 30 s to send what is queued; the rest is lost
    print(json.dumps({"sent": sent, "exported": exported[0], "latencies": latencies}))
    """
)


def rss_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def du_mb(path: Path) -> float:
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.path.getsize(os.path.join(root, name))
            except OSError:
                pass
    return total / 1e6


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=60)
    parser.add_argument(
        "--spans-per-second", type=float, default=3000, help="offered by all workers together"
    )
    parser.add_argument(
        "--protocol", choices=("http", "grpc"), default="http", help="the workers' OTLP exporter"
    )
    args = parser.parse_args()
    project = f"bench-soak-{uuid.uuid4().hex[:6]}"
    spool = Path(w.TRACKIO_DIR) / "soak-spool"
    spool_args = ("--spool", str(spool), "--drain-seconds", "900")
    server = w.Receiver(project, *spool_args, name="soak")
    receiver = server.process
    samples: list[tuple[float, float, float]] = []  # (t, receiver RSS MB, spool MB)
    started = time.monotonic()
    stop_sampling = threading.Event()

    def sample_resources() -> None:
        while not stop_sampling.wait(1.0):
            try:
                samples.append((time.monotonic() - started, rss_mb(receiver.pid), du_mb(spool)))
            except (FileNotFoundError, ProcessLookupError):
                return

    threading.Thread(target=sample_resources, daemon=True).start()
    here = os.path.dirname(os.path.abspath(__file__))
    workers = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                WORKER,
                server.grpc_url if args.protocol == "grpc" else server.url,
                str(k),
                str(args.seconds),
                str(args.spans_per_second / w.SPANS_PER_SAMPLE / args.workers),
                here,
                args.protocol,
            ],
            stdout=subprocess.PIPE,
            text=True,
            env={**os.environ, "OTEL_SDK_DISABLED": "false"},
        )
        for k in range(args.workers)
    ]
    results = [json.loads(p.communicate()[0].strip().splitlines()[-1]) for p in workers]
    offered_done = time.monotonic() - started
    sent = sum(r["sent"] for r in results)
    delivered = sum(r["exported"] for r in results)  # the workers' exporters got SUCCESS
    latencies = [x for r in results for x in r["latencies"]]
    stored_at_offer_end = w.count_traces(project, "soak")
    server.stop()
    drained_at = time.monotonic() - started
    stop_sampling.set()
    restarted = False
    if any("left in the spool" in line for line in server.output):
        restarted = True  # the next start with the same spool finishes it
        w.Receiver(project, *spool_args, name="soak").stop()
    stored = w.count_traces(project, "soak")
    for line in server.output:  # the receiver's own warnings, if any
        if "Traceback" in line or "rror" in line or "lost" in line or "WARNING" in line:
            print(f"receiver: {line.rstrip()}", file=sys.stderr)
    p99 = statistics.quantiles(latencies, n=100)[98] * 1000 if len(latencies) > 1 else 0.0
    peak_rss = max((s[1] for s in samples), default=0.0)
    first_rss = samples[0][1] if samples else 0.0
    peak_spool = max((s[2] for s in samples), default=0.0)
    spans_per_s = stored * w.SPANS_PER_SAMPLE / drained_at
    offered_per_s = sent * w.SPANS_PER_SAMPLE / offered_done
    for t, rss, size in samples[:: max(1, len(samples) // 12)]:
        print(f"t={t:5.0f} s  receiver RSS {rss:6.1f} MB  spool {size:7.1f} MB", file=sys.stderr)
    print(
        f"{args.workers} workers x {args.seconds:g} s: sent {sent} samples "
        f"({offered_per_s:.0f} spans/s offered), {delivered} answered SUCCESS, "
        f"stored {stored_at_offer_end} when they were done, "
        f"{stored} in the end{' (after a restart drained the rest)' if restarted else ''}; "
        f"export() p99 {p99:.0f} ms over {len(latencies)} requests; receiver RSS "
        f"{first_rss:.0f} -> peak {peak_rss:.0f} MB; spool peak {peak_spool:.0f} MB; stored "
        f"{spans_per_s:.0f} spans/s sustained",
        file=sys.stderr,
    )
    w.write_result(
        f"11. receiver soak, {args.workers} OTLP/{args.protocol.upper()} workers x "
        f"{args.seconds:g} s over what it stores: "
        "samples stored / sent",
        f"{stored}/{sent}; p99 {p99:.0f} ms; RSS peak {peak_rss:.0f} MB; spool peak "
        f"{peak_spool:.0f} MB; {spans_per_s:.0f} spans/s stored",
        "all stored",
        stored == sent,
    )
    w.cleanup()
    print(
        f"soak: {stored}/{sent} samples stored ({offered_per_s:.0f} spans/s offered, "
        f"{spans_per_s:.0f} stored), export p99 {p99:.0f} ms, receiver RSS {first_rss:.0f}->"
        f"{peak_rss:.0f} MB, spool peak {peak_spool:.0f} MB"
    )


if __name__ == "__main__":
    main()
