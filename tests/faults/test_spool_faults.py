"""The spool's promise under ordinary faults: nothing acknowledged is lost or stored twice.

One test per row of issue #21's table. Each starts from a fresh spool (and, where the fault is
in Trackio's folder, a fresh ``TRACKIO_DIR``), drives the receiver through the official OTLP
exporter (or ``otel-trackio serve`` / ``otel-trackio drain`` subprocesses), makes one thing fail
where it happens — the storage write, the append, the checkpoint, the lock, a kill while samples
are held — and then counts what is in Trackio storage by (step, sample_index), duplicates
included. "Acknowledged" is what the client was told was taken: ``export()`` returned SUCCESS.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import math
import os
import pickle
import shutil
import signal
import sqlite3
import stat
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
import uuid
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any

import pytest
from conftest import (
    SERVE,
    memory_tracer,
    read_logs,
    read_traces,
    sample_spans,
    send_over_http,
    storage_lock_held,
    wait_until,
)
from fault_tally import tally
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import (
    OTLPSpanExporter as GrpcSpanExporter,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec import spool as codec
from otel_trackio._spool import segments as spool_segments
from otel_trackio._spool.segments import HEADER, MAGIC, load_checkpoint

REPO = Path(__file__).resolve().parents[2]
SETPRIV = shutil.which("setpriv")


# -- helpers -----------------------------------------------------------------------------------


def _keys(spans: Sequence[ReadableSpan]) -> set[tuple[int, int]]:
    return {
        (int(s.attributes["step"]), int(s.attributes["sample_index"]))  # type: ignore[index,arg-type]
        for s in spans
        if s.parent is None and s.attributes
    }


READ = (
    "import json, sys\n"
    "from trackio.sqlite_storage import SQLiteStorage\n"
    "rows = SQLiteStorage.get_traces(sys.argv[1], sys.argv[2]) "
    "if sys.argv[2] in SQLiteStorage.get_runs(sys.argv[1]) else []\n"
    "print(json.dumps([{'step': t['step'], 'metadata': t['metadata'], 'spans': t['spans']} "
    "for t in rows]))\n"
)


def _stored_rows(project: str, run: str, trackio_dir: str | None = None) -> list[dict[str, Any]]:
    """The Traces stored for a run: read in this process, or (another ``TRACKIO_DIR``: Trackio
    reads it once at import) in a child process."""
    if trackio_dir is None:
        return read_traces(project, run)
    result = subprocess.run(
        [sys.executable, "-c", READ, project, run],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return list(json.loads(result.stdout.strip().splitlines()[-1]))


class Stored:
    """What Trackio storage holds, by (step, sample_index): whole rows and continuations."""

    def __init__(self, rows: list[dict[str, Any]]) -> None:
        self.rows = rows
        samples = [
            (int(r["step"]), r["metadata"].get("sample_index"))
            for r in rows
            if r["metadata"].get("partial_reason") != "late"
        ]
        self.counts: Counter[tuple[int, Any]] = Counter(samples)
        self.span_ids = Counter(str(s["id"]) for r in rows for s in r["spans"])

    @property
    def keys(self) -> set[tuple[int, Any]]:
        return set(self.counts)

    @property
    def duplicates(self) -> int:
        """Samples stored more than once, and spans stored in more than one row."""
        return sum(n - 1 for n in self.counts.values()) + sum(n - 1 for n in self.span_ids.values())


def _check(
    kind: str, acknowledged: set[tuple[int, int]], stored: Stored, *, spans_each: int = 2
) -> None:
    """Every acknowledged sample stored once, whole; the fault tally counts the losses."""
    tally.tried(kind, len(acknowledged))
    missing = acknowledged - stored.keys
    tally.lost(kind, len(missing))
    assert not missing, f"{len(missing)} acknowledged samples not stored: {sorted(missing)}"
    assert stored.duplicates == 0, f"{stored.duplicates} duplicates: {stored.counts}"
    by_key: Counter[tuple[int, Any]] = Counter()
    for row in stored.rows:
        by_key[(int(row["step"]), row["metadata"].get("sample_index"))] += len(row["spans"])
    short = {k: n for k, n in by_key.items() if k in acknowledged and n != spans_each}
    assert not short, f"samples with spans missing: {short}"


class Server:
    """``otel-trackio serve`` in a child process; its output is collected as it comes."""

    def __init__(
        self,
        project: str,
        trackio_dir: str,
        spool: Path,
        *args: str,
        name: str | None = "r",
        confined: bool = False,
        command: Sequence[str] = SERVE,
    ) -> None:
        naming = ["--name", name] if name is not None else []
        command = [*command, "--project", project, *naming, "--spool", str(spool), *args]
        if confined:
            # root ignores file permissions: drop the capabilities that let it, so a read-only
            # folder is read-only for the server as for any user
            command = [
                str(SETPRIV),
                "--bounding-set",
                "-dac_override,-dac_read_search,-fowner",
                "--",
                *command,
            ]
        self.process = subprocess.Popen(
            command,
            env={**os.environ, "TRACKIO_DIR": trackio_dir},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=REPO,
        )
        self.lines: list[str] = []
        ready = threading.Event()
        self.url = ""

        def read() -> None:
            assert self.process.stdout is not None
            for line in self.process.stdout:
                self.lines.append(line)
                if "listening on" in line and not ready.is_set():
                    self.url = line.split("listening on ")[1].split()[0]
                    ready.set()
            ready.set()

        self._reader = threading.Thread(target=read, daemon=True)
        self._reader.start()
        ready.wait(120)
        assert self.url, self.output

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def stop(self, sig: int = signal.SIGTERM) -> str:
        self.process.send_signal(sig)
        self.process.wait(120)
        self._reader.join(30)
        return self.output


@pytest.fixture
def fresh_dir(tmp_path: Path) -> Iterator[str]:
    """A Trackio folder of its own (made writable again at the end for the cleanup)."""
    folder = tmp_path / "trackio"
    folder.mkdir()
    yield str(folder)
    for path in [folder, *folder.rglob("*")]:
        path.chmod(path.stat().st_mode | stat.S_IWUSR)


def _read_only(folder: Path, on: bool) -> None:
    for path in [folder, *folder.rglob("*")]:
        mode = path.stat().st_mode
        writable = stat.S_IWUSR | stat.S_IWGRP | stat.S_IWOTH
        path.chmod(mode | stat.S_IWUSR if on is False else mode & ~writable)


def _confinement_works(tmp_path: Path) -> bool:
    if os.geteuid() != 0:
        return True
    if SETPRIV is None:
        return False
    probe = tmp_path / "probe"
    probe.mkdir()
    probe.chmod(0o555)
    result = subprocess.run(
        [
            SETPRIV,
            "--bounding-set",
            "-dac_override,-dac_read_search,-fowner",
            "--",
            "touch",
            str(probe / "x"),
        ],
        capture_output=True,
    )
    probe.chmod(0o755)
    return result.returncode != 0


def _through_a_fault(
    project: str,
    trackio_dir: str,
    spool: Path,
    fault: Callable[[], AbstractContextManager[Any]],
    during: Sequence[Sequence[ReadableSpan]],
    *,
    first: Sequence[ReadableSpan] | None = None,
    seen: Callable[[str], bool] = lambda output: True,
    confined: bool = False,
) -> tuple[set[tuple[int, int]], str]:
    """Against ``otel-trackio serve`` (no grace period): send ``first`` and wait until it is
    stored; send ``during`` while ``fault`` is on (what the receiver refuses meanwhile is not
    acknowledged) and wait until ``seen(output)``; once the fault is gone, send one more batch,
    wait until every acknowledged sample is stored, stop the server (it must exit 0).
    Returns (the acknowledged samples, the server's output)."""
    server = Server(project, trackio_dir, spool, "--sample-grace-seconds", "0", confined=confined)
    try:
        acknowledged = _sent_through(server, project, trackio_dir, fault, during, first, seen)
    finally:
        output = server.stop()
    assert server.process.returncode == 0, output
    return acknowledged, output


def _sent_through(
    server: Server,
    project: str,
    trackio_dir: str,
    fault: Callable[[], AbstractContextManager[Any]],
    during: Sequence[Sequence[ReadableSpan]],
    first: Sequence[ReadableSpan] | None,
    seen: Callable[[str], bool],
) -> set[tuple[int, int]]:
    first = sample_spans(0, range(5)) if first is None else first
    assert send_over_http(server.url, first)
    acknowledged = _keys(first)
    wait_until(
        lambda: len(_stored_rows(project, "r", trackio_dir)) == len(acknowledged), what="first"
    )
    with fault():
        for batch in during:
            if send_over_http(server.url, batch, timeout=5):
                acknowledged |= _keys(batch)
        wait_until(lambda: seen(server.output), what="the fault reported")
    late = sample_spans(99, range(5))
    assert send_over_http(server.url, late, timeout=60)
    acknowledged |= _keys(late)
    wait_until(
        lambda: Stored(_stored_rows(project, "r", trackio_dir)).keys >= acknowledged,
        what="every acknowledged sample",
    )
    return acknowledged


# -- the storage write fails ---------------------------------------------------------------------


def test_storage_lock_held_past_trackios_timeout_keeps_and_retries_the_entries(
    project, fresh_dir, tmp_path
):
    """Another process holds the project's lock past Trackio's 10 s: the write fails, the
    entries stay in the spool and are retried; the receiver stops acknowledging meanwhile."""
    from trackio.utils import canonical_project_name

    lock_path = Path(fresh_dir) / f"{canonical_project_name(project)}.lock"
    held_since = [0.0]

    @contextlib.contextmanager
    def lock_held() -> Iterator[None]:
        with open(lock_path, "w") as lock:
            fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
            held_since[0] = time.monotonic()
            yield
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)

    spool = tmp_path / "spool"
    acknowledged, output = _through_a_fault(
        project,
        fresh_dir,
        spool,
        lock_held,
        [sample_spans(1 + k, range(5)) for k in range(2)],
        # Trackio gives up after 10 s of waiting for the lock: hold it past that
        seen=lambda output: time.monotonic() - held_since[0] > 12.5,
    )
    # The documented restart finds nothing left to do and logs nothing twice.
    again = Server(project, fresh_dir, spool, "--sample-grace-seconds", "0")
    again.stop()
    _check("storage-lock", acknowledged, Stored(_stored_rows(project, "r", fresh_dir)))
    assert "retr" in output, output  # the failure and the retries were reported


