"""TrackioSpanExporter end to end: real OTel SDK spans in, real Trackio storage read back."""

from __future__ import annotations

import asyncio
import json
import logging
import re
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import trackio
from conftest import project_db_rows, read_logs, read_traces, trace_id, trace_usage, wait_until
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import (
    BatchSpanProcessor,
    SimpleSpanProcessor,
    SpanExportResult,
)
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode
from trackio import context_vars

from otel_trackio import TrackioSpanExporter

# The in-process engine, by name: its pipeline, batches, TTL and buffer in this process.
pytestmark = pytest.mark.usefixtures("in_process")

ISO_Z = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$")
REPO = Path(__file__).resolve().parent.parent


def _provider(exporter) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _chat_attributes(question: str, answer: str, input_tokens: int, output_tokens: int) -> dict:
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "m-1",
        "gen_ai.usage.input_tokens": input_tokens,
        "gen_ai.usage.output_tokens": output_tokens,
        "gen_ai.input.messages": json.dumps(
            [{"role": "user", "parts": [{"type": "text", "content": question}]}]
        ),
        "gen_ai.output.messages": json.dumps(
            [{"role": "assistant", "parts": [{"type": "text", "content": answer}]}]
        ),
    }


def _samples(traces: list[dict]) -> dict[tuple[int, int], dict]:
    return {
        (t["step"], t["metadata"]["sample_index"]): t
        for t in traces
        if "sample_index" in t["metadata"]
    }


def test_nested_spans_become_one_trace_with_the_right_tree(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 4, "sample_index": 2}):
        with tracer.start_as_current_span("agent"):
            with tracer.start_as_current_span(
                "chat m-1", attributes=_chat_attributes("what is 2+2?", "4", 11, 0)
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool calc",
                attributes={
                    "gen_ai.operation.name": "execute_tool",
                    "gen_ai.tool.call.arguments": '{"x": 1}',
                    "gen_ai.tool.call.result": "4",
                },
            ):
                pass
    provider.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 1
    trace = traces[0]
    assert trace["step"] == 4
    assert trace["messages"] == [
        {"role": "user", "content": "what is 2+2?"},
        {"role": "assistant", "content": "4"},
    ]
    spans = {s["name"]: s for s in trace["spans"]}
    assert set(spans) == {"rollout", "agent", "chat m-1", "execute_tool calc"}
    assert spans["rollout"]["parent_id"] is None
    assert spans["agent"]["parent_id"] == spans["rollout"]["id"]
    assert spans["chat m-1"]["parent_id"] == spans["agent"]["id"]
    assert spans["chat m-1"]["kind"] == "generation"
    assert spans["chat m-1"]["model"] == "m-1"
    assert spans["chat m-1"]["usage"] == {
        "input_tokens": 11,
        "output_tokens": 0,
        "total_tokens": 11,
    }
    assert spans["execute_tool calc"]["kind"] == "tool"
    assert spans["execute_tool calc"]["input"] == {"x": 1}
    assert spans["agent"]["kind"] == "span"
    for span in trace["spans"]:
        assert ISO_Z.match(span["start_time"]) and ISO_Z.match(span["end_time"])
        assert isinstance(span["duration_ms"], float) and span["duration_ms"] >= 0
        assert span["status"] == "success"
    meta = trace["metadata"]
    assert meta["step"] == 4 and meta["sample_index"] == 2
    assert meta["status"] == "success"
    assert len(trace_id(trace)) == 32
    assert trace_usage(trace) == {"input_tokens": 11, "output_tokens": 0, "total_tokens": 11}
    assert "service_name" not in meta  # the SDK's unknown_service:<process> says nothing


