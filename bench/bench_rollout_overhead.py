"""Figure 1: rollout-thread wall time with ``BatchSpanProcessor(TrackioSpanExporter)`` vs a no-op.

The same 5-span GenAI workload is emitted by the main ("rollout") thread with a
``BatchSpanProcessor`` in front of (a) an exporter that drops everything and (b)
``TrackioSpanExporter`` into a temp Trackio project. Only the emitting loop is timed — that is
what the rollout waits for; the processor's thread exports meanwhile, competing for the GIL.
The processor's queue holds the whole workload, so no span is dropped and both arms do the same
work (with the SDK's default 2,048-span queue a span storm overflows it and the Trackio arm would
look cheaper by dropping spans).

Two workloads:

* **span storm** — the rollout thread does nothing but create spans (about 10k spans/s here):
  the worst case, since the exporter and Trackio's SQLite writes need more CPU per span than
  creating it and take it from the rollout thread through the GIL;
* **with model latency** — each model call waits ``--latency-ms`` (as a rollout waits for its
  inference server; the GIL is free meanwhile), the shape of a real RL rollout.

Each arm runs in a fresh process (what a rollout process is: the no-op arm never imports
Trackio, and with ``offload=True`` — the exporter's default — neither does the Trackio arm; the
writer process does). Arms alternate for ``--rounds`` rounds; a figure is the median of the
rounds' ratios (each round's Trackio arm over its own no-op arm). The last line printed is the
figure.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

STORM_TARGET = 1.15
LATENCY_TARGET = 1.02
OTLP_TARGET = 1.10


def arm_in_this_process(samples: int, arm: str, latency: float, port: int) -> dict[str, float]:
    """One arm, in this (fresh) process: a warm-up of 200 samples, then the timed rollout.
    Returns rollout seconds, drain seconds at shutdown, and the spans the exporter received
    (Trackio arm: the samples stored, counted in Trackio's storage)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = uuid.uuid4().hex[:8]
    exporter: object
    if arm == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        exporter = OTLPSpanExporter(endpoint=f"http://127.0.0.1:{port}/v1/traces", timeout=120)
    elif arm == "trackio":
        from otel_trackio import TrackioSpanExporter

        with w.quiet_stdout():
            exporter = TrackioSpanExporter(project="bench-rollout", name=name)
    else:
        exporter = w.NoOpSpanExporter()
    spans = samples * w.SPANS_PER_SAMPLE
    provider = TracerProvider()
    processor = BatchSpanProcessor(exporter, max_queue_size=max(2048, spans))  # type: ignore[arg-type]
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    w.emit_workload(tracer, 200, first=samples, model_latency=latency)  # warm up
    with w.quiet_stdout():
        provider.force_flush(timeout_millis=600_000)
    rollout = w.timed(lambda: w.emit_workload(tracer, samples, model_latency=latency))
    with w.quiet_stdout():
        provider.force_flush(timeout_millis=600_000)
        drain = w.timed(provider.shutdown)
    if arm == "otlp":
        received = spans  # counted on the receiver side: every Trace is checked by figure 6
    elif arm == "trackio":
        stored = w.count_traces("bench-rollout", name) - 200  # minus the warm-up
        received = stored * w.SPANS_PER_SAMPLE
    else:
        received = exporter.spans - 200 * w.SPANS_PER_SAMPLE  # type: ignore[attr-defined]
    w.cleanup()
    return {"rollout": rollout, "drain": drain, "received": received}


def run_arm(samples: int, arm: str, latency: float, port: int = 0) -> tuple[float, float, int]:
    """(rollout seconds, drain seconds at shutdown, spans received) of one arm in a fresh
    process."""
    command = [sys.executable, os.path.abspath(__file__), "--arm", arm]
    command += ["--samples", str(samples), "--latency-ms", str(latency * 1000), "--port", str(port)]
    env = dict(os.environ, TRACKIO_DISABLE_TELEMETRY="1")
    env.pop("TRACKIO_DIR", None)  # the child makes its own
    proc = subprocess.run(command, capture_output=True, text=True, env=env)
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm} failed:\n{proc.stderr[-3000:]}")
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    return result["rollout"], result["drain"], int(result["received"])


