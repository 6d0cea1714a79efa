"""GenAI log events in process: ``TrackioLogExporter`` beside a ``TrackioSpanExporter``.

Real SDK tracer and logger providers, real Trackio storage. The instrumentation tests
(``test_instrumentations.py``) cover the real openai-v2; these cover the edges: events later
than the grace period, spans that never come, the buffer bound, the TTL timer, unsampled and
span-less events, retried exports, and the exporter contract.
"""

from __future__ import annotations

import logging
import time
from typing import Any

import pytest
from conftest import read_traces, root_span_id, wait_until
from opentelemetry import trace as otel_trace
from opentelemetry._logs import LogRecord
from opentelemetry.sdk._logs import LoggerProvider
from opentelemetry.sdk._logs.export import (
    InMemoryLogRecordExporter,
    LogRecordExportResult,
    SimpleLogRecordProcessor,
)
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.sampling import ALWAYS_OFF

from otel_trackio import TrackioLogExporter, TrackioSpanExporter
from otel_trackio._core.assembly import PLACEHOLDER_ATTRIBUTE, PLACEHOLDER_NAME
from otel_trackio._core.assembly.grace import LOG_GRACE_SECONDS

# The in-process engine, by name: GenAI log events joining samples in this process's
# pipeline (offloaded: test_spool.py).
pytestmark = pytest.mark.usefixtures("in_process")

CHAT = {"gen_ai.operation.name": "chat"}


class Setup:
    """A span exporter and a log exporter on one pipeline, each behind a synchronous processor,
    and a recorder of the log records so tests can hand them over whenever they like."""

    def __init__(self, project: str, run: str = "r", **options: Any) -> None:
        self.spans = TrackioSpanExporter(project, run, **options)
        self.logs = TrackioLogExporter(self.spans)
        self.tracer_provider = TracerProvider()
        self.tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.tracer = self.tracer_provider.get_tracer("t")
        self.recorded = InMemoryLogRecordExporter()
        self.logger_provider = LoggerProvider()
        self.logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self.recorded))
        self.logger = self.logger_provider.get_logger("genai")

    def say(self, text: str, role: str = "user") -> None:
        """Emit a per-message GenAI event in the current span (recorded, not exported yet)."""
        self.logger.emit(LogRecord(event_name=f"gen_ai.{role}.message", body={"content": text}))

    def send_logs(self) -> LogRecordExportResult:
        """Export what was recorded so far, as a ``BatchLogRecordProcessor`` would."""
        batch = self.recorded.get_finished_logs()
        self.recorded.clear()
        return self.logs.export(batch)

    def close(self) -> None:
        self.logs.shutdown()
        self.tracer_provider.shutdown()


def test_events_later_than_the_grace_period_are_a_continuation_of_their_sample(project):
    setup = Setup(project, sample_grace_seconds=0)
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 3, "sample_index": 5}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT) as chat:
            setup.say("hello")
    # Grace 0: logged with its root (stored behind it: counted once the store says so).
    wait_until(lambda: setup.spans.stats.samples_logged == 1, "the sample stored")
    assert setup.send_logs() is LogRecordExportResult.SUCCESS
    setup.close()

    first, continuation = read_traces(project, "r")
    assert first["messages"] == []
    meta = continuation["metadata"]
    assert (continuation["step"], meta["sample_index"], meta["partial_reason"]) == (3, 5, "late")
    assert meta["root_span_id"] == root_span_id(first)
    assert continuation["messages"] == [{"role": "user", "content": "hello"}]
    (span,) = continuation["spans"]
    assert span["id"] == f"{chat.get_span_context().span_id:016x}"
    assert span["metadata"][PLACEHOLDER_ATTRIBUTE] == "span already logged"