def test_two_samples_under_one_step_span_become_two_traces(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("train_step", attributes={"step": 1}):
        for i in range(2):
            with tracer.start_as_current_span("rollout", attributes={"sample_index": i}):
                with tracer.start_as_current_span(
                    f"chat-{i}", attributes=_chat_attributes(f"q{i}", f"a{i}", 3, 2)
                ):
                    pass
    provider.shutdown()

    samples = _samples(read_traces(project, "r"))
    assert set(samples) == {(1, 0), (1, 1)}
    for i in range(2):
        names = sorted(s["name"] for s in samples[(1, i)]["spans"])
        assert names == [f"chat-{i}", "rollout"]
        assert samples[(1, i)]["messages"][0]["content"] == f"q{i}"
    # The step span is not glued onto a sample, nor lost: its duration, at its step.
    assert all("sample_index" in t["metadata"] for t in read_traces(project, "r"))
    (row,) = [row for row in read_logs(project, "r") if "step_time/train_step" in row]
    assert row["step"] == 1 and row["step_time/train_step"] > 0


def test_children_exported_in_another_call_than_their_root(project):
    memory = InMemorySpanExporter()
    provider = _provider(memory)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 2, "sample_index": 7}):
        with tracer.start_as_current_span("child-a"):
            with tracer.start_as_current_span("grandchild"):
                pass
        with tracer.start_as_current_span("child-b"):
            pass
    spans = list(memory.get_finished_spans())
    assert [s.name for s in spans] == ["grandchild", "child-a", "child-b", "rollout"]

    exporter = TrackioSpanExporter(project=project, name="r")
    for span in spans:  # one span per export() call, children first
        assert exporter.export([span]) is SpanExportResult.SUCCESS
        if span.name != "rollout":
            assert read_traces(project, "r") == []
    exporter.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 1
    assert sorted(s["name"] for s in traces[0]["spans"]) == [
        "child-a",
        "child-b",
        "grandchild",
        "rollout",
    ]
    assert "partial" not in traces[0]["metadata"]


def _log_entries_per_step(project: str, run: str) -> dict[int, int]:
    """How many log entries (Trackio's ``log_id``) hold the run's Traces, per step."""
    query = "SELECT step, COUNT(DISTINCT log_id) FROM traces WHERE run_name = ? GROUP BY step"
    return dict(project_db_rows(project, query, (run,)))


def test_each_export_logs_one_batch_per_step(project):
    memory = InMemorySpanExporter()
    provider = _provider(memory)
    tracer = provider.get_tracer("t")
    for step in (0, 1):
        for i in range(3):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": i}
            ):
                pass
    exporter = TrackioSpanExporter(project=project, name="r")
    assert exporter.export(memory.get_finished_spans()) is SpanExportResult.SUCCESS
    exporter.shutdown()
    assert _log_entries_per_step(project, "r") == {0: 1, 1: 1}  # one log entry (:0 to :2) each
    assert exporter.stats.samples_logged == 6 and exporter.stats.log_calls == 2
    assert sorted(_samples(read_traces(project, "r"))) == [(s, i) for s in (0, 1) for i in range(3)]