def measure(
    samples: int, rounds: int, latency: float, label: str, receiver: w.Receiver | None = None
) -> tuple[float, int]:
    """The median over rounds of (Trackio arm / the no-op arm of the same round), and the most
    spans either arm lost. Arms alternate (each round reverses the order), so a neighbour's
    burst on a shared machine hits one round's pair, not the median.

    With ``receiver``, the Trackio arm is the official OTLP exporter to ``otel-trackio serve``.
    """
    spans = samples * w.SPANS_PER_SAMPLE
    ratios: list[float] = []
    walls: dict[str, list[float]] = {"noop": [], "trackio": []}
    lost = 0
    for r in range(rounds):
        this_round: dict[str, float] = {}
        for arm in ("noop", "trackio") if r % 2 == 0 else ("trackio", "noop"):
            kind = "otlp" if receiver is not None and arm == "trackio" else arm
            port = receiver.port if receiver is not None else 0
            rollout, drain, received = run_arm(samples, kind, latency, port)
            this_round[arm] = rollout
            walls[arm].append(rollout)
            lost = max(lost, spans - received)
            print(
                f"{label} round {r + 1} {arm:7s}: rollout {rollout:.2f} s "
                f"({rollout / spans * 1e6:.1f} us/span), drain after the loop {drain:.2f} s, "
                f"spans not exported {spans - received}",
                file=sys.stderr,
            )
        ratios.append(this_round["trackio"] / this_round["noop"])
    ratio = statistics.median(ratios)
    print(
        f"{label}: {ratio:.2f}x, median of {rounds} paired rounds (Trackio "
        f"{statistics.median(walls['trackio']):.2f} s vs no-op "
        f"{statistics.median(walls['noop']):.2f} s)",
        file=sys.stderr,
    )
    return ratio, lost


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in this process
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.arm:
        result = arm_in_this_process(args.samples, args.arm, args.latency_ms / 1000, args.port)
        print(json.dumps(result))
        return

    storm, storm_lost = measure(args.samples, args.rounds, 0.0, "span storm")
    latency = args.latency_ms / 1000
    paced, paced_lost = measure(args.samples, args.rounds, latency, "with model latency")
    receiver = w.Receiver("bench-rollout-otlp")
    try:
        remote, remote_lost = measure(
            args.samples, args.rounds, latency, "OTLP to otel-trackio serve", receiver
        )
    finally:
        receiver.stop()
    w.write_result(
        f"1. rollout wall time, BSP(Trackio)/BSP(no-op), {args.samples:,} samples x 5 spans, "
        "span storm",
        f"{storm:.2f}x",
        f"<= {STORM_TARGET:.2f}x",
        storm <= STORM_TARGET and storm_lost == 0,
    )
    w.write_result(
        f"1b. the same with {args.latency_ms:g} ms model latency per model call",
        f"{paced:.2f}x",
        f"<= {LATENCY_TARGET:.2f}x",
        paced <= LATENCY_TARGET and paced_lost == 0,
    )
    w.write_result(
        "1c. the same, exporting over OTLP/HTTP to `otel-trackio serve` in another process",
        f"{remote:.2f}x",
        f"<= {OTLP_TARGET:.2f}x",
        remote <= OTLP_TARGET and remote_lost == 0,
    )
    w.cleanup()
    print(
        f"rollout wall time ratio, {args.samples:,} samples x 5 spans, nothing dropped: "
        f"span storm {storm:.2f}x, with {args.latency_ms:g} ms model latency {paced:.2f}x, "
        f"the same over OTLP to otel-trackio serve {remote:.2f}x "
        f"(targets <= {STORM_TARGET}x / {LATENCY_TARGET}x / {OTLP_TARGET}x)"
    )


if __name__ == "__main__":
    main()
