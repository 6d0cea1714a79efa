"""The builder (``otel_trackio/_wiring.py``): each plan built as it says — and every way of setting
otel-trackio up following it. The decisions themselves: ``tests/unit/test_plan.py``."""

from __future__ import annotations

import json
import logging

from conftest import read_traces

import otel_trackio
from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._core.records import SpanRecord
from otel_trackio._offload.metric_exporter import SpooledMetricExporter
from otel_trackio._plan import plan_run
from otel_trackio._wiring import build_spans, metrics_spool, observe
from otel_trackio.autoconfigure import TrackioEnvMetricExporter, TrackioEnvSpanExporter
from otel_trackio.metric_exporter import TrackioMetricExporter
from otel_trackio.settings import TrackioSettings


def plan_spans(settings, run=None):
    """Plan, then build: what every entry point does."""
    return build_spans(plan_run(settings, observe(settings, run=run)), run=run)


def test_offloaded_the_writer_opens_the_run_and_metrics_follow_the_spool(project, monkeypatch):
    monkeypatch.delenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", raising=False)
    wiring = plan_spans(TrackioSettings(project=project, name="planned"))
    try:
        assert wiring.offload is not None and wiring.engine is None
        assert wiring.why_in_process is None
        assert not wiring.sink.opened  # the writer process opened it, not this one
        assert wiring.sink.run_name == "planned"
        assert metrics_spool(wiring.offload) is wiring.offload
    finally:
        wiring.offload.shutdown(30.0, [])
        wiring.sink.release()
    assert metrics_spool(wiring.offload) is None  # a closed spool takes no metrics


def test_in_process_the_run_is_opened_here_and_metrics_go_straight_to_it(project):
    wiring = plan_spans(TrackioSettings(project=project, name="here", offload=False))
    try:
        assert wiring.offload is None and wiring.engine is not None
        assert wiring.why_in_process is None  # asked for: nothing to warn about
        assert wiring.sink.opened
        assert metrics_spool(wiring.engine.spans) is None
    finally:
        wiring.engine.shutdown(5.0)


def test_settings_that_cannot_cross_to_a_writer_keep_spans_here_and_say_why(
    project, monkeypatch, caplog
):
    monkeypatch.delenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", raising=False)

    def local_decoder(ids: list[int]) -> str:  # not importable by another process
        return ""

    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        wiring = plan_spans(
            TrackioSettings(project=project, name="local", token_decoder=local_decoder)
        )
    try:
        assert wiring.offload is None and wiring.engine is not None
        assert wiring.why_in_process is not None
        assert wiring.sink.opened
        warned = [r.getMessage() for r in caplog.records if "in this process" in r.getMessage()]
        assert len(warned) == 1 and wiring.why_in_process in warned[0]
    finally:
        wiring.engine.shutdown(5.0)

    # A decoder the writer process can import crosses: offloaded.
    importable = plan_spans(
        TrackioSettings(project=project, name="importable", token_decoder=json.dumps)
    )
    try:
        assert importable.offload is not None
    finally:
        importable.offload.shutdown(30.0, [])
        importable.sink.release()


def test_configure_the_hand_built_exporter_and_zero_code_follow_the_plan(project, monkeypatch):
    """The same decisions, whichever way the user set things up."""
    monkeypatch.delenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", raising=False)
    handle = otel_trackio.configure(project, "configured", logs=False)
    try:
        assert handle.span_exporter.offloaded is not None
        assert isinstance(handle.metric_exporter, SpooledMetricExporter)
        assert isinstance(handle._span_processor, TrackioSpanProcessor)
    finally:
        handle.shutdown()
    handle = otel_trackio.configure(project, "configured-here", logs=False, offload=False)
    try:
        assert handle.span_exporter.offloaded is None
        assert isinstance(handle.metric_exporter, TrackioMetricExporter)
    finally:
        handle.shutdown()

    by_hand = TrackioSpanExporter(project, "by-hand")
    assert by_hand.offloaded is not None
    by_hand.shutdown()

    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_PROJECT", project)
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_RUN", "zero-code")
    spans = TrackioEnvSpanExporter()
    metrics = TrackioEnvMetricExporter()
    try:
        assert spans.exporter is not None and spans.exporter.offloaded is not None
        assert isinstance(metrics.exporter, SpooledMetricExporter)
    finally:
        metrics.shutdown()
        spans.shutdown()


def test_in_process_engines_share_one_store_process_which_writes_each_into_its_run(project):
    first = TrackioSpanExporter(project, name="a", offload=False)
    second = TrackioSpanExporter(project, name="b", offload=False)
    store = first._engine.sink._store
    assert store is not None and second._engine.sink._store is store  # one process for both
    for index, exporter in enumerate((first, second)):
        root = SpanRecord(index + 1, 1, "s", 0, 1, attributes={"step": 0, "sample_index": index})
        assert exporter._export_records([root]).name == "SUCCESS"
        exporter.shutdown()  # everything handed over is stored when it returns
    assert [t["metadata"]["sample_index"] for t in read_traces(project, "a")] == [0]
    assert [t["metadata"]["sample_index"] for t in read_traces(project, "b")] == [1]
    assert store._process is not None and store._process.poll() is None  # kept for the next


def test_a_run_on_a_trackio_server_gets_no_store_process(project):
    remote = TrackioSettings(project=project, server_url="http://127.0.0.1:9", offload=False)
    assert plan_run(remote, observe(remote)).writes.name == "LOGGING_THREAD"