def test_events_within_the_grace_period_join_their_held_sample(project):
    setup = Setup(project)  # no grace period set: a log exporter makes it LOG_GRACE_SECONDS
    assert setup.spans._pipeline.grace.seconds == LOG_GRACE_SECONDS
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT):
            setup.say("be brief", "system")
            setup.say("hi")
    assert setup.spans.stats.samples_logged == 0  # held for its events
    setup.send_logs()
    setup.close()
    (sample,) = read_traces(project, "r")
    assert "partial" not in sample["metadata"]
    assert sample["messages"] == [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "hi"},
    ]


def test_events_whose_span_never_ends_go_out_with_their_trace_marked(project):
    setup = Setup(project, sample_grace_seconds=0)
    tracer = setup.tracer
    # A sample whose model-call span is never ended: its event goes out with the sample.
    with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": 0}):
        leaked = tracer.start_span("chat m", attributes=CHAT)
        with otel_trace.use_span(leaked, end_on_exit=False):
            setup.say("lost span")
            setup.send_logs()
    # A trace of which only an event ever comes: out at the flush, as a partial sample.
    alone = tracer.start_span("chat m", attributes=CHAT)
    with otel_trace.use_span(alone, end_on_exit=False):
        setup.say("alone")
        setup.send_logs()
    setup.close()

    rows = {t["messages"][0]["content"]: t for t in read_traces(project, "r")}
    whole, flushed = rows["lost span"], rows["alone"]
    assert "partial" not in whole["metadata"] and whole["metadata"]["sample_index"] == 0
    assert whole["messages"] == [{"role": "user", "content": "lost span"}]
    placeholder = next(s for s in whole["spans"] if s["name"] == PLACEHOLDER_NAME)
    assert placeholder["id"] == f"{leaked.get_span_context().span_id:016x}"
    assert placeholder["metadata"][PLACEHOLDER_ATTRIBUTE] == "span not received"
    assert flushed["metadata"]["partial_reason"] == "flush"
    assert flushed["messages"] == [{"role": "user", "content": "alone"}]


def test_waiting_events_count_against_the_buffer_and_nothing_is_lost(project):
    setup = Setup(project, max_buffered_spans=5)
    spans = []
    for index in range(8):  # 8 traces whose spans never come, 2 events each
        span = setup.tracer.start_span("chat m", attributes=CHAT)
        spans.append(span)
        with otel_trace.use_span(span, end_on_exit=False):
            setup.say(f"q{index}")
            setup.say(f"a{index}", "assistant")
        setup.send_logs()
        assert setup.spans._pipeline.assembler.buffered_spans <= 5
    wait_until(lambda: setup.spans.stats.partial_samples >= 6, "the evicted samples stored")
    setup.close()
    traces = read_traces(project, "r")
    assert sorted(t["messages"][0]["content"] for t in traces) == [f"q{i}" for i in range(8)]
    assert all(len(t["messages"]) == 2 for t in traces)
    assert {t["metadata"]["partial_reason"] for t in traces} == {"capacity", "flush"}


def test_the_timer_logs_events_whose_span_never_comes_at_the_ttl(project):
    setup = Setup(project, sample_ttl_seconds=0.3)
    span = setup.tracer.start_span("chat m", attributes=CHAT)
    with otel_trace.use_span(span, end_on_exit=False):
        setup.say("nobody came")
    setup.send_logs()
    wait_until(lambda: read_traces(project, "r"), "the timer to log the idle sample")
    (sample,) = read_traces(project, "r")  # logged by the timer: no export, no flush
    assert sample["metadata"]["partial_reason"] == "ttl"
    assert sample["messages"] == [{"role": "user", "content": "nobody came"}]
    setup.close()


