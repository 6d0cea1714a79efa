"""The spool between OpenTelemetry and Trackio: the on-disk queue, ``offload=True`` (a writer
process logs what the rollout process spools) and the receiver answering once data is spooled —
with crashes of every party, on real Trackio storage."""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import zlib
from pathlib import Path

import pytest
import requests
from conftest import (
    SERVE,
    OffloadWithLogEvents,
    read_traces,
    sample_spans,
    storage_lock_held,
    wait_until,
)
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._codec import spool as codec
from otel_trackio._offload.client import WRITER_CHECK_SECONDS
from otel_trackio._spool import segments as spool_segments
from otel_trackio._spool.segments import (
    SEGMENT_BYTES,
    Checkpoint,
    Position,
    Producer,
    Reader,
    SpoolFull,
    load_checkpoint,
    save_checkpoint,
    segment_path,
    segments,
)
from otel_trackio.receiver import OTLPReceiver

REPO = Path(__file__).resolve().parent.parent
PROTOBUF = {"Content-Type": "application/x-protobuf"}
VOLATILE = {
    "id",
    "parent_id",
    "start_time",
    "end_time",
    "duration_ms",
    "otel.trace_id",
    "root_span_id",
}


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # a zombie still answers kill(0): look at its state
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return False
    return state != "Z"


def _emit(provider: TracerProvider, steps: int, samples: int, start: int = 0) -> None:
    """A small agentic workload: root, a model call with messages and usage, a tool, a reward."""
    tracer = provider.get_tracer("rollout")
    for step in range(steps):
        for i in range(start, start + samples):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": i, "reward": i % 2}
            ):
                with tracer.start_as_current_span("chat policy") as chat:
                    chat.set_attribute("gen_ai.operation.name", "chat")
                    chat.set_attribute("gen_ai.usage.input_tokens", 10 + i)
                    chat.set_attribute("gen_ai.usage.output_tokens", 4)
                    chat.set_attribute(
                        "gen_ai.input.messages",
                        json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": f"q{i}"}]}]
                        ),
                    )
                    chat.set_attribute(
                        "gen_ai.output.messages",
                        json.dumps(
                            [{"role": "assistant", "parts": [{"type": "text", "content": f"a{i}"}]}]
                        ),
                    )
                    chat.add_event("gen_ai.choice", {"index": 0})
                with tracer.start_as_current_span("execute_tool calc") as tool:
                    tool.set_attribute("gen_ai.operation.name", "execute_tool")
                    tool.set_attribute("gen_ai.tool.call.arguments", '{"x": 1}')


def _normalised(traces: list[dict]) -> list[dict]:
    def strip(value):
        if isinstance(value, dict):
            return {k: strip(v) for k, v in value.items() if k not in VOLATILE}
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    keyed = [strip({k: t[k] for k in ("step", "messages", "metadata", "spans")}) for t in traces]
    return sorted(keyed, key=lambda t: (t["step"], t["metadata"]["sample_index"]))


def _keys(traces: list[dict]) -> list[tuple[int, int]]:
    return sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)


# -- the queue ---------------------------------------------------------------------------------


