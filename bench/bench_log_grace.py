"""How late do GenAI log events reach the pipeline after their sample's root? (grace period)

In process, ``configure()`` puts a ``BatchSpanProcessor`` (schedule delay 5 s, batches of 512)
and a ``BatchLogRecordProcessor`` (1 s, 512) in front of one pipeline. A model call emits its
log event before its span ends, but the two processors export on their own schedules, so an event
can reach the pipeline after the sample's root did. This measures that lag, per event, for
rollouts shaped like an agent loop (model latency between calls) and as a storm (no waiting:
both processors export by batch size). For grace periods from 0 to the default
(``LOG_GRACE_SECONDS``) it counts the samples that split (a continuation row for late events) and
the lag of every event that came after its sample was complete (from the end of the export that
completed it to the event's export).

    python bench/bench_log_grace.py [--samples 2000]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from typing import Any

os.environ.setdefault("TRACKIO_DIR", tempfile.mkdtemp(prefix="otel-trackio-bench-"))
os.environ.setdefault("TRACKIO_DISABLE_TELEMETRY", "1")

from opentelemetry import _logs, trace

import otel_trackio
from otel_trackio._core.assembly.grace import LOG_GRACE_SECONDS


def workload(samples: int, latency: float) -> None:
    """Rollout samples of a root, two model calls (each with a details log event) and a tool."""
    tracer = trace.get_tracer("bench")
    logger = _logs.get_logger("genai")
    chat = {"gen_ai.operation.name": "chat", "gen_ai.usage.input_tokens": 11}
    for index in range(samples):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            for call in range(2):
                with tracer.start_as_current_span("chat m", attributes=chat):
                    if latency:
                        time.sleep(latency)
                    text = {"type": "text", "content": f"q{call}"}
                    messages = [{"role": "user", "parts": [text]}]
                    logger.emit(
                        _logs.LogRecord(
                            event_name="gen_ai.client.inference.operation.details",
                            attributes={"gen_ai.input.messages": messages},
                        )
                    )
            with tracer.start_as_current_span("execute_tool t"):
                pass


def measure(name: str, samples: int, latency: float, grace: float | None) -> dict[str, Any]:
    """Run one workload; the lag of every event that arrived after its sample's root."""
    run = f"{name}-{grace}"
    handle = otel_trackio.configure("bench-log-grace", run, sample_grace_seconds=grace)
    pipeline = handle.span_exporter._pipeline
    roots: dict[int, float] = {}
    lags: list[float] = []
    events = 0
    add, add_events = pipeline.assembler.add, pipeline.add_events

    def timed_add(records: Any) -> Any:
        records = list(records)
        out = add(records)
        now = time.monotonic()  # the sample is complete (and held) from here on
        for record in records:
            if "sample_index" in record.attributes:
                roots[record.trace_id] = now
        return out

    def timed_add_events(batch: Any, *args: Any) -> Any:
        nonlocal events
        now = time.monotonic()  # handed to the pipeline: the log exporter's export
        batch = list(batch)
        events += len(batch)
        for event in batch:
            if event.trace_id in roots:
                lags.append(now - roots[event.trace_id])
        return add_events(batch, *args)

    pipeline.assembler.add = timed_add  # type: ignore[method-assign]
    pipeline.add_events = timed_add_events  # type: ignore[method-assign]
    started = time.perf_counter()
    workload(samples, latency)
    handle.shutdown()
    stats = pipeline.stats
    return {
        "workload": name,
        "grace_s": pipeline.grace.seconds,
        "samples": samples,
        "events": events,
        "events_after_root": len(lags),
        "lag_max_s": round(max(lags), 3) if lags else 0.0,
        "lag_p99_s": round(statistics.quantiles(lags, n=100)[98], 3) if len(lags) > 1 else 0.0,
        "continuations": stats.partial_samples,
        "seconds": round(time.perf_counter() - started, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=2000)
    args = parser.parse_args()
    rows = []
    for grace in (0.0, 0.5, 1.0, None):  # None: the default once a log exporter is there
        rows.append(measure("agent-loop", args.samples, 0.002, grace))
        rows.append(measure("storm", args.samples * 5, 0.0, grace))
        print(json.dumps(rows[-2]), json.dumps(rows[-1]), sep="\n", flush=True)
    worst = max(row["lag_max_s"] for row in rows)
    split = sum(row["continuations"] for row in rows if row["grace_s"] == LOG_GRACE_SECONDS)
    print(
        f"log events after their complete sample: at most {worst:.3f} s late; with the default "
        f"grace of {LOG_GRACE_SECONDS} s, {split} samples split"
    )


if __name__ == "__main__":
    main()