def test_unsampled_span_less_and_other_records_are_counted_and_left_out(project, caplog):
    setup = Setup(project)
    dropped = TracerProvider(sampler=ALWAYS_OFF).get_tracer("t")
    with dropped.start_as_current_span("chat m", attributes=CHAT):
        setup.say("sampler dropped this sample")
    setup.say("outside any span")
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        setup.logger.emit(LogRecord(body="an ordinary log line"))
        setup.logger.emit(LogRecord(event_name="app.click", body={"x": 1}))
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        assert setup.send_logs() is LogRecordExportResult.SUCCESS
    assert "outside any span" in caplog.text
    stats = setup.logs.stats
    assert (stats.records_received, stats.genai_events) == (4, 0)
    assert (stats.unsampled, stats.no_span, stats.not_genai) == (1, 1, 2)
    setup.close()
    (sample,) = read_traces(project, "r")
    assert sample["messages"] == [] and len(sample["spans"]) == 1


def test_a_retried_export_and_span_events_give_each_message_once(project):
    """The same batch exported twice (a retry), and an instrumentation that records the same
    event on the span and as a log record (``SPAN_AND_EVENT``-like): each message once."""
    setup = Setup(project)
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT) as chat:
            setup.say("hi")
            chat.add_event("gen_ai.user.message", {"content": "hi"})  # also on the span
            batch = setup.recorded.get_finished_logs()
            assert setup.logs.export(batch) is LogRecordExportResult.SUCCESS
    assert setup.logs.export(batch) is LogRecordExportResult.SUCCESS
    setup.close()
    (sample,) = read_traces(project, "r")
    assert sample["messages"] == [{"role": "user", "content": "hi"}]


def test_log_events_sent_again_after_their_sample_went_out_are_stored_once(project):
    """A log export retried after the sample holding its events was logged (its first try's
    answer lost), and a late one retried after its continuation was logged: no Trace twice."""
    setup = Setup(project, sample_grace_seconds=1)
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT):
            setup.say("hi")
            early = setup.recorded.get_finished_logs()
            setup.recorded.clear()
            assert setup.logs.export(early) is LogRecordExportResult.SUCCESS
            setup.say("late")
    late = setup.recorded.get_finished_logs()
    assert setup.spans._pipeline.flush()  # the sample goes out with its first event
    assert setup.logs.export(early) is LogRecordExportResult.SUCCESS  # sent again
    assert setup.logs.export(late) is LogRecordExportResult.SUCCESS  # a continuation
    assert setup.logs.export(late) is LogRecordExportResult.SUCCESS  # sent again
    setup.close()
    first, continuation = read_traces(project, "r")
    assert first["messages"] == [{"role": "user", "content": "hi"}]
    assert continuation["metadata"]["partial_reason"] == "late"
    assert continuation["messages"] == [{"role": "user", "content": "late"}]


def test_messages_of_one_time_and_name_are_each_kept_when_they_come_late(project):
    """Each message of a request is an event of the same name, and an instrumentation may stamp
    them all with the request's time: one that comes after its sample went out is another
    message, not the first one sent again."""
    setup = Setup(project, sample_grace_seconds=0)
    stamp = time.time_ns()
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT):
            for text in ("first", "second"):
                setup.logger.emit(
                    LogRecord(
                        timestamp=stamp, event_name="gen_ai.user.message", body={"content": text}
                    )
                )
            first, second = setup.recorded.get_finished_logs()
            assert setup.logs.export([first]) is LogRecordExportResult.SUCCESS
    assert setup.spans._pipeline.flush()  # the sample goes out with the first message
    assert setup.logs.export([second]) is LogRecordExportResult.SUCCESS  # late: a continuation
    setup.close()
    sample, continuation = read_traces(project, "r")
    assert sample["messages"] == [{"role": "user", "content": "first"}]
    assert continuation["messages"] == [{"role": "user", "content": "second"}]


def test_the_log_exporter_keeps_the_exporter_contract(project):
    setup = Setup(project)

    class Hostile:
        @property
        def log_record(self):
            raise RuntimeError("unreadable record")

    assert setup.logs.export([Hostile()]) is LogRecordExportResult.FAILURE  # never raises
    assert setup.logs.force_flush() is True
    setup.logs.shutdown()
    setup.logs.shutdown()  # idempotent
    assert setup.send_logs() is LogRecordExportResult.FAILURE
    assert setup.logs.force_flush() is False
    setup.close()


