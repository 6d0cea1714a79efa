"""Trackio's storage writes in a process of their own, beside the one that converts.

An exporter in process, a writer process or the receiver spends about half of its time
converting samples and the other half in Trackio's storage write (serialising the rows, the
SQLite transaction, one session file per Trace), all under one GIL. A :class:`TraceStore` runs
that write in a child process: the parent hands it what a run queued and converts the next
samples while the child writes, so on two cores the time until durable is bounded by Trackio's
own write.

The child is forked from a writer that runs no other thread yet, with Trackio imported (ready at
once; it closes every file it inherited but its pipes, so a spool lock never outlives the
writer); otherwise (the receiver, which starts it with itself; a rollout process, whose
in-process exporters share one) it is this file run as a script, which imports Trackio first and
says :data:`READY` when done: until then :meth:`TraceStore.submit` takes nothing and the caller
writes.

A request is an id and the log entries a run queued. The child takes them in order; those
waiting in its pipe when it is free it takes together, in one write: the ``bulk_log`` calls
Trackio's own writer thread would make for their entries (``SQLiteStorage.bulk_log``, grouped by
run as ``Run._write_logs_to_sqlite`` groups them). A caller that hands requests over faster than
storage takes them so gets fewer, larger writes, which cost Trackio less per Trace. It answers
one line per request: ``<id> ok`` or ``<id> failed <why>``. What it writes was decoded from JSON
just before, so Trackio's sanitising walk over every value, which would only copy it, is skipped
there (:func:`write_decoded_json_as_is`): the store's write costs less than Trackio's own.

It exits when its pipe closes (the parent ended or was killed); a request it had taken is
finished first. A child that dies fails every request it had not answered: the caller then looks
up what storage holds and logs the rest again, as after any failed write. The child is in its
parent's session, so the writer's CPU priority (its autogroup's nice) is the child's too.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import select
import signal
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Any

import orjson

_logger = logging.getLogger("otel_trackio")
_HEADER = struct.Struct("<QI")  # request id, payload length

READY = b"ready\n"
"""The store process's first line: it has imported Trackio and takes requests."""

TIMED_OUT = "timed out"
"""What :meth:`TraceStore.wait` answers when the write is still going on."""


