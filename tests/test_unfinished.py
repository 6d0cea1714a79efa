"""Samples still running at a flush show where they stopped: their open spans are in the tree,
marked unfinished, and ``partial_reason`` names them — in process, offloaded, and zero-code."""

from __future__ import annotations

import os
import textwrap
import time
from pathlib import Path

import pytest
from conftest import read_traces, run_python
from opentelemetry import trace as otel_trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor

from otel_trackio import OpenSampleTracker, TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._engine.open_spans import OpenSpans

ROOT = Path(__file__).resolve().parent.parent
TOOL = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": "get_weather"}
CHAT = {
    "gen_ai.operation.name": "chat",
    "gen_ai.request.model": "m",
    "gen_ai.usage.input_tokens": 7,
    "gen_ai.usage.output_tokens": 3,
}


def _provider(exporter: TrackioSpanExporter, how: str) -> TracerProvider:
    provider = TracerProvider()
    if how == "processor":
        provider.add_span_processor(TrackioSpanProcessor(exporter))
    else:  # the zero-code setup: the SDK's own processor, our tracker beside it
        provider.add_span_processor(OpenSampleTracker(exporter=exporter))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    return provider


def _stuck(tracer: otel_trace.Tracer, *, chat_first: bool) -> None:
    """A sample that starts its tool call and never returns from it (both stay open)."""
    root = tracer.start_span("rollout", attributes={"step": 3, "sample_index": 5})
    with otel_trace.use_span(root, end_on_exit=False):
        if chat_first:
            with tracer.start_as_current_span("chat m", attributes=CHAT):
                pass
        tracer.start_span("execute_tool get_weather", attributes=TOOL)  # hangs


def _spans_by_name(trace: dict) -> dict[str, dict]:
    return {span["name"]: span for span in trace["spans"]}


@pytest.mark.parametrize("how", ["processor", "tracker"])
def test_a_sample_stuck_in_its_first_tool_call_is_stored_with_its_open_spans(project, how):
    exporter = TrackioSpanExporter(project, how)
    provider = _provider(exporter, how)
    _stuck(provider.get_tracer("t"), chat_first=False)
    provider.shutdown()  # no span of the sample ever ended

    [trace] = read_traces(project, how)
    meta = trace["metadata"]
    assert (trace["step"], meta["sample_index"], meta["status"]) == (3, 5, "partial")
    spans = _spans_by_name(trace)
    assert set(spans) == {"rollout", "execute_tool get_weather"}
    assert {s["status"] for s in spans.values()} == {"unfinished"}
    root, tool = spans["rollout"], spans["execute_tool get_weather"]
    assert root["parent_id"] is None and tool["parent_id"] == root["id"]
    assert tool["kind"] == "tool" and tool["metadata"]["gen_ai.tool.name"] == "get_weather"
    assert tool["duration_ms"] >= 0 and root["duration_ms"] >= tool["duration_ms"]
    assert len(trace["spans"]) == 2
    reason = meta["partial_reason"]
    assert reason.startswith("flush: still open: execute_tool get_weather (")
    assert reason.index("execute_tool") < reason.index("rollout (")


def test_a_sample_stuck_after_some_children_ended_keeps_them(project):
    exporter = TrackioSpanExporter(project, "after")
    provider = _provider(exporter, "processor")
    _stuck(provider.get_tracer("t"), chat_first=True)
    provider.shutdown()

    [trace] = read_traces(project, "after")
    spans = _spans_by_name(trace)
    assert {name: s["status"] for name, s in spans.items()} == {
        "rollout": "unfinished",
        "chat m": "success",
        "execute_tool get_weather": "unfinished",
    }
    assert spans["chat m"]["parent_id"] == spans["rollout"]["id"]
    assert spans["chat m"]["usage"]["input_tokens"] == 7
    assert "still open: execute_tool get_weather" in trace["metadata"]["partial_reason"]


