"""Figures 8 to 10: what the rollout process pays with ``offload=True``, side by side.

Arms, each behind the same ``BatchSpanProcessor`` (queue sized so nothing is dropped):

* ``noop``       — an exporter that drops everything (tracing on, export free);
* ``in-process`` — ``TrackioSpanExporter``: conversion and Trackio writes in this process;
* ``offload``    — ``TrackioSpanExporter(offload=True)``: spans spooled, a writer process logs;
* ``otlp``       — the official OTLP/HTTP exporter to ``otel-trackio serve`` (another process).

Figures, measured in one run:

8. rollout-process CPU per exported span: (process CPU of the arm - of ``noop``) / spans, a span
   storm (all threads of this process: the rollout and the export thread; the writer process and
   the receiver are other processes);
9. rollout wall time / ``noop``: with 2 ms model latency per model call, and as a span storm;
   every sample stored after shutdown, counted;
10. an asyncio rollout with 256 concurrent samples: event-loop lag p99 (a ticker every 5 ms
    measures how late it wakes).

The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio import TrackioSpanExporter

ARMS = ("noop", "in-process", "offload", "otlp")


def make(arm: str, project: str, name: str, receiver: w.Receiver | None) -> object:
    if arm == "noop":
        return w.NoOpSpanExporter()
    if arm == "otlp":
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

        assert receiver is not None
        return OTLPSpanExporter(endpoint=f"http://127.0.0.1:{receiver.port}/v1/traces", timeout=120)
    with w.quiet_stdout():
        return TrackioSpanExporter(project, name, offload=arm == "offload")


def run(arm: str, samples: int, latency: float, receiver: w.Receiver | None) -> dict[str, float]:
    """One arm: rollout wall and CPU seconds, shutdown seconds, samples stored."""
    project = receiver.project if arm == "otlp" and receiver else "bench-offload"
    name = "r" if arm == "otlp" else uuid.uuid4().hex[:8]
    before = w.count_traces(project, name) if arm == "otlp" else 0
    exporter = make(arm, project, name, receiver)
    if isinstance(exporter, TrackioSpanExporter) and exporter.offloaded is not None:
        exporter.force_flush()  # steady state: the writer process has started (imports done)
    provider = TracerProvider()
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_queue_size=max(2048, samples * w.SPANS_PER_SAMPLE))
    )
    tracer = provider.get_tracer("bench")
    cpu0, wall0 = time.process_time(), time.perf_counter()
    w.emit_workload(tracer, samples, model_latency=latency)
    wall = time.perf_counter() - wall0
    with w.quiet_stdout():
        provider.force_flush(timeout_millis=600_000)
        cpu = time.process_time() - cpu0  # the rollout process's work, export included
        shutdown = w.timed(provider.shutdown)
    stored = None
    if arm == "otlp" and receiver is not None:
        stored = -1  # counted after the receiver stopped
    elif arm != "noop":
        stored = w.count_traces(project, name) - before
    return {"wall": wall, "cpu": cpu, "shutdown": shutdown, "stored": stored or 0}


def best_runs(
    samples: int, latency: float, receiver: w.Receiver | None, rounds: int
) -> dict[str, dict[str, float]]:
    """Each arm's best round (least rollout wall time), arms alternating; stored counts add up."""
    best: dict[str, dict[str, float]] = {}
    for _ in range(rounds):
        for arm in ARMS:
            result = run(arm, samples, latency, receiver)
            stored = best.get(arm, {}).get("stored", 0) + result["stored"]
            if arm not in best or result["wall"] < best[arm]["wall"]:
                best[arm] = result
            best[arm]["stored"] = stored
    return best


async def _async_rollout(
    tracer: object, concurrency: int, samples: int, latency: float
) -> list[float]:
    """256 concurrent samples on one event loop; returns the loop's lag samples (seconds)."""
    lags: list[float] = []
    stop = asyncio.Event()

    async def ticker() -> None:
        period = 0.005
        while not stop.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(period)
            lags.append(time.perf_counter() - t0 - period)

    async def sample(i: int) -> None:
        payload = w.sample_payload(i)
        with tracer.start_as_current_span(  # type: ignore[attr-defined]
            "rollout", attributes={"step": i // w.SAMPLES_PER_STEP, "sample_index": i}
        ):
            for turn in (1, 2):
                with tracer.start_as_current_span(  # type: ignore[attr-defined]
                    "chat " + w.MODEL, attributes=w.chat_attributes(i, payload, turn)
                ):
                    await asyncio.sleep(latency)
            with tracer.start_as_current_span("reward"):  # type: ignore[attr-defined]
                pass

    tick = asyncio.create_task(ticker())
    queue = iter(range(samples))

    async def worker() -> None:
        for i in queue:
            await sample(i)

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    stop.set()
    await tick
    return lags


def loop_lag(arm: str, samples: int, latency: float, receiver: w.Receiver | None) -> float:
    """Event-loop lag p99 (ms) while 256 concurrent samples run and the arm exports them."""
    exporter = make(arm, "bench-offload-async", uuid.uuid4().hex[:8], receiver)
    if isinstance(exporter, TrackioSpanExporter) and exporter.offloaded is not None:
        exporter.force_flush()
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=samples * 4))
    lags = asyncio.run(_async_rollout(provider.get_tracer("bench"), 256, samples, latency))
    with w.quiet_stdout():
        provider.shutdown()
    return statistics.quantiles(lags, n=100)[98] * 1000