def test_entries_come_back_in_order_across_segments_and_a_torn_tail_is_skipped(tmp_path):
    producer = Producer(tmp_path, max_bytes=1 << 30)
    big = b"x" * (SEGMENT_BYTES // 3)
    for i in range(7):
        producer.append(codec.SPANS, big + str(i).encode())
    assert len(segments(tmp_path)) >= 3
    producer.close()
    # A producer killed mid-append leaves a torn entry at the end of its last segment.
    with open(segment_path(tmp_path, segments(tmp_path)[-1]), "ab") as handle:
        handle.write(b"OT\x01\x00\xff\xff")
    later = Producer(tmp_path, max_bytes=1 << 30)  # the next producer starts a new segment
    later.append(codec.FLUSH, codec.encode_flush(1))
    reader = Reader(tmp_path)
    entries = reader.read(reader.first_position(), 1 << 40)
    assert [e.payload[-1:] for e in entries[:7]] == [str(i).encode() for i in range(7)]
    assert entries[-1].kind == codec.FLUSH
    assert reader.torn_entries == 1
    assert [e.start for e in entries] == sorted(e.start for e in entries)
    later.close()


def test_the_bound_refuses_appends_until_segments_are_deleted(tmp_path):
    producer = Producer(tmp_path, max_bytes=3000)
    producer.append(codec.SPANS, b"a" * 1000)
    producer.append(codec.SPANS, b"b" * 1000)
    with pytest.raises(SpoolFull):
        producer.append(codec.SPANS, b"c" * 1000)
    producer.close()
    for seq in segments(tmp_path):
        segment_path(tmp_path, seq).unlink()
    again = Producer(tmp_path, max_bytes=3000)
    again.append(codec.SPANS, b"c" * 1000)
    again.close()


def test_a_full_spool_takes_appends_again_once_the_drainer_moved_on(tmp_path):
    """The producer looks at what the spool holds only at its bound: the same producer, refused
    once, appends again as soon as the drainer's checkpoint says the entries are done."""
    producer = Producer(tmp_path, max_bytes=3000)
    producer.append(codec.SPANS, b"a" * 1000)
    producer.append(codec.SPANS, b"b" * 1000)
    with pytest.raises(SpoolFull):
        producer.append(codec.SPANS, b"c" * 1000)
    [seq] = segments(tmp_path)
    done = Position(seq, segment_path(tmp_path, seq).stat().st_size)
    save_checkpoint(tmp_path, Checkpoint(oldest=done, processed=done))
    producer.append(codec.SPANS, b"c" * 1000)
    with pytest.raises(SpoolFull):  # and the bound still holds after it
        producer.append(codec.SPANS, b"d" * 2500)
    producer.close()


@pytest.mark.parametrize("size", [0, 1, 4095, 4096, 4097, 5 * 1024 + 1, 1_000_003])
def test_the_append_checksum_is_zlibs_at_every_size(size):
    """The spool's checksum, computed in pieces that keep the GIL, is zlib's CRC-32."""
    data = bytes(range(256)) * (size // 256) + bytes(size % 256)
    assert spool_segments.crc32_holding_the_gil(data) == zlib.crc32(data)


def test_checkpoint_round_trip_and_one_producer_per_spool(tmp_path):
    checkpoint = Checkpoint(Position(2, 10), Position(3, 0), Position(3, 99), 4, {"spans": 1})
    save_checkpoint(tmp_path, checkpoint)
    assert load_checkpoint(tmp_path) == checkpoint
    first = Producer(tmp_path, max_bytes=1 << 20)
    with pytest.raises(RuntimeError, match="another process"):
        Producer(tmp_path, max_bytes=1 << 20)
    first.close()


# -- offload=True --------------------------------------------------------------------------------


def _offload_provider(
    project: str, name: str, **options
) -> tuple[TracerProvider, TrackioSpanExporter]:
    exporter = TrackioSpanExporter(project, name, offload=True, **options)
    assert exporter.offloaded is not None
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(BatchSpanProcessor(exporter, max_export_batch_size=64))
    return provider, exporter


def test_a_hand_built_exporter_offloads_unless_the_variable_says_not_to(
    project, monkeypatch, tracer_provider
):
    monkeypatch.delenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", raising=False)
    exporter = TrackioSpanExporter(project, "by-hand")
    assert exporter.settings.offload is True
    assert exporter.offloaded is not None
    provider = tracer_provider
    provider.add_span_processor(BatchSpanProcessor(exporter))
    _emit(provider, steps=1, samples=6)
    provider.shutdown()
    assert _keys(read_traces(project, "by-hand")) == [(0, i) for i in range(6)]

    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", "false")
    in_process = TrackioSpanExporter(project, "in-process")
    assert in_process.offloaded is None
    in_process.shutdown()


def test_offloaded_traces_are_identical_to_in_process_ones(project):
    """In process, offloaded behind a ``BatchSpanProcessor`` (batches encoded by ``export()``) and
    behind ``TrackioSpanProcessor`` (spans encoded as they end): the same Traces."""
    in_process = TrackioSpanExporter(project, "in-process", offload=False)
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(BatchSpanProcessor(in_process, max_export_batch_size=64))
    _emit(provider, steps=2, samples=12)
    provider.shutdown()

    provider, exporter = _offload_provider(project, "offloaded")
    _emit(provider, steps=2, samples=12)
    provider.shutdown()
    writer = exporter.offloaded.writer_pid
    assert not _alive(writer)  # no process left behind
    assert not exporter.offloaded.path.exists()  # drained and cleaned up
    assert exporter.stats.samples_logged == 24  # the writer's counters outlive its spool

    spooling = TrackioSpanExporter(project, "spooled", offload=True)
    provider = TracerProvider(resource=Resource.create({"service.name": "bench"}))
    provider.add_span_processor(TrackioSpanProcessor(spooling, max_export_batch_size=64))
    _emit(provider, steps=2, samples=12)
    provider.shutdown()

    expected = _normalised(read_traces(project, "in-process"))
    got = _normalised(read_traces(project, "offloaded"))
    assert len(got) == 24
    assert got == expected
    assert _normalised(read_traces(project, "spooled")) == expected


AUTOGROUP = Path("/proc/self/autogroup")


def _autogroup_nice(pid: int | str = "self") -> int | None:
    """The nice value of a process's autogroup (``/autogroup-123 nice 0``), or None in the root
    group: a session the kernel started before any ``setsid`` (a container's init, a CI runner)
    has no autogroup of its own, and the file is empty."""
    fields = Path(f"/proc/{pid}/autogroup").read_text().split()
    return int(fields[-1]) if fields else None


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup scheduling")
def test_the_writer_takes_the_lowest_priority_of_its_own_autogroup_too(project):
    # In a session of its own, the writer's nice alone would not rank it below the rollout:
    # the kernel shares the CPU between sessions' autogroups first.
    ours = _autogroup_nice()
    provider, exporter = _offload_provider(project, "lowest")
    writer = exporter.offloaded.writer_pid
    wait_until(
        lambda: _autogroup_nice(writer) == 19, "the writer's lowest priority (once the run is open)"
    )
    assert os.getsid(writer) == writer  # its own session: Ctrl-C reaches only the rollout
    assert os.getpriority(os.PRIO_PROCESS, writer) == 19
    assert _autogroup_nice(writer) == 19
    assert _autogroup_nice() == ours  # the rollout's session keeps its priority
    _emit(provider, steps=2, samples=10)
    provider.shutdown()
    traces = read_traces(project, "lowest")
    keys = sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert keys == [(step, i) for step in range(2) for i in range(10)]


@pytest.mark.skipif(not AUTOGROUP.exists(), reason="this kernel has no autogroup scheduling")
def test_a_writer_that_does_not_lead_its_session_leaves_the_sessions_priority_alone():
    # A session of its own (as the client starts writers), holding a process that is not its
    # leader (a writer started by hand from a shell), then the leader itself.
    script = textwrap.dedent(
        """
        import os, subprocess, sys
        from pathlib import Path
        def nice():
            return Path("/proc/self/autogroup").read_text().split()[-1]
        call = "from otel_trackio._offload.priority import deprioritise; deprioritise()"
        subprocess.run([sys.executable, "-c", call], check=True)
        print("after a member:", nice())
        exec(call)
        print("after the leader:", nice())
        """
    )
    result = subprocess.run(
        [sys.executable, "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
        start_new_session=True,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == ["after a member: 0", "after the leader: 19"]


def test_force_flush_returns_once_everything_is_durable(project):
    provider, exporter = _offload_provider(project, "flush")
    _emit(provider, steps=1, samples=30)
    assert provider.force_flush()  # drains the batch processor into the spool
    assert exporter.force_flush()  # the writer has logged and written all of it
    assert len(read_traces(project, "flush")) == 30  # no waiting: already in storage
    assert exporter.stats.samples_logged == 30
    provider.shutdown()
    assert exporter.export([]).name == "FAILURE"  # after shutdown


def test_a_killed_writer_is_restarted_and_nothing_is_lost_or_logged_twice(project):
    provider, exporter = _offload_provider(project, "crash")
    offload = exporter.offloaded
    for round_ in range(4):
        _emit(provider, steps=1, samples=40, start=round_ * 40)
        provider.force_flush()  # into the spool; the writer is busy logging it
        time.sleep(0.05 * round_)
        os.kill(offload.writer_pid, signal.SIGKILL)  # mid-drain, at a different moment each time
        offload._process.wait(60)
        time.sleep(WRITER_CHECK_SECONDS)  # the next export looks at the writer, and restarts it
    assert exporter.force_flush(60_000)
    provider.shutdown()
    assert offload.writer_starts >= 4
    traces = read_traces(project, "crash")
    assert _keys(traces) == [(0, i) for i in range(160)]  # each sample exactly once
    assert all(len(t["spans"]) == 3 and not t["metadata"].get("partial") for t in traces)


ROLLOUT = textwrap.dedent(
    """
    # A rollout process that is killed (SIGKILL) right after its spans were spooled.
    import os, signal, sys, time
    sys.path.insert(0, sys.argv[3])
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from otel_trackio import TrackioSpanExporter
    from test_spool import _emit
    exporter = TrackioSpanExporter(sys.argv[1], sys.argv[2], offload=True)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    _emit(provider, steps=2, samples=25)
    tracer = provider.get_tracer("t")
    open_root = tracer.start_span("rollout", attributes={"step": 9, "sample_index": 99})
    print(exporter.offloaded.writer_pid, flush=True)
    if sys.argv[4] == "both":
        os.kill(exporter.offloaded.writer_pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _killed_rollout(project: str, name: str, trackio_dir: str, mode: str) -> int:
    env = {**os.environ, "TRACKIO_DIR": trackio_dir}
    child = subprocess.run(
        [sys.executable, "-c", ROLLOUT, project, name, str(REPO / "tests"), mode],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]
    return int(child.stdout.strip().splitlines()[-1])


def test_a_killed_rollout_process_leaves_a_writer_that_logs_everything_and_exits(
    project, trackio_dir
):
    writer = _killed_rollout(project, "killed", trackio_dir, "rollout")
    wait_until(lambda: not _alive(writer))  # it drains, then exits on its own
    traces = read_traces(project, "killed")
    assert _keys([t for t in traces if t["step"] < 9]) == [
        (s, i) for s in (0, 1) for i in range(25)
    ]


def test_writer_and_rollout_both_killed_the_next_start_of_the_run_finishes_it(project, trackio_dir):
    writer = _killed_rollout(project, "both", trackio_dir, "both")
    wait_until(lambda: not _alive(writer))
    assert len(read_traces(project, "both")) < 50  # the writer died before it was done
    provider, _ = _offload_provider(project, "both", resume="allow")  # a new start of the run
    provider.shutdown()
    # A writer of its own stores the abandoned spool in its run, beside the new start.
    wait_until(lambda: len([t for t in read_traces(project, "both") if t["step"] < 9]) >= 50)
    traces = [t for t in read_traces(project, "both") if t["step"] < 9]
    assert _keys(traces) == [(s, i) for s in (0, 1) for i in range(25)]


def test_an_abandoned_spool_is_stored_in_its_own_run_not_a_similar_names(project, trackio_dir):
    """Run ``x/y`` killed with its writer, then run ``x_y`` starts: each keeps its own spool
    and Traces (the names once shared a spool folder)."""
    writer = _killed_rollout(project, "x/y", trackio_dir, "both")
    wait_until(lambda: not _alive(writer))
    provider, _ = _offload_provider(project, "x_y")
    provider.shutdown()
    wait_until(lambda: len([t for t in read_traces(project, "x/y") if t["step"] < 9]) >= 50)
    assert _keys([t for t in read_traces(project, "x/y") if t["step"] < 9]) == [
        (s, i) for s in (0, 1) for i in range(25)
    ]
    assert read_traces(project, "x_y") == []


def test_offload_under_opentelemetry_instrument(project, trackio_dir, tmp_path):
    app = tmp_path / "app.py"
    app.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(REPO / 'tests')!r})\n"
        "from opentelemetry import trace\n"
        "from test_spool import _emit\n"
        "_emit(trace.get_tracer_provider(), steps=1, samples=10)\n"
    )
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    env.update(
        TRACKIO_DIR=trackio_dir,
        OTEL_TRACES_EXPORTER="trackio",
        OTEL_METRICS_EXPORTER="none",
        OTEL_LOGS_EXPORTER="none",
        OTEL_EXPORTER_TRACKIO_PROJECT=project,
        OTEL_EXPORTER_TRACKIO_RUN="zero-code",
        OTEL_EXPORTER_TRACKIO_OFFLOAD="true",
    )
    instrument = Path(sys.executable).parent / "opentelemetry-instrument"
    result = subprocess.run(
        [str(instrument), sys.executable, str(app)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert _keys(read_traces(project, "zero-code")) == [(0, i) for i in range(10)]
    # The writer must not instrument itself (it would start a writer, which would start one...):
    # once the app is done, its writer exits and no other appears.
    wait_until(lambda: not _processes_mentioning(f"otel-trackio-spool/{project}/"), timeout=60)


def _processes_mentioning(text: str) -> list[int]:
    """Pids of live processes whose command line contains ``text``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if text.encode() in (entry / "cmdline").read_bytes():
                    found.append(int(entry.name))
            except OSError:
                continue
    return found


# -- the receiver --------------------------------------------------------------------------------


def _finished_spans(samples: int, offset: int = 0) -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("t")
    for i in range(offset, offset + samples):
        with tracer.start_as_current_span("rollout", attributes={"step": 0, "sample_index": i}):
            with tracer.start_as_current_span("chat", attributes={"output.value": "y" * 2000}):
                pass
    return list(memory.get_finished_spans())


def test_receiver_answers_before_trackio_and_a_full_spool_gets_503_then_retries_land(project):
    receiver = OTLPReceiver(
        project,
        "busy",
        port=0,
        grpc_port=0,
        summary_interval=0,
        sample_grace_seconds=0,
        spool_max_mb=0.05,
    ).start()
    pipeline = receiver.router.default.spans
    pipeline._lock.acquire()  # Trackio is slow: nothing drains for now
    released = threading.Timer(1.5, pipeline._lock.release)
    try:
        session = requests.Session()
        codes = []
        for k in range(8):
            body = encode_spans(_finished_spans(4, offset=4 * k)).SerializeToString()
            started = time.monotonic()
            codes.append(
                session.post(receiver.url + "/v1/traces", data=body, headers=PROTOBUF).status_code
            )
            assert time.monotonic() - started < 1.0  # answered without waiting for Trackio
        assert 503 in codes and 200 in codes
        busy = session.post(
            receiver.url + "/v1/traces",
            data=encode_spans(_finished_spans(4, offset=996)).SerializeToString(),
            headers=PROTOBUF,
        )
        assert busy.status_code == 503 and int(busy.headers["Retry-After"]) > 0
        # The official exporter retries 503 with backoff: its data lands once room is made.
        released.start()
        exporter = OTLPSpanExporter(endpoint=receiver.url + "/v1/traces", timeout=30)
        assert exporter.export(_finished_spans(3, offset=500)).name == "SUCCESS"
    finally:
        if released.is_alive() or released.finished.is_set():
            released.join()
        else:
            pipeline._lock.release()
        receiver.stop()
    stored = {t["metadata"]["sample_index"] for t in read_traces(project, "busy")}
    accepted = {4 * k + j for k, code in enumerate(codes) if code == 200 for j in range(4)}
    assert stored == accepted | {500, 501, 502}


def _serve(project: str, trackio_dir: str, *args: str) -> tuple[subprocess.Popen, str]:
    server = subprocess.Popen(
        [*SERVE, "--project", project, "--name", "restart", *args],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=REPO,
    )
    for line in server.stdout:
        if "listening on" in line:
            return server, line.split("listening on ")[1].split()[0]
    raise AssertionError(server.communicate()[0])


def test_receiver_sigterm_with_a_backlog_then_restart_loses_nothing(project, trackio_dir):
    server, url = _serve(
        project, trackio_dir, "--drain-seconds", "0", "--sample-grace-seconds", "0"
    )
    session = requests.Session()
    spans = _finished_spans(4000)
    # Another process holds the project's storage lock: whatever the machine's speed, the
    # drain cannot store the requests before the signal, so the receiver stops with a backlog.
    with storage_lock_held(project):
        for k in range(0, len(spans), 400):
            body = encode_spans(spans[k : k + 400]).SerializeToString()
            response = session.post(url + "/v1/traces", data=body, headers=PROTOBUF)
            assert response.status_code == 200
        signalled = time.monotonic()
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=120)
        stopping = time.monotonic() - signalled
    assert server.returncode == 0, output
    assert "left in the spool" in output, output  # it stopped with a backlog
    # Past its drain deadline it waits for no write of its own: only Trackio's own finish waits
    # out the lock once (10 s). Waiting for its writes too took 25-40 s.
    assert stopping < 20, (stopping, output)
    first = len(read_traces(project, "restart"))
    assert first < 4000

    server, url = _serve(project, trackio_dir)  # the same project and run: the same spool
    server.send_signal(signal.SIGTERM)
    output, _ = server.communicate(timeout=120)
    assert server.returncode == 0, output
    indexes = sorted(t["metadata"]["sample_index"] for t in read_traces(project, "restart"))
    assert indexes == list(range(4000))  # all of them, once each


def _drain(project: str, trackio_dir: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``otel-trackio drain`` of the receiver's spool of ``project``/``restart``."""
    command = [sys.executable, "-m", "otel_trackio", "drain", "--project", project]
    return subprocess.run(
        [*command, "--name", "restart", *options],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )


def test_drain_command_logs_a_leftover_spool_without_serving(project, trackio_dir):
    server, url = _serve(
        project, trackio_dir, "--drain-seconds", "0", "--sample-grace-seconds", "0"
    )
    body = encode_spans(_finished_spans(50)).SerializeToString()
    assert requests.post(url + "/v1/traces", data=body, headers=PROTOBUF).status_code == 200
    server.send_signal(signal.SIGTERM)
    server.communicate(timeout=120)
    drained = _drain(project, trackio_dir)
    assert drained.returncode == 0, drained.stderr
    assert "done" in drained.stdout
    assert sorted(t["metadata"]["sample_index"] for t in read_traces(project, "restart")) == list(
        range(50)
    )


def test_drain_with_a_timeout_stops_when_storage_takes_nothing_and_says_what_is_left(
    project, trackio_dir
):
    """Trackio's storage not taking writes (its lock held: as a full disk would): ``drain
    --timeout`` gives up when told, exit status 1, saying what is left; the next drain, with
    storage back, stores it all, once."""
    server, url = _serve(
        project, trackio_dir, "--drain-seconds", "0", "--sample-grace-seconds", "0"
    )
    body = encode_spans(_finished_spans(50)).SerializeToString()
    with storage_lock_held(project):
        assert requests.post(url + "/v1/traces", data=body, headers=PROTOBUF).status_code == 200
        server.send_signal(signal.SIGTERM)
        server.communicate(timeout=120)
        stuck = _drain(project, trackio_dir, "--timeout", "3")
    assert stuck.returncode == 1, stuck.stdout + stuck.stderr
    # (stopped while the spool was handed over, or once it was, its last writes refused)
    assert "otel-trackio drain: stopped" in stuck.stdout, stuck.stdout
    assert "run it again to go on" in stuck.stdout
    drained = _drain(project, trackio_dir)
    assert drained.returncode == 0, drained.stderr
    indexes = [t["metadata"]["sample_index"] for t in read_traces(project, "restart")]
    assert sorted(indexes) == list(range(50))


# -- GenAI log events through the spool ----------------------------------------------------------


def test_offloaded_log_events_join_their_samples_in_either_order_and_survive_a_writer_crash(
    project, tracer_provider
):
    from opentelemetry._logs import LogRecord

    rollouts = OffloadWithLogEvents(project, "events", tracer_provider)
    spans, logs, tracer = rollouts.spans, rollouts.logs, rollouts.tracer

    def sample(index: int, events_first: bool) -> None:
        with tracer.start_as_current_span("rollout", attributes={"step": 1, "sample_index": index}):
            with tracer.start_as_current_span(
                "chat m", attributes={"gen_ai.operation.name": "chat"}
            ):
                rollouts.logger.emit(
                    LogRecord(event_name="gen_ai.user.message", body={"content": f"q{index}"})
                )
                if events_first:  # the log processor exports before the span ends
                    rollouts.send_log_events()
        if not events_first:  # ... or after the whole sample went out
            rollouts.send_log_events()

    for index in range(10):
        sample(index, events_first=index % 2 == 0)
        if index == 4:  # the writer dies with samples held and events in flight
            os.kill(spans.offloaded.writer_pid, signal.SIGKILL)
    assert spans.force_flush(60_000)
    logs.shutdown()
    tracer_provider.shutdown()
    traces = read_traces(project, "events")
    assert sorted(t["metadata"]["sample_index"] for t in traces) == list(range(10))
    for trace in traces:
        assert not trace["metadata"].get("partial"), trace["metadata"]
        index = trace["metadata"]["sample_index"]
        assert trace["messages"] == [{"role": "user", "content": f"q{index}"}]


def test_a_damaged_metric_memory_is_ignored_and_an_unwritable_one_counted(
    project, tmp_path, caplog
):
    """The metric memory beside a spool (what a restarted drainer recalls) is checked: a file
    torn or altered is warned about and ignored, a duplicate rather than a crash; a spool
    folder that refuses it is warned about once and counted, and the metrics go on."""
    from otel_trackio._core.metric_convert import ConverterMemory
    from otel_trackio._spool.metric_memory import (
        MetricMemory,
        load_memory,
        memory_path,
        save_memory,
    )
    from otel_trackio.metric_exporter import TrackioMetricExporter

    path = memory_path(tmp_path, "p/r")
    memory = ConverterMemory(intervals=(("tokens", 1, 2),))
    save_memory(path, memory, fsync=True)
    assert load_memory(path) == memory
    data = bytearray(path.read_bytes())
    data[-3] ^= 0xFF
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        assert load_memory(path) is None
    assert "is damaged: ignored" in caplog.text
    path.write_bytes(b"OTMM1")  # torn
    assert load_memory(path) is None

    exporter = TrackioMetricExporter(project=project, name="r")
    keeper = MetricMemory(tmp_path / "gone", fsync=False)
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        keeper.save(exporter, "p/r")
        keeper.save(exporter, "p/r")
    exporter.shutdown()
    assert keeper.failed_saves == 2
    assert caplog.text.count("may be counted twice") == 1


def test_a_drainer_taking_over_after_the_close_was_handed_over_knows_the_producer_is_done(
    tmp_path,
):
    """A writer replaced at shutdown after it had handed the close over: its successor never
    sees the close entry again, and must still stop once everything is drained."""
    from otel_trackio._spool.drain import Drainer

    producer = Producer(tmp_path, 1 << 20)
    producer.append(codec.SPANS, codec.encode_records([]))
    producer.append(codec.CLOSE, b"")
    first = Drainer(tmp_path, lambda route: None)
    first.run(threading.Event())  # returns once the close is handed over
    assert first.producer_closed
    first.close()
    second = Drainer(tmp_path, lambda route: None)
    assert second.producer_closed
    done = threading.Event()
    stop = threading.Event()
    threading.Thread(target=lambda: (second.run(stop), done.set()), daemon=True).start()
    finished = done.wait(10)  # it stops: the producer is done, nothing is left
    stop.set()
    assert finished
    second.close()
    producer.close()


@pytest.mark.parametrize("sole_producer", [True, False], ids=["offload writer", "receiver"])
def test_a_sole_producers_steps_cost_no_storage_read(project, tmp_path, monkeypatch, sole_producer):
    """The offload writer's spool has one producer, whose samples no other process stores: a
    step new to its drainer costs no storage read (only replayed entries are looked up). A
    receiver's drainer reads once per step: a client may have sent the same request to the other
    receiver of the run. Each sample is stored once either way."""
    from otel_trackio._engine.run import build_run_engine
    from otel_trackio._spool import replay
    from otel_trackio._spool.drain import Drainer
    from otel_trackio._trackio.sink import TrackioSink
    from otel_trackio.settings import TrackioSettings

    reads: list[int] = []
    real_read = replay.has_traces_at

    def counted(sink, step, run_name=None):
        reads.append(step)
        return real_read(sink, step, run_name)

    monkeypatch.setattr(replay, "has_traces_at", counted)
    producer = Producer(tmp_path / "spool", 1 << 24)
    engine = build_run_engine(
        TrackioSettings(project=project, name="r", sample_grace_seconds=0),
        TrackioSink(project, "r"),
        transport="offload",
    )
    drainer = Drainer(tmp_path / "spool", lambda route: engine, sole_producer=sole_producer)
    for step in (0, 1):  # appended after the drainer began: nothing of it is a replay
        producer.append(codec.SPANS, codec.encode_sdk_spans(sample_spans(step, range(3))))
    while drainer.cycle():
        pass
    drainer.close()
    engine.shutdown()
    producer.close()
    assert reads == ([] if sole_producer else [0, 1])
    stored = sorted(
        (t["metadata"]["step"], t["metadata"]["sample_index"]) for t in read_traces(project, "r")
    )
    assert stored == [(s, i) for s in (0, 1) for i in range(3)]
