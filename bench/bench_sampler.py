"""Figure 2: cost of a rollout sample dropped by ``StepSampler``.

``TracerProvider(sampler=StepSampler(0))`` drops every sample; the rollout thread still runs
``start_as_current_span`` for the sample root (carrying ``step`` and ``sample_index``, where the
sampler decides) and its 4 children (which follow the dropped parent). Compared with the cheapest
thing OTel can do: one plain span under ``ALWAYS_OFF`` with the same attributes. Best of
``--rounds`` rounds of ``--samples`` samples each. The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from otel_trackio.sampling import StepSampler

TARGET_US = 5.0
CHILD = {"gen_ai.operation.name": "chat", "gen_ai.request.model": w.MODEL}


def dropped_samples(tracer, n: int, children: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        with tracer.start_as_current_span(
            "rollout", attributes={"step": i // 100, "sample_index": i}
        ):
            for _ in range(children):
                with tracer.start_as_current_span("chat", attributes=CHILD):
                    pass
    return (time.perf_counter() - t0) / n


def plain_unsampled(tracer, n: int) -> float:
    t0 = time.perf_counter()
    for i in range(n):
        with tracer.start_as_current_span(
            "rollout", attributes={"step": i // 100, "sample_index": i}
        ):
            pass
    return (time.perf_counter() - t0) / n


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=50_000)
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()

    exporter = w.NoOpSpanExporter()
    sampled = TracerProvider(sampler=StepSampler(0))
    sampled.add_span_processor(BatchSpanProcessor(exporter))
    off = TracerProvider(sampler=ALWAYS_OFF)
    off.add_span_processor(BatchSpanProcessor(w.NoOpSpanExporter()))
    t_sampled, t_off = sampled.get_tracer("bench"), off.get_tracer("bench")
    best = {"root": float("inf"), "sample": float("inf"), "plain": float("inf")}
    for _ in range(args.rounds):
        best["plain"] = min(best["plain"], plain_unsampled(t_off, args.samples))
        best["root"] = min(best["root"], dropped_samples(t_sampled, args.samples, 0))
        best["sample"] = min(best["sample"], dropped_samples(t_sampled, args.samples, 4))
    sampled.shutdown()
    off.shutdown()
    assert exporter.spans == 0, "StepSampler(0) recorded spans"
    root_us, sample_us, plain_us = (best[k] * 1e6 for k in ("root", "sample", "plain"))
    print(
        f"per dropped 5-span sample (root + 4 children): {sample_us:.2f} us "
        f"({sample_us / plain_us:.1f}x a plain unsampled span)",
        file=sys.stderr,
    )
    w.write_result(
        "2. StepSampler: dropped sample root (per sample) / plain ALWAYS_OFF span",
        f"{root_us:.2f} us ({root_us / plain_us:.2f}x)",
        "<= 5 us",
        root_us <= TARGET_US,
    )
    w.cleanup()
    print(
        f"dropped sample (its root span): {root_us:.2f} us per sample, {root_us / plain_us:.2f}x a "
        f"plain unsampled span ({plain_us:.2f} us); whole 5-span sample {sample_us:.2f} us "
        "(target <= 5 us)"
    )


if __name__ == "__main__":
    main()