def test_many_threads_and_asyncio_tasks_never_mix_samples(project, tracer_provider):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = tracer_provider
    provider.add_span_processor(
        BatchSpanProcessor(exporter, max_export_batch_size=64, schedule_delay_millis=20)
    )
    tracer = provider.get_tracer("t")

    def one_sample(step: int, index: int) -> None:
        with tracer.start_as_current_span(
            "rollout", attributes={"step": step, "sample_index": index}
        ):
            for turn in range(3):
                with tracer.start_as_current_span(f"turn-{index}-{turn}"):
                    pass

    async def one_async_sample(step: int, index: int) -> None:
        with tracer.start_as_current_span(
            "rollout", attributes={"step": step, "sample_index": index}
        ):
            for turn in range(3):
                with tracer.start_as_current_span(f"turn-{index}-{turn}"):
                    await asyncio.sleep(0.001 * ((index + turn) % 3))

    threads = [threading.Thread(target=one_sample, args=(0, i)) for i in range(40)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()

    async def many() -> None:
        await asyncio.gather(*(one_async_sample(1, i) for i in range(100)))

    asyncio.run(many())
    provider.shutdown()

    samples = _samples(read_traces(project, "r"))
    assert len(samples) == 140
    for (_step, index), trace in samples.items():
        names = sorted(s["name"] for s in trace["spans"])
        assert names == ["rollout"] + [f"turn-{index}-{turn}" for turn in range(3)]
        assert "partial" not in trace["metadata"]


def test_an_error_span_makes_the_sample_status_error(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": 0}):
        try:
            with tracer.start_as_current_span("tool"):
                raise ValueError("calculator exploded")
        except ValueError:
            pass
        with tracer.start_as_current_span("judge") as judge:
            judge.set_status(Status(StatusCode.ERROR, "judge timed out"))
    provider.shutdown()

    (trace,) = read_traces(project, "r")
    spans = {s["name"]: s for s in trace["spans"]}
    assert trace["metadata"]["status"] == "error"
    assert spans["tool"]["status"] == "error"
    assert "calculator exploded" in spans["tool"]["error"]
    assert spans["judge"]["error"] == "judge timed out"
    assert spans["rollout"]["status"] == "success"


def test_shutdown_logs_an_open_sample_as_partial(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    root = tracer.start_span("rollout", attributes={"step": 3, "sample_index": 5})
    from opentelemetry import trace as otel_trace

    with otel_trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("finished-child"):
            pass
    provider.shutdown()  # root never ended

    (trace,) = read_traces(project, "r")
    assert [s["name"] for s in trace["spans"]] == ["finished-child"]
    assert trace["metadata"]["partial"] is True
    assert trace["metadata"]["partial_reason"] == "flush"
    assert trace["metadata"]["status"] == "partial"  # Trackio's pill, not "success"


def test_open_sample_keeps_its_identity_when_its_root_was_registered(project):
    from opentelemetry import trace as otel_trace

    from otel_trackio._engine.open_samples import register_open_sample, unregister_open_sample

    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    root = tracer.start_span("rollout", attributes={"step": 6, "sample_index": 9})
    ctx = root.get_span_context()
    register_open_sample(ctx.trace_id, ctx.span_id, {"step": 6, "sample_index": 9})
    try:
        with otel_trace.use_span(root, end_on_exit=False):
            with tracer.start_as_current_span("child"):
                pass
        assert exporter.force_flush() is True
    finally:
        unregister_open_sample(ctx.trace_id, ctx.span_id)
    provider.shutdown()
    (trace,) = read_traces(project, "r")
    assert trace["step"] == 6
    assert trace["metadata"]["sample_index"] == 9 and trace["metadata"]["partial"] is True


def test_a_late_span_becomes_a_continuation_of_its_sample(project):
    from opentelemetry import trace as otel_trace

    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 2, "sample_index": 1}):
        straggler = tracer.start_span("fire-and-forget")
    with otel_trace.use_span(straggler, end_on_exit=True):
        with tracer.start_as_current_span("late-grandchild"):
            pass
    provider.shutdown()

    traces = read_traces(project, "r")
    assert len(traces) == 2
    first, late = sorted(traces, key=lambda t: "partial" in t["metadata"])
    assert [s["name"] for s in first["spans"]] == ["rollout"]
    assert sorted(s["name"] for s in late["spans"]) == ["fire-and-forget", "late-grandchild"]
    assert late["step"] == 2
    assert late["metadata"]["partial"] is True and late["metadata"]["partial_reason"] == "late"
    assert (late["metadata"]["status"], first["metadata"]["status"]) == ("partial", "success")
    assert late["metadata"]["sample_index"] == 1
    assert trace_id(late) == trace_id(first)


def test_ttl_logs_an_idle_sample_as_partial(project):
    memory = InMemorySpanExporter()
    provider = _provider(memory)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": 0}):
        with tracer.start_as_current_span("child"):
            pass
    child, _root = memory.get_finished_spans()
    exporter = TrackioSpanExporter(project=project, name="r", sample_ttl_seconds=0.0)
    exporter.export([child])  # logged at once (TTL 0), written behind in the store process
    # Counted once the store says it is stored: the timer asks, no further export needed.
    wait_until(lambda: exporter.stats.partial_samples == 1, "the TTL's sample stored")
    exporter.shutdown()  # nothing open is left to flush: the TTL already logged it
    (trace,) = read_traces(project, "r")
    assert trace["metadata"]["partial_reason"] == "ttl"
    assert trace["metadata"]["status"] == "partial"


def test_a_full_buffer_logs_the_oldest_samples_as_partial_with_a_warning(project, caplog):
    memory = InMemorySpanExporter()
    provider = _provider(memory)
    tracer = provider.get_tracer("t")
    for i in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
            with tracer.start_as_current_span(f"child-{i}"):
                pass
    children = [s for s in memory.get_finished_spans() if s.name.startswith("child")]
    exporter = TrackioSpanExporter(project=project, name="r", max_buffered_spans=2)
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        for child in children:
            exporter.export([child])
    assert exporter.stats.evicted_samples == 1
    assert "1 open samples logged early as partial" in caplog.text
    exporter.shutdown()
    traces = read_traces(project, "r")
    reasons = {t["spans"][0]["name"]: t["metadata"]["partial_reason"] for t in traces}
    assert reasons == {"child-0": "capacity", "child-1": "flush", "child-2": "flush"}
    assert {t["metadata"]["status"] for t in traces} == {"partial"}


def test_step_comes_from_strings_and_falls_back_to_the_latest_step(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": "12", "sample_index": 0}):
        pass
    with tracer.start_as_current_span("rollout", attributes={"sample_index": 1}):
        pass
    provider.shutdown()
    assert sorted(
        (t["step"], t["metadata"]["sample_index"]) for t in read_traces(project, "r")
    ) == [
        (12, 0),
        (12, 1),
    ]


def test_without_any_step_samples_go_to_step_zero_not_trackio_auto_step(project):
    run = trackio.init(project=project, name="r")
    run.log({"loss": 1.0}, step=40)
    exporter = TrackioSpanExporter()
    provider = _provider(exporter)
    with provider.get_tracer("t").start_as_current_span("rollout"):
        pass
    provider.shutdown()
    run.finish()
    assert [t["step"] for t in read_traces(project, "r")] == [0]


def test_usage_totals_count_generation_spans_only(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    provider = _provider(exporter)
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span(
        "agent",
        attributes={
            "step": 0,
            "sample_index": 0,
            "gen_ai.operation.name": "invoke_agent",
            "gen_ai.usage.input_tokens": 100,
            "gen_ai.usage.output_tokens": 100,
        },
    ):
        for _ in range(2):
            with tracer.start_as_current_span("chat", attributes=_chat_attributes("q", "a", 5, 0)):
                pass
    provider.shutdown()
    (trace,) = read_traces(project, "r")
    assert trace_usage(trace) == {  # what the Tokens chip sums: the model calls only
        "input_tokens": 10,
        "output_tokens": 0,
        "total_tokens": 10,
    }
    agent = next(s for s in trace["spans"] if s["name"] == "agent")
    assert agent["metadata"]["usage"]["input_tokens"] == 100  # the agent's own total, kept


def test_an_active_user_run_is_reused_and_not_finished(project):
    run = trackio.init(project=project, name="mine")
    exporter = TrackioSpanExporter()
    assert exporter.run is run
    provider = _provider(exporter)
    with provider.get_tracer("t").start_as_current_span("rollout", attributes={"step": 1}):
        pass
    provider.shutdown()
    assert context_vars.current_run.get() is run
    run.log({"loss": 0.5}, step=2)  # still usable: the exporter did not finish it
    run.finish()
    assert len(read_traces(project, "mine")) == 1


def test_a_different_active_run_is_left_alone(project):
    mine = trackio.init(project=project, name="mine")
    exporter = TrackioSpanExporter(project=project, name="traces")
    assert exporter.run is not mine and exporter.run.name == "traces"
    assert context_vars.current_run.get() is mine
    provider = _provider(exporter)
    with provider.get_tracer("t").start_as_current_span("rollout", attributes={"step": 1}):
        pass
    provider.shutdown()
    mine.log({"loss": 0.5}, step=2)
    mine.finish()
    assert len(read_traces(project, "traces")) == 1
    assert read_traces(project, "mine") == []


def test_two_exporters_for_one_project_and_name_share_a_run(project):
    first = TrackioSpanExporter(project=project, name="shared")
    second = TrackioSpanExporter(project=project, name="shared", key="other/traces")
    assert first.run is second.run
    first.shutdown()
    provider = _provider(second)
    with provider.get_tracer("t").start_as_current_span("rollout", attributes={"step": 0}):
        pass
    provider.shutdown()  # the run is finished only now, by the last holder
    assert len(read_traces(project, "shared")) == 1


def test_a_missing_project_is_a_clear_error():
    with pytest.raises(ValueError, match="project"):
        TrackioSpanExporter()


class _BrokenRun:
    """A run whose log fails, as a full disk or a dead server would make it."""

    project = "broken"
    name = "broken"

    def log(self, metrics, step=None):
        raise OSError("disk full")

    def finish(self):
        pass


def test_a_run_whose_log_raises_makes_export_fail_without_raising(caplog):
    exporter = TrackioSpanExporter(run=_BrokenRun())
    memory = InMemorySpanExporter()
    provider = _provider(memory)
    with provider.get_tracer("t").start_as_current_span("rollout", attributes={"step": 0}):
        pass
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        assert exporter.export(memory.get_finished_spans()) is SpanExportResult.FAILURE
        assert "disk full" in caplog.text and "1 samples kept" in caplog.text
        assert exporter.stats.samples_lost == 0  # kept, retried with the next write
        exporter.shutdown()
    assert "1 samples lost" in caplog.text  # given up only at shutdown
    assert exporter.stats.samples_lost == 1


def test_lifecycle_follows_the_otel_spec(project):
    exporter = TrackioSpanExporter(project=project, name="r")
    assert exporter.force_flush(timeout_millis=1000) is True
    exporter.shutdown()
    exporter.shutdown()  # idempotent
    assert exporter.export([]) is SpanExportResult.FAILURE
    assert exporter.force_flush() is False


def test_make_demo_writes_24_samples(tmp_path):
    env = {"TRACKIO_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    result = subprocess.run(
        [
            sys.executable,
            str(REPO / "examples" / "rollout_demo.py"),
            "--project",
            "demo",
            "--name",
            "r",
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    # One "Run finished" (Trackio printed it twice), and a show command that works from anywhere.
    assert result.stdout.count("Run finished") == 1, result.stdout
    # The run's summary (stderr) ends with it.
    command = re.search(
        r"^otel-trackio: open them with: (TRACKIO_DIR=\S+) (\S+) show --project demo → ",
        result.stderr,
        re.M,
    )
    assert command is not None, result.stderr
    assert command.group(1) == f"TRACKIO_DIR={tmp_path}"
    assert Path(command.group(2)).is_absolute() and Path(command.group(2)).exists()
    code = (
        "from trackio.sqlite_storage import SQLiteStorage as S; import json;"
        "print(json.dumps([[t['step'], t['metadata'].get('sample_index'), len(t['messages'])]"
        " for t in S.get_traces('demo', 'r')]))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        env=env,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    rows = json.loads(out.stdout)
    assert sorted((s, i) for s, i, _ in rows) == [(s, i) for s in range(3) for i in range(8)]
    # system, user, tool call, tool result, answer; the sample stuck in its tool: the first three
    assert {(s, i): n for s, i, n in rows if n != 5} == {(2, 7): 3}


KILLED_AFTER_EXPORT = """
import os, signal
from otel_trackio import TrackioSpanExporter
from otel_trackio._core.records import SpanRecord

exporter = TrackioSpanExporter(os.environ["PROJECT"], name="killed", offload=False)
store = exporter._engine.sink._store._process
os.kill(store.pid, signal.SIGSTOP)  # the store stalls: nothing is stored while exporting
for step in range(3):
    batch = [
        SpanRecord(step * 100 + i + 1, 1, "s", 0, 1, attributes={"step": step, "sample_index": i})
        for i in range(5)
    ]
    assert exporter._export_records(batch).name == "SUCCESS"
assert exporter.stats.samples_logged == 0  # handed over, not yet stored
os.kill(store.pid, signal.SIGCONT)
os.kill(os.getpid(), signal.SIGKILL)  # before any flush or shutdown
"""


def test_what_export_handed_to_the_store_is_stored_once_though_the_process_is_killed_after(
    project, trackio_dir
):
    """In process, Trackio's writes run in a store process: ``export()`` returns once its
    Traces are handed over, and the store writes them even when the exporting process dies
    right after."""
    from conftest import run_python

    child = run_python(KILLED_AFTER_EXPORT, trackio_dir, PROJECT=project)
    assert child.returncode == -9, child.stderr[-2000:]
    expected = sorted((step, index) for step in range(3) for index in range(5))

    def stored() -> list[tuple[int, int]]:
        traces = read_traces(project, "killed")
        return sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)

    wait_until(lambda: stored() == expected, "every exported sample stored, once")
