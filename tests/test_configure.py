"""``otel_trackio.configure()``: global providers, one run, no double export, shutdown order."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import read_logs, read_traces, trace_usage
from opentelemetry import _logs as otel_logs
from opentelemetry import metrics as otel_metrics
from opentelemetry import trace
from opentelemetry._logs import _internal as logs_internal
from opentelemetry.metrics import _internal as metrics_internal
from opentelemetry.util._once import Once

import otel_trackio
from otel_trackio import telemetry as otel_setup

ROOT = Path(__file__).resolve().parents[1]


def _reset_otel_globals() -> None:
    """Forget the process-wide OTel providers (OTel's own test utils do the same)."""
    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None
    metrics_internal._METER_PROVIDER_SET_ONCE = Once()
    metrics_internal._METER_PROVIDER = None
    logs_internal._LOGGER_PROVIDER_SET_ONCE = Once()
    logs_internal._LOGGER_PROVIDER = None
    otel_setup._installed = None
    otel_setup._active = None


@pytest.fixture(autouse=True)
def fresh_globals():
    """Each test starts as a fresh process would: no global providers, nothing configured."""
    _reset_otel_globals()
    yield
    active = otel_setup.active_telemetry()
    if active is not None:
        active.shutdown()
    _reset_otel_globals()


def _rollouts(step: int, count: int, tracer_name: str = "test") -> None:
    tracer = trace.get_tracer(tracer_name)
    for index in range(count):
        attributes = {"step": step, "sample_index": index}
        with tracer.start_as_current_span("rollout", attributes=attributes):
            with tracer.start_as_current_span("chat m") as span:
                span.set_attribute("gen_ai.operation.name", "chat")
                span.set_attribute("gen_ai.usage.input_tokens", 3)
                span.set_attribute("gen_ai.usage.output_tokens", 4)


def _scalar(project: str, run: str, name: str) -> dict[int, float]:
    return {row["step"]: row[name] for row in read_logs(project, run) if name in row}


class _Recorder:
    """Wraps a real run's ``log``, storage writes and ``finish`` to record their order (the
    calls still happen): ("log", keys) per ``run.log``, ("write", keys) per entry written to
    storage before ``finish`` began, ("finish", ()) once."""

    def __init__(self, run) -> None:
        self.events: list[tuple[str, tuple[str, ...]]] = []
        original_log, original_finish = run.log, run.finish
        original_write = run._write_logs_to_sqlite
        finishing = False

        def log(metrics, *args, **kwargs):
            self.events.append(("log", tuple(sorted(metrics))))
            return original_log(metrics, *args, **kwargs)

        def write(logs):
            if not finishing:
                self.events.extend(("write", tuple(sorted(entry["metrics"]))) for entry in logs)
            return original_write(logs)

        def finish(*args, **kwargs):
            nonlocal finishing
            finishing = True
            self.events.append(("finish", ()))
            return original_finish(*args, **kwargs)

        run.log = log
        run._write_logs_to_sqlite = write
        run.finish = finish


def test_configure_sends_spans_and_metrics_to_one_run(project, in_process):
    # In process: the span and metric exporters hold the very run object configure() opened.
    handle = otel_trackio.configure(project, "r")
    assert trace.get_tracer_provider() is handle.tracer_provider
    assert otel_metrics.get_meter_provider() is handle.meter_provider
    assert handle.span_exporter.run is handle.run is handle.metric_exporter.run

    counter = otel_metrics.get_meter("test").create_counter("rollout.samples")
    for step in (0, 1):
        _rollouts(step, 3)
        counter.add(3, {"step": step})
    handle.shutdown()

    traces = read_traces(project, "r")
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [
        (s, i) for s in (0, 1) for i in range(3)
    ]
    assert trace_usage(traces[0])["input_tokens"] == 3
    assert _scalar(project, "r", "rollout.samples") == {0: 3, 1: 3}
    assert handle.closed
    assert handle.run._stop_flag.is_set()  # configure() started the run, so it finished it


def test_configure_twice_same_run_returns_the_handle_and_exports_once(project, caplog):
    first = otel_trackio.configure(project, "r")
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        second = otel_trackio.configure(project, "r", key="other/traces")
    assert second is first
    assert "new arguments ignored" in caplog.text
    _rollouts(0, 4)
    first.shutdown()
    second.shutdown()  # idempotent

    traces = read_traces(project, "r")
    assert sorted(t["metadata"]["sample_index"] for t in traces) == [0, 1, 2, 3]
    assert {t["key"] for t in traces} == {"rollout/traces"}


def test_configure_for_another_run_replaces_the_previous_one(project, in_process):
    # In process: it looks at the run objects configure() opened and finished.
    first = otel_trackio.configure(project, "r1")
    _rollouts(0, 2)
    second = otel_trackio.configure(project, "r2")
    assert first.closed and not second.closed
    assert first.run._stop_flag.is_set()
    assert trace.get_tracer_provider() is second.tracer_provider is first.tracer_provider
    _rollouts(1, 3)
    second.shutdown()

    assert [t["step"] for t in read_traces(project, "r1")] == [0, 0]
    assert [t["step"] for t in read_traces(project, "r2")] == [1, 1, 1]


def test_configure_after_shutdown_works_although_providers_are_set_once(project):
    first = otel_trackio.configure(project, "a")
    first.shutdown()
    _rollouts(0, 2)  # nothing configured: these go nowhere
    second = otel_trackio.configure(project, "b", metrics=False)
    assert second.metric_exporter is None
    _rollouts(1, 2)
    second.shutdown()

    assert read_traces(project, "a") == []
    assert [t["step"] for t in read_traces(project, "b")] == [1, 1]


@pytest.mark.parametrize("offload", [False, True])
def test_shutdown_flushes_spans_and_metrics_before_the_run_finishes(project, offload):
    handle = otel_trackio.configure(
        project, "r", metric_export_interval_millis=600_000, offload=offload
    )
    recorder = _Recorder(handle.run)
    tracer = trace.get_tracer("test")
    gauge_values = iter([0.75])
    otel_metrics.get_meter("test").create_observable_gauge(
        "reward.mean",
        callbacks=[
            lambda _options: [otel_metrics.Observation(v, {"step": 2}) for v in gauge_values]
        ],
    )
    _rollouts(2, 3)  # complete samples, still queued in the batch processor (5 s delay)
    open_root = tracer.start_span("rollout", attributes={"step": 2, "sample_index": 9})
    with trace.use_span(open_root):
        with tracer.start_as_current_span("tool"):
            pass  # the sample stays open: its root has not ended

    assert recorder.events == []  # nothing logged yet: everything is still buffered
    handle.shutdown()
    open_root.end()

    kinds = [kind for kind, _ in recorder.events]
    assert kinds[-1] == "finish" and kinds.count("finish") == 1
    written = {key for kind, keys in recorder.events if kind == "write" for key in keys}
    # Offloaded, the writer process stores the Traces and the metrics (it is done before
    # shutdown() returns); this process's run object, opened by handle.run, writes nothing.
    assert written == set() if offload else {"rollout/traces", "reward.mean"} <= written
    traces = read_traces(project, "r")
    complete = [t for t in traces if not t["metadata"].get("partial")]
    partial = [t for t in traces if t["metadata"].get("partial")]
    assert sorted(t["metadata"]["sample_index"] for t in complete) == [0, 1, 2]
    # The open root is shown too, unfinished (it ends only after the shutdown).
    assert [{s["name"]: s["status"] for s in t["spans"]} for t in partial] == [
        {"rollout": "unfinished", "tool": "success"}
    ]
    assert _scalar(project, "r", "reward.mean") == {2: 0.75}


def test_configure_borrows_an_active_run_and_leaves_it_open(project):
    import trackio

    run = trackio.init(project=project, name="mine")
    handle = otel_trackio.configure(project, "mine")
    assert handle.run is run
    _rollouts(0, 1)
    handle.shutdown()
    assert not run._stop_flag.is_set()
    run.log({"after": 1.0}, step=5)  # still the user's run to use
    run.finish()
    assert len(read_traces(project, "mine")) == 1
    assert _scalar(project, "mine", "after") == {5: 1.0}


def test_options_reach_the_exporters_and_trackio_init(project):
    handle = otel_trackio.configure(
        project, "r", key="val/traces", step_attribute="global_step", config={"lr": 0.1}
    )
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("rollout", attributes={"global_step": 7, "sample_index": 0}):
        pass
    otel_metrics.get_meter("test").create_counter("n").add(1, {"global_step": 7})
    handle.shutdown()
    traces = read_traces(project, "r")
    assert [(t["key"], t["step"]) for t in traces] == [("val/traces", 7)]
    assert _scalar(project, "r", "n") == {7: 1}
    assert handle.run.config["lr"] == 0.1


def test_max_samples_per_step_keeps_that_many_samples_per_step(project):
    handle = otel_trackio.configure(project, "r", max_samples_per_step=2)
    _rollouts(0, 6)
    _rollouts(1, 6)
    handle.shutdown()
    traces = read_traces(project, "r")
    assert [t["step"] for t in traces] == [0, 0, 1, 1]
    assert all(len(t["spans"]) == 2 for t in traces)  # children follow the root


def test_the_cap_also_applies_to_samples_under_a_step_span(project):
    handle = otel_trackio.configure(project, "r", max_samples_per_step=3)
    tracer = trace.get_tracer("test")
    for step in (0, 1):
        with tracer.start_as_current_span("train_step", attributes={"step": step}):
            for index in range(10):
                with tracer.start_as_current_span("rollout", attributes={"sample_index": index}):
                    with tracer.start_as_current_span("chat"):
                        pass
    handle.shutdown()
    samples = [
        t for t in read_traces(project, "r") if t["metadata"].get("sample_index") is not None
    ]
    assert sorted(t["step"] for t in samples) == [0, 0, 0, 1, 1, 1]
    assert all(len(t["spans"]) == 2 for t in samples)


def test_the_sampler_reads_a_custom_step_attribute(project):
    handle = otel_trackio.configure(
        project, "r", max_samples_per_step=1, step_attribute="global_step", sampling_seed=7
    )
    tracer = trace.get_tracer("test")
    for step in (3, 4):
        for index in range(5):
            attributes = {"global_step": step, "sample_index": index}
            with tracer.start_as_current_span("rollout", attributes=attributes):
                pass
    handle.shutdown()
    assert [t["step"] for t in read_traces(project, "r")] == [3, 4]


def test_unshut_handle_is_flushed_at_interpreter_exit(project, trackio_dir):
    script = textwrap.dedent(
        f"""
        import otel_trackio
        from opentelemetry import metrics, trace
        otel_trackio.configure({project!r}, "exit")
        tracer = trace.get_tracer("t")
        for i in range(3):
            sample = {{"step": 4, "sample_index": i}}
            with tracer.start_as_current_span("rollout", attributes=sample):
                pass
        metrics.get_meter("t").create_counter("done").add(3, {{"step": 4}})
        print("exiting without shutdown")
        """
    )
    env = {**os.environ, "TRACKIO_DIR": trackio_dir, "TRACKIO_DISABLE_TELEMETRY": "1"}
    result = subprocess.run(
        [sys.executable, "-c", script],
        env=env,
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert [t["step"] for t in read_traces(project, "exit")] == [4, 4, 4]
    assert _scalar(project, "exit", "done") == {4: 3}


def test_configure_joins_a_tracer_provider_installed_before_it(project, caplog):
    from opentelemetry.sdk.trace import TracerProvider

    own = TracerProvider()
    trace.set_tracer_provider(own)
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        handle = otel_trackio.configure(project, "joined", max_samples_per_step=1)
    assert handle.tracer_provider is own
    assert "max_samples_per_step ignored" in caplog.text
    _rollouts(0, 3)  # the user's provider keeps its sampler: all three are kept
    otel_trackio.configure(project, "joined")  # same run: no second processor
    _rollouts(1, 1)
    handle.shutdown()
    assert [t["step"] for t in read_traces(project, "joined")] == [0, 0, 0, 1]


def _genai_rollout(index: int, question: str) -> None:
    """A sample whose model call sends its content as GenAI log events (as openai-v2 does),
    plus one ordinary log record."""
    tracer = trace.get_tracer("test")
    logger = otel_logs.get_logger("genai")
    with tracer.start_as_current_span("rollout", attributes={"step": 2, "sample_index": index}):
        with tracer.start_as_current_span("chat m", attributes={"gen_ai.operation.name": "chat"}):
            user = {"content": question}
            logger.emit(otel_logs.LogRecord(event_name="gen_ai.user.message", body=user))
            body = {"index": 0, "finish_reason": "stop", "message": {"content": f"re: {question}"}}
            logger.emit(otel_logs.LogRecord(event_name="gen_ai.choice", body=body))
            logger.emit(otel_logs.LogRecord(body="an ordinary log line"))


def test_configure_joins_genai_log_events_to_their_samples(project):
    handle = otel_trackio.configure(project, "logs")
    assert otel_logs.get_logger_provider() is handle.logger_provider is not None
    for index in range(3):
        _genai_rollout(index, f"q{index}")
    handle.shutdown()

    traces = read_traces(project, "logs")
    assert [t["messages"] for t in traces] == [
        [{"role": "user", "content": f"q{i}"}, {"role": "assistant", "content": f"re: q{i}"}]
        for i in range(3)
    ]
    assert not any(t["metadata"].get("partial") for t in traces)
    stats = handle.log_exporter.stats
    assert (stats.genai_events, stats.not_genai) == (6, 3)


def test_configure_adds_its_log_processor_to_a_logger_provider_installed_before(project):
    from opentelemetry.sdk._logs import LoggerProvider
    from opentelemetry.sdk._logs.export import InMemoryLogRecordExporter, SimpleLogRecordProcessor

    own = LoggerProvider()
    theirs = InMemoryLogRecordExporter()
    own.add_log_record_processor(SimpleLogRecordProcessor(theirs))
    otel_logs.set_logger_provider(own)
    handle = otel_trackio.configure(project, "joined-logs")
    assert handle.logger_provider is own
    _genai_rollout(0, "q")
    otel_trackio.configure(project, "joined-logs")  # same run: no second processor
    handle.shutdown()
    (sample,) = read_traces(project, "joined-logs")
    assert [m["content"] for m in sample["messages"]] == ["q", "re: q"]
    assert len(theirs.get_finished_logs()) == 3  # the user's exporter still gets everything


def test_configure_without_logs(project):
    handle = otel_trackio.configure(project, "no-logs", logs=False)
    assert handle.log_exporter is None and handle.logger_provider is None
    _genai_rollout(0, "q")
    handle.shutdown()
    (sample,) = read_traces(project, "no-logs")
    assert sample["messages"] == []
