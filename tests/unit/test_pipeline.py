"""The span pipeline on its own (``otel_trackio._engine.pipeline.TracePipeline``): span records in,
one ``run.log`` per step out, written to Trackio's storage before ``add`` returns.

No SDK here: records are built directly and fed to a pipeline over a real
:class:`~otel_trackio._trackio.sink.TrackioSink` (real Trackio storage in the session's temp
``TRACKIO_DIR``). Time is an injected clock, so grace periods are decided by the test, not by
the machine's speed. What is stored is read back from Trackio's SQLite storage and counted by
``(step, sample_index)``, duplicates included.

The exporter around the pipeline: ``test_exporter.py``; the assembler inside it:
``test_assembly.py``, ``test_whole_samples.py``; faults through the exporter:
``test_faults_exporter.py``.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import threading
import time
from collections import Counter
from collections.abc import Iterator
from typing import Any

import pytest
from conftest import TRACKIO_WRITE_WARNING, storage_write_failing, trackio_dir_path, wait_until
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio._core.assembly.grace import (
    LOG_GRACE_SECONDS,
    RECEIVER_GRACE_SECONDS,
    GracePolicy,
)
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.run import build_run_engine
from otel_trackio._engine.writes import MAX_WRITES_BEHIND
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.store import TraceStore
from otel_trackio.settings import TrackioSettings

RUN = "pipe"
WAIT = 30.0  # seconds: the most a state may take to show with the CPU busy


class Clock:
    """A monotonic clock the test moves by hand (``now``), or lets run with the real one."""

    def __init__(self) -> None:
        self.now = 1000.0
        self.real = False

    def __call__(self) -> float:
        return time.monotonic() + 1e6 if self.real else self.now


def _sample(step: int, index: Any, rollout_n: Any = None, *, trace_id: int) -> list[SpanRecord]:
    """A two-span sample, child first (as the SDK delivers them); span ids unique across traces,
    as the SDK's random ones are (a retried write tells stored spans by their id)."""
    attributes: dict[str, Any] = {"step": step, "sample_index": index}
    if rollout_n is not None:
        attributes["rollout_n"] = rollout_n
    root_id = trace_id * 100 + 1
    root = SpanRecord(trace_id, root_id, "rollout", 0, 10, attributes=attributes)
    child = SpanRecord(trace_id, root_id + 1, "generate", 1, 9, parent_id=root_id)
    return [child, root]


def _stored(project: str) -> list[dict[str, Any]]:
    return SQLiteStorage.get_traces(project, RUN)


def _counts(project: str) -> Counter[tuple[int, Any]]:
    """How many Traces are stored for each (step, sample_index)."""
    return Counter((t["step"], t["metadata"].get("sample_index")) for t in _stored(project))


@pytest.fixture
def pipeline_of(project: str) -> Iterator[Any]:
    """Build pipelines over a real sink of ``project``/``RUN``; all closed at the end."""
    built: list[TracePipeline] = []

    def build(
        grace: float = 0.0,
        clock: Clock | None = None,
        policy: GracePolicy | None = None,
        store: TraceStore | None = None,
    ) -> TracePipeline:
        settings = TrackioSettings(project=project, name=RUN)
        sink = TrackioSink(project, RUN)
        pipeline = TracePipeline(
            settings,
            sink,
            grace=policy or GracePolicy(explicit=grace),
            open_samples=None,
            clock=clock if clock is not None else Clock(),
            write_behind=store is not None,
        )
        if store is not None:
            sink.write_behind_to(store)
        built.append(pipeline)
        return pipeline

    yield build
    for pipeline in built:
        pipeline.close(5.0)