def bulk_log_calls(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Trackio log entries (what ``run.log`` queues) as the ``SQLiteStorage.bulk_log`` calls
    Trackio's writer thread makes for them: one per run, in order, the first config kept."""
    calls: dict[tuple[Any, Any, Any], dict[str, Any]] = {}
    for entry in entries:
        key = (entry["project"], entry["run"], entry.get("run_id"))
        call = calls.get(key)
        if call is None:
            call = calls[key] = {
                "project": key[0],
                "run": key[1],
                "run_id": key[2],
                "metrics_list": [],
                "steps": [],
                "log_ids": [],
                "config": None,
            }
        call["metrics_list"].append(entry["metrics"])
        call["steps"].append(entry.get("step"))
        call["log_ids"].append(entry.get("log_id"))
        if entry.get("config") and call["config"] is None:
            call["config"] = entry["config"]
    for call in calls.values():
        if all(log_id is None for log_id in call["log_ids"]):
            call["log_ids"] = None
    return list(calls.values())


class TraceStore:
    """The parent's side of a store process: :meth:`submit` hands it the entries a run queued,
    :meth:`wait` tells how their write went. The process starts with :meth:`start` (or else
    the first request) and again after it died, unless it never got as far as taking writes
    (it cannot start, or cannot import Trackio): then it is given up, warned once, and the
    caller writes. Thread-safe; a forked child's copy hands nothing over (the pipe is the
    parent's)."""

    def __init__(self, trackio_dir: Path, *, environment: Mapping[str, str] | None = None) -> None:
        self._trackio_dir = trackio_dir
        # The environment a process started afresh gets (default: this process's).
        self._environment = dict(os.environ if environment is None else environment)
        self._environment["TRACKIO_DIR"] = str(trackio_dir)
        self._pid = os.getpid()  # a forked copy of this object is not the pipe's owner
        self._given_up = False  # a process that could not start, or ended before it was ready
        self._lock = threading.Lock()  # one request written to the pipe at a time
        self._answered = threading.Condition()
        self._answers: dict[int, str | None] = {}
        self._waiting: set[int] = set()
        self._process: subprocess.Popen[bytes] | _Forked | None = None
        self._ready = threading.Event()  # the running process has imported Trackio
        self._next_id = 0
        self._closed = False

    def start(self, *, fork: bool = True) -> None:
        """Start the store process now, so that it takes writes by the time they come. Forked
        when ``fork`` allows and this process runs no other thread (a lock another thread held
        would stay held in the child): Trackio is imported already, so it is ready at once.
        Otherwise afresh: it takes writes once it has imported Trackio, and what arrives
        meanwhile is written by the caller."""
        with self._lock:
            if self._closed:
                return
            fork = fork and threading.active_count() == 1
            if fork:
                import trackio.sqlite_storage  # noqa: F401 - the child finds it imported
            self._running(fork=fork)

    def ready(self, timeout_seconds: float) -> bool:
        """Start the process if it is not running and wait until it takes writes (True), at
        most ``timeout_seconds``."""
        with self._lock:
            if self._closed or self._running() is None:
                return False
        deadline = time.monotonic() + timeout_seconds
        while not self._ready.wait(min(0.05, max(0.0, deadline - time.monotonic()))):
            if self._given_up or time.monotonic() >= deadline:
                return False
        return True

    @property
    def given_up(self) -> bool:
        """True once no store process is started any more (one could not start, or ended
        before it took writes): the caller writes."""
        return self._given_up

    def lower_priority(self, nice: int) -> None:
        """Give the running store process CPU priority ``nice`` (a forked one keeps the nice it
        was forked with; one started later inherits the caller's)."""
        with self._lock:
            if self._process is not None:
                with contextlib.suppress(OSError):
                    os.setpriority(os.PRIO_PROCESS, self._process.pid, nice)

    def submit(self, entries: Sequence[Mapping[str, Any]]) -> int | None:
        """Hand the store Trackio log entries to write; returns the request's id, or None when
        the store cannot take them (closed, still starting, or the process cannot start or be
        written to: the caller writes them itself)."""
        if os.getpid() != self._pid:
            return None  # a forked child: the pipe and its answers are its parent's
        with self._lock:
            if self._closed:
                return None
            process = self._running()
            if process is None or process.stdin is None or not self._ready.is_set():
                return None
            payload = orjson.dumps(list(entries))
            self._next_id += 1
            request = self._next_id
            with self._answered:
                self._waiting.add(request)
            try:
                process.stdin.write(_HEADER.pack(request, len(payload)))
                process.stdin.write(payload)
                process.stdin.flush()
            except (OSError, ValueError):
                with self._answered:
                    self._waiting.discard(request)
                return None
            return request

    def wait(self, request: int, timeout_seconds: float) -> str | None:
        """None once request ``request`` is stored; else why not (:data:`TIMED_OUT` while it is
        still being written: ask again)."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        with self._answered:
            while request not in self._answers:
                if request not in self._waiting:
                    return "the store process never took it"
                left = deadline - time.monotonic()
                if left <= 0:
                    return TIMED_OUT
                self._answered.wait(left)
            self._waiting.discard(request)
            return self._answers.pop(request)

    def close(self, timeout_seconds: float = 30.0) -> None:
        """Let the process finish what it took and end; return once every request handed
        over is answered (killed past ``timeout_seconds``). The process then only ends (its
        pipe closed): that is not waited for, it writes nothing more. Idempotent."""
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        if not self._lock.acquire(timeout=max(0.0, timeout_seconds)):
            # A request is being handed to a store that takes nothing (its pipe full, its write
            # waiting out a lock): ended, the hand-over fails and lets go.
            stalled = self._process
            if stalled is not None:
                stalled.kill()
            self._lock.acquire()
        try:
            self._closed = True
            process, self._process = self._process, None
        finally:
            self._lock.release()
        if process is None:
            return
        with contextlib.suppress(OSError, ValueError):
            if process.stdin is not None:
                process.stdin.close()
        with self._answered:
            while self._waiting - self._answers.keys() and process.poll() is None:
                left = deadline - time.monotonic()
                if left <= 0:
                    process.kill()
                    return
                self._answered.wait(min(left, 0.05))

    def _running(self, fork: bool = False) -> subprocess.Popen[bytes] | _Forked | None:
        """The store process, started now when it is not running (lock held)."""
        if self._process is not None and self._process.poll() is None:
            return self._process
        if self._process is not None and not self._ready.is_set():
            # It ended before it took writes (its reader may not have said so yet): not again.
            self._give_up(f"it ended before it could write (exit {self._process.poll()})")
        if self._given_up:
            return None
        process: subprocess.Popen[bytes] | _Forked
        try:
            if fork:
                process = _Forked.start()
            else:
                process = subprocess.Popen(
                    # This file run as a script: the child imports Trackio and orjson, not this
                    # package (nor OpenTelemetry).
                    [sys.executable, os.path.abspath(__file__)],
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    env=self._environment,
                )
        except OSError as exc:
            self._give_up(repr(exc))
            return None
        _widen(process.stdin)
        self._process = process
        self._ready.clear()
        threading.Thread(
            target=self._read_answers, args=(process,), name="otel-trackio-store", daemon=True
        ).start()
        return process

    def _read_answers(self, process: subprocess.Popen[bytes] | _Forked) -> None:
        """Hand each answer to its waiter; when the process ends, fail what it left."""
        assert process.stdout is not None
        if process.stdout.readline() == READY:
            self._ready.set()
        else:
            code = process.wait()
            with self._lock:
                if not self._closed:
                    self._give_up(f"it ended before it could write (exit {code})")
        for line in process.stdout:
            number, _, outcome = line.decode("utf-8", "replace").rstrip("\n").partition(" ")
            with self._answered:
                ok = outcome == "ok"
                self._answers[int(number)] = None if ok else outcome.removeprefix("failed ")
                self._answered.notify_all()
        process.wait()
        with self._answered:
            for request in self._waiting - set(self._answers):
                self._answers[request] = f"the store process ended (exit {process.returncode})"
            self._answered.notify_all()

    def _give_up(self, why: str) -> None:
        """Start no store process again (lock held): its writes stay on the caller's thread.
        Said once."""
        if self._given_up:
            return
        self._given_up = True
        _logger.warning(
            "otel-trackio: the Trackio store process cannot start (%s); Trackio's writes stay "
            "in this process",
            why,
        )


class ProcessStores:
    """The store processes of this process, one per Trackio directory, shared by every engine
    that writes there (a store takes any run's entries): each starts when first asked for and
    ends when this process does (its pipe closes). A forked child asks for its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._stores: dict[tuple[int, Path], TraceStore] = {}

    def store_for(self, trackio_dir: Path, environment: Mapping[str, str]) -> TraceStore:
        """The running store of ``trackio_dir``, started now (afresh, never forked: this
        process may run threads whose locks a fork would copy held) if there is none yet."""
        key = (os.getpid(), trackio_dir)
        with self._lock:
            store = self._stores.get(key)
            if store is None:
                store = self._stores[key] = TraceStore(trackio_dir, environment=environment)
                store.start(fork=False)
            return store


PROCESS_STORES = ProcessStores()
"""This process's store processes (see :class:`ProcessStores`)."""


#: The request pipe's capacity asked for (Linux's most for an unprivileged process): a request
#: handed over while the store writes the one before waits in the pipe instead of in the caller.
PIPE_BYTES = 1 << 20


def _widen(pipe: IO[bytes] | None) -> None:
    """Ask for a request pipe of :data:`PIPE_BYTES` (Linux; elsewhere, or refused, it stays)."""
    size = getattr(fcntl, "F_SETPIPE_SZ", None)
    if pipe is not None and size is not None:
        with contextlib.suppress(OSError):
            fcntl.fcntl(pipe.fileno(), size, PIPE_BYTES)


class _Forked:
    """A store process forked from this one, with the part of :class:`subprocess.Popen`'s
    interface :class:`TraceStore` uses."""

    def __init__(self, pid: int, stdin: IO[bytes], stdout: IO[bytes]) -> None:
        self.pid = pid
        self.stdin = stdin
        self.stdout = stdout
        self.returncode: int | None = None
        self._reaping = threading.Lock()  # one waitpid at a time: the reader thread and close()

    @classmethod
    def start(cls) -> _Forked:
        """Fork the store (this process must run no other thread: a lock one held would stay
        held in the child)."""
        requests_read, requests_write = os.pipe()
        answers_read, answers_write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the store: serve until the parent closes its end or dies, then leave
            code = 1
            try:
                # Only the two pipes and stdio stay open: an inherited spool lock would outlive
                # the parent while this finishes a write.
                low, high = sorted((requests_read, answers_write))
                os.closerange(3, low)
                os.closerange(low + 1, high)
                os.closerange(high + 1, os.sysconf("SC_OPEN_MAX"))
                os.dup2(sys.stderr.fileno(), sys.stdout.fileno())  # prints go to stderr
                _serve_as_store_process(
                    os.fdopen(requests_read, "rb", buffering=0), os.fdopen(answers_write, "wb")
                )
                code = 0
            finally:
                os._exit(code)  # never the parent's atexit handlers or buffered output
        os.close(requests_read)
        os.close(answers_write)
        return cls(pid, os.fdopen(requests_write, "wb"), os.fdopen(answers_read, "rb"))

    def poll(self) -> int | None:
        with self._reaping:
            if self.returncode is None:
                try:
                    pid, status = os.waitpid(self.pid, os.WNOHANG)
                except ChildProcessError:  # reaped by someone else: its code is unknown
                    self.returncode = -1
                else:
                    if pid != 0:
                        self.returncode = os.waitstatus_to_exitcode(status)
            return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while (code := self.poll()) is None:
            if deadline is not None and time.monotonic() >= deadline:
                raise subprocess.TimeoutExpired(str(self.pid), timeout or 0.0)
            time.sleep(0.01)
        return code

    def kill(self) -> None:
        with contextlib.suppress(ProcessLookupError):
            os.kill(self.pid, signal.SIGKILL)


#: Decoded JSON of every kind a request holds (what the store's walk must leave as it is).
_DECODED_JSON_PROBE = (
    b'{"k":[0,-1,7,2.5,-0.0,1e300,"NaN","Infinity","","\xc3\xa9",null,true,false,'
    b'{"n":{"m":[],"o":{}}}],"":{}}'
)


def write_decoded_json_as_is(storage: Any) -> bool:
    """Let Trackio's storage write (``storage``: ``trackio.sqlite_storage``) store the values
    of this process's requests as they are, without its sanitising walk; True when done.

    Trackio runs that walk (``serialize_values``: NaN and infinities as text, NumPy scalars as
    numbers, keys as text) over every value it stores, a Python call per value. The store's
    values were decoded from JSON just before (``orjson`` never yields what the walk changes, and
    ``run.log`` walked them once already), so the walk only copies them. It is skipped when the
    installed Trackio's walk gives the probe of every JSON kind back unchanged; otherwise it
    stays. Only for a store process: it changes ``storage`` for the whole process."""
    walk = getattr(storage, "serialize_values", None)
    if not callable(walk):
        return False
    probe = orjson.loads(_DECODED_JSON_PROBE)
    try:
        unchanged = bool(walk(probe) == orjson.loads(_DECODED_JSON_PROBE))
    except Exception:  # noqa: BLE001 - a walk that fails here is not the known one: keep it
        return False
    if unchanged:
        storage.serialize_values = _as_is
    return unchanged


def _as_is(value: Any) -> Any:
    return value


def _serve_as_store_process(requests: IO[bytes], answers: IO[bytes]) -> None:
    """:func:`serve` in a store process (forked, or this file run as a script)."""
    import trackio.sqlite_storage

    write_decoded_json_as_is(trackio.sqlite_storage)
    serve(requests, answers)


#: Most requests waiting in the pipe the store takes into one write.
MAX_REQUESTS_PER_WRITE = 8


def _read_exactly(stream: IO[bytes], size: int) -> bytes | None:
    """``size`` bytes of an unbuffered pipe (a read gives what is there: read on); None when
    it ends first."""
    data = bytearray()
    while len(data) < size:
        chunk = stream.read(size - len(data))
        if not chunk:
            return None
        data += chunk
    return bytes(data)


def _read_request(requests: IO[bytes]) -> tuple[int, bytes] | None:
    """The next request (id, payload); None when the pipe ends (the parent closed it, or died
    mid-request: nothing of that one is written)."""
    header = _read_exactly(requests, _HEADER.size)
    if header is None:
        return None
    request, size = _HEADER.unpack(header)
    payload = _read_exactly(requests, size)
    return None if payload is None else (request, payload)


def _failed(exc: Exception) -> str:
    return "failed " + repr(exc).replace("\n", " ")


def serve(requests: IO[bytes], answers: IO[bytes]) -> None:
    """The child's loop until the requests end: take the next request, and the ones waiting
    behind it (up to :data:`MAX_REQUESTS_PER_WRITE`), write them with one
    ``SQLiteStorage.bulk_log`` per run, answer each. ``requests`` is unbuffered, so a request
    waiting shows on its file descriptor."""
    from trackio.sqlite_storage import SQLiteStorage

    answers.write(READY)
    answers.flush()
    while (first := _read_request(requests)) is not None:
        taken = [first]
        ended = False
        while len(taken) < MAX_REQUESTS_PER_WRITE and select.select([requests], [], [], 0)[0]:
            waiting = _read_request(requests)
            if waiting is None:
                ended = True  # the parent is gone: the requests taken are still written
                break
            taken.append(waiting)
        said: dict[int, str] = {}
        entries: list[dict[str, Any]] = []
        readable: list[int] = []
        for request, payload in taken:
            try:
                entries.extend(orjson.loads(payload))
                readable.append(request)
            except Exception as exc:  # noqa: BLE001 - every failure is an answer
                said[request] = _failed(exc)
        try:
            for call in bulk_log_calls(entries):
                SQLiteStorage.bulk_log(**call)
            outcome = "ok"
        except Exception as exc:  # noqa: BLE001 - every failure is an answer
            outcome = _failed(exc)
        said.update(dict.fromkeys(readable, outcome))
        answers.write("".join(f"{request} {said[request]}\n" for request, _ in taken).encode())
        answers.flush()
        if ended:
            return


if __name__ == "__main__":
    # Its parent decides when it ends: a Ctrl-C or a SIGTERM sent to the parent's whole process
    # group must not cut a write short. It ends once the parent closed its pipe (or died) and
    # every request taken is written.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    # Answers go to the real stdout alone: whatever prints (Trackio's notices) goes to stderr.
    _answers = os.fdopen(os.dup(sys.stdout.fileno()), "wb")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    _serve_as_store_process(open(sys.stdin.fileno(), "rb", buffering=0, closefd=False), _answers)
