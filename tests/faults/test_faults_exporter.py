"""Exporter faults: Trackio failing under the exporter must never take the user's program down.

Injected faults: ``run.log`` raising (a run object whose ``log`` raises), Trackio's folder out of
space or read-only (a tiny tmpfs, in a child process; needs root for ``mount``), the user finishing
the run before the providers shut down, ``shutdown()`` racing an export, and exports from many
threads. Each test checks what the user sees (no exception, ``FAILURE`` where data was lost, a
warning naming how much) and what Trackio holds afterwards.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import threading
from pathlib import Path
from typing import Any

import pytest
import trackio
from conftest import TRACKIO_WRITE_WARNING, read_traces, storage_write_failing, wait_until
from fault_tally import tally
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export import SpanExportResult as R

from otel_trackio import TrackioSpanExporter
from otel_trackio._core.records import SpanRecord
from otel_trackio._engine.writes import MAX_WRITES_BEHIND

# The in-process engine, by name: its storage faults (offloaded: test_spool_faults.py,
# test_offload_shutdown.py).
pytestmark = pytest.mark.usefixtures("in_process")

REPO = Path(__file__).resolve().parents[2]
HANG_GUARD = 60.0  # seconds: a join past this means something blocked forever


def _sample(step: int, index: int, trace_id: int | None = None) -> list[SpanRecord]:
    """A two-span sample (child first, as the SDK delivers them)."""
    tid = trace_id if trace_id is not None else step * 10_000 + index + 1
    root = SpanRecord(tid, 1, "sample", 0, 10, attributes={"step": step, "sample_index": index})
    child = SpanRecord(tid, 2, "generate", 1, 9, parent_id=1)
    return [child, root]


def _stored_keys(project: str, run: str) -> list[tuple[int, Any]]:
    return [(t["step"], t["metadata"].get("sample_index")) for t in read_traces(project, run)]


@TRACKIO_WRITE_WARNING
def test_storage_refusing_writes_returns_failure_keeps_the_samples_and_stores_them_once_it_works(
    project, caplog
):
    run = trackio.init(project=project, name="flaky")
    exporter = TrackioSpanExporter(run=run)
    caplog.set_level(logging.WARNING, logger="otel_trackio")
    tally.tried("exporter", 5)
    with storage_write_failing(project):
        # Handed to the store process; its failed write shows by the next call (the flush).
        exporter._export_records([s for i in range(3) for s in _sample(1, i)])
        assert exporter.force_flush(5_000) is False
    assert exporter.stats.samples_lost == 0 and exporter.stats.samples_logged == 0
    assert "Trackio could not write to its storage" in caplog.text
    assert "3 samples kept" in caplog.text
    ok = exporter._export_records([s for i in range(2) for s in _sample(2, i)])
    assert ok is R.SUCCESS
    assert exporter.stats.samples_logged == 5 and exporter.stats.samples_retried == 3
    exporter.shutdown()
    trackio.finish()
    stored = _stored_keys(project, "flaky")
    assert sorted(stored) == [(1, 0), (1, 1), (1, 2), (2, 0), (2, 1)]
    tally.lost("exporter", 5 - len(stored) - exporter.stats.samples_lost)  # unreported losses


def test_user_finishes_run_before_provider_shutdown(project):
    trackio.init(project=project, name="early-finish")
    exporter = TrackioSpanExporter(project)  # borrows the user's run
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("t")
    tally.tried("exporter", 6)
    for i in range(3):
        with tracer.start_as_current_span("s", attributes={"step": 0, "sample_index": i}):
            pass
    provider.force_flush()
    trackio.finish()  # the user is done with the run; spans keep coming
    for i in range(3):
        with tracer.start_as_current_span("s", attributes={"step": 1, "sample_index": i}):
            pass
    done = threading.Thread(target=provider.shutdown)
    done.start()
    done.join(HANG_GUARD)
    assert not done.is_alive()
    stored = _stored_keys(project, "early-finish")
    tally.lost("exporter", 6 - len(stored) - exporter.stats.samples_lost)
    assert sorted(stored) == [(s, i) for s in (0, 1) for i in range(3)]


def test_shutdown_racing_an_export_waits_at_most_its_timeout(project, caplog):
    run = trackio.init(project=project, name="race")
    exporter = TrackioSpanExporter(run=run)
    store = exporter._engine.sink._store  # the process Trackio's writes run in
    assert store is not None and store._process is not None
    caplog.set_level(logging.WARNING, logger="otel_trackio")
    results: list[R] = []
    os.kill(store._process.pid, signal.SIGSTOP)  # a stalled disk: no write is answered
    try:
        for index in range(MAX_WRITES_BEHIND):  # handed over without waiting
            assert exporter._export_records(_sample(0, index)) is R.SUCCESS
        # One more waits for the oldest write, holding the exporter, as a slow write would.
        exporting = threading.Thread(
            target=lambda: results.append(exporter._export_records(_sample(1, 0)))
        )
        exporting.start()
        wait_until(lambda: exporter.stats.spans_received == 2 * (MAX_WRITES_BEHIND + 1))
        tally.tried("exporter", MAX_WRITES_BEHIND + 2)
        # Another sample is open (no root yet) when shutdown gives up waiting.
        exporter_open = SpanRecord(99, 5, "child", 0, 1, parent_id=4)
        closer = threading.Thread(target=exporter.shutdown, kwargs={"timeout_millis": 100})
        closer.start()
        closer.join(HANG_GUARD)
        assert not closer.is_alive()  # returned although the export still holds the lock
        assert exporter._export_records([exporter_open]) is R.FAILURE  # after shutdown
        assert "shutdown timed out" in caplog.text
    finally:
        os.kill(store._process.pid, signal.SIGCONT)
    exporting.join(HANG_GUARD)
    assert results == [R.SUCCESS]
    exporter.shutdown()  # idempotent
    trackio.finish()
    expected = [(0, index) for index in range(MAX_WRITES_BEHIND)] + [(1, 0)]
    wait_until(lambda: sorted(_stored_keys(project, "race")) == expected, "every export stored")
    tally.lost("exporter", 0)


def test_exports_from_many_threads_lose_nothing(project, tracer_provider):
    exporter = TrackioSpanExporter(project, name="threads")
    provider = tracer_provider
    provider.add_span_processor(SimpleSpanProcessor(exporter))  # export on each caller's thread
    tracer = provider.get_tracer("t")
    threads, per_thread = 8, 25
    errors: list[BaseException] = []

    def work(t: int) -> None:
        try:
            for i in range(per_thread):
                with tracer.start_as_current_span(
                    "sample", attributes={"step": t, "sample_index": i}
                ):
                    with tracer.start_as_current_span("generate"):
                        pass
        except BaseException as exc:  # noqa: BLE001 - counted as a crash
            errors.append(exc)

    workers = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(HANG_GUARD)
    provider.shutdown()
    tally.tried("exporter", threads * per_thread)
    tally.crashed("exporter", len(errors))
    traces = read_traces(project, "threads")
    stored = sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)
    tally.lost("exporter", threads * per_thread - len(set(stored)))
    assert not errors
    assert stored == [(t, i) for t in range(threads) for i in range(per_thread)]
    assert all(len(t["spans"]) == 2 for t in traces)


# -- disk full / read-only, in a child process on a tiny tmpfs -----------------------------------

CHILD = textwrap.dedent(
    """
    import json, logging, subprocess, sys
    from otel_trackio import TrackioSpanExporter
    from otel_trackio._core.records import SpanRecord
    mode, folder = sys.argv[1], sys.argv[2]
    logging.basicConfig(level=logging.WARNING)
    exporter = TrackioSpanExporter("faults", name="disk")

    def sample(step, size):
        attrs = {"step": step, "sample_index": 0, "output.value": "x" * size}
        return [SpanRecord(step + 1, 1, "s", 0, 1, attributes=attrs)]

    first = exporter._export_records(sample(0, 10)).name
    exporter.force_flush()  # stored (its write done) before the disk changes
    if mode == "ro":
        subprocess.run(["mount", "-o", "remount,ro", folder], check=True)
    results = [exporter._export_records(sample(s, 60_000)).name for s in range(1, 40)]
    flushed = exporter.force_flush()
    exporter.shutdown()
    print(json.dumps({"first": first, "results": results, "flushed": flushed,
                      "lost": exporter.stats.samples_lost}))
    """
)


@pytest.mark.parametrize("mode", ["full", "ro"])
def test_full_or_read_only_trackio_folder_returns_failure_and_warns(mode):
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    folder = tempfile.mkdtemp(prefix="otel-trackio-disk-")
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=2m", "tmpfs", folder], capture_output=True
    )
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount tmpfs: {mounted.stderr.decode()}")
    try:
        env = {**os.environ, "TRACKIO_DIR": folder, "TRACKIO_DISABLE_TELEMETRY": "1"}
        child = subprocess.run(
            [sys.executable, "-c", CHILD, mode, folder],
            capture_output=True,
            text=True,
            env=env,
            timeout=120,
            cwd=REPO,
        )
    finally:
        subprocess.run(["umount", "-l", folder], check=False)
        os.rmdir(folder)
    tally.tried("exporter", 40)
    if child.returncode != 0:
        tally.crashed("exporter")
    assert child.returncode == 0, child.stderr[-3000:]
    out = json.loads(child.stdout.strip().splitlines()[-1])
    assert out["first"] == "SUCCESS"
    failures = out["results"].count("FAILURE")
    assert failures > 0, out  # the user is told: export() returned FAILURE
    assert "could not write to its storage" in child.stderr
    assert "samples lost" in child.stderr
    # A write that failed at flush time counts the samples it cost, not only a raising run.log.
    assert out["lost"] >= failures, out