def test_each_step_is_one_log_call_with_its_traces_in_sample_order(project, pipeline_of):
    pipeline = pipeline_of()
    records: list[SpanRecord] = []
    # Arrival order is not sample order; sample_index values mix ints and strings of ints.
    for tid, (step, index, n) in enumerate(
        [(2, 1, 1), (1, "10", 0), (2, 1, 0), (1, 2, 0), (2, 0, 3), (1, 0, 1), (1, 0, 0)], 1
    ):
        records.extend(_sample(step, index, n, trace_id=tid))
    assert pipeline.add(records)
    assert pipeline.stats.log_calls == 2  # one per step
    assert pipeline.stats.samples_logged == 7
    stored = _stored(project)  # durable when add returned: no waiting
    by_step: dict[int, list[dict[str, Any]]] = {}
    for trace in stored:
        by_step.setdefault(trace["step"], []).append(trace)
    assert sorted(by_step) == [1, 2]
    for traces in by_step.values():
        assert len({t["timestamp"] for t in traces}) == 1  # one run.log
    order = {
        step: [
            (t["metadata"]["sample_index"], t["metadata"]["rollout_n"])
            for t in sorted(traces, key=lambda t: t["index"])
        ]
        for step, traces in by_step.items()
    }
    assert order == {1: [(0, 0), (0, 1), (2, 0), ("10", 0)], 2: [(0, 3), (1, 0), (1, 1)]}


def test_a_completed_sample_is_logged_only_after_its_grace_period(project, pipeline_of):
    clock = Clock()
    pipeline = pipeline_of(grace=5.0, clock=clock)
    child, root = _sample(1, 0, trace_id=1)
    assert pipeline.add([root])
    assert pipeline.assembler.held_samples == 1
    assert not _stored(project)
    clock.now += 4.9
    late = SpanRecord(1, root.span_id + 2, "judge", 11, 12, parent_id=root.span_id)
    assert pipeline.add([child, late])  # spans trailing the root join it during its grace
    assert pipeline.expire()
    assert not _stored(project)
    clock.now += 0.2  # 5.1 s after the root
    assert pipeline.expire()
    [trace] = _stored(project)
    assert len(trace["spans"]) == 3
    assert not trace["metadata"].get("partial")
    assert pipeline.assembler.held_samples == 0


# -- the receiver's quick phase (see otel_trackio._core.assembly.grace) -----------------------


def test_in_the_receivers_quick_phase_a_sample_goes_out_once_what_came_with_it_is_in(
    project, pipeline_of
):
    clock = Clock()  # moved by hand, never past a grace period
    pipeline = pipeline_of(clock=clock, policy=GracePolicy(receiver=True))  # the receiver's default
    began = clock.now - 0.1  # a request begun before the sample completed
    assert pipeline.add(_sample(1, 0, trace_id=1))
    assert pipeline.settling and pipeline.assembler.held_samples == 1
    assert not _stored(project)
    clock.now += 0.01
    assert pipeline.settle(began)  # that request may carry its spans: not yet
    assert not _stored(project)
    # Every request begun by now has reached the pipeline: the sample goes out.
    assert pipeline.settle(clock.now)
    assert _counts(project) == Counter({(1, 0): 1})
    assert not pipeline.settling
    # Never settled (a request that never ends): the grace period.
    assert pipeline.add(_sample(1, 1, trace_id=2))
    clock.now += RECEIVER_GRACE_SECONDS - 0.01
    assert pipeline.expire()
    assert _counts(project) == Counter({(1, 0): 1})
    clock.now += 0.02
    assert pipeline.expire()
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})


def test_a_span_joining_a_held_sample_ends_the_quick_phase(project, pipeline_of):
    clock = Clock()
    pipeline = pipeline_of(clock=clock, policy=GracePolicy(receiver=True))  # the receiver's default
    child, root = _sample(1, 0, trace_id=1)
    assert pipeline.add([child, root])
    # A span of the sample after its root (a request the receiver was still taking, from
    # another process or the same one): it joins, and the run's spans have shown they trail.
    joining = SpanRecord(1, root.span_id + 2, "chat", 2, 8, parent_id=root.span_id)
    assert pipeline.add([joining])
    assert pipeline.grace.trailing_seen
    clock.now += 0.01
    assert pipeline.settle(clock.now)
    assert not _stored(project)  # held for the grace period now
    clock.now += RECEIVER_GRACE_SECONDS
    assert pipeline.expire()
    [trace] = _stored(project)
    assert len(trace["spans"]) == 3 and not trace["metadata"].get("partial")


