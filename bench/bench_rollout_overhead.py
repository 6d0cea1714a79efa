"""Figure 1: rollout-thread wall time with ``BatchSpanProcessor(TrackioSpanExporter)`` vs a no-op.

The same 5-span GenAI workload is emitted by the main ("rollout") thread with a
``BatchSpanProcessor`` (SDK defaults) in front of (a) an exporter that drops everything and
(b) ``TrackioSpanExporter`` into a temp Trackio project. Only the emitting loop is timed — that
is what the rollout waits for; the processor's thread exports meanwhile, competing for the GIL.
Arms alternate for ``--rounds`` rounds; each arm's best round counts. Spans the processor
dropped because its queue was full are reported (they would make the Trackio arm look cheaper).
The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio import TrackioSpanExporter

TARGET = 1.10


def run_arm(samples: int, trackio: bool) -> tuple[float, float, int]:
    """(rollout seconds, drain seconds at shutdown, spans the exporter received)."""
    if trackio:
        with w.quiet_stdout():
            exporter = TrackioSpanExporter(project="bench-rollout", name=uuid.uuid4().hex[:8])
    else:
        exporter = w.NoOpSpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("bench")
    rollout = w.timed(lambda: w.emit_workload(tracer, samples))
    with w.quiet_stdout():
        drain = w.timed(provider.shutdown)
    received = exporter.stats.spans_received if trackio else exporter.spans
    return rollout, drain, received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    spans = args.samples * w.SPANS_PER_SAMPLE

    run_arm(200, trackio=True)  # warm imports and caches
    run_arm(200, trackio=False)
    best = {"noop": float("inf"), "trackio": float("inf")}
    dropped = {"noop": 0, "trackio": 0}
    for r in range(args.rounds):
        for arm in ("noop", "trackio"):
            rollout, drain, received = run_arm(args.samples, trackio=arm == "trackio")
            best[arm] = min(best[arm], rollout)
            dropped[arm] = max(dropped[arm], spans - received)
            print(
                f"round {r + 1} {arm:7s}: rollout {rollout:.2f} s "
                f"({rollout / spans * 1e6:.1f} us/span), drain at shutdown {drain:.2f} s, "
                f"dropped by the processor {spans - received}",
                file=sys.stderr,
            )
    ratio = best["trackio"] / best["noop"]
    w.write_result(
        f"1. rollout wall time, BSP(Trackio)/BSP(no-op), {args.samples:,} samples x 5 spans",
        f"{ratio:.2f}x",
        "<= 1.10x",
        ratio <= TARGET and dropped["trackio"] == 0,
    )
    w.cleanup()
    note = f", {dropped['trackio']} spans dropped (queue full)" if dropped["trackio"] else ""
    print(
        f"rollout wall time ratio, {args.samples:,} samples x 5 spans: {ratio:.2f}x "
        f"(Trackio {best['trackio']:.2f} s vs no-op {best['noop']:.2f} s{note}; target <= 1.10x)"
    )


if __name__ == "__main__":
    main()
