"""The one door to Trackio on its own (``otel_trackio._trackio.sink.TrackioSink``): which run it
holds, how it logs, how it makes a write durable, and what it says when the installed Trackio
lacks a member it uses.

Real Trackio runs in the session's temp ``TRACKIO_DIR``; a run showing only Trackio's public
surface stands for a future Trackio without the private members (as in ``test_settings.py``).
The exporters' use of the door: ``test_exporter.py``, ``test_faults_exporter.py``.
"""

from __future__ import annotations

import logging
import threading
from typing import Any

import pytest
import trackio
from conftest import project_db_rows, wait_until
from trackio import context_vars
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio._trackio import installed as door
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.storage import has_traces_at, stored_span_ids

WAIT = 30.0  # seconds: the most Trackio's own writer thread may take with the CPU busy
TRACE = {
    "messages": [{"role": "user", "content": "q"}],
    "metadata": {"step": 1},
    "spans": [{"id": "00000000000000aa", "name": "rollout", "kind": "span"}],
}


class PublicOnlyRun:
    """A real run seen through Trackio's public surface only; records every ``log`` call."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self.project = run.project
        self.name = run.name
        self.calls: list[tuple[dict[str, Any], int | None]] = []

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        self.calls.append((metrics, step))
        self._run.log(metrics, step=step)

    def finish(self) -> None:
        self._run.finish()


class NoFailureReportRun(PublicOnlyRun):
    """Can write inline (``_flush_queues_inline``, ``_client_lock``) but has no
    ``_warned_failures``: a failed write cannot be told."""

    def __init__(self, run: Any) -> None:
        super().__init__(run)
        self._flush_queues_inline = run._flush_queues_inline
        self._client_lock = run._client_lock


@pytest.fixture
def lacks(caplog: pytest.LogCaptureFixture) -> Any:
    """The "installed Trackio lacks ..." warnings logged so far (each said once per process)."""
    door._missing.reset()
    caplog.set_level(logging.WARNING, logger="otel_trackio")
    yield lambda: [r.getMessage() for r in caplog.records if "lacks" in r.getMessage()]
    door._missing.reset()


def _traces(project: str, run: str) -> list[dict[str, Any]]:
    return SQLiteStorage.get_traces(project, run)


def _scalars(project: str, run: str, key: str) -> list[tuple[int, Any]]:
    """(step, value) of every stored log row that has ``key``."""
    return [(r["step"], r[key]) for r in SQLiteStorage.get_logs(project, run) if key in r]


def test_the_active_run_is_adopted_and_never_finished(project):
    user_run = trackio.init(project=project, name="mine")
    try:
        sink = TrackioSink(project)
        assert sink.run is user_run
        assert TrackioSink().run is user_run  # no project asked: the active one
        assert TrackioSink(project, "mine").run is user_run
        sink.log_traces("traces", [TRACE], step=1)
        assert sink.flush()
        sink.release()
        sink.release()  # idempotent
        assert context_vars.current_run.get() is user_run  # still the user's, still open
        user_run.log({"loss": 1.0}, step=2)
    finally:
        user_run.finish()
    assert [t["step"] for t in _traces(project, "mine")] == [1]
    assert _scalars(project, "mine", "loss") == [(2, 1.0)]


def test_another_run_is_started_beside_the_active_one_never_over_it(project, monkeypatch):
    user_run = trackio.init(project=project, name="mine")
    active_at_init: list[Any] = []
    real_init = trackio.init

    def init(*args: Any, **kwargs: Any) -> Any:
        active_at_init.append(context_vars.current_run.get())
        return real_init(*args, **kwargs)

    monkeypatch.setattr(trackio, "init", init)
    try:
        sink = TrackioSink(project, "ours")
        assert sink.run is not user_run and sink.run_name == "ours"
        assert active_at_init == [None]  # trackio.init never saw the user's run active
        assert context_vars.current_run.get() is user_run
        other = TrackioSink(f"{project}-b")  # another project: not the active run either
        assert other.run is not user_run and other.project == f"{project}-b"
        sink.log_traces("traces", [TRACE], step=4)
        assert sink.flush()
        sink.release()  # ours: finished now
        other.release()
        user_run.log({"loss": 2.0}, step=1)  # the user's run still works
    finally:
        user_run.finish()
    assert [t["step"] for t in _traces(project, "ours")] == [4]
    assert _scalars(project, "mine", "loss") == [(1, 2.0)]


def test_sinks_of_one_run_share_it_and_the_last_one_finishes_it(project):
    first = TrackioSink(project, "shared")
    second = TrackioSink(project, "shared")
    assert first.run is second.run
    run: Any = first.run
    first.release()
    assert not run._stop_flag.is_set()  # still held by the second
    second.release()
    assert run._stop_flag.is_set()  # finished by its last holder
    third = TrackioSink(project, "shared")
    try:
        assert third.run is not run  # a finished run is not handed out again
    finally:
        third.release()


def test_every_log_call_names_its_step(project):
    run = PublicOnlyRun(trackio.init(project=project, name="steps"))
    sink = TrackioSink(run=run)
    sink.log({"reward": 1.0}, step=3)
    sink.log_traces("traces", [TRACE, TRACE], step=3)
    sink.log_traces("traces", [], step=4)  # nothing to log: no call
    assert [step for _, step in run.calls] == [3, 3]
    [_, (entry, _)] = run.calls
    assert list(entry) == ["traces"] and len(entry["traces"]) == 2
    run.finish()
    assert sorted((t["step"], t["index"]) for t in _traces(project, "steps")) == [(3, 0), (3, 1)]
    assert _scalars(project, "steps", "reward") == [(3, 1.0)]


class OwnLockRun:
    """A real run with a lock of its own for the sink: while the test holds the run's real
    ``_client_lock``, Trackio's writer thread cannot write, so only ``flush()`` can."""

    def __init__(self, run: Any) -> None:
        self._run = run
        self._client_lock = threading.Lock()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._run, name)


