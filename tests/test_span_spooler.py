"""``TrackioSpanProcessor`` with an offloading exporter: spans are encoded as they end, on the
thread that ends them, and a thread of the processor's own appends them to the spool
(``otel_trackio/_offload/span_spooler.py``). Real SDK, real spool and writer process, real
Trackio storage; each sample counted there by (step, sample_index)."""

from __future__ import annotations

import errno
import os
import threading
from collections import Counter
from typing import Any

from conftest import read_traces, wait_until
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.sampling import Decision, Sampler, SamplingResult

from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._offload import client as offload_client
from otel_trackio._offload.span_spooler import CHUNK_SPANS
from otel_trackio._spool import segments as spool_segments


def _provider(project: str, name: str, **options: Any) -> tuple[TracerProvider, Any, Any]:
    exporter = TrackioSpanExporter(project, name, offload=True)
    processor = TrackioSpanProcessor(exporter, **options)
    provider = TracerProvider()
    provider.add_span_processor(processor)
    return provider, processor, exporter


def _samples(provider: TracerProvider, step: int, indexes: range) -> None:
    """Samples of three spans each: a root, a model call with messages, a tool call."""
    tracer = provider.get_tracer("rollout")
    for i in indexes:
        with tracer.start_as_current_span("rollout", attributes={"step": step, "sample_index": i}):
            with tracer.start_as_current_span(
                "chat m",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.input.messages": '[{"role":"user","parts":[]}]' + " " * 500,
                },
            ):
                pass
            with tracer.start_as_current_span("execute_tool calc"):
                pass


def _stored(project: str, name: str) -> Counter[tuple[int, int]]:
    """How many times each (step, sample_index) is in Trackio's storage."""
    return Counter((t["step"], t["metadata"]["sample_index"]) for t in read_traces(project, name))


def _finish(provider: TracerProvider, exporter: Any) -> None:
    assert provider.force_flush(60_000)
    assert exporter.force_flush(60_000)
    provider.shutdown()


def test_spans_are_encoded_as_they_end_and_spooled_by_the_processors_own_thread(
    project, monkeypatch
):
    """No batch of span objects reaches the exporter's ``export()``: the spool gets encoded
    chunks, from the spooler's thread (whole batches) or the flush (the rest); every sample is
    stored once, whole, however the chunks cut its spans."""
    spooled_from: list[tuple[str, int]] = []
    real = offload_client.OffloadClient.try_spool_spans

    def try_spool_spans(self: Any, payloads: Any, spans: int) -> Any:
        spooled_from.append((threading.current_thread().name, spans))
        return real(self, payloads, spans)

    monkeypatch.setattr(offload_client.OffloadClient, "try_spool_spans", try_spool_spans)
    provider, _, exporter = _provider(project, "chunks", max_export_batch_size=128)
    exported: list[int] = []
    monkeypatch.setattr(exporter, "export", lambda spans: exported.append(len(spans)))
    _samples(provider, 0, range(301))  # 903 spans: not a whole number of chunks
    _finish(provider, exporter)
    assert exported == []
    assert sum(n for _, n in spooled_from) == 903
    threads = {name for name, _ in spooled_from}
    assert "otel-trackio-span-spooler" in threads  # batches went out while spans still ended
    assert max(n for _, n in spooled_from) >= 128
    assert _stored(project, "chunks") == Counter({(0, i): 1 for i in range(301)})
    traces = read_traces(project, "chunks")
    assert all(len(t["spans"]) == 3 and not t["metadata"].get("partial") for t in traces)
    assert exporter.stats.spans_received == 903


def test_spans_ended_on_many_threads_are_each_stored_once(project):
    provider, _, exporter = _provider(project, "threads")
    workers = [
        threading.Thread(target=_samples, args=(provider, step, range(60))) for step in range(8)
    ]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    _finish(provider, exporter)
    assert _stored(project, "threads") == Counter(
        {(step, i): 1 for step in range(8) for i in range(60)}
    )


