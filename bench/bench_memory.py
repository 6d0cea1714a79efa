"""Figure 5: peak RSS growth while streaming spans through ``TrackioSpanExporter``.

A child process (fresh interpreter, so nothing else inflates its memory) builds finished SDK
``ReadableSpan`` objects for the 5-span workload and hands them to ``exporter.export()`` in
batches of 512, as a ``BatchSpanProcessor`` would, into a temp Trackio project. Baseline: RSS
after the first 10,000 spans (imports, Trackio run and caches warm). Growth: the peak RSS
(``VmHWM`` from /proc) at the end minus that baseline. RSS is also sampled every 10% so a
reduced run shows whether memory keeps growing (it should stay flat: samples are logged and
forgotten as they complete). The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGET_MB = 50.0
WARMUP_SPANS = 10_000


def _child(total_spans: int) -> None:
    import _workload as w
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, SpanKind, TraceFlags

    from otel_trackio import TrackioSpanExporter

    resource = Resource.create({"service.name": "bench-rollout"})
    flags = TraceFlags(TraceFlags.SAMPLED)

    def sample_spans(i: int, now: int) -> list[ReadableSpan]:
        payload = w.sample_payload(i)
        trace_id = (i + 1) * 7919
        root_id = (i + 1) * 16
        root_ctx = SpanContext(trace_id, root_id, False, flags)
        step = i // w.SAMPLES_PER_STEP
        children = [
            ("chat " + w.MODEL, w.chat_attributes(i, payload, 1)),
            (
                "execute_tool calculator",
                {
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.name": "calculator",
                    "gen_ai.tool.call.arguments": json.dumps({"expr": payload["expr"]}),
                    "gen_ai.tool.call.result": payload["result"],
                },
            ),
            ("chat " + w.MODEL, w.chat_attributes(i, payload, 2)),
            ("reward", {"reward.score": float(i % 2)}),
        ]
        out = [
            ReadableSpan(
                name=name,
                context=SpanContext(trace_id, root_id + k + 1, False, flags),
                parent=root_ctx,
                resource=resource,
                attributes=attrs,
                kind=SpanKind.INTERNAL,
                start_time=now + k * 1000,
                end_time=now + k * 1000 + 900,
            )
            for k, (name, attrs) in enumerate(children)
        ]
        out.append(
            ReadableSpan(
                name="rollout",
                context=root_ctx,
                parent=None,
                resource=resource,
                attributes={"step": step, "sample_index": i, "rollout_n": i % 4, "validate": False},
                kind=SpanKind.INTERNAL,
                start_time=now,
                end_time=now + 10_000,
            )
        )
        return out

    with w.quiet_stdout():
        exporter = TrackioSpanExporter(project="bench-memory", name="stream")
    samples = total_spans // w.SPANS_PER_SAMPLE
    batch: list[ReadableSpan] = []
    sent = 0
    baseline_kb = 0
    checkpoints: list[tuple[int, float, int]] = []
    every = max(1, samples // 10)
    t0 = time.perf_counter()
    now = time.time_ns()
    for i in range(samples):
        batch.extend(sample_spans(i, now + i * 20_000))
        if len(batch) >= 512:
            exporter.export(batch)
            sent += len(batch)
            batch = []
        if baseline_kb == 0 and sent >= WARMUP_SPANS:
            baseline_kb = w.proc_status_kb("VmRSS")
        if (i + 1) % every == 0:
            queued = len(getattr(exporter.run, "_queued_logs", ()))  # Trackio's write backlog
            checkpoints.append((sent, w.proc_status_kb("VmRSS") / 1024, queued))
    if batch:
        exporter.export(batch)
        sent += len(batch)
    stream_s = time.perf_counter() - t0
    peak_kb = w.proc_status_kb("VmHWM")
    t1 = time.perf_counter()
    with w.quiet_stdout():
        exporter.shutdown()
    finish_s = time.perf_counter() - t1
    stored = w.count_traces("bench-memory", "stream")
    result = {
        "spans": sent,
        "samples": samples,
        "stored_traces": stored,
        "baseline_mb": baseline_kb / 1024,
        "peak_mb": peak_kb / 1024,
        "growth_mb": max(0, peak_kb - baseline_kb) / 1024,
        "stream_s": stream_s,
        "finish_s": finish_s,
        "checkpoints": checkpoints,
        "stats": str(exporter.stats),
    }
    w.cleanup()
    print(json.dumps(result))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--spans", type=int, default=1_000_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(args.spans)
        return

    import _workload as w

    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--child", "--spans", str(args.spans)],
        check=True,
        capture_output=True,
        text=True,
    )
    result = json.loads(out.stdout.strip().splitlines()[-1])
    rate = result["spans"] / result["stream_s"]
    print(
        f"streamed {result['spans']:,} spans ({result['samples']:,} samples) in "
        f"{result['stream_s']:.1f} s ({rate:,.0f} spans/s), run finish {result['finish_s']:.1f} s, "
        f"{result['stored_traces']:,} Traces stored",
        file=sys.stderr,
    )
    print(
        "RSS MB (Trackio log calls queued) by spans sent: "
        + ", ".join(f"{n:,}: {mb:.0f} ({q})" for n, mb, q in result["checkpoints"]),
        file=sys.stderr,
    )
    print(f"exporter stats: {result['stats']}", file=sys.stderr)
    growth = result["growth_mb"]
    met = growth <= TARGET_MB and result["stored_traces"] == result["samples"]
    scope = "" if result["spans"] >= 1_000_000 else f" (reduced run: {result['spans']:,} spans)"
    w.write_result(
        f"5. peak RSS growth, {result['spans']:,} spans streamed",
        f"{growth:.1f} MB",
        "<= 50 MB",
        met,
    )
    w.cleanup()
    print(
        f"peak RSS growth streaming {result['spans']:,} spans{scope}: {growth:.1f} MB "
        f"(baseline {result['baseline_mb']:.0f} MB, peak {result['peak_mb']:.0f} MB; "
        "target <= 50 MB)"
    )


if __name__ == "__main__":
    main()