def test_a_sample_idle_past_the_ttl_is_logged_with_its_open_spans(project):
    """A tool call hangs: no span of the trace ends for the TTL, so the timer logs the sample
    as partial while it still runs — showing the open root and tool call, not only what ended;
    their ends come later as a continuation."""
    exporter = TrackioSpanExporter(project, "ttl", sample_ttl_seconds=0.5)
    provider = _provider(exporter, "processor")
    tracer = provider.get_tracer("t")
    root = tracer.start_span("rollout", attributes={"step": 3, "sample_index": 5})
    with otel_trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("chat m", attributes=CHAT):
            pass
        tool = tracer.start_span("execute_tool get_weather", attributes=TOOL)  # hangs
    deadline = time.monotonic() + 60
    while not read_traces(project, "ttl"):  # the timer, not a flush, logs it
        assert time.monotonic() < deadline, "the TTL never logged the idle sample"
        time.sleep(0.05)
    tool.end()
    root.end()
    provider.shutdown()

    first, later = read_traces(project, "ttl")
    spans = _spans_by_name(first)
    assert {name: s["status"] for name, s in spans.items()} == {
        "rollout": "unfinished",
        "chat m": "success",
        "execute_tool get_weather": "unfinished",
    }
    meta = first["metadata"]
    assert (first["step"], meta["sample_index"]) == (3, 5)
    assert meta["partial_reason"].startswith("ttl: still open: execute_tool get_weather")
    assert later["metadata"]["partial_reason"] == "late"
    assert {s["name"]: s["status"] for s in later["spans"]} == {
        "rollout": "success",
        "execute_tool get_weather": "success",
    }


def test_many_samples_idle_at_once_are_logged_with_their_open_spans_in_one_look(
    project, monkeypatch
):
    """A model server goes away: 200 samples hang in their tool calls at once. The TTL logs
    each with its open root and tool call, and reads the open spans once per sweep, not once
    per idle trace (a pass over every open span each: quadratic, on the export thread)."""
    looks: list[int] = []
    records = OpenSpans.records

    def counted(self: OpenSpans, now_ns: int | None = None, trace_ids=None):  # type: ignore[no-untyped-def]
        if trace_ids is not None:
            looks.append(len(trace_ids))
        return records(self, now_ns, trace_ids)

    monkeypatch.setattr(OpenSpans, "records", counted)
    exporter = TrackioSpanExporter(project, "idle", sample_ttl_seconds=0.5)
    provider = _provider(exporter, "processor")
    tracer = provider.get_tracer("t")
    hung = []
    for i in range(200):
        root = tracer.start_span("rollout", attributes={"step": 1, "sample_index": i})
        with otel_trace.use_span(root, end_on_exit=False):
            with tracer.start_as_current_span("chat m", attributes=CHAT):
                pass
            hung.append((root, tracer.start_span("execute_tool get_weather", attributes=TOOL)))
    deadline = time.monotonic() + 60
    while len(read_traces(project, "idle")) < 200:  # the timer, not a flush, logs them
        assert time.monotonic() < deadline, "the TTL never logged the idle samples"
        time.sleep(0.1)
    stored = read_traces(project, "idle")
    assert sorted(t["metadata"]["sample_index"] for t in stored) == list(range(200))
    for trace in stored:
        assert {s["name"]: s["status"] for s in trace["spans"]} == {
            "rollout": "unfinished",
            "chat m": "success",
            "execute_tool get_weather": "unfinished",
        }
    # A look per sweep, covering every trace idle then, not a look per trace (looks of one):
    # how many sweeps run before the writer stores them depends on how busy the machine is.
    assert sum(looks) >= 200 and sum(looks) >= 20 * len(looks), looks
    for root, tool in hung:
        tool.end()
        root.end()
    provider.shutdown()


def test_open_spans_shown_at_a_flush_end_later_as_a_continuation(project):
    exporter = TrackioSpanExporter(project, "later")
    provider = _provider(exporter, "processor")
    tracer = provider.get_tracer("t")
    root = tracer.start_span("rollout", attributes={"step": 1, "sample_index": 0})
    with otel_trace.use_span(root, end_on_exit=False):
        tool = tracer.start_span("execute_tool get_weather", attributes=TOOL)
    provider.force_flush()
    assert exporter.force_flush()  # shown, unfinished
    tool.end()
    root.end()
    provider.shutdown()

    first, second = read_traces(project, "later")
    assert {s["status"] for s in first["spans"]} == {"unfinished"}
    # The ends come as a continuation of the same sample, not as a second whole sample.
    meta = second["metadata"]
    assert (second["step"], meta["sample_index"], meta["partial_reason"]) == (1, 0, "late")
    assert {s["status"] for s in second["spans"]} == {"success"}


