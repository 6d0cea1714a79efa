"""Each decision the run engine makes once: the grace period, the offload default, the stats
through the offload checkpoint, the latest step, the process-wide settings (issue #20)."""

from __future__ import annotations

from typing import Any

import pytest
from conftest import OffloadWithLogEvents, read_traces
from opentelemetry._logs import LogRecord
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_trackio import TrackioLogExporter, TrackioSpanExporter, set_step
from otel_trackio._settings import active_settings


def test_an_explicit_grace_period_below_the_log_default_is_kept_by_a_lone_log_exporter(project):
    logs = TrackioLogExporter(project=project, name="alone", sample_grace_seconds=0.5)
    try:
        pipeline = logs._target()
        assert pipeline.grace.seconds == 0.5  # was max(0.5, 2.0)
    finally:
        logs.shutdown()


def test_set_step_reaches_the_traces_fallback_step(project, tracer_provider):
    exporter = TrackioSpanExporter(project, "steps")
    tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = tracer_provider.get_tracer("t")
    set_step(7)
    with tracer.start_as_current_span("rollout", attributes={"sample_index": 0}):
        pass
    tracer_provider.shutdown()
    [trace] = read_traces(project, "steps")
    assert trace["step"] == 7


def test_a_hand_built_exporter_does_not_change_the_process_wide_settings(project):
    first = TrackioSpanExporter(project, "first", sample_attribute="idx")
    assert active_settings().sample_attribute == "idx"  # the first one sets them, as before
    second = TrackioSpanExporter(project, "second", sample_attribute="other")
    try:
        # OpenSampleTracker() and rollout() read these: a later exporter must not change them.
        assert active_settings().sample_attribute == "idx"
    finally:
        first.shutdown()
        second.shutdown()


def test_offloaded_stats_keep_every_counter_of_the_writer(project, tracer_provider):
    rollouts = OffloadWithLogEvents(project, "stats", tracer_provider)
    spans, logs, tracer = rollouts.spans, rollouts.logs, rollouts.tracer
    assert spans.offloaded is not None
    for index in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": index}):
            with tracer.start_as_current_span("chat", attributes={"gen_ai.operation.name": "chat"}):
                rollouts.logger.emit(
                    LogRecord(event_name="gen_ai.user.message", body={"content": "q"})
                )
                rollouts.send_log_events()
    assert spans.force_flush(60_000)
    stats = spans.stats
    logs.shutdown()
    tracer_provider.shutdown()
    assert len(read_traces(project, "stats")) == 3
    assert stats.samples_logged == 3
    assert stats.log_events_received == 3  # read 0 through the checkpoint
    assert stats.log_calls >= 1  # read 0 through the checkpoint
    final = spans.stats
    assert final.samples_logged == 3 and final.log_events_received == 3


def test_every_refused_offloaded_export_counts_as_a_failed_export(
    project, tmp_path, tracer_provider
):
    spans = TrackioSpanExporter(project, "refused", offload=True, spool_dir=str(tmp_path))
    client = spans._offload
    assert client is not None
    client.producer.close()  # the spool can no longer be written: each export is refused
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = tracer_provider.get_tracer("t")
    for index in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            pass
    assert spans.stats.failed_exports == 3  # was int(refused > 0): 1
    spans.shutdown(timeout_millis=5000)


def test_only_a_pipeline_beside_the_rollout_hands_the_gil_over(project):
    """In process, conversion yields the GIL so a rollout thread waking from a model call does
    not wait for it; a writer process or the receiver has no rollout to wait."""
    from otel_trackio._engine.run import build_run_engine
    from otel_trackio._trackio.sink import TrackioSink
    from otel_trackio.settings import TrackioSettings

    settings = TrackioSettings(project=project, name="gil")
    for transport, beside in (("process", True), ("offload", False), ("receiver", False)):
        engine = build_run_engine(settings, TrackioSink(project, "gil"), transport=transport)
        try:
            assert engine.spans._beside_rollout is beside, transport
        finally:
            engine.shutdown()


@pytest.mark.parametrize("convert_seconds, yields", [(0.0, (0, 2)), (0.002, (10, 10))])
def test_conversion_beside_a_rollout_hands_the_gil_over_once_it_held_it_a_millisecond(
    monkeypatch, convert_seconds, yields
):
    """Quick conversions go on without a thread switch per sample; one that holds the GIL past
    ``YIELD_EVERY_SECONDS`` hands it over after that sample (never without a rollout beside)."""
    import time

    from otel_trackio._core.samples import Sample, SampleIdentity
    from otel_trackio._engine import batches

    slept: list[float] = []
    monkeypatch.setattr(batches.time, "sleep", slept.append)

    def convert(sample: Sample) -> Any:
        deadline = time.perf_counter() + convert_seconds
        while time.perf_counter() < deadline:  # holds the GIL, as converting does
            pass
        return {}

    samples = [
        Sample([], None, SampleIdentity(trace_id=i, root_span_id=None, step=0, sample_index=i))
        for i in range(10)
    ]
    assert len(batches.by_step(samples, convert, beside_rollout=False)[0]) == 10
    assert slept == []
    batches.by_step(samples, convert, beside_rollout=True)
    assert yields[0] <= len(slept) <= yields[1] and set(slept) <= {0}
