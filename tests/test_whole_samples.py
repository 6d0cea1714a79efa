"""Samples stay whole whatever the arrival order: the grace period, the expiry timer, open sample
roots under the plain OTel API, and spans of one sample sent by several processes."""

from __future__ import annotations

import os
import random
import subprocess
import sys
import textwrap
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import read_traces, root_span_id, trace_usage, wait_until
from opentelemetry import trace as otel_trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import Status, StatusCode

from otel_trackio import (
    OpenSampleTracker,
    TrackioSettings,
    TrackioSpanExporter,
    TrackioSpanProcessor,
)
from otel_trackio._codec.sdk import record_from_readable_span
from otel_trackio._core.assembly import SampleAssembler
from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio.receiver import OTLPReceiver

PROTOBUF = {"Content-Type": "application/x-protobuf"}


def _sample_spans(samples: int, children: int = 3) -> list[ReadableSpan]:
    """Finished spans of ``samples`` samples: a root and ``children`` children each; the last
    child of every third sample fails."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "shuffled"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(samples):
        with tracer.start_as_current_span("rollout", attributes={"step": i % 4, "sample_index": i}):
            for c in range(children):
                with tracer.start_as_current_span(f"child-{c}") as child:
                    if c == children - 1 and i % 3 == 0:
                        child.set_status(Status(StatusCode.ERROR, "tool failed"))
    return list(memory.get_finished_spans())


def _post_root_first(url: str, spans: list[ReadableSpan], requests_in_parallel: int) -> None:
    """Every root first (one request), then the children shuffled over many concurrent requests
    — what a client flushing its batches concurrently, or a Collector, does."""
    roots = [s for s in spans if s.parent is None]
    children = [s for s in spans if s.parent is not None]
    random.Random(7).shuffle(children)
    session = requests.Session()

    def post(batch: list[ReadableSpan]) -> int:
        time.sleep(random.random() * 0.05)
        body = encode_spans(batch).SerializeToString()
        return session.post(url + "/v1/traces", data=body, headers=PROTOBUF, timeout=30).status_code

    assert post(roots) == 200
    batches = [children[i::requests_in_parallel] for i in range(requests_in_parallel)]
    with ThreadPoolExecutor(8) as pool:
        assert set(pool.map(post, batches)) == {200}


def _split_samples(traces: list[dict]) -> int:
    """How many samples came out in more than one row (rows without a sample index each count
    as a split of an unknown sample)."""
    rows: dict[object, int] = {}
    for t in traces:
        index = t["metadata"].get("sample_index")
        rows[index] = rows.get(index, 0) + 1
    unknown = rows.pop(None, 0)
    return sum(1 for n in rows.values() if n > 1) + unknown


def test_receiver_children_after_their_root_join_it_within_the_grace_period(project):
    spans = _sample_spans(49)
    first = spans[-4:]  # sample 48: its children, then its root (the order they ended)
    receiver = OTLPReceiver(project, "grace", port=0, grpc_port=0, summary_interval=0).start()
    try:
        # The run's first sample, its children sent after its root was answered: it goes out
        # as soon as the receiver has the root (its quick phase), so they come as continuations
        # (the known gap) — or join it, when their request began before it went out — and show
        # that this run's spans trail their root.
        _post_root_first(receiver.url, first, requests_in_parallel=1)
        wait_until(
            lambda: receiver.router.default.spans.grace.trailing_seen,
            what="the late children seen",
        )
        # From then on every sample waits for the grace period: children after their root join.
        _post_root_first(receiver.url, spans[:-4], requests_in_parallel=24)
    finally:
        receiver.stop()
    traces = read_traces(project, "grace")
    head, *late = sorted(
        (t for t in traces if t["metadata"]["sample_index"] == 48),
        key=lambda t: bool(t["metadata"].get("partial")),
    )
    assert "rollout" in [s["name"] for s in head["spans"]]
    assert all(t["metadata"]["partial_reason"] == "late" for t in late)
    names = sorted(s["name"] for t in [head, *late] for s in t["spans"])
    assert names == ["child-0", "child-1", "child-2", "rollout"]  # each span once
    traces = [t for t in traces if t["metadata"]["sample_index"] != 48]
    assert len(traces) == 48
    assert sorted(t["metadata"]["sample_index"] for t in traces) == list(range(48))
    for trace in traces:
        meta = trace["metadata"]
        assert not meta.get("partial"), meta
        assert len(trace["spans"]) == 4
        assert sorted(s["name"] for s in trace["spans"]) == [
            "child-0",
            "child-1",
            "child-2",
            "rollout",
        ]
        failed = meta["sample_index"] % 3 == 0
        assert any(s["status"] == "error" for s in trace["spans"]) == failed


def test_without_a_grace_period_late_children_are_continuations_findable_by_root_id(project):
    spans = _sample_spans(12)
    receiver = OTLPReceiver(
        project, "no-grace", port=0, grpc_port=0, summary_interval=0, sample_grace_seconds=0
    ).start()
    try:
        _post_root_first(receiver.url, spans, requests_in_parallel=6)
    finally:
        receiver.stop()
    traces = read_traces(project, "no-grace")
    assert _split_samples(traces) == 12  # every child came after its root: each sample split
    first_rows = [t for t in traces if not t["metadata"].get("partial")]
    assert len(first_rows) == 12
    for first in first_rows:
        root_id = root_span_id(first)
        rest = [t for t in traces if t is not first and root_span_id(t) == root_id]
        assert rest and all(t["metadata"]["partial_reason"] == "late" for t in rest)
        assert len(first["spans"]) + sum(len(t["spans"]) for t in rest) == 4


def test_a_fragment_whose_root_never_came_says_its_step_is_a_guess(project):
    """Children of a root that never reaches the receiver (its process killed) carry no step:
    the fragment is stored at the latest step seen, partial, its header saying the step is a
    guess; a whole sample says nothing of the kind."""
    spans = _sample_spans(6)  # steps 0, 1, 2, 3, 0, 1
    lost_root = next(s for s in spans if s.parent is None and s.attributes["sample_index"] == 5)
    sent = [s for s in spans if s is not lost_root]
    receiver = OTLPReceiver(project, "orphans", port=0, grpc_port=0, summary_interval=0).start()
    try:
        body = encode_spans(sent).SerializeToString()
        response = requests.post(receiver.url + "/v1/traces", data=body, headers=PROTOBUF)
        assert response.status_code == 200
    finally:
        receiver.stop()
    traces = read_traces(project, "orphans")
    whole = [t for t in traces if "sample_index" in t["metadata"]]
    assert sorted(t["metadata"]["sample_index"] for t in whole) == [0, 1, 2, 3, 4]
    assert not any("step_guessed" in t["metadata"] for t in whole)
    (fragment,) = [t for t in traces if "sample_index" not in t["metadata"]]
    assert sorted(s["name"] for s in fragment["spans"]) == ["child-0", "child-1", "child-2"]
    meta = fragment["metadata"]
    assert meta["partial"] and meta["step"] == 3  # the latest step seen
    assert meta["step_guessed"].startswith("no span of this sample carried a step")
    assert root_span_id(fragment) is None, meta  # its root never came: the tree has none


def test_a_held_sample_is_logged_when_its_grace_ends_with_no_more_data(project, tracer_provider):
    exporter = TrackioSpanExporter(project, "timer", sample_grace_seconds=0.3)
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("rollout", attributes={"step": 2, "sample_index": 5}):
        pass
    assert read_traces(project, "timer") == []  # held
    deadline = time.monotonic() + 10
    while not read_traces(project, "timer") and time.monotonic() < deadline:
        time.sleep(0.05)
    (trace,) = read_traces(project, "timer")  # logged by the timer: no export, no flush
    assert trace["metadata"]["sample_index"] == 5 and not trace["metadata"].get("partial")
    provider.shutdown()
    assert len(read_traces(project, "timer")) == 1


def test_an_idle_open_trace_is_logged_at_its_ttl_by_the_timer(project, tracer_provider):
    # The rollout process reports its spans open past half the TTL, every quarter of it: the
    # TTL leaves a starved machine a second for that report to reach the writer.
    exporter = TrackioSpanExporter(project, "ttl", sample_ttl_seconds=2.0)
    provider = tracer_provider
    provider.add_span_processor(TrackioSpanProcessor(exporter, schedule_delay_millis=50))
    tracer = provider.get_tracer("t")
    root = tracer.start_span("rollout", attributes={"step": 4, "sample_index": 9})
    with otel_trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("chat"):
            pass
    deadline = time.monotonic() + 30
    while not read_traces(project, "ttl") and time.monotonic() < deadline:
        time.sleep(0.05)
    (trace,) = read_traces(project, "ttl")
    meta = trace["metadata"]
    assert (trace["step"], meta["sample_index"]) == (4, 9)
    assert meta["partial_reason"].startswith("ttl: still open: rollout")  # its root, still open
    root.end()
    provider.shutdown()


def test_force_flush_logs_held_samples_at_once_whole(project, tracer_provider):
    exporter = TrackioSpanExporter(project, "flush", sample_grace_seconds=60)
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    for i in range(3):
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": i}):
            pass
    assert read_traces(project, "flush") == []
    started = time.monotonic()
    assert exporter.force_flush()
    assert time.monotonic() - started < 5
    traces = read_traces(project, "flush")
    assert len(traces) == 3 and not any(t["metadata"].get("partial") for t in traces)
    provider.shutdown()


def test_held_samples_count_against_the_span_buffer():
    assembler = SampleAssembler(
        TrackioSettings(max_buffered_spans=5), grace=GracePolicy(explicit=60)
    )
    records = [record_from_readable_span(s) for s in _sample_spans(3, children=1)]
    out = assembler.add(records)  # 6 spans, all complete but held: over the bound of 5
    assert assembler.buffered_spans <= 5
    assert len(out) == 1 and out[0].root is not None and not out[0].identity.partial


@pytest.mark.parametrize("how", ["processor", "tracker"])
def test_open_roots_started_with_the_plain_api_keep_their_identity(project, how, tracer_provider):
    exporter = TrackioSpanExporter(project, how)
    provider = tracer_provider
    if how == "processor":
        provider.add_span_processor(TrackioSpanProcessor(exporter))
    else:  # what the zero-code setup adds beside the SDK's own BatchSpanProcessor
        provider.add_span_processor(OpenSampleTracker())
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    with tracer.start_as_current_span("train_step", attributes={"step": 3}):
        pass  # a later step seen: the latest-step fallback would be 3, not 9
    root = tracer.start_span("rollout", attributes={"step": 9, "sample_index": 77})
    with otel_trace.use_span(root, end_on_exit=False):
        with tracer.start_as_current_span("chat"):
            pass
    provider.shutdown()  # the root is still open
    partial = [t for t in read_traces(project, how) if t["metadata"].get("partial")]
    assert len(partial) == 1
    assert (partial[0]["step"], partial[0]["metadata"]["sample_index"]) == (9, 77)


# -- several processes, the official OTLP exporter ----------------------------------------------

MODEL_SERVER = textwrap.dedent(
    """
    # An inference server in its own process, instrumented on its own: it continues the caller's
    # trace (W3C traceparent) and exports its spans with its own batch processor.
    import sys
    from opentelemetry import propagate
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url = sys.argv[1]
    provider = TracerProvider(resource=Resource.create({"service.name": "model-server"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=url + "/v1/traces"), max_export_batch_size=4,
        schedule_delay_millis=300))
    tracer = provider.get_tracer("server")
    for line in sys.stdin:
        context = propagate.extract({"traceparent": line.strip()})
        with tracer.start_as_current_span("chat policy", context=context) as span:
            span.set_attribute("gen_ai.operation.name", "chat")
            span.set_attribute("gen_ai.usage.input_tokens", 5)
            span.set_attribute("gen_ai.usage.output_tokens", 3)
        print("done", flush=True)
    provider.shutdown()
    """
)

WORKER = textwrap.dedent(
    """
    # A rollout worker: the sample root here, the model call in the model server's process.
    import subprocess, sys
    from opentelemetry import propagate, trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    url, worker, samples, server = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
    model = subprocess.Popen([sys.executable, "-c", server, url], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    provider = TracerProvider(resource=Resource.create({"service.name": f"worker-{worker}"}))
    provider.add_span_processor(BatchSpanProcessor(
        OTLPSpanExporter(endpoint=url + "/v1/traces"), max_export_batch_size=2,
        schedule_delay_millis=50))
    tracer = provider.get_tracer("worker")
    for i in range(samples):
        index = worker * samples + i
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": index}):
            carrier = {}
            propagate.inject(carrier)
            model.stdin.write(carrier["traceparent"] + "\\n"); model.stdin.flush()
            model.stdout.readline()
            with tracer.start_as_current_span("reward"):
                pass
    provider.shutdown()
    model.stdin.close(); model.wait(timeout=60)
    """
)


def _run_workers(url: str, workers: int, samples: int, first: int = 0) -> None:
    """``workers`` worker processes (numbered from ``first``), ``samples`` samples each."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    procs = [
        subprocess.Popen(
            [sys.executable, "-c", WORKER, url, str(w), str(samples), MODEL_SERVER], env=env
        )
        for w in range(first, first + workers)
    ]
    assert [p.wait(timeout=120) for p in procs] == [0] * workers


