"""The default path finishes its job: with offload (the default), everything ``export()``
acknowledged is in Trackio's storage when ``shutdown()`` returns — a writer stopped, starved or
killed over and over included — or, for a process killed with its writer, after the next start of
anything for the project, in the run the spool records. Counted in real Trackio storage by
(step, sample_index), duplicates and wrong runs included."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest
from conftest import read_traces, wait_until
from opentelemetry.sdk.trace import TracerProvider
from test_spool import _emit, _keys

import otel_trackio
from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
from otel_trackio._offload import client
from otel_trackio._offload.client import WRITER_CHECK_SECONDS
from otel_trackio._offload.writer import abandoned

REPO = Path(__file__).resolve().parents[2]


def _provider(project: str, name: str, **options) -> tuple[TracerProvider, TrackioSpanExporter]:
    exporter = TrackioSpanExporter(project, name, offload=True, **options)
    assert exporter.offloaded is not None
    provider = TracerProvider()
    provider.add_span_processor(TrackioSpanProcessor(exporter))
    return provider, exporter


def _stored_keys(trackio_dir: str, project: str) -> list[tuple[str, int, int]]:
    """(run, step, sample_index) of every Trace in the project's database, read raw: runs can
    share a name, and every copy counts. Each run name must be one run."""
    database = Path(trackio_dir) / f"{project}.db"
    if not database.exists():
        return []
    with sqlite3.connect(database) as connection:
        rows = connection.execute("SELECT run_name, run_id, step, metadata FROM traces").fetchall()
    runs: dict[str, set[str]] = {}
    for name, run_id, _, _ in rows:
        runs.setdefault(name, set()).add(run_id)
    assert all(len(ids) == 1 for ids in runs.values()), runs  # never two runs of one name
    return sorted((name, step, json.loads(meta)["sample_index"]) for name, _, step, meta in rows)


def test_shutdown_with_the_writer_stopped_stores_everything_at_this_process_priority(
    project, capfd
):
    provider, exporter = _provider(project, "stopped")
    writer = exporter.offloaded.writer_pid
    os.kill(writer, signal.SIGSTOP)  # a writer that gets no CPU at all
    try:
        _emit(provider, steps=3, samples=40)
        provider.shutdown()  # no timeout: it returns once everything is stored
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(writer, signal.SIGCONT)
    assert _keys(read_traces(project, "stopped")) == [(s, i) for s in range(3) for i in range(40)]
    err = capfd.readouterr().err
    assert "not keeping up (it is stopped)" in err
    assert "120 samples logged" in err  # the summary counts what both writers stored
    assert not exporter.offloaded.path.exists()  # all stored: the spool is gone


def test_a_starved_writer_hands_over_at_shutdown(project, capfd, monkeypatch):
    """A writer at the lowest priority on a machine whose CPUs are all taken: its share is a
    sliver, so the exiting process stores the rest at its own priority. (Where the kernel lets
    shutdown give the writer a normal share back, it does first: here it cannot, as on a kernel
    without autogroups.)"""
    monkeypatch.setattr(client, "HANDOVER_BYTES", 0)  # this tail is short: hand it over anyway
    monkeypatch.setattr(client, "set_autogroup_nice", lambda nice, pid=None: False)
    provider, exporter = _provider(project, "starved")
    writer = exporter.offloaded.writer_pid
    _emit(provider, steps=2, samples=60)
    burners = [
        subprocess.Popen([sys.executable, "-c", "while True: pass"])
        for _ in range((os.cpu_count() or 2) * 2)
    ]
    try:
        os.kill(writer, signal.SIGSTOP)  # let the spool fill before the writer competes
        provider.force_flush()
        os.kill(writer, signal.SIGCONT)
        provider.shutdown()
    finally:
        for burner in burners:
            burner.kill()
            burner.wait()
    assert _keys(read_traces(project, "starved")) == [(s, i) for s in range(2) for i in range(60)]
    err = capfd.readouterr().err
    assert "120 samples logged" in err, err  # the replaced writer's stores counted too
    assert "not keeping up (it is starved of CPU" in err


def test_a_writer_killed_over_and_over_loses_nothing_and_the_summary_counts_every_writer(
    project, capfd
):
    provider, exporter = _provider(project, "killed")
    offload = exporter.offloaded
    tracer = provider.get_tracer("t")
    for step in range(9):
        for i in range(40):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": i}
            ):
                pass
        provider.force_flush()  # in the spool; the writer restarted if it was dead
        time.sleep(0.05 * (step % 4))  # mid-drain, at a different moment each time
        os.kill(offload.writer_pid, signal.SIGKILL)
        offload._process.wait(60)
        time.sleep(WRITER_CHECK_SECONDS)
    provider.shutdown()  # the last writer is dead: one at this process's priority finishes
    expected = [(s, i) for s in range(9) for i in range(40)]
    assert _keys(read_traces(project, "killed")) == expected  # each once
    assert offload.writer_starts >= 9
    err = capfd.readouterr().err
    assert "360 samples logged to" in err and "steps 0 to 8 (9 steps)" in err


def test_set_step_reaches_samples_without_a_step_under_offload(project):
    provider, _ = _provider(project, "set-step")
    tracer = provider.get_tracer("t")
    otel_trackio.set_step(7)
    with tracer.start_as_current_span("rollout", attributes={"sample_index": 0}):
        pass
    provider.force_flush()
    otel_trackio.set_step(8)
    with tracer.start_as_current_span("rollout", attributes={"sample_index": 1}):
        pass
    provider.shutdown()
    assert _keys(read_traces(project, "set-step")) == [(7, 0), (8, 1)]


KILLED_WITH_ITS_WRITER = textwrap.dedent(
    """
    # A rollout process killed together with its writer (what ray.shutdown() does to an actor):
    # its writer is stopped first, so nothing it spooled is stored yet.
    import os, signal, sys
    sys.path.insert(0, sys.argv[3])
    from opentelemetry.sdk.trace import TracerProvider
    from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor
    from test_spool import _emit
    exporter = TrackioSpanExporter(sys.argv[1], sys.argv[2], offload=True)
    provider = TracerProvider()
    provider.add_span_processor(TrackioSpanProcessor(exporter))
    os.kill(exporter.offloaded.writer_pid, signal.SIGSTOP)
    _emit(provider, steps=2, samples=20)
    provider.force_flush()
    os.kill(exporter.offloaded.writer_pid, signal.SIGKILL)
    os.kill(os.getpid(), signal.SIGKILL)
    """
)


def _killed_with_its_writer(project: str, name: str, trackio_dir: str) -> None:
    env = {**os.environ, "TRACKIO_DIR": trackio_dir}
    child = subprocess.run(
        [sys.executable, "-c", KILLED_WITH_ITS_WRITER, project, name, str(REPO / "tests")],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert child.returncode == -signal.SIGKILL, child.stderr[-2000:]


def test_a_process_killed_with_its_writer_is_stored_in_its_own_run_by_the_next_start(
    project, trackio_dir
):
    _killed_with_its_writer(project, "first", trackio_dir)
    assert _stored_keys(trackio_dir, project) == []
    # The next start of anything for the project: here, another run's exporter.
    provider, _ = _provider(project, "second")
    _emit(provider, steps=1, samples=5)
    provider.shutdown()
    expected = sorted(
        [("first", s, i) for s in range(2) for i in range(20)]
        + [("second", 0, i) for i in range(5)]
    )
    wait_until(lambda: len(_stored_keys(trackio_dir, project)) >= len(expected))
    wait_until(lambda: not abandoned(Path(trackio_dir) / "otel-trackio-spool" / project))
    assert _stored_keys(trackio_dir, project) == expected  # once each, each in its own run


def test_drain_with_no_arguments_stores_every_abandoned_spool_in_its_run(project, tmp_path):
    trackio_dir = str(tmp_path)  # a folder of its own: the command drains every project's spools
    _killed_with_its_writer(project, "left", trackio_dir)
    _killed_with_its_writer(project, "right", trackio_dir)
    done = subprocess.run(
        [sys.executable, "-m", "otel_trackio.receiver.cli", "drain"],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    # "right"'s writer took "left"'s spool as it started (the next start for the project); the
    # command stores what no writer holds.
    assert "abandoned spools under" in done.stdout
    expected = sorted((run, s, i) for run in ("left", "right") for s in range(2) for i in range(20))
    wait_until(lambda: len(_stored_keys(trackio_dir, project)) >= len(expected))
    assert _stored_keys(trackio_dir, project) == expected
    # The spool goes once its writer has checkpointed past what its store wrote and let go.
    spools = Path(trackio_dir) / "otel-trackio-spool" / project
    wait_until(lambda: not abandoned(spools), "the drained spools removed")


def _autogroup_nice(pid: int) -> int | None:
    try:
        return int(Path(f"/proc/{pid}/autogroup").read_text().split("nice")[1])
    except (OSError, IndexError, ValueError):
        return None


def test_shutdown_gives_the_writer_a_normal_share_at_once(project):
    """The rollout is over when shutdown begins: the writer, at the lowest priority until then,
    gets a normal CPU share back before anything else (a sliver of a busy machine would take
    minutes over the last steps), and no lag check of its own takes it back."""
    provider, exporter = _provider(project, "finishing")
    writer = exporter.offloaded.writer_pid
    if _autogroup_nice(writer) != 19:
        provider.shutdown()
        pytest.skip("no autogroup scheduling on this kernel")
    os.kill(writer, signal.SIGSTOP)  # a backlog the writer is still storing when shutdown begins
    try:
        _emit(provider, steps=10, samples=200)
        provider.force_flush()
    finally:
        os.kill(writer, signal.SIGCONT)
    seen: list[int | None] = []
    shutting_down = threading.Thread(target=provider.shutdown)
    shutting_down.start()
    while shutting_down.is_alive() and 0 not in seen:
        seen.append(_autogroup_nice(writer))
        time.sleep(0.005)
    shutting_down.join()
    assert 0 in seen, seen[-5:]
    keys = _keys(read_traces(project, "finishing"))
    assert keys == [(s, i) for s in range(10) for i in range(200)]


def test_a_writer_behind_its_lag_bound_takes_a_normal_share_until_it_caught_up(project, capfd):
    provider, exporter = _provider(project, "lag", writer_max_lag_seconds=1.0)
    writer = exporter.offloaded.writer_pid
    if _autogroup_nice(writer) != 19:
        provider.shutdown()
        pytest.skip("no autogroup scheduling on this kernel: the writer cannot catch up by itself")
    os.kill(writer, signal.SIGSTOP)
    tracer = provider.get_tracer("t")
    try:
        for i in range(50):  # 3 MB in 50 entries: more than one drain cycle takes
            with tracer.start_as_current_span(
                "rollout", attributes={"step": 0, "sample_index": i, "output.value": "x" * 60_000}
            ):
                pass
            provider.force_flush()
        time.sleep(1.5)  # what is spooled waits longer than the bound
    finally:
        os.kill(writer, signal.SIGCONT)
    said: list[str] = []
    wait_until(
        lambda: said.append(capfd.readouterr().err) or "takes a normal CPU share" in said[-1],
        what="the warning",
    )
    wait_until(lambda: _autogroup_nice(writer) == 19, what="the lowest priority again")
    provider.shutdown()
    assert _keys(read_traces(project, "lag")) == [(0, i) for i in range(50)]