def test_log_events_hold_the_receivers_samples_and_a_late_one_ends_the_quick_phase(
    project, pipeline_of
):
    clock = Clock()
    pipeline = pipeline_of(clock=clock, policy=GracePolicy(receiver=True))  # the receiver's default
    child, root = _sample(1, 0, trace_id=1)
    assert pipeline.add([child, root])
    clock.now += 0.01
    assert pipeline.settle(clock.now)
    assert _counts(project) == Counter({(1, 0): 1})
    # Its log event after it went out: a continuation; log events feed the run from now on,
    # and they have shown they can trail a sample.
    event = LogEventRecord(1, child.span_id, EventRecord("gen_ai.user.message", 5, from_log=True))
    assert pipeline.add_events([event])
    assert pipeline.log_events and pipeline.grace.trailing_seen
    assert _counts(project) == Counter({(1, 0): 2})
    assert pipeline.add(_sample(1, 1, trace_id=2))
    completed = clock.now
    clock.now += 0.01
    # No longer: the receiver holding every span sent is not enough.
    assert pipeline.settle(clock.now)
    clock.now += LOG_GRACE_SECONDS + 0.5
    assert pipeline.expire()
    assert _counts(project) == Counter({(1, 0): 2})  # the whole grace period, not the log one
    clock.now = completed + RECEIVER_GRACE_SECONDS + 0.01
    assert pipeline.expire()
    assert _counts(project) == Counter({(1, 0): 2, (1, 1): 1})


def test_log_events_arriving_first_hold_the_receivers_samples_for_the_log_grace(
    project, pipeline_of
):
    clock = Clock()
    pipeline = pipeline_of(clock=clock, policy=GracePolicy(receiver=True))  # the receiver's default
    child, root = _sample(1, 0, trace_id=1)
    event = LogEventRecord(1, child.span_id, EventRecord("gen_ai.user.message", 5, from_log=True))
    assert pipeline.add_events([event])  # before its span: it waits for it
    assert pipeline.add([child, root])
    clock.now += 0.01
    assert pipeline.settle(clock.now)
    assert not _stored(project)  # the next sample's events may still be on their way
    clock.now += LOG_GRACE_SECONDS + 0.01
    assert pipeline.expire()
    [trace] = _stored(project)
    assert not trace["metadata"].get("partial")
    assert not pipeline.grace.trailing_seen  # events before their span trail nothing


def test_the_timer_logs_held_samples_when_no_more_data_comes(project, pipeline_of):
    clock = Clock()  # stands still until the test lets it run
    pipeline = pipeline_of(grace=0.05, clock=clock)
    assert pipeline.add(_sample(3, 0, trace_id=1))
    assert pipeline.assembler.held_samples == 1
    assert not _stored(project)  # the clock stands still: the grace period cannot end
    clock.real = True  # time passes; nobody calls the pipeline again
    # Stored, then counted: wait for both (the timer thread does the second after the first).
    wait_until(lambda: pipeline.stats.samples_logged == 1, "the timer to log the sample")
    assert _counts(project) == Counter({(3, 0): 1})
    assert pipeline.assembler.held_samples == 0


@TRACKIO_WRITE_WARNING
def test_a_failed_storage_write_returns_false_and_keeps_the_samples_for_the_next(
    project, pipeline_of
):
    pipeline = pipeline_of()
    assert pipeline.add(_sample(1, 0, trace_id=1))
    with storage_write_failing(project):
        assert pipeline.add(_sample(1, 1, trace_id=2)) is False
        assert pipeline.sink.last_failures  # Trackio's own report of the failed write
    assert pipeline.stats.failed_writes == 1
    assert pipeline.stats.samples_lost == 0 and pipeline.unwritten_samples == 1
    assert pipeline.add(_sample(2, 2, trace_id=3))  # storage is back: the kept sample goes too
    assert pipeline.unwritten_samples == 0 and pipeline.stats.samples_lost == 0
    # Nothing lost, nothing doubled.
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1, (2, 2): 1})