@pytest.mark.parametrize("grace", [None, 0])
def test_official_exporter_across_processes_gives_whole_samples(project, grace, capsys):
    options = {} if grace is None else {"sample_grace_seconds": grace}
    receiver = OTLPReceiver(
        project, "procs", port=0, grpc_port=0, summary_interval=0, **options
    ).start()
    try:
        if grace is None:
            # The receiver's quick phase lets a sample go once its own process's spans are in,
            # until the run shows spans of one sample from two processes: a first worker's
            # samples show it (the first ones may come out split: the known gap), then every
            # sample waits for the grace period.
            _run_workers(receiver.url, workers=1, samples=2, first=12)  # samples 24 and 25
            wait_until(
                lambda: receiver.router.default.spans.grace.trailing_seen,
                what="the run showing two processes",
            )
        _run_workers(receiver.url, workers=3, samples=8)
    finally:
        receiver.stop()
    traces = read_traces(project, "procs")
    if grace is None:
        first = [t for t in traces if t["metadata"].get("sample_index") in (24, 25)]
        names = sorted(s["name"] for t in first for s in t["spans"])
        assert names == ["chat policy", "chat policy", "reward", "reward", "rollout", "rollout"]
        traces = [t for t in traces if t not in first]
    split = _split_samples(traces)
    with capsys.disabled():
        print(f"\n[cross-process, grace={grace}] 24 samples -> {len(traces)} rows, {split} split")
    if grace is None:
        assert len(traces) == 24 and split == 0
        for trace in traces:
            assert sorted(s["name"] for s in trace["spans"]) == ["chat policy", "reward", "rollout"]
            assert trace_usage(trace)["input_tokens"] == 5
    else:  # the model server's spans trail their roots: without a grace period samples split,
        # and the trailing spans come out as continuations carrying the sample's identity
        assert split > 0
        late = [t for t in traces if t["metadata"].get("partial_reason") == "late"]
        assert late and all(t["metadata"].get("sample_index") is not None for t in late)


def test_concurrent_flushes_from_a_thread_pool_keep_samples_whole(project):
    """Many clients at once, each with a different order (root first or last)."""
    spans = _sample_spans(32, children=2)
    receiver = OTLPReceiver(project, "mixed", port=0, grpc_port=0, summary_interval=0).start()
    url = receiver.url
    by_sample: dict[int, list[ReadableSpan]] = {}
    for s in spans:
        by_sample.setdefault(s.context.trace_id, []).append(s)
    errors: list[BaseException] = []

    def client(group: list[list[ReadableSpan]], seed: int) -> None:
        rng = random.Random(seed)
        try:
            for sample_spans in group:
                parts = [[s] for s in sample_spans]
                rng.shuffle(parts)
                for part in parts:
                    body = encode_spans(part).SerializeToString()
                    requests.post(url + "/v1/traces", data=body, headers=PROTOBUF, timeout=30)
        except BaseException as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    groups = list(by_sample.values())
    threads = [threading.Thread(target=client, args=(groups[k::4], k)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    receiver.stop()
    assert not errors
    traces = read_traces(project, "mixed")
    assert len(traces) == 32 and _split_samples(traces) == 0
    assert not any(t["metadata"].get("partial") for t in traces)