def test_flush_makes_a_log_durable_before_it_returns(project):
    real = trackio.init(project=project, name="durable")
    sink = TrackioSink(run=OwnLockRun(real))
    try:
        with real._client_lock:  # Trackio's own writer thread is kept out
            sink.log_traces("traces", [TRACE], step=7)
            assert sink.flush()
            assert [t["step"] for t in _traces(project, "durable")] == [7]
        assert stored_span_ids(sink, "traces", 7) == {"00000000000000aa"}
        assert stored_span_ids(sink, "other-key", 7) == set()
    finally:
        real.finish()


def test_stored_traces_are_read_from_the_sinks_own_run_when_another_shares_its_name(project):
    # verl's Tracking opens its run with resume="never": a second run of the same name.
    first = trackio.init(project=project, name="shared")
    first_sink = TrackioSink(run=first)
    second: Any = None
    try:
        first_sink.log_traces("traces", [TRACE], step=7)
        assert first_sink.flush()
        second = trackio.init(project=project, name="shared", resume="never")
        assert second.id != first.id
        second_sink = TrackioSink(run=second)
        assert has_traces_at(second_sink, 7) is False  # the first run's Trace is not its own
        assert stored_span_ids(second_sink, "traces", 7) == set()
        assert has_traces_at(first_sink, 7) is True
        assert stored_span_ids(first_sink, "traces", 7) == {"00000000000000aa"}
    finally:
        first.finish()
        if second is not None:
            second.finish()


def test_a_run_without_trackio_internals_still_stores_and_says_once_what_is_lost(project, lacks):
    real = trackio.init(project=project, name="public")
    sink = TrackioSink(run=PublicOnlyRun(real))
    try:
        sink.log_traces("traces", [TRACE], step=1)
        assert sink.flush()  # cannot write inline: Trackio's thread will
        assert sink.flush()
        assert sink.next_step() is None
        messages = lacks()
        assert len(messages) == 2, messages  # one per missing piece, not one per call
        assert "Run._flush_queues_inline" in messages[0]
        assert "no longer written to storage before export() returns" in messages[0]
        assert "Run._next_step" in messages[1]
        wait_until(lambda: _traces(project, "public"), "the Trace stored")
        assert [t["step"] for t in _traces(project, "public")] == [1]
    finally:
        sink.release()
        real.finish()  # borrowed: the sink never finishes it


def test_a_run_that_cannot_report_failed_writes_says_so(project, lacks):
    real = trackio.init(project=project, name="blind")
    sink = TrackioSink(run=NoFailureReportRun(real))
    try:
        sink.log_traces("traces", [TRACE], step=2)
        assert sink.flush()
        assert [t["step"] for t in _traces(project, "blind")] == [2]  # written inline
        [message] = lacks()
        assert "Run._warned_failures" in message and "no longer detected" in message
    finally:
        real.finish()


def test_a_project_is_required_without_an_active_run():
    with pytest.raises(ValueError, match="needs a Trackio project"):
        TrackioSink()


def test_a_sink_built_on_one_thread_logs_from_another(project):
    sink = TrackioSink(project, "threads")
    errors: list[BaseException] = []

    def export() -> None:  # an SDK worker thread: no active run in its context
        try:
            sink.log_traces("traces", [TRACE], step=9)
            assert sink.flush()
        except BaseException as exc:  # noqa: BLE001 - reported on the test's thread
            errors.append(exc)

    worker = threading.Thread(target=export)
    worker.start()
    worker.join(WAIT)
    sink.release()
    assert not errors
    assert [t["step"] for t in _traces(project, "threads")] == [9]