def test_a_log_exporter_finds_the_span_exporter_of_its_run_or_logs_alone(project, caplog):
    # Built before any span exporter of its run: it finds the one made later.
    logs = TrackioLogExporter(project=project, name="found")
    spans = TrackioSpanExporter(project, "found")
    assert logs._target() is spans._pipeline
    logs.shutdown()
    spans.shutdown()
    # No span exporter of this run in the process: the events are logged on their own.
    setup = Setup(project, "elsewhere")
    alone = TrackioLogExporter(project=project, name="alone")
    with setup.tracer.start_as_current_span("chat m", attributes=CHAT):
        setup.say("no spans here")
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        assert alone.export(setup.recorded.get_finished_logs()) is LogRecordExportResult.SUCCESS
    assert "no TrackioSpanExporter" in caplog.text
    alone.shutdown()
    setup.close()
    (sample,) = read_traces(project, "alone")
    assert sample["messages"] == [{"role": "user", "content": "no spans here"}]
    assert sample["metadata"]["partial_reason"] == "flush"


@pytest.mark.parametrize("grace", [0.0, 1.5])
def test_an_explicit_grace_period_wins(project, grace):
    setup = Setup(project, sample_grace_seconds=grace)
    assert setup.spans._pipeline.grace.seconds == grace
    setup.close()


def test_events_handed_over_during_a_long_export_never_wait_for_it(project):
    """While another export holds the pipeline (a slow Trackio write), the log exporter returns
    at once and the holder takes the events before it lets go."""
    setup = Setup(project)
    pipeline = setup.spans._pipeline
    span = setup.tracer.start_span("chat m", attributes=CHAT)
    with otel_trace.use_span(span, end_on_exit=False):
        setup.say("while busy")
    pipeline._lock.acquire()  # as a span export in progress does
    try:
        started = time.monotonic()
        assert setup.send_logs() is LogRecordExportResult.SUCCESS
        assert time.monotonic() - started < 1.0
        assert pipeline.assembler.pending_events == 0  # not taken yet: in the inbox
    finally:
        pipeline._unlock()
    assert pipeline.assembler.pending_events == 1  # taken when the holder let go
    assert pipeline.stats.log_events_received == 1
    span.end()
    setup.close()
    (sample,) = read_traces(project, "r")
    assert sample["messages"] == [{"role": "user", "content": "while busy"}]


def test_an_event_of_an_unknown_span_of_a_logged_sample_keeps_its_identity(project):
    """The sample was logged; an event then names a span of its trace that never came: at the
    flush it goes out as a continuation of that sample (its step and index), not as a stranger."""
    setup = Setup(project, sample_grace_seconds=0)
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 6, "sample_index": 2}):
        unseen = setup.tracer.start_span("chat m", attributes=CHAT)  # never ended
        with otel_trace.use_span(unseen, end_on_exit=False):
            setup.say("after the fact")
    wait_until(lambda: setup.spans.stats.samples_logged == 1, "the sample stored")
    setup.send_logs()
    setup.close()
    first, rest = read_traces(project, "r")
    assert (rest["step"], rest["metadata"]["sample_index"]) == (6, 2)
    assert rest["metadata"]["root_span_id"] == root_span_id(first)
    assert rest["metadata"]["partial_reason"] == "flush"
    assert rest["messages"] == [{"role": "user", "content": "after the fact"}]


def test_the_older_event_name_attribute_is_read_too(project):
    """Producers older than the log record's event_name field put the name in ``event.name``."""
    setup = Setup(project)
    with setup.tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        with setup.tracer.start_as_current_span("chat m", attributes=CHAT):
            name = {"event.name": "gen_ai.user.message"}
            setup.logger.emit(LogRecord(attributes=name, body={"content": "old style"}))
            setup.send_logs()
    setup.close()
    (sample,) = read_traces(project, "r")
    assert sample["messages"] == [{"role": "user", "content": "old style"}]