def test_trackio_dir_read_only_mid_run_keeps_the_data_and_the_counters_tell_the_truth(
    project, fresh_dir, tmp_path
):
    if not _confinement_works(tmp_path):
        pytest.skip("cannot make a folder read-only for this user")

    @contextlib.contextmanager
    def read_only() -> Iterator[None]:
        _read_only(Path(fresh_dir), True)
        try:
            yield
        finally:
            _read_only(Path(fresh_dir), False)

    acknowledged, output = _through_a_fault(
        project,
        fresh_dir,
        tmp_path / "spool",
        read_only,
        [sample_spans(1 + k, range(5)) for k in range(2)],
        seen=lambda output: "storage" in output,
        confined=True,
    )
    stored = Stored(_stored_rows(project, "r", fresh_dir))
    _check("read-only", acknowledged, stored)
    stop_line = [line for line in output.splitlines() if "stopped;" in line][-1]
    assert f" {len(stored.rows)} samples logged" in stop_line, stop_line  # what reached storage


# -- the append fails half-way -------------------------------------------------------------------


def _failing_writes(
    monkeypatch: pytest.MonkeyPatch, fails: Callable[[int, bytes], bool]
) -> list[int]:
    """Make the spool's one write function fail like a full disk: it writes the first half of
    what it was given, then raises ENOSPC, for the calls ``fails(number, data)`` picks."""
    real = spool_segments._write_all
    failed: list[int] = []
    calls = [0]

    def write(handle: Any, *buffers: bytes) -> None:
        calls[0] += 1
        data = b"".join(bytes(b) for b in buffers)
        if fails(calls[0], data):
            failed.append(calls[0])
            os.write(handle.fileno(), data[: len(data) // 2])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    return failed


def test_a_short_write_at_append_is_undone_before_the_next_entry(
    project, start_receiver, tmp_path, monkeypatch
):
    failed = _failing_writes(monkeypatch, lambda number, _: number == 2)
    receiver = start_receiver(sample_grace_seconds=0, spool=tmp_path / "spool")
    acknowledged: set[tuple[int, int]] = set()
    for step in range(4):
        batch = sample_spans(step, range(5))
        assert send_over_http(receiver.url, batch)  # the torn one was refused (503) and retried
        acknowledged |= _keys(batch)
    assert failed == [2]
    receiver.stop()
    _check("short-append", acknowledged, Stored(_stored_rows(project, "r")))
    assert receiver.router.totals().torn_entries == 0


def test_a_reader_between_a_half_written_append_and_its_cut_back_takes_none_of_it(
    tmp_path, monkeypatch
):
    """An append of three entries fails half-way (the disk fills): its first entry is whole on
    disk until the producer cuts the segment back. A drainer reading in that window must take
    none of the append — it was refused, all of it — and, after the cut-back, read on from
    where it was as the next append lands there (before: it took the first entry, stored what
    was refused, then sat past the segment's end while new entries went in before it)."""
    from otel_trackio._spool.segments import Position, Producer, Reader

    spool = tmp_path / "spool"
    producer = Producer(spool, 1 << 24)
    reader = Reader(spool)
    producer.append_all([(1, b"before")])
    real = spool_segments._write_all
    seen: list[list[bytes]] = []

    def write(handle: Any, *buffers: bytes) -> None:
        if not seen:  # the failing append: half of it written, read in that window, then ENOSPC
            data = b"".join(bytes(b) for b in buffers)
            os.write(handle.fileno(), data[: len(data) // 2])
            seen.append([e.payload for e in reader.read(Position(1, 0), 1 << 20)])
            raise OSError(errno.ENOSPC, "No space left on device")
        real(handle, *buffers)

    monkeypatch.setattr(spool_segments, "_write_all", write)
    with pytest.raises(OSError):
        producer.append_all([(1, b"a" * 4000), (1, b"b" * 4000), (1, b"c" * 4000)])
    assert seen == [[b"before"]]  # the half-written append is not readable
    producer.append_all([(1, b"after")])
    entries = reader.read(reader.reached, 1 << 20)
    assert [e.payload for e in entries] == [b"after"]
    assert reader.torn_entries == 0
    producer.close()


def test_one_request_for_two_runs_is_spooled_whole_or_not_at_all(
    project, start_receiver, tmp_path, monkeypatch
):
    run_b = f"b-{uuid.uuid4().hex[:8]}"
    refused = [False]

    def second_route_once(_: int, data: bytes) -> bool:
        if run_b.encode() in data and not refused[0]:
            refused[0] = True
            return True
        return False

    _failing_writes(monkeypatch, second_route_once)
    receiver = start_receiver(sample_grace_seconds=0, spool=tmp_path / "spool")
    spans_a = sample_spans(0, range(5), resource=Resource.create({"trackio.run": "a"}))
    spans_b = sample_spans(0, range(5), resource=Resource.create({"trackio.run": run_b}))
    assert send_over_http(receiver.url, spans_a + spans_b)  # one request, two resources
    assert refused[0]
    receiver.stop()
    _check("two-runs", _keys(spans_a), Stored(_stored_rows(project, "a")))
    _check("two-runs", _keys(spans_b), Stored(_stored_rows(project, run_b)))


# -- the checkpoint write fails ------------------------------------------------------------------


def test_checkpoint_write_failing_neither_kills_the_drain_nor_loses_data(
    project, fresh_dir, tmp_path
):
    if not _confinement_works(tmp_path):
        pytest.skip("cannot make a folder read-only for this user")
    spool = tmp_path / "spool"

    @contextlib.contextmanager
    def no_new_file_in_the_spool() -> Iterator[None]:
        spool.chmod(0o555)  # the checkpoint cannot be written
        try:
            yield
        finally:
            spool.chmod(0o755)

    acknowledged, _ = _through_a_fault(
        project,
        fresh_dir,
        spool,
        no_new_file_in_the_spool,
        [sample_spans(step, range(2)) for step in range(1, 4)],
        first=sample_spans(0, range(2)),
        seen=lambda output: "checkpoint" in output,
        confined=True,
    )
    _check("checkpoint", acknowledged, Stored(_stored_rows(project, "r", fresh_dir)))


# -- a torn tail, kills and restarts -------------------------------------------------------------


def test_drain_command_returns_past_a_torn_tail_and_counts_it_once(project, fresh_dir, tmp_path):
    spool = tmp_path / "spool"
    server = Server(
        project, fresh_dir, spool, "--sample-grace-seconds", "60", "--drain-seconds", "0"
    )
    batch = sample_spans(0, range(1))
    assert send_over_http(server.url, batch)
    wait_until(lambda: (load_checkpoint(spool) or _never()).processed.offset > 0, what="drain")
    server.stop(signal.SIGKILL)  # the sample still held: the spool keeps it
    last = max(spool.glob("*.seg"))
    with open(last, "ab") as handle:  # a producer killed mid-write: a header and half a body
        handle.write(HEADER.pack(MAGIC, 1, 0, 1000, 0, time.time_ns()) + b"x" * 300)
    drained = subprocess.run(
        [
            sys.executable,
            "-m",
            "otel_trackio",
            "drain",
            "--project",
            project,
            "--name",
            "r",
            "--spool",
            str(spool),
        ],
        env={**os.environ, "TRACKIO_DIR": fresh_dir},
        capture_output=True,
        text=True,
        timeout=90,
        cwd=REPO,
    )
    assert drained.returncode == 0, drained.stdout + drained.stderr
    assert "done" in drained.stdout
    output = drained.stdout + drained.stderr
    assert output.count("cut short") == 1, output  # warned once, counted once
    _check("torn-tail", _keys(batch), Stored(_stored_rows(project, "r", fresh_dir)))


def _never() -> Any:
    raise AssertionError("no checkpoint yet")


def _orphan_child() -> list[ReadableSpan]:
    """One span whose sample root never comes: it keeps its spool entry open (replayed)."""
    tracer, memory = memory_tracer()
    root = tracer.start_span("rollout", attributes={"step": 99, "sample_index": 0})
    with tracer.start_as_current_span("generate", context=_context_of(root)):
        pass
    return list(memory.get_finished_spans())  # the root is never ended


def _context_of(span: Any) -> Any:
    from opentelemetry import trace

    return trace.set_span_in_context(span)


@pytest.mark.parametrize("checkpoint", ["kept", "emptied by a power loss"])
def test_a_restart_after_a_kill_while_samples_are_held_logs_each_once(
    project, fresh_dir, tmp_path, checkpoint
):
    """Samples logged after an older entry that is still open (a span waiting for its root,
    samples in their grace period) are replayed after a restart: none is logged twice — also
    when the checkpoint came back empty (every entry present is then checked)."""
    spool = tmp_path / "spool"
    args = ("--sample-grace-seconds", "1", "--drain-seconds", "0")
    server = Server(project, fresh_dir, spool, *args)
    assert send_over_http(server.url, _orphan_child())
    acknowledged: set[tuple[int, int]] = set()
    for step in range(4):
        batch = sample_spans(step, range(5))
        assert send_over_http(server.url, batch)
        acknowledged |= _keys(batch)
    wait_until(lambda: len(_stored_rows(project, "r", fresh_dir)) == 20, what="20 stored")
    held = sample_spans(7, range(5))  # in their grace period at the kill
    assert send_over_http(server.url, held)
    acknowledged |= _keys(held)
    server.stop(signal.SIGKILL)
    if checkpoint != "kept":
        (spool / "checkpoint.json").write_text("")
    again = Server(project, fresh_dir, spool, *args)  # the documented restart
    wait_until(
        lambda: Stored(_stored_rows(project, "r", fresh_dir)).keys >= acknowledged,
        what="the held samples",
    )
    again.stop()  # what the replay still holds is logged now (a second copy would be too)
    _check("restart-held", acknowledged, Stored(_stored_rows(project, "r", fresh_dir)))


def test_a_replay_that_groups_spans_differently_logs_nothing_twice(project, fresh_dir, tmp_path):
    """Before the kill a sample was logged as {root, child} and a late child as its
    continuation; the replay, with a grace period, groups all three into one sample."""
    spool = tmp_path / "spool"
    server = Server(project, fresh_dir, spool, "--sample-grace-seconds", "0")
    assert send_over_http(server.url, _orphan_child())
    tracer, memory = memory_tracer()
    root = tracer.start_span("rollout", attributes={"step": 0, "sample_index": 3})
    with tracer.start_as_current_span("generate", context=_context_of(root)):
        pass
    late_child = tracer.start_span("tool", context=_context_of(root))
    root.end()
    first = list(memory.get_finished_spans())
    assert send_over_http(server.url, first)  # the sample: root + generate
    wait_until(lambda: len(_stored_rows(project, "r", fresh_dir)) == 1, what="the sample")
    late_child.end()
    assert send_over_http(server.url, [memory.get_finished_spans()[-1]])  # its late span
    wait_until(lambda: len(_stored_rows(project, "r", fresh_dir)) == 2, what="continuation")
    server.stop(signal.SIGKILL)
    again = Server(project, fresh_dir, spool, "--sample-grace-seconds", "1")
    again.stop()  # the replay's regrouped sample is released now, if not before
    stored = Stored(_stored_rows(project, "r", fresh_dir))
    _check("regrouped", {(0, 3)}, stored, spans_each=3)
    assert stored.counts[(0, 3)] == 1


@pytest.mark.parametrize("replayed", ["from the last checkpoint", "from an open span before"])
def test_samples_stored_after_the_last_checkpoint_are_counted_by_the_drainer_that_takes_over(
    project, tmp_path, monkeypatch, replayed
):
    """A drainer killed after a write to storage but before the checkpoint that counts it: the
    next one finds those samples stored (logs none twice) and the run's counters say every
    sample once — also when the replay goes back past samples the checkpoint counted (a span
    waiting for its root keeps the entries since for a replay)."""
    from otel_trackio._engine.run import build_run_engine
    from otel_trackio._spool import drain
    from otel_trackio._spool.segments import Producer
    from otel_trackio._trackio.sink import TrackioSink
    from otel_trackio.settings import TrackioSettings

    spool = tmp_path / "spool"
    producer = Producer(spool, 1 << 24)
    settings = TrackioSettings(project=project, name="r", sample_grace_seconds=0)
    first_engine = build_run_engine(settings, TrackioSink(project, "r"), transport="offload")
    first = drain.Drainer(spool, lambda route: first_engine)
    if replayed != "from the last checkpoint":
        producer.append(codec.SPANS, codec.encode_sdk_spans(_orphan_child()))

    def stored_in(engine: Any, drainer: drain.Drainer, step: int) -> None:
        producer.append(codec.SPANS, codec.encode_sdk_spans(sample_spans(step, range(10))))
        while drainer.cycle():
            pass
        # Whole samples without a grace period: in Trackio's storage, counted, as add returns.
        assert len(_stored_rows(project, "r")) == 10 * (step + 1)

    stored_in(first_engine, first, 0)
    first._save()
    real_save = drain.save_checkpoint
    # From now on the drainer dies before each checkpoint after a cycle: only the in-flight
    # marks reach the disk.
    monkeypatch.setattr(
        drain,
        "save_checkpoint",
        lambda path, checkpoint, fsync: (
            checkpoint.inflight is not None and real_save(path, checkpoint, fsync=fsync)
        ),
    )
    stored_in(first_engine, first, 1)
    stored_in(first_engine, first, 2)
    monkeypatch.setattr(drain, "save_checkpoint", real_save)
    first._lock.release()  # killed: no close, no final checkpoint

    second_engine = build_run_engine(settings, first_engine.spans.sink, transport="offload")
    second = drain.Drainer(spool, lambda route: second_engine)
    producer.append(codec.SPANS, codec.encode_sdk_spans(sample_spans(3, range(10))))
    while second.cycle():
        pass
    assert second_engine.spans.flush()
    second.close()
    counted = load_checkpoint(spool).stats  # type: ignore[union-attr]
    stored = Stored(_stored_rows(project, "r"))
    _check("checkpoint", {(s, i) for s in range(4) for i in range(10)}, stored)
    orphan = replayed != "from the last checkpoint"  # logged at the end, partial
    assert counted["samples_logged"] == 40 + orphan, counted
    assert counted["step_ranges"] == [[0, 3]]
    # Found stored again by the replay, counted by the first drainer: steps 0 and 1.
    assert counted["already_stored"] == 20 * orphan
    second_engine.spans.close(flush=False)
    first_engine.shutdown()


class _RunsCode:
    """What a hostile spool entry would hold: reading a plain pickle of it runs a command."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, (f"touch {self.marker}",))


def test_a_spool_entry_that_is_not_data_is_skipped_counted_and_the_drain_goes_on(
    project, tmp_path, caplog
):
    """A planted entry never runs code: a pickle that would run a command when loaded, and a
    MessagePack entry naming a class its kind may not hold, are each skipped, counted and
    warned about with the reason; the entries around them are stored."""
    import msgpack

    from otel_trackio._codec.packing import FIRST_CLASS_CODE, FORMAT, UnreadablePayload
    from otel_trackio._engine.run import build_run_engine
    from otel_trackio._offload.protocol import decode_config
    from otel_trackio._spool.drain import Drainer
    from otel_trackio._spool.segments import Producer
    from otel_trackio._trackio.sink import TrackioSink
    from otel_trackio.settings import TrackioSettings

    marker = tmp_path / "ran"
    spool = tmp_path / "spool"
    producer = Producer(spool, 1 << 24)
    producer.append(codec.SPANS, pickle.dumps(((None, None), {}, [_RunsCode(marker)])))
    producer.append(codec.SPANS, codec.encode_sdk_spans(sample_spans(0, range(3))))
    # Extension code 40: no class of a spans entry has it.
    foreign = msgpack.packb(
        [FORMAT, [[None, None], {}, [msgpack.ExtType(FIRST_CLASS_CODE + 24, b"\x80")]]]
    )
    producer.append(codec.SPANS, foreign)
    producer.append(codec.SPANS, codec.encode_sdk_spans(sample_spans(1, range(3))))
    engine = build_run_engine(
        TrackioSettings(project=project, name="r", sample_grace_seconds=0),
        TrackioSink(project, "r"),
        transport="offload",
    )
    drainer = Drainer(spool, lambda route: engine)
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        while drainer.cycle():
            pass
    drainer.close()
    engine.shutdown()
    assert not marker.exists()
    assert drainer.stats.unreadable_entries == 2
    assert "it is a pickle" in caplog.text  # the next such warning waits its interval
    with pytest.raises(UnreadablePayload, match="extension type 40"):
        codec.decode_spans(foreign)
    _check(
        "unreadable",
        {(step, i) for step in (0, 1) for i in range(3)},
        Stored(_stored_rows(project, "r")),
    )
    # The writer's config is read the same way.
    with pytest.raises(ValueError, match="it is a pickle"):
        decode_config(pickle.dumps(_RunsCode(marker)))
    assert not marker.exists()


# -- a timed-out write to storage ----------------------------------------------------------------


def test_a_timed_out_storage_write_keeps_the_entries_until_they_are_written(
    project, start_receiver, tmp_path
):
    spool = tmp_path / "spool"
    receiver = start_receiver(sample_grace_seconds=0, spool=spool)
    pipeline = receiver.router.default.spans
    pipeline.write_timeout_seconds = 0.2
    run_lock = pipeline.sink.run._client_lock  # Trackio's writer is busy for longer than that
    acknowledged: set[tuple[int, int]] = set()
    with run_lock:
        batch = sample_spans(0, range(5))
        assert send_over_http(receiver.url, batch)
        acknowledged |= _keys(batch)
        wait_until(lambda: receiver.router.totals().retried_writes > 0, what="a timeout")
        checkpoint = load_checkpoint(spool)
        assert checkpoint is not None
        first = min(spool.glob("*.seg"))
        assert checkpoint.oldest.seq <= int(first.stem) and checkpoint.oldest.offset == 0
    wait_until(lambda: len(read_traces(project, "r")) >= 5, what="the retried write")
    receiver.stop()
    _check("write-timeout", acknowledged, Stored(_stored_rows(project, "r")))


# -- a real full disk under the spool (a tiny tmpfs; needs root) ---------------------------------


@pytest.fixture
def tiny_disk() -> Iterator[Path]:
    """A 1 MiB tmpfs to hold a spool; skipped where it cannot be mounted."""
    if os.geteuid() != 0:
        pytest.skip("mounting a tiny tmpfs needs root")
    folder = Path(tempfile.mkdtemp(prefix="otel-trackio-spool-disk-"))
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True
    )
    if mounted.returncode != 0:
        folder.rmdir()
        pytest.skip(f"cannot mount tmpfs: {mounted.stderr.decode()}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", "-l", str(folder)], check=False)
        folder.rmdir()


def _fill(disk: Path, leave: int) -> Path:
    """Fill ``disk`` up, then free ``leave`` bytes: the next larger write stops short."""
    filler = disk / "filler"
    with open(filler, "wb", buffering=0) as handle:
        while True:
            try:
                handle.write(b"\0" * 4096)
            except OSError:
                break
        handle.truncate(max(0, handle.tell() - leave))
    return filler


def test_spool_disk_full_mid_append_refuses_then_stores_everything_once(
    project, fresh_dir, tiny_disk
):
    big = sample_spans(1, range(60), children=3)  # about 30 KB: stops short after 8 KB

    @contextlib.contextmanager
    def disk_full() -> Iterator[None]:
        filler = _fill(tiny_disk, leave=8192)
        try:
            yield
        finally:
            filler.unlink()

    acknowledged, _ = _through_a_fault(project, fresh_dir, tiny_disk / "spool", disk_full, [big])
    stored = Stored(_stored_rows(project, "r", fresh_dir))
    _check("disk-full", acknowledged - _keys(big), stored)
    _check("disk-full", acknowledged & _keys(big), stored, spans_each=4)


# -- still true: a receiver SIGKILLed mid-stream, a retrying client ------------------------------


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_receiver_sigkilled_mid_stream_with_a_retrying_client_stores_each_once(
    project, fresh_dir, tmp_path, protocol
):
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = str(probe.getsockname()[1])
    spool = tmp_path / "spool"
    # the same port after the restart, for the protocol the client speaks
    ports = ("--port", port, "--grpc-port", "0")
    if protocol == "grpc":
        ports = ("--port", "0", "--grpc-port", port)
    args = ("--sample-grace-seconds", "0", *ports)
    command = [sys.executable, "-m", "otel_trackio", "serve", "--summary-seconds", "0"]
    server = Server(project, fresh_dir, spool, *args, command=command)
    url = server.url if protocol == "http" else f"http://127.0.0.1:{port}"
    batches = [sample_spans(step, range(20)) for step in range(30)]
    results: list[bool] = []

    def client() -> None:
        for batch in batches:  # the official exporters retry refused connections
            if protocol == "http":
                results.append(send_over_http(url, batch, timeout=90))
                continue
            exporter = GrpcSpanExporter(endpoint=url, insecure=True, timeout=90)
            results.append(exporter.export(batch).name == "SUCCESS")
            exporter.shutdown()

    sender = threading.Thread(target=client)
    sender.start()
    wait_until(lambda: len(results) >= 10, what="a third sent")
    server.stop(signal.SIGKILL)
    server = Server(project, fresh_dir, spool, *args, command=command)
    sender.join(300)
    wait_until(
        lambda: len(_stored_rows(project, "r", fresh_dir)) >= 600, what="every sample stored"
    )
    server.stop()
    assert results == [True] * 30
    acknowledged = set().union(*(_keys(batch) for batch in batches))
    stored = Stored(_stored_rows(project, "r", fresh_dir))
    # A batch spooled whose answer the kill cut off is sent again by the client: stored once.
    _check("receiver-kill", acknowledged, stored)


# -- a response lost: the client sends the request again ---------------------------------------


class ResponseLosingProxy:
    """A loopback HTTP/1.1 proxy in front of the receiver that forwards every request whole and
    reads the receiver's whole answer, but for the requests ``lose(n)`` picks (n: the request's
    number, counting each distinct body once) closes the client's connection instead of
    passing that answer on: the request was taken, and the client never heard it."""

    def __init__(self, upstream: str, lose: Callable[[int], bool]) -> None:
        import socket

        host, port = upstream.removeprefix("http://").split(":")
        self._upstream = (host, int(port))
        self._lose = lose
        self._bodies: dict[bytes, int] = {}
        self.lost = 0
        self.requests = 0
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self._listener.getsockname()[1]}"
        self._closed = False
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        while not self._closed:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    @staticmethod
    def _read_message(sock: Any, buffered: bytes = b"") -> tuple[bytes, bytes, bytes] | None:
        """(head, body, what came after) of one HTTP message with a Content-Length."""
        data = buffered
        while b"\r\n\r\n" not in data:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            data += chunk
        head, rest = data.split(b"\r\n\r\n", 1)
        length = 0
        for line in head.split(b"\r\n")[1:]:
            name, _, value = line.partition(b":")
            if name.strip().lower() == b"content-length":
                length = int(value.strip())
        while len(rest) < length:
            chunk = sock.recv(65536)
            if not chunk:
                return None
            rest += chunk
        return head + b"\r\n\r\n", rest[:length], rest[length:]

    def _serve(self, client: Any) -> None:
        import socket

        leftover = b""
        with client:
            while True:
                request = self._read_message(client, leftover)
                if request is None:
                    return
                head, body, leftover = request
                with socket.create_connection(self._upstream) as upstream:
                    upstream.sendall(head + body)
                    answer = self._read_message(upstream)
                if answer is None:
                    return
                self.requests += 1
                first_time = body not in self._bodies
                number = self._bodies.setdefault(body, len(self._bodies))
                if first_time and self._lose(number):
                    self.lost += 1
                    return  # taken, never answered: the connection drops
                client.sendall(answer[0] + answer[1])

    def close(self) -> None:
        self._closed = True
        self._listener.close()


def test_a_request_sent_again_after_its_answer_was_lost_is_stored_once(
    project, fresh_dir, tmp_path
):
    """The official exporter sends a request again when the connection drops before the answer
    (a proxy restarting, a load balancer timing out): the receiver took it the first time."""
    server = Server(project, fresh_dir, tmp_path / "spool")
    proxy = ResponseLosingProxy(server.url, lose=lambda n: n % 3 == 0)
    batches = [sample_spans(step, range(10)) for step in range(12)]
    try:
        results = [send_over_http(proxy.url, batch) for batch in batches]
        acknowledged = set().union(*(_keys(batch) for batch in batches))
        wait_until(
            lambda: Stored(_stored_rows(project, "r", fresh_dir)).keys >= acknowledged,
            what="every sample stored",
        )
    finally:
        proxy.close()
        server.stop()
    assert results == [True] * 12
    assert proxy.lost == 4 and proxy.requests == 16  # each lost answer brought the request again
    _check("answer-lost", acknowledged, Stored(_stored_rows(project, "r", fresh_dir)))


def test_a_request_sent_again_long_after_is_stored_once(project, start_receiver, monkeypatch):
    """Sent again after more spans went through than the receiver remembers (its memory of
    logged spans is bounded): the sample's step is looked up in storage, not logged twice."""
    from otel_trackio._core.assembly import memory

    remember = memory.EmittedSamples.__init__
    monkeypatch.setattr(
        memory.EmittedSamples, "__init__", lambda self, limit=0: remember(self, 50)
    )  # 50 spans, for 50,000: the same window, quicker to pass
    receiver = start_receiver(sample_grace_seconds=0)
    first = sample_spans(0, range(4))
    assert send_over_http(receiver.url, first)
    later = [sample_spans(step, range(10)) for step in range(1, 5)]  # 80 spans more
    for batch in later:
        assert send_over_http(receiver.url, batch)
    assert send_over_http(receiver.url, first)  # its answer was lost: the client sends it again
    receiver.stop()
    acknowledged = _keys(first).union(*(_keys(batch) for batch in later))
    _check("answer-lost", acknowledged, Stored(_stored_rows(project, "r")))


def test_a_request_retried_on_the_other_receiver_of_a_fail_over_pair_is_stored_once(
    project, start_receiver, tmp_path
):
    """Two receivers with one name on one Trackio folder; the client's first try reached the
    first (which stored it) but its answer was lost, so it retries on the second, started
    before the first stored anything."""
    standby = start_receiver(sample_grace_seconds=0, spool=tmp_path / "b")
    active = start_receiver(sample_grace_seconds=0, spool=tmp_path / "a")
    earlier = sample_spans(9, range(2))
    assert send_over_http(
        standby.url, earlier
    )  # the standby took data before: it has looked around
    wait_until(lambda: len(_stored_rows(project, "r")) == 2, what="the earlier data")
    batch = sample_spans(0, range(5)) + sample_spans(1, range(5))
    assert send_over_http(active.url, batch)
    wait_until(lambda: len(_stored_rows(project, "r")) == 12, what="the first try stored")
    assert send_over_http(standby.url, batch)  # the retry, on the other receiver
    assert send_over_http(standby.url, sample_spans(2, range(3)))  # and new data goes on
    active.stop()
    standby.stop()
    acknowledged = _keys(earlier) | _keys(batch) | {(2, i) for i in range(3)}
    _check("answer-lost", acknowledged, Stored(_stored_rows(project, "r")))


def test_a_metrics_request_sent_again_after_its_answer_was_lost_counts_once(
    project, trackio_dir, tmp_path
):
    """The official metric exporter (delta temporality) sends a request again when the answer
    is lost: the counter's points are added once."""
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.sdk.metrics import Counter as CounterInstrument
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import (
        AggregationTemporality,
        PeriodicExportingMetricReader,
    )

    server = Server(project, trackio_dir, tmp_path / "spool")
    proxy = ResponseLosingProxy(server.url, lose=lambda n: True)  # every first answer lost
    exporter = OTLPMetricExporter(
        endpoint=proxy.url + "/v1/metrics",
        preferred_temporality={CounterInstrument: AggregationTemporality.DELTA},
    )
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"trackio.run": "r"})
    )
    counter = provider.get_meter("m").create_counter("tokens")
    try:
        for step in range(3):
            counter.add(10, {"step": step})
            assert provider.force_flush()
        provider.shutdown()
        wait_until(lambda: len(read_logs(project, "r")) >= 3, what="the metrics stored")
    finally:
        proxy.close()
        server.stop()
    assert proxy.lost == 3 and proxy.requests == 6  # each request was sent twice
    values = [(row["step"], row["tokens"]) for row in read_logs(project, "r") if "tokens" in row]
    assert sorted(values) == [(0, 10), (1, 10), (2, 10)]


