"""Figure 13b: what ``TrackioSpanProcessor`` adds per span on the rollout's thread.

Figure 13 measures a whole asyncio rollout, where this VM's drift (±5% between neighbouring
rollouts) hides anything under a microsecond. This measures only the processors' ``on_start`` and
``on_end`` (ours also records each open span, for a stuck sample's Trace), called for 1,000 SDK
spans of a GenAI span's attributes already started: ``BatchSpanProcessor``'s against
``TrackioSpanProcessor``'s, in this one process, alternating, nothing exported (a long schedule
delay; the queue emptied between rounds), the best and the median of ``--rounds``. For scale, the
SDK's own cost of a span (started and ended through the tracer, ``BatchSpanProcessor`` behind it)
is measured too.
"""

from __future__ import annotations

import argparse
import gc
import statistics
import sys
import time
from typing import Any

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

SPANS = 1000


def _attributes(i: int) -> dict[str, Any]:
    """A GenAI span's attributes; its messages its own (as in a rollout: an encoder may not
    count on one string object shared by every span)."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "qwen",
        "gen_ai.usage.input_tokens": 420,
        "gen_ai.usage.output_tokens": 21,
        "gen_ai.input.messages": f"{i:08d}" + "x" * 1992,
        "gen_ai.output.messages": f"{i:08d}" + "y" * 92,
    }


ATTRIBUTES = [_attributes(i) for i in range(SPANS)]
TARGET_US = 0.5


def _hooks(processor: Any, spans: list[Any]) -> float:
    """Seconds per span of ``processor.on_start`` then ``on_end`` for each of ``spans``."""
    on_start, on_end = processor.on_start, processor.on_end
    t0 = time.perf_counter()
    for span in spans:
        on_start(span, parent_context=None)
    for span in spans:
        on_end(span)
    elapsed = time.perf_counter() - t0
    _forget(processor)  # nothing is exported: only the hooks count
    return elapsed / len(spans)


def _forget(processor: Any) -> None:
    """Drop what the processor queued (spans; offloaded: the encoded chunks), unexported."""
    processor._batch_processor._queue.clear()
    spooler = getattr(processor, "_spooler", None)
    if spooler is not None:
        with spooler._lock:
            spooler._packed.clear()
            spooler._packed_spans = 0
            spooler._chunk = type(spooler._chunk)()


def _whole_span(processor: Any) -> float:
    """Seconds per span started and ended through an SDK tracer with ``processor`` behind it."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(processor)
    tracer = provider.get_tracer("bench")
    t0 = time.perf_counter()
    for attributes in ATTRIBUTES:
        with tracer.start_as_current_span("chat qwen", attributes=attributes):
            pass
    elapsed = time.perf_counter() - t0
    _forget(processor)
    return elapsed / SPANS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300, help="rounds per arm, alternating")
    args = parser.parse_args()
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor

    options: dict[str, Any] = {"max_queue_size": 10 * SPANS, "schedule_delay_millis": 3_600_000}
    with w.quiet_stdout():
        exporter = TrackioSpanExporter("bench-processor", "r", offload=False, summary=False)
        offloaded = TrackioSpanExporter("bench-processor", "o", offload=True, summary=False)
    tracer = TracerProvider().get_tracer("bench")
    spans = [tracer.start_span("chat qwen", attributes=attributes) for attributes in ATTRIBUTES]
    sdk_processor = BatchSpanProcessor(w.NoOpSpanExporter(), **options)
    our_processor = TrackioSpanProcessor(exporter, **options)
    # Offloaded, on_end also encodes the span (what the export thread did before, cold).
    spooling = TrackioSpanProcessor(offloaded, **options, max_export_batch_size=10 * SPANS)
    sdk: list[float] = []
    ours: list[float] = []
    encoding: list[float] = []
    gc.disable()  # the collector's pauses would land on either arm at random
    try:
        for r in range(args.rounds):
            arms = [(sdk_processor, sdk), (our_processor, ours), (spooling, encoding)]
            for processor, results in arms if r % 2 else reversed(arms):
                results.append(_hooks(processor, spans))
        whole = min(_whole_span(sdk_processor) for _ in range(20))
    finally:
        gc.enable()
        sdk_processor.shutdown()
        our_processor.shutdown()
        _forget(spooling)
        with w.quiet_stdout():
            spooling.shutdown()
            exporter.shutdown()
        w.cleanup()
    best = (min(ours) - min(sdk)) * 1e6
    median = (statistics.median(ours) - statistics.median(sdk)) * 1e6
    print(
        f"on_start + on_end per span: BatchSpanProcessor {min(sdk) * 1e6:.2f} us, "
        f"TrackioSpanProcessor {min(ours) * 1e6:.2f} us (best of {args.rounds}): +{best:.2f} us "
        f"(medians: +{median:.2f} us); the SDK's whole span {whole * 1e6:.1f} us",
        file=sys.stderr,
    )
    w.write_result(
        "13b. TrackioSpanProcessor's on_start + on_end over BatchSpanProcessor's, per GenAI span "
        "on the rollout thread (best / median of alternating rounds)",
        f"+{best:.2f} / +{median:.2f} µs (the SDK's whole span: {whole * 1e6:.1f} µs)",
        f"<= {TARGET_US:.1f} µs",
        best <= TARGET_US,
    )
    spooled = (min(encoding) - min(sdk)) * 1e6
    print(
        f"offloaded, on_end encoding each span: TrackioSpanProcessor {min(encoding) * 1e6:.2f} us "
        f"(best of {args.rounds}): +{spooled:.2f} us over BatchSpanProcessor (medians: "
        f"+{(statistics.median(encoding) - statistics.median(sdk)) * 1e6:.2f} us)",
        file=sys.stderr,
    )
    w.write_result(
        "13c. the same, offloaded: on_end also encodes the span for the spool (the export "
        "thread's work before, moved to the rollout thread; best of alternating rounds)",
        f"+{spooled:.2f} µs",
        "(recorded)",
        None,
    )
    print(
        f"processor +{best:.2f} us per span over BatchSpanProcessor (SDK span {whole * 1e6:.1f} us)"
    )


if __name__ == "__main__":
    main()