@TRACKIO_WRITE_WARNING
def test_flush_logs_open_samples_as_partial_and_held_ones_whole(project, pipeline_of):
    pipeline = pipeline_of(grace=60.0)
    held = _sample(1, 0, trace_id=1)
    open_child = SpanRecord(2, 2, "generate", 1, 9, parent_id=1)  # its root has not ended
    assert pipeline.add([*held, open_child])
    assert not _stored(project)
    with storage_write_failing(project):
        assert pipeline.flush() is False  # a flush that cannot write says so
    assert pipeline.stats.samples_lost == 0  # kept for the next write
    assert pipeline.flush()
    stored = _stored(project)
    assert len(stored) == 2
    [whole] = [t for t in stored if len(t["spans"]) == 2]
    [partial] = [t for t in stored if t is not whole]
    assert not whole["metadata"].get("partial")
    assert partial["metadata"]["partial"] is True
    assert partial["metadata"]["partial_reason"].startswith("flush")
    assert pipeline.stats.samples_lost == 0


def test_close_flushes_once_and_is_idempotent(project, pipeline_of):
    pipeline = pipeline_of(grace=60.0)
    assert pipeline.add(_sample(5, 0, trace_id=1))
    pipeline.close()
    assert pipeline.closed
    pipeline.close()  # a second close does nothing, raises nothing
    assert _counts(project) == Counter({(5, 0): 1})
    assert pipeline.add(_sample(5, 1, trace_id=2)) is False  # after close: refused
    assert pipeline.flush() is False
    assert pipeline.expire() is False
    assert _counts(project) == Counter({(5, 0): 1})
    assert pipeline.stats.samples_logged == 1


def test_close_racing_exports_from_threads_loses_nothing_acknowledged(project, pipeline_of):
    pipeline = pipeline_of()
    acknowledged: list[tuple[int, int]] = []
    lock = threading.Lock()

    def export(worker: int) -> None:
        for index in range(10):
            tid = worker * 100 + index + 1
            if pipeline.add(_sample(worker, index, trace_id=tid)):
                with lock:
                    acknowledged.append((worker, index))

    threads = [threading.Thread(target=export, args=(w,)) for w in range(3)]
    for thread in threads:
        thread.start()
    pipeline.close()
    for thread in threads:
        thread.join(WAIT)
    counts = _counts(project)
    assert all(n == 1 for n in counts.values()), counts  # nothing doubled
    assert set(acknowledged) <= set(counts)  # nothing acknowledged lost


def test_the_engine_builds_one_pipeline_over_its_sink_with_the_paths_grace(project):
    settings = TrackioSettings(project=project, name=RUN)
    engine = build_run_engine(settings, TrackioSink(project, RUN), transport="receiver")
    try:
        assert engine.spans.sink is engine.sink
        assert engine.grace.seconds == RECEIVER_GRACE_SECONDS
        assert engine.spans.add(_sample(1, 0, trace_id=1))
        assert not _stored(project)  # held for the receiver's grace period
    finally:
        engine.shutdown()
        engine.shutdown()
    assert _counts(project) == Counter({(1, 0): 1})  # shutdown logs what was held


def test_a_redelivered_sample_is_not_stored_twice(project, pipeline_of):
    pipeline = pipeline_of()
    assert pipeline.add(_sample(1, 0, trace_id=1))
    assert pipeline.add(_sample(1, 0, trace_id=1))  # the same spans, same ids
    assert _counts(project) == Counter({(1, 0): 1})