def _metrics_requests(steps: Sequence[tuple[int, int]]) -> list[bytes]:
    """OTLP metrics requests as the official exporter sends them (its own encoder), one per
    (step, amount): a delta counter ``tokens`` with a ``step`` attribute, of run ``r``."""
    from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
    from opentelemetry.sdk.metrics import Counter as CounterInstrument
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import AggregationTemporality, InMemoryMetricReader

    reader = InMemoryMetricReader(
        preferred_temporality={CounterInstrument: AggregationTemporality.DELTA}
    )
    provider = MeterProvider(
        metric_readers=[reader], resource=Resource.create({"trackio.run": "r"})
    )
    counter = provider.get_meter("m").create_counter("tokens")
    requests = []
    for step, amount in steps:
        counter.add(amount, {"step": step})
        data = reader.get_metrics_data()
        assert data is not None
        requests.append(encode_metrics(data).SerializeToString())
    provider.shutdown()
    return requests


def _post_metrics(url: str, body: bytes) -> int:
    request = urllib.request.Request(
        url + "/v1/metrics", data=body, headers={"Content-Type": "application/x-protobuf"}
    )
    with urllib.request.urlopen(request, timeout=30) as response:
        return int(response.status)


@pytest.mark.parametrize("fault", ["sent-again", "replayed"])
def test_metrics_logged_before_a_receiver_was_killed_count_once_after_it(
    project, trackio_dir, tmp_path, fault
):
    """The receiver logged a metrics request and was killed: before its answer left (the
    client sends the request again to the receiver started in its place), or before its
    checkpoint moved past the entry (the new drainer replays it). The new receiver remembers
    the points logged (kept beside its spool), and a counter's step goes on from where it
    stood."""
    spool = tmp_path / "spool"
    requests = _metrics_requests([(0, 10), (1, 10), (2, 10), (2, 5), (3, 10)])
    first, second, third, more, fourth = requests
    server = Server(project, trackio_dir, spool)
    try:
        assert [_post_metrics(server.url, body) for body in (first, second, third)] == [200] * 3
        wait_until(lambda: len(read_logs(project, "r")) >= 3, what="the metrics stored")
    finally:
        server.stop(signal.SIGKILL)
    if fault == "replayed":  # killed after Trackio's write, before the checkpoint's
        spool_segments.save_checkpoint(spool, spool_segments.Checkpoint())
    server = Server(project, trackio_dir, spool)
    try:
        if fault == "sent-again":
            assert _post_metrics(server.url, third) == 200
        assert _post_metrics(server.url, more) == 200  # 5 more at step 2
        assert _post_metrics(server.url, fourth) == 200
        wait_until(
            lambda: any(row["step"] == 3 for row in read_logs(project, "r")),
            what="the last step stored",
        )
    finally:
        output = server.stop()
    values = [(row["step"], row["tokens"]) for row in read_logs(project, "r") if "tokens" in row]
    # Step 2 shows what was added there so far, each time it grew: 10, then 15; nothing twice.
    assert values == [(0, 10), (1, 10), (2, 10), (2, 15), (3, 10)]
    assert "Traceback" not in output