def best_lag(
    samples: int, latency: float, receiver: w.Receiver | None, rounds: int
) -> dict[str, float]:
    """Each arm's best p99 over ``rounds`` rounds, arms alternating."""
    best = {arm: float("inf") for arm in ARMS}
    for _ in range(rounds):
        for arm in ARMS:
            best[arm] = min(best[arm], loop_lag(arm, samples, latency, receiver))
    return best


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=2000)
    parser.add_argument("--latency-ms", type=float, default=2.0)
    parser.add_argument("--async-samples", type=int, default=2000)
    parser.add_argument("--rounds", type=int, default=3, help="arms alternate; best round counts")
    args = parser.parse_args()
    spans = args.samples * w.SPANS_PER_SAMPLE
    latency = args.latency_ms / 1000
    receiver = w.Receiver(f"bench-offload-otlp-{uuid.uuid4().hex[:6]}")
    try:
        run("in-process", 100, 0.0, receiver)  # warm imports and caches
        run("offload", 100, 0.0, receiver)
        storm = best_runs(args.samples, 0.0, receiver, args.rounds)
        paced = best_runs(args.samples, latency, receiver, args.rounds)
        lag = best_lag(args.async_samples, latency, receiver, args.rounds)
    finally:
        receiver.stop()
    # The OTLP arm's receiver also got the asyncio rounds' samples.
    stored_otlp = w.count_traces(receiver.project, "r") - args.rounds * args.async_samples
    for label, figures in (("span storm", storm), (f"{args.latency_ms:g} ms latency", paced)):
        for arm in ARMS:
            f = figures[arm]
            print(
                f"{label:16s} {arm:10s}: wall {f['wall']:.2f} s, CPU {f['cpu']:.2f} s, "
                f"shutdown {f['shutdown']:.2f} s, stored {f['stored']}",
                file=sys.stderr,
            )
    cpu_per_span = {
        arm: (storm[arm]["cpu"] - storm["noop"]["cpu"]) / spans * 1e6 for arm in ARMS[1:]
    }
    wall_paced = {arm: paced[arm]["wall"] / paced["noop"]["wall"] for arm in ARMS[1:]}
    wall_storm = {arm: storm[arm]["wall"] / storm["noop"]["wall"] for arm in ARMS[1:]}
    expected = 2 * args.samples * args.rounds  # storm + paced arms, every round
    stored = {
        "in-process": storm["in-process"]["stored"] + paced["in-process"]["stored"],
        "offload": storm["offload"]["stored"] + paced["offload"]["stored"],
        "otlp": stored_otlp,
    }
    for arm in ARMS[1:]:
        print(
            f"{arm:10s}: {cpu_per_span[arm]:.1f} us CPU/span in the rollout process, wall "
            f"x{wall_paced[arm]:.2f} with latency, x{wall_storm[arm]:.2f} storm, loop lag p99 "
            f"{lag[arm]:.1f} ms (no-op {lag['noop']:.1f} ms), stored {stored[arm]}/{expected}",
            file=sys.stderr,
        )
    w.write_result(
        "8. rollout-process CPU per exported span: in-process / offload / official OTLP",
        f"{cpu_per_span['in-process']:.0f} / {cpu_per_span['offload']:.1f} / "
        f"{cpu_per_span['otlp']:.0f} µs",
        "offload <= 15 µs",
        cpu_per_span["offload"] <= 15,
    )
    w.write_result(
        f"9. rollout wall / no-op, offload, {args.latency_ms:g} ms model latency",
        f"{wall_paced['offload']:.2f}x (in-process {wall_paced['in-process']:.2f}x, "
        f"OTLP {wall_paced['otlp']:.2f}x)",
        "<= 1.03x",
        wall_paced["offload"] <= 1.03 and stored["offload"] == expected,
    )
    w.write_result(
        "9b. rollout wall / no-op, offload, span storm",
        f"{wall_storm['offload']:.2f}x (in-process {wall_storm['in-process']:.2f}x, "
        f"OTLP {wall_storm['otlp']:.2f}x); stored {stored['offload']}/{expected}",
        "<= 1.25x, all stored",
        wall_storm["offload"] <= 1.25 and stored["offload"] == expected,
    )
    w.write_result(
        "10. asyncio, 256 concurrent samples: event-loop lag p99, no-op / in-process / offload",
        f"{lag['noop']:.1f} / {lag['in-process']:.1f} / {lag['offload']:.1f} ms",
        "(recorded)",
        None,
    )
    w.cleanup()
    print(
        f"offload: {cpu_per_span['offload']:.1f} us CPU/span in the rollout process "
        f"(in-process {cpu_per_span['in-process']:.0f}, OTLP {cpu_per_span['otlp']:.0f}); "
        f"wall x{wall_paced['offload']:.2f} with {args.latency_ms:g} ms latency, "
        f"x{wall_storm['offload']:.2f} storm; loop lag p99 {lag['offload']:.1f} ms "
        f"(no-op {lag['noop']:.1f}, in-process {lag['in-process']:.1f}); "
        f"stored {stored['offload']}/{expected}"
    )


if __name__ == "__main__":
    main()