@pytest.mark.parametrize("on_the_span", [False, True], ids=["messages-to-come", "messages-on-span"])
def test_a_model_call_without_its_messages_holds_the_receivers_samples_for_its_log_events(
    project, pipeline_of, on_the_span
):
    """A client that shuts its tracer provider down before its logger provider sends every
    span before any log event: a model call with no messages on its span says they may come
    as log events, so its sample (and the one held before it) waits the log grace instead of
    going out when settled, and its events join it. Messages on the span: nothing to wait for."""
    clock = Clock()
    pipeline = pipeline_of(clock=clock, policy=GracePolicy(receiver=True))  # the receiver's default
    assert pipeline.add(_sample(1, 0, trace_id=1))  # no model call: settling would release it
    child, root = _sample(1, 1, trace_id=2)
    chat = {"gen_ai.operation.name": "chat", "gen_ai.request.model": "m"}
    if on_the_span:
        chat["gen_ai.input.messages"] = '[{"role": "user", "parts": []}]'
    child = dataclasses.replace(child, attributes=chat)
    assert pipeline.add([child, root])
    assert pipeline.log_events is not on_the_span
    clock.now += 0.01
    assert pipeline.settle(clock.now)
    if on_the_span:
        assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})
        return
    assert not _stored(project)
    event = LogEventRecord(
        2,
        child.span_id,
        EventRecord("gen_ai.user.message", 5, {"content": "q"}, from_log=True),
    )
    assert pipeline.add_events([event])  # after its spans, within the log grace: it joins
    clock.now += LOG_GRACE_SECONDS
    assert pipeline.expire()
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})
    assert not any(t["metadata"].get("partial") for t in _stored(project))
    assert not pipeline.grace.trailing_seen
    [with_events] = [t for t in _stored(project) if t["metadata"]["sample_index"] == 1]
    assert with_events["messages"] == [{"role": "user", "content": "q"}]


# -- writes behind: a spool drainer's Trace entries written in a store process -------------------


@pytest.fixture
def store() -> Iterator[TraceStore]:
    """A store process writing into the session's Trackio folder, ready."""
    built = TraceStore(trackio_dir_path())
    assert built.ready(WAIT)
    yield built
    built.close()


def test_writes_behind_are_handed_over_without_waiting_and_each_stored_once(
    project, pipeline_of, store
):
    pipeline = pipeline_of(store=store)
    process = store._process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)  # busy: what is handed over waits in its pipe
    try:
        first = _sample(1, 0, trace_id=1)
        assert pipeline.add(first)  # handed to the store: add returns before it is stored
        assert pipeline.writing_behind and pipeline.unwritten_samples == 1
        # Until it is known to be stored, its spans count as held: a spool keeps their entry.
        held = {id(item) for item in pipeline.buffered_items()}
        assert all(id(span) in held for span in first)
        started = time.monotonic()
        assert pipeline.add(_sample(1, 1, trace_id=2))  # handed over too, without waiting
        assert time.monotonic() - started < 5.0
        assert pipeline.unwritten_samples == 2 and pipeline.stats.samples_logged == 0
        assert not _stored(project)
    finally:
        os.kill(process.pid, signal.SIGCONT)
    assert pipeline.settle_writes()
    assert not pipeline.writing_behind and pipeline.unwritten_samples == 0
    assert pipeline.stats.samples_logged == 2 and pipeline.buffered_items() == []
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})


def test_past_the_bound_of_writes_behind_the_oldest_is_waited_for(project, pipeline_of, store):
    pipeline = pipeline_of(store=store)
    pipeline.write_timeout_seconds = 0.5
    process = store._process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)  # storage does not keep up
    try:
        for index in range(MAX_WRITES_BEHIND):
            assert pipeline.add(_sample(1, index, trace_id=index + 1))  # no wait
        started = time.monotonic()
        # One more: the oldest is waited for (and here, stopped, it times out: kept, not lost).
        assert not pipeline.add(_sample(2, 0, trace_id=99))
        assert time.monotonic() - started >= 0.5
        assert pipeline.unwritten_samples == MAX_WRITES_BEHIND + 1
    finally:
        os.kill(process.pid, signal.SIGCONT)
    wait_until(pipeline.retry_writes, "the kept samples stored", WAIT)
    assert pipeline.stats.samples_logged == MAX_WRITES_BEHIND + 1
    assert pipeline.stats.samples_lost == 0
    expected = Counter({(1, index): 1 for index in range(MAX_WRITES_BEHIND)})
    assert _counts(project) == expected + Counter({(2, 0): 1})