def test_a_write_failing_half_way_keeps_its_spans_and_stores_everything_once(
    project, monkeypatch
):
    """The disk fills during one append of chunks: half its bytes reach the segment, then
    ENOSPC. The spool is cut back (no torn entry); those spans wait in memory and go with the
    next append, once there is room: every sample stored, once, nothing refused."""
    real = spool_segments._write_all
    full = [False]

    def write(handle: Any, *buffers: bytes) -> None:
        if full[0]:
            data = b"".join(bytes(b) for b in buffers)
            os.write(handle.fileno(), data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    provider, processor, exporter = _provider(project, "enospc", schedule_delay_millis=600_000)
    for step in range(3):
        _samples(provider, step, range(CHUNK_SPANS))  # three chunks a step
        full[0] = step == 1  # the disk is full while step 1 is appended
        assert processor.force_flush(60_000) is (step != 1)  # each step one append
        full[0] = False
    _finish(provider, exporter)
    stored = _stored(project, "enospc")
    assert stored == Counter({(step, i): 1 for step in range(3) for i in range(CHUNK_SPANS)})
    assert exporter.stats.spans_received == 3 * 3 * CHUNK_SPANS
    assert exporter.offloaded.spans_refused == 0


def test_a_disk_full_for_too_long_gives_up_the_oldest_spans_counted(project, monkeypatch):
    """No room for longer than memory may hold: past ``MAX_HELD_BYTES`` the oldest waiting
    spans are given up, counted as refused and said; once there is room again the rest is
    stored, once; the counts agree with storage."""
    from otel_trackio._offload import span_spooler

    monkeypatch.setattr(span_spooler, "MAX_HELD_BYTES", 200_000)
    real = spool_segments._write_all
    full = [True]

    def write(handle: Any, *buffers: bytes) -> None:
        if full[0]:
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    provider, processor, exporter = _provider(project, "long", schedule_delay_millis=600_000)
    for step in range(6):
        _samples(provider, step, range(CHUNK_SPANS))
        assert processor.force_flush(60_000) is False
    full[0] = False
    _finish(provider, exporter)
    refused = exporter.offloaded.spans_refused
    stored = _stored(project, "long")
    assert refused > 0 and set(stored.values()) == {1}
    # Every span stored or counted (a chunk given up can cut a sample: the rest of it is stored).
    spans_stored = sum(len(t["spans"]) for t in read_traces(project, "long"))
    assert spans_stored + refused == 6 * 3 * CHUNK_SPANS
    assert stored[(5, 0)] == 1  # the newest waited; the oldest were given up
    assert (0, 0) not in stored


def test_a_stalled_spool_bounds_the_queue_drops_and_counts_the_rest(project, monkeypatch):
    """While the spool takes nothing (a write stuck on a slow disk), at most
    ``max_queue_size`` spans wait (more are dropped and counted, never held without bound);
    once it moves, every span kept is stored, once."""
    stuck, entered = threading.Event(), threading.Event()
    real = spool_segments._write_all

    def write(handle: Any, *buffers: bytes) -> None:
        entered.set()
        assert stuck.wait(60)
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    provider, _, exporter = _provider(
        project, "stalled", max_queue_size=192, max_export_batch_size=CHUNK_SPANS
    )
    tracer = provider.get_tracer("rollout")

    def one(i: int) -> None:
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
            pass

    for i in range(CHUNK_SPANS):
        one(i)
    assert entered.wait(30)  # the spooler's thread is stuck writing the first chunk
    for i in range(CHUNK_SPANS, 1000):
        one(i)
    refused = exporter.offloaded.spans_refused
    assert refused == 1000 - CHUNK_SPANS - 192  # the written chunk, then the queue's 192
    stuck.set()
    _finish(provider, exporter)
    stored = _stored(project, "stalled")
    assert set(stored.values()) == {1}
    assert len(stored) == 1000 - refused
    assert exporter.stats.spans_received == 1000


class _RecordOnly(Sampler):
    """Records every span without sampling it (the SDK calls processors; nothing is exported)."""

    def should_sample(self, *args: Any, **kwargs: Any) -> SamplingResult:
        return SamplingResult(Decision.RECORD_ONLY)

    def get_description(self) -> str:
        return "record-only"


def test_spans_recorded_but_not_sampled_are_not_spooled(project):
    exporter = TrackioSpanExporter(project, "unsampled", offload=True)
    provider = TracerProvider(sampler=_RecordOnly())
    provider.add_span_processor(TrackioSpanProcessor(exporter))
    _samples(provider, 0, range(5))
    _finish(provider, exporter)
    assert exporter.stats.spans_received == 0
    assert read_traces(project, "unsampled") == []


def test_shutdown_is_idempotent_and_spans_after_it_are_ignored(project):
    provider, processor, _ = _provider(project, "closed")
    _samples(provider, 0, range(3))
    processor.shutdown()
    processor.shutdown()
    _samples(provider, 1, range(3))  # ended after the shutdown: dropped, no error
    assert processor.force_flush(1_000) is False  # as a BatchSpanProcessor after shutdown
    assert _stored(project, "closed") == Counter({(0, i): 1 for i in range(3)})
    provider.shutdown()


def test_a_lone_span_is_spooled_within_the_schedule_delay(project):
    """Fewer spans than a chunk still reach the spool without a flush: at the schedule delay
    the thread packs the part-filled chunk."""
    provider, _, exporter = _provider(project, "lone", schedule_delay_millis=200)
    _samples(provider, 0, range(1))
    waited = threading.Event()
    for _ in range(600):
        if exporter.offloaded.spans_spooled == 3:
            break
        waited.wait(0.05)
    assert exporter.offloaded.spans_spooled == 3
    _finish(provider, exporter)
    assert _stored(project, "lone") == Counter({(0, 0): 1})


def test_the_spooler_takes_the_batch_arguments_then_the_sdks_variables_then_its_defaults(
    monkeypatch,
):
    from otel_trackio.span_processor import _spooler_options

    defaults = {"max_queue_size": 2048, "schedule_delay_seconds": 5.0, "batch_spans": 512}
    assert _spooler_options({}) == defaults
    monkeypatch.setenv("OTEL_BSP_MAX_QUEUE_SIZE", "300")
    monkeypatch.setenv("OTEL_BSP_SCHEDULE_DELAY", "250")
    monkeypatch.setenv("OTEL_BSP_MAX_EXPORT_BATCH_SIZE", "not a number")
    assert _spooler_options({}) == {
        **defaults,
        "max_queue_size": 300,
        "schedule_delay_seconds": 0.25,
    }
    given = {"max_queue_size": 10, "schedule_delay_millis": 1000, "max_export_batch_size": 5}
    assert _spooler_options(given) == {
        "max_queue_size": 10,
        "schedule_delay_seconds": 1.0,
        "batch_spans": 5,
    }


def test_a_span_that_cannot_be_encoded_never_raises_into_its_end(project):
    """A hand-made span with a value ``pickle`` refuses: ending it raises nothing in the
    rollout; its chunk is refused and counted (as ``export()`` refuses such a batch), and
    the chunks after it are stored."""
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.trace import SpanContext, TraceFlags

    exporter = TrackioSpanExporter(project, "bad-value", offload=True)
    processor = TrackioSpanProcessor(exporter, schedule_delay_millis=600_000)

    def root(step: int, i: int, **extra: Any) -> ReadableSpan:
        context = SpanContext(step * 1000 + i + 1, i + 1, False, TraceFlags(TraceFlags.SAMPLED))
        attributes = {"step": step, "sample_index": i, **extra}
        return ReadableSpan("rollout", context, attributes=attributes, start_time=1, end_time=2)

    for i in range(CHUNK_SPANS):
        processor.on_end(root(0, i, **({"bad": lambda: 0} if i == 5 else {})))
    for i in range(CHUNK_SPANS):
        processor.on_end(root(1, i))
    assert processor.force_flush(60_000)
    assert exporter.force_flush(60_000)
    processor.shutdown()
    assert exporter.offloaded.spans_refused == CHUNK_SPANS
    assert _stored(project, "bad-value") == Counter({(1, i): 1 for i in range(CHUNK_SPANS)})


def test_an_unexpected_error_in_the_spool_write_leaves_the_spooler_running(project, monkeypatch):
    """Whatever the append raises (here not an ``OSError``), the spooler's thread lives on: that
    batch waits in memory and goes with the next one; both are stored, nothing refused."""
    real = spool_segments._write_all
    failures = [1]

    def write(handle: Any, *buffers: bytes) -> None:
        if failures[0]:
            failures[0] -= 1
            raise ValueError("unexpected")
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    provider, processor, exporter = _provider(
        project, "survives", max_export_batch_size=CHUNK_SPANS, schedule_delay_millis=600_000
    )
    tracer = provider.get_tracer("rollout")
    spooler = processor._spooler
    stages = (
        (0, lambda: bool(spooler._held)),  # refused: it waits in memory
        (1, lambda: exporter.offloaded.spans_spooled == 2 * CHUNK_SPANS),  # both spooled
    )
    for step, done in stages:
        for i in range(CHUNK_SPANS):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": i}
            ):
                pass
        wait_until(done, f"the spooler's thread took step {step}'s batch (no flush)")
    assert exporter.offloaded.spans_refused == 0
    assert spooler._thread.is_alive()
    _finish(provider, exporter)
    assert _stored(project, "survives") == Counter(
        {(step, i): 1 for step in (0, 1) for i in range(CHUNK_SPANS)}
    )