def test_a_request_sent_again_to_the_restarted_receiver_is_stored_once(
    project, fresh_dir, tmp_path
):
    """The receiver stored a request and was killed before its answer left: the client sends
    it again to the receiver started in its place, which finds it in Trackio's storage."""
    spool = tmp_path / "spool"
    batches = [sample_spans(step, range(10)) for step in range(4)]
    server = Server(project, fresh_dir, spool)
    assert all(send_over_http(server.url, batch) for batch in batches[:3])
    wait_until(lambda: len(_stored_rows(project, "r", fresh_dir)) == 30, what="stored")
    server.stop(signal.SIGKILL)  # the answer to batches[2] never left, as the client sees it
    server = Server(project, fresh_dir, spool)
    try:
        assert send_over_http(server.url, batches[2])  # sent again
        assert send_over_http(server.url, batches[3])  # and the run goes on
        wait_until(
            lambda: any(r["step"] == 3 for r in _stored_rows(project, "r", fresh_dir)),
            what="the next step stored",
        )
    finally:
        output = server.stop()
    acknowledged = set().union(*(_keys(batch) for batch in batches))
    _check("restart-resent", acknowledged, Stored(_stored_rows(project, "r", fresh_dir)))
    assert "Traceback" not in output


def _traces_by_run(project: str, trackio_dir: str) -> dict[str, list[dict[str, Any]]]:
    """Every Trace of ``project`` by its run's name, from raw SQLite (runs of one name would
    hide each other behind Trackio's API)."""
    with sqlite3.connect(Path(trackio_dir) / f"{project}.db") as db:
        rows = db.execute("SELECT run_name, step, metadata, spans FROM traces").fetchall()
    out: dict[str, list[dict[str, Any]]] = {}
    for run, step, metadata, spans in rows:
        trace = {"step": step, "metadata": json.loads(metadata), "spans": json.loads(spans)}
        out.setdefault(run, []).append(trace)
    return out