@pytest.mark.parametrize("settle_by", ["settle_writes", "the next add"])
def test_the_store_process_killed_before_it_wrote_keeps_the_samples_and_they_are_stored_once(
    project, pipeline_of, store, settle_by
):
    pipeline = pipeline_of(store=store)
    assert pipeline.add(_sample(1, 0, trace_id=1))
    assert pipeline.settle_writes()
    process = store._process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)  # the next request waits in its pipe, unread
    assert pipeline.add(_sample(1, 1, trace_id=2) + _sample(2, 2, trace_id=3))
    assert pipeline.writing_behind
    process.kill()
    process.wait(WAIT)
    if settle_by == "settle_writes":
        assert pipeline.settle_writes() is False  # its write is reported failed, not assumed
        assert pipeline.unwritten_samples == 2 and pipeline.stats.samples_lost == 0
        wait_until(pipeline.retry_writes, "the kept samples stored again", WAIT)
        assert pipeline.unwritten_samples == 0 and pipeline.stats.samples_logged == 3
    # The next add settles what is behind (the store process starts again for it).
    pipeline.add(_sample(3, 3, trace_id=4))
    wait_until(pipeline.settle_writes, "everything stored", WAIT)
    assert pipeline.stats.samples_logged == 4 and pipeline.stats.samples_lost == 0
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1, (2, 2): 1, (3, 3): 1})


@TRACKIO_WRITE_WARNING
def test_storage_refusing_a_write_behind_keeps_the_samples_until_it_takes_them(
    project, pipeline_of, store
):
    pipeline = pipeline_of(store=store)
    with storage_write_failing(project):
        assert pipeline.add(_sample(1, 0, trace_id=1))  # handed over: the failure comes later
        assert pipeline.settle_writes() is False
        assert "write-logs-behind" in " ".join(pipeline.sink.last_failures)
        assert pipeline.unwritten_samples == 1 and pipeline.stats.failed_writes == 1
    assert pipeline.add(_sample(1, 1, trace_id=2))
    assert pipeline.settle_writes()
    assert pipeline.stats.samples_logged == 2 and pipeline.stats.samples_lost == 0
    assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})


def test_a_closed_store_takes_nothing_and_the_pipeline_writes_itself(project, pipeline_of, store):
    pipeline = pipeline_of(store=store)
    store.close()
    store.close()  # idempotent
    assert store.submit([]) is None
    assert pipeline.add(_sample(1, 0, trace_id=1))
    assert not pipeline.writing_behind and pipeline.unwritten_samples == 0  # stored here
    assert _counts(project) == Counter({(1, 0): 1})


def test_a_store_still_starting_takes_nothing_and_the_pipeline_writes_itself(project, pipeline_of):
    starting = TraceStore(trackio_dir_path())  # started afresh: it imports Trackio first
    try:
        pipeline = pipeline_of(store=starting)
        assert pipeline.add(_sample(1, 0, trace_id=1))
        assert not pipeline.writing_behind and pipeline.unwritten_samples == 0  # stored here
        assert _counts(project) == Counter({(1, 0): 1})
        assert starting.ready(WAIT)  # then it takes the next ones
        assert pipeline.add(_sample(1, 1, trace_id=2)) and pipeline.writing_behind
        assert pipeline.settle_writes()
        assert _counts(project) == Counter({(1, 0): 1, (1, 1): 1})
    finally:
        starting.close()
