"""The store process (``otel_trackio/_trackio/store.py``): Trackio's storage write beside the
conversion, forked from a writer before its threads start.

What a pipeline does with it (writes behind, settled, a killed store): ``test_pipeline.py``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import uuid
from pathlib import Path
from typing import Any

import orjson
import pytest
from conftest import read_traces, trackio_dir_path, wait_until
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio._spool.segments import is_locked
from otel_trackio._trackio.store import _HEADER, TraceStore, serve

WAIT = 30.0  # seconds: the most a state may take to show with the CPU busy

# A writer in miniature: it holds a spool's drain lock, forks its store with no other thread
# running, has one Trace written there, says what it knows, then waits to be killed.
WRITER = textwrap.dedent(
    """
    import sys, threading, time, uuid
    from pathlib import Path
    from otel_trackio._spool.segments import Lock
    from otel_trackio._trackio.store import TraceStore

    lock_path, trackio_dir, project = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    lock = Lock(lock_path)
    assert lock.acquire()
    store = TraceStore(trackio_dir)
    store.start()
    assert threading.active_count() == 2  # this thread and the store's answer reader
    ready_at_once = store.ready(0.5)
    entry = {
        "project": project, "run": "forked", "run_id": None, "step": 3,
        "log_id": uuid.uuid4().hex,
        "metrics": {"rollout/traces": [{"_type": "trackio.trace", "messages": [],
                    "metadata": {"sample_index": 7}, "spans": []}]},
    }
    request = store.submit([entry])
    print("ready", ready_at_once, "answer", store.wait(request, 30.0), flush=True)
    print("store", store._process.pid, flush=True)
    time.sleep(120)
    """
)


def test_a_store_forked_from_a_writer_is_ready_at_once_and_lets_the_spool_go_when_it_is_killed(
    project: str, tmp_path: Path
) -> None:
    lock_path = tmp_path / "drain.lock"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lock_path), str(trackio_dir_path()), project],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        said = writer.stdout.readline().split()
        assert said == ["ready", "True", "answer", "None"], said  # no start-up, stored
        store_pid = int(writer.stdout.readline().split()[1])
        # A fork, not a fresh interpreter; it kept none of the writer's files open.
        cmdline = Path(f"/proc/{store_pid}/cmdline").read_bytes()
        assert cmdline == Path(f"/proc/{writer.pid}/cmdline").read_bytes()
        held = {
            os.readlink(f"/proc/{store_pid}/fd/{fd}") for fd in os.listdir(f"/proc/{store_pid}/fd")
        }
        assert str(lock_path) not in held
        [trace] = read_traces(project, "forked")
        assert trace["metadata"]["sample_index"] == 7
        assert is_locked(lock_path)
        writer.kill()  # as a launcher kills a writer: the store sees its pipe close and ends
        writer.wait(WAIT)
        wait_until(
            lambda: not Path(f"/proc/{store_pid}").exists() or _zombie(store_pid),
            "the store to end with its writer",
            WAIT,
        )
        assert not is_locked(lock_path)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(WAIT)


def _zombie(pid: int) -> bool:
    """True when process ``pid`` has ended and waits to be reaped (its parent was killed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_the_writers_nice_reaches_its_forked_store(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from otel_trackio._trackio.store import TraceStore
        store = TraceStore(Path(sys.argv[1]))
        store.start()
        assert store.ready(10.0)
        store.lower_priority(19)
        print(os.getpriority(os.PRIO_PROCESS, store._process.pid), flush=True)
        store.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(trackio_dir_path())],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.stdout.split() == ["19"], done.stderr


def _entry(project: str, step: int) -> dict[str, Any]:
    """One Trackio log entry of one Trace at ``step``, as a run queues it."""
    return {
        "project": project,
        "run": "together",
        "run_id": None,
        "step": step,
        "log_id": uuid.uuid4().hex,
        "metrics": {
            "rollout/traces": [
                {"_type": "trackio.trace", "messages": [], "metadata": {}, "spans": []}
            ]
        },
    }


def test_requests_waiting_for_the_store_are_written_together_and_each_answered(
    project: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    requests_read, requests_write = os.pipe()
    answers_read, answers_write = os.pipe()
    with os.fdopen(requests_write, "wb") as pipe:  # all waiting before the store looks
        for step in (1, 2, 3, 4):
            payload = orjson.dumps([_entry(project, step)])
            if step == 2:
                payload = b"not json"  # answered failed by itself: the others are written
            header = _HEADER.pack(step, len(payload))
            if step == 4:  # the parent killed while handing this one over
                payload = payload[: len(payload) // 2]
            pipe.write(header + payload)
    writes: list[list[int]] = []
    real = SQLiteStorage.bulk_log

    def counted(**call: Any) -> Any:
        writes.append(call["steps"])
        return real(**call)

    monkeypatch.setattr(SQLiteStorage, "bulk_log", staticmethod(counted))
    with (
        os.fdopen(requests_read, "rb", buffering=0) as requests,
        os.fdopen(answers_write, "wb") as answers,
    ):
        serve(requests, answers)
    with os.fdopen(answers_read, "rb") as said:
        answered = said.read().decode().splitlines()
    assert answered[:2] == ["ready", "1 ok"] and answered[3] == "3 ok", answered
    assert answered[2].startswith("2 failed JSONDecodeError") and len(answered) == 4
    assert writes == [[1, 3]]  # one write for both; the torn one is not written
    assert [trace["step"] for trace in read_traces(project, "together")] == [1, 3]


def test_a_request_handed_over_while_the_store_writes_waits_in_its_pipe_not_in_the_caller(
    project: str,
) -> None:
    store = TraceStore(trackio_dir_path())
    try:
        assert store.ready(WAIT)
        process = store._process
        assert process is not None
        entry = _entry(project, 5)
        # About half a megabyte, as a part of ~100 samples of GenAI messages is.
        entry["metrics"]["rollout/traces"][0]["messages"] = [
            {"role": "user", "content": "x" * 500_000}
        ]
        os.kill(process.pid, signal.SIGSTOP)  # busy writing the part before
        try:
            handed: list[int | None] = []
            caller = threading.Thread(target=lambda: handed.append(store.submit([entry])))
            caller.start()
            caller.join(5.0)
            assert not caller.is_alive(), "the caller waited for the store to read its request"
        finally:
            os.kill(process.pid, signal.SIGCONT)
        caller.join(WAIT)
        [request] = handed
        assert request is not None and store.wait(request, WAIT) is None
        assert [trace["step"] for trace in read_traces(project, "together")] == [5]
    finally:
        store.close()


def test_a_store_that_cannot_start_is_given_up_once_and_its_caller_writes(caplog) -> None:
    # A Python that cannot start (no standard library where it looks): it exits before it
    # says it is ready. It is not started again for every request.
    store = TraceStore(trackio_dir_path(), environment={**os.environ, "PYTHONHOME": "/nowhere"})
    caplog.set_level("WARNING", logger="otel_trackio")
    try:
        store.start(fork=False)
        assert store.ready(WAIT) is False
        assert store.given_up
        assert store.submit([_entry("unused", 0)]) is None  # the caller writes it
        assert store._process is not None and store._process.poll() is not None
        assert caplog.text.count("store process cannot start") == 1
    finally:
        store.close()


def test_the_store_finishes_its_writes_through_a_ctrl_c_or_sigterm_of_its_process_group(
    project: str,
) -> None:
    # A rollout process's store is in its process group: Ctrl-C or a SIGTERM to the group
    # reaches it too. It leaves when its parent closes the pipe, after what it took.
    store = TraceStore(trackio_dir_path())
    try:
        store.start(fork=False)
        assert store.ready(WAIT)
        process = store._process
        assert process is not None
        os.kill(process.pid, signal.SIGINT)
        os.kill(process.pid, signal.SIGTERM)
        request = store.submit([_entry(project, 4)])
        assert request is not None and store.wait(request, WAIT) is None
        assert [trace["step"] for trace in read_traces(project, "together")] == [4]
        assert process.poll() is None
    finally:
        store.close()


def test_a_forked_child_hands_nothing_to_its_parents_store(project: str) -> None:
    store = TraceStore(trackio_dir_path())
    try:
        assert store.ready(WAIT)
        parents = store._process
        assert parents is not None
        child = os.fork()
        if child == 0:  # the pipe and its answers are the parent's: the child writes itself
            taken = store.submit([_entry(project, 1)])
            os._exit(0 if taken is None and store._process is parents else 1)
        _, status = os.waitpid(child, 0)
        assert os.waitstatus_to_exitcode(status) == 0
        request = store.submit([_entry(project, 2)])  # the parent's pipe is intact
        assert request is not None and store.wait(request, WAIT) is None
        assert [trace["step"] for trace in read_traces(project, "together")] == [2]
    finally:
        store.close()


def test_close_returns_once_what_was_handed_over_is_stored_and_kills_a_store_stalled_past_it(
    project: str, tmp_path: Path
) -> None:
    # A store whose interpreter takes long to end (here an exit hook that sleeps): closing it
    # waits for its answers, not for its end; it writes nothing more meanwhile.
    hook = "import atexit, time\natexit.register(time.sleep, 60)\n"
    (tmp_path / "sitecustomize.py").write_text(hook)
    path = os.pathsep.join([str(tmp_path), *sys.path])
    store = TraceStore(trackio_dir_path(), environment={**os.environ, "PYTHONPATH": path})
    store.start(fork=False)
    assert store.ready(WAIT)
    process = store._process
    assert process is not None
    try:
        assert store.submit([_entry(project, 6)]) is not None
        store.close()
        assert [trace["step"] for trace in read_traces(project, "together")] == [6]
        assert process.poll() is None  # still ending
    finally:
        process.kill()
    stalled = TraceStore(trackio_dir_path())
    stalled.start(fork=False)
    assert stalled.ready(WAIT)
    stopped = stalled._process
    assert stopped is not None
    os.kill(stopped.pid, signal.SIGSTOP)  # never answers
    assert stalled.submit([_entry(project, 7)]) is not None
    stalled.close(timeout_seconds=0.5)
    wait_until(lambda: stopped.poll() is not None, what="the stalled store killed")
    assert [trace["step"] for trace in read_traces(project, "together")] == [6]


def test_close_ends_a_stalled_store_that_a_hand_over_waits_for(project: str) -> None:
    # The store stuck in a write (here stopped) and its pipe full: a hand-over waits on it,
    # holding the store's lock. Closing without waiting ends the store, and the hand-over fails.
    store = TraceStore(trackio_dir_path())
    store.start(fork=False)
    assert store.ready(WAIT)
    process = store._process
    assert process is not None
    os.kill(process.pid, signal.SIGSTOP)
    entry = _entry(project, 8)
    big = [{"role": "user", "content": "x" * 3_000_000}]  # more than the pipe holds
    entry["metrics"]["rollout/traces"][0]["messages"] = big
    handed: list[int | None] = []
    caller = threading.Thread(target=lambda: handed.append(store.submit([entry])))
    caller.start()
    wait_until(lambda: store._lock.locked(), what="the hand-over waiting on the full pipe")
    closing = threading.Thread(target=lambda: store.close(timeout_seconds=0.0))
    closing.start()
    closing.join(WAIT)
    caller.join(WAIT)
    assert not closing.is_alive() and not caller.is_alive()
    assert handed == [None]  # the caller writes it (or its spool keeps it)
    wait_until(lambda: process.poll() is not None, what="the stalled store ended")


def _stored_rows(project: str, run: str) -> list[tuple[Any, ...]]:
    """What storage holds of ``run``: its metrics and its Traces' columns, byte for byte (ids,
    log ids and times aside)."""
    import sqlite3

    with sqlite3.connect(trackio_dir_path() / f"{project}.db") as db:
        metrics = db.execute(
            "SELECT step, metrics FROM metrics WHERE run_name = ? ORDER BY step", (run,)
        ).fetchall()
        traces = db.execute(
            "SELECT step, key, trace_index, messages, metadata, spans, "
            "replace(search_text, id, '') FROM traces WHERE run_name = ? ORDER BY step, "
            "trace_index",
            (run,),
        ).fetchall()
    return [*metrics, *traces]


def test_the_store_stores_byte_for_byte_what_trackio_stores_for_the_same_entries(
    project: str,
) -> None:
    import numpy as np
    from trackio.utils import serialize_values

    trace = {
        "_type": "trackio.trace",
        "messages": [{"role": "user", "content": 'Où? 🚆 \u2028 "quoted"\n'}],
        "metadata": {"reward": float("nan"), "big": 2**62, "tiny": 1e-300, "nested": {"a": [()]}},
        "spans": [{"id": "1", "name": "n", "kind": "span", "input": {"x": -0.0}}],
    }
    values = {"loss": float("inf"), "np": np.float32(0.25), "rollout/traces": [trace, trace]}
    # What run.log queues: Trackio's walk, then a JSON round trip.
    queued = orjson.loads(orjson.dumps(serialize_values(values)))
    assert "NaN" in orjson.dumps(queued).decode()  # the walk ran: NaN and inf as text

    def entry(run: str) -> dict[str, Any]:
        return {
            "project": project,
            "run": run,
            "run_id": None,
            "step": 5,
            "log_id": uuid.uuid4().hex,
            "metrics": orjson.loads(orjson.dumps(queued)),
        }

    SQLiteStorage.bulk_log(
        project=project,
        run="by-trackio",
        metrics_list=[entry("by-trackio")["metrics"]],
        steps=[5],
        log_ids=[uuid.uuid4().hex],
    )
    store = TraceStore(trackio_dir_path())
    store.start(fork=False)
    try:
        assert store.ready(WAIT)
        request = store.submit([entry("by-the-store")])
        assert request is not None and store.wait(request, WAIT) is None
    finally:
        store.close()
    by_trackio = _stored_rows(project, "by-trackio")
    assert len(by_trackio) == 3  # the scalars, two Traces
    assert _stored_rows(project, "by-the-store") == by_trackio


def test_the_store_skips_trackios_walk_only_where_it_leaves_decoded_json_unchanged() -> None:
    from types import SimpleNamespace

    import trackio.sqlite_storage
    from trackio.utils import serialize_values

    from otel_trackio._trackio.store import write_decoded_json_as_is

    installed = SimpleNamespace(serialize_values=serialize_values)
    assert write_decoded_json_as_is(installed)
    value = {"a": [1.5]}
    assert installed.serialize_values(value) is value  # as it is, no copy
    assert trackio.sqlite_storage.serialize_values is serialize_values  # this process: untouched

    def shortens(value: Any) -> Any:  # a walk that changes decoded JSON (cuts long text)
        return serialize_values(value) if not isinstance(value, str) else value[:1]

    def cut_text(value: Any) -> Any:
        if isinstance(value, dict):
            return {key: cut_text(item) for key, item in value.items()}
        if isinstance(value, list):
            return [cut_text(item) for item in value]
        return shortens(value)

    def fails(value: Any) -> Any:
        raise TypeError("not JSON")

    for walk in (cut_text, fails):
        other = SimpleNamespace(serialize_values=walk)
        assert not write_decoded_json_as_is(other)
        assert other.serialize_values is walk  # kept
    assert not write_decoded_json_as_is(SimpleNamespace())