def test_other_samples_of_the_step_stay_apart_under_an_open_step_span(project):
    exporter = TrackioSpanExporter(project, "step")
    provider = _provider(exporter, "processor")
    tracer = provider.get_tracer("t")
    step = tracer.start_span("train_step", attributes={"step": 2})
    with otel_trace.use_span(step, end_on_exit=False):
        for index in range(2):
            _stuck_at(tracer, index)
    provider.shutdown()

    traces = read_traces(project, "step")
    by_index = {t["metadata"].get("sample_index"): t for t in traces}
    assert set(by_index) == {0, 1, None}  # the step span on its own, as when it ends
    for index in (0, 1):
        assert {s["name"] for s in by_index[index]["spans"]} == {
            "rollout",
            "execute_tool get_weather",
        }
        assert by_index[index]["step"] == 2
    assert [s["name"] for s in by_index[None]["spans"]] == ["train_step"]


def _stuck_at(tracer: otel_trace.Tracer, index: int) -> None:
    root = tracer.start_span("rollout", attributes={"sample_index": index})
    with otel_trace.use_span(root, end_on_exit=False):
        tracer.start_span("execute_tool get_weather", attributes=TOOL)


STUCK_WITH_CONFIGURE = textwrap.dedent(
    """
    import otel_trackio
    from opentelemetry import trace
    handle = otel_trackio.configure({project!r}, "offloaded")  # offload=True by default
    tracer = trace.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={{"step": 0, "sample_index": 0}}):
        pass
    root = tracer.start_span("rollout", attributes={{"step": 0, "sample_index": 1}})
    with trace.use_span(root, end_on_exit=False):
        tracer.start_span("execute_tool get_weather", attributes={tool!r})
    handle.shutdown()
    """
)


def test_offloaded_run_stores_the_stuck_sample_with_its_open_spans(project, trackio_dir):
    result = run_python(STUCK_WITH_CONFIGURE.format(project=project, tool=TOOL), trackio_dir)
    assert result.returncode == 0, result.stderr
    traces = {t["metadata"]["sample_index"]: t for t in read_traces(project, "offloaded")}
    assert set(traces) == {0, 1}
    stuck = traces[1]
    assert {s["name"]: s["status"] for s in stuck["spans"]} == {
        "rollout": "unfinished",
        "execute_tool get_weather": "unfinished",
    }
    assert "still open: execute_tool get_weather" in stuck["metadata"]["partial_reason"]


STUCK_PAST_THE_TTL = textwrap.dedent(
    """
    import os, sys, time
    import otel_trackio
    from opentelemetry import trace
    handle = otel_trackio.configure(
        {project!r}, "offloaded-ttl", offload=True, sample_ttl_seconds={ttl}
    )
    tracer = trace.get_tracer("t")
    root = tracer.start_span("rollout", attributes={{"step": 4, "sample_index": 2}})
    with trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("chat m"):
            pass
        tool = tracer.start_span("execute_tool get_weather", attributes={tool!r})
    deadline = time.monotonic() + 120
    while not os.path.exists({flag!r}) and time.monotonic() < deadline:
        time.sleep(0.05)  # hangs until the test has seen the TTL's Trace
    tool.end()
    root.end()
    handle.shutdown()
    """
)


def test_offloaded_sample_idle_past_the_ttl_shows_its_open_spans(project, trackio_dir, tmp_path):
    """Offloaded, the writer logs the idle trace at the TTL; the spans open in the rollout
    process reach it (reported once open for half the TTL), so the Trace shows them."""
    import subprocess
    import sys

    flag = tmp_path / "seen"
    script = STUCK_PAST_THE_TTL.format(project=project, ttl=6.0, tool=TOOL, flag=str(flag))
    child = subprocess.Popen(
        [sys.executable, "-c", script],
        env={**os.environ, "TRACKIO_DIR": trackio_dir, "TRACKIO_DISABLE_TELEMETRY": "1"},
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 90
        while not read_traces(project, "offloaded-ttl"):  # the writer's TTL, not a flush
            assert child.poll() is None, child.communicate()
            assert time.monotonic() < deadline, "the TTL never logged the idle sample"
            time.sleep(0.1)
        flag.touch()
        _, stderr = child.communicate(timeout=120)
    finally:
        if child.poll() is None:
            child.kill()
    assert child.returncode == 0, stderr
    first, later = read_traces(project, "offloaded-ttl")
    assert {s["name"]: s["status"] for s in first["spans"]} == {
        "rollout": "unfinished",
        "chat m": "success",
        "execute_tool get_weather": "unfinished",
    }
    assert first["metadata"]["partial_reason"].startswith("ttl: still open: execute_tool")
    assert later["metadata"]["partial_reason"] == "late"