def test_large_spans_wait_for_a_slow_spool_in_bounded_memory_and_all_are_stored(
    project, monkeypatch
):
    """Spans of a megabyte each (an image inline) ended faster than a slow disk takes them:
    they are packed a few at a time, and the thread ending them waits while more than
    ``MAX_WAITING_BYTES`` of them wait; none is dropped, each is stored once."""
    import time

    from otel_trackio._offload import span_spooler

    monkeypatch.setattr(span_spooler, "MAX_WAITING_BYTES", 4 * 1024 * 1024)
    real = spool_segments._write_all
    waiting: list[int] = []

    def slow(handle: Any, *buffers: bytes) -> None:
        time.sleep(0.05)
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", slow)
    provider, processor, exporter = _provider(project, "large")
    spooler = processor._spooler
    tracer = provider.get_tracer("rollout")
    image = "x" * (1024 * 1024)
    for i in range(40):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
            with tracer.start_as_current_span("chat m", attributes={"picture": image}):
                pass
        waiting.append(spooler._packed_bytes)
    _finish(provider, exporter)
    # Never more than the bound and one chunk of the spans packed before (a few megabytes).
    assert max(waiting) <= 4 * 1024 * 1024 + span_spooler.CHUNK_BYTES + 2 * 1024 * 1024, waiting
    assert exporter.offloaded.spans_refused == 0
    stored = _stored(project, "large")
    assert len(stored) == 40 and set(stored.values()) == {1}