def _stored_trace_rows(project: str, run: str) -> list[tuple[Any, ...]]:
    """Every column Trackio stores for each Trace of ``run`` but the ids made per log call (the
    row id and log id, and the search text's first word, which is that row id)."""
    rows = project_db_rows(
        project,
        "SELECT step, key, trace_index, messages, metadata, spans, search_text "
        "FROM traces WHERE run_name = ? ORDER BY step, trace_index",
        (run,),
    )
    return [(*row[:6], row[6].split(" ", 1)[1]) for row in rows]


AWKWARD_TRACE = {
    "messages": [
        {"role": "user", "content": 'ünïcödé \u2028 and a "quote"'},
        {"role": "assistant", "content": "", "tool_calls": [{"id": "c1", "arguments": "{}"}]},
    ],
    # Non-finite floats never reach a payload: the converter writes them as text ("nan").
    "metadata": {"step": 3, "reward": "nan", "big": 1e308, "tags": ["a", "b"], "ok": True},
    "spans": [{"id": "00000000000000bb", "name": "chat", "kind": "llm", "metadata": {"n": None}}],
}


def test_trace_entries_skip_run_logs_copy_are_written_together_and_stored_as_run_log_stores_them(
    project,
):
    """Trace entries skip ``run.log``'s deep copy and are queued as ``run.log`` queues them:
    what is stored must not change, value for value; the entries logged before a flush go to
    storage in one write (Trackio opens its database twice per write, whatever it holds)."""
    direct = TrackioSink(project, "direct")
    queued_run = trackio.init(project=project, name="queued")
    queued = TrackioSink(run=PublicOnlyRun(queued_run))  # public surface only: run.log
    run: Any = direct.run
    writes: list[int] = []
    logged: list[Any] = []
    write, log = run._write_logs_to_sqlite, run.log

    def write_spy(logs: list[Any]) -> None:
        writes.append(len(logs))
        write(logs)

    def log_spy(*args: Any, **kwargs: Any) -> None:
        logged.append(args)
        log(*args, **kwargs)

    run._write_logs_to_sqlite, run.log = write_spy, log_spy
    try:
        for sink, real in ((direct, run), (queued, queued_run)):
            with real._client_lock:  # Trackio's own thread may not write in between
                sink.log_traces("traces", [TRACE, AWKWARD_TRACE], step=3)
                sink.log_traces("traces", [AWKWARD_TRACE], step=5)
            assert sink.flush()
        wait_until(lambda: len(_traces(project, "queued")) == 3, "run.log's Traces stored")
        assert _stored_trace_rows(project, "direct") == _stored_trace_rows(project, "queued")
        assert len(_stored_trace_rows(project, "direct")) == 3
        assert writes == [2]  # both entries in one storage write
        assert logged == []  # run.log was not called: its copy skipped
        assert direct.next_step() == 6  # the run's step clock moves as run.log moves it
    finally:
        direct.release()
        queued.release()
        queued_run.finish()


def test_logging_traces_never_waits_for_trackios_writer_thread(project):
    sink = TrackioSink(project, "busy-writer")
    run: Any = sink.run
    try:
        with run._client_lock:  # Trackio's thread is writing: the entry is queued, not waited on
            sink.log_traces("traces", [TRACE], step=2)
            assert _traces(project, "busy-writer") == []
        assert sink.flush()
        assert [t["step"] for t in _traces(project, "busy-writer")] == [2]  # once
    finally:
        sink.release()


def test_a_runs_config_is_stored_with_its_first_traces(project):
    sink = TrackioSink(project, "configured", init_kwargs={"config": {"lr": 0.1}})
    try:
        sink.log_traces("traces", [TRACE], step=1)  # the first entry carries the config
        sink.log_traces("traces", [TRACE], step=2)
        assert sink.flush()
        assert SQLiteStorage.get_run_config(project, "configured")["lr"] == 0.1
        assert sorted(t["step"] for t in _traces(project, "configured")) == [1, 2]
    finally:
        sink.release()


def test_trace_entries_queued_while_trackios_writer_thread_takes_the_queue_are_all_stored(project):
    """Trackio's writer thread swaps its queue for a new list as it takes it: an entry queued at
    that moment lands in one list or the other, never in one nobody writes any more."""
    sink = TrackioSink(project, "racing")
    run: Any = sink.run
    done = threading.Event()

    def trackios_writer_thread() -> None:
        while not done.is_set():
            with run._client_lock:
                run._flush_queues_inline()

    writer = threading.Thread(target=trackios_writer_thread)
    writer.start()
    try:
        for step in range(300):
            sink.log_traces("traces", [TRACE], step=step)
    finally:
        done.set()
        writer.join(WAIT)
    try:
        assert sink.flush()
        assert sorted(t["step"] for t in _traces(project, "racing")) == list(range(300))
    finally:
        sink.release()