def test_a_request_sent_again_to_the_next_start_without_name_is_stored_once(
    project, fresh_dir, tmp_path
):
    """A receiver started without ``--name`` makes a new run each start. It stored a request
    and stopped cleanly before the answer left; the client sends it again to the start that
    follows, which finds it in the run before and stores only what is new in its own."""
    spool = tmp_path / "spool"
    batches = [sample_spans(step, range(10)) for step in range(3)]
    server = Server(project, fresh_dir, spool, name=None)
    assert all(send_over_http(server.url, batch) for batch in batches[:2])
    first_output = server.stop()  # clean: everything is stored, the run finished
    assert "Traceback" not in first_output
    server = Server(project, fresh_dir, spool, name=None)
    try:
        assert send_over_http(server.url, batches[1])  # sent again: its answer was lost
        assert send_over_http(server.url, batches[2])  # and the rollout goes on
        wait_until(
            lambda: sum(len(t) for t in _traces_by_run(project, fresh_dir).values()) >= 30,
            what="step 2 stored",
        )
    finally:
        output = server.stop()
    runs = _traces_by_run(project, fresh_dir)
    assert len(runs) == 2, list(runs)
    first, second = sorted(runs.values(), key=lambda rows: min(r["step"] for r in rows))
    _check("restart-resent-unnamed", _keys(batches[0]) | _keys(batches[1]), Stored(first))
    _check("restart-resent-unnamed", _keys(batches[2]), Stored(second))
    assert Stored(second).keys == _keys(batches[2])  # nothing of the run before again
    assert "10 samples found stored already, kept once" in output, output
    assert "Traceback" not in output


# -- offload=True: the writer process's write fails ----------------------------------------------


def test_offload_writer_keeps_and_retries_what_a_held_storage_lock_refused(project):
    from otel_trackio import TrackioSpanExporter

    exporter = TrackioSpanExporter(project, "offload", offload=True, sample_grace_seconds=0)
    acknowledged: set[tuple[int, int]] = set()
    try:
        first = sample_spans(0, range(5))
        assert exporter.export(first).name == "SUCCESS"
        acknowledged |= _keys(first)
        assert exporter.force_flush(60_000)
        with storage_lock_held(project):
            held_since = time.monotonic()
            for step in (1, 2):
                batch = sample_spans(step, range(5))
                assert exporter.export(batch).name == "SUCCESS"  # spooled: acknowledged
                acknowledged |= _keys(batch)
            # Trackio gives up after 10 s of waiting for the lock: hold it past that
            wait_until(lambda: time.monotonic() - held_since > 12.5, what="Trackio's timeout")
        assert exporter.force_flush(90_000)
    finally:
        exporter.shutdown()
    _check("offload-lock", acknowledged, Stored(_stored_rows(project, "offload")))
    assert exporter.stats.samples_logged == 15
