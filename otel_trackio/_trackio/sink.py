"""A held Trackio run, and the one place that calls ``run.log`` / ``run.finish``.

OTel exporters run on the SDK's worker threads, which do not see the ``ContextVar`` that
``trackio.log()`` reads, so everything here holds a :class:`trackio.Run` object and calls
``run.log(..., step=...)`` on it. A run started here is finished when the last holder releases it;
a run that was borrowed is never finished.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from otel_trackio._plan import RunOpener, choose_opener
from otel_trackio._trackio.installed import (
    RunLike,
    active_run,
    forget_active_run,
    is_remote,
    lost,
    module,
    reserved_keys,
    run_id,
)
from otel_trackio._trackio.payloads import as_table, payloads_as_stored, trace_entries
from otel_trackio._trackio.runs import (
    OWNED,
    REGISTRY_LOCK,
    OpenedElsewhere,
    OwnedRun,
    finished,
    held_run,
    seen,
    start_run,
)
from otel_trackio._trackio.store import TIMED_OUT, TraceStore

_logger = logging.getLogger("otel_trackio")
# Trackio's warn-once keys for local writes that failed (it warns and drops the batch).
_WRITE_FAILURE_PREFIXES = ("write-logs", "local-sender-loop")


class TrackioSink:
    """A held Trackio run, and the one place that calls ``run.log`` / ``run.finish``.

    Build it on the user's thread (it may need that thread's active run); use it from any thread.
    Built by hand it finds its run by the plan's rule (:func:`~otel_trackio._plan.choose_opener`);
    a builder holds the run its plan chose (:meth:`planned`). With ``defer=True``
    (``offload=True``: a writer process logs) and neither ``run`` given nor a
    matching run active, no run is opened here: the writer process opens it and reports it
    (:meth:`opened_elsewhere`), and ``run`` opens it here only when something asks for it.
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        run: RunLike | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        defer: bool = False,
    ) -> None:
        self._start_holding(None, None)
        active = active_run()
        chosen = choose_opener(  # built outside a plan: the plan's rule, asked here
            project,
            name,
            given=seen(run),
            active=seen(active),
            held=held_run(project, name),
            deferred=defer,
        )
        self._hold(chosen, project, name, run, active, dict(init_kwargs or {}), defer)

    @classmethod
    def planned(
        cls,
        opener: RunOpener,
        project: str | None,
        name: str | None,
        *,
        run: RunLike | None = None,
        init_kwargs: Mapping[str, Any] | None = None,
        defer: bool = False,
    ) -> TrackioSink:
        """The run a plan chose (:attr:`~otel_trackio._plan.RunPlan.opener`), held: built on
        the thread the plan observed (its active run is the one the plan saw)."""
        sink = cls.__new__(cls)
        sink._start_holding(None, None)
        sink._hold(opener, project, name, run, active_run(), dict(init_kwargs or {}), defer)
        return sink

    def _start_holding(self, owned: OwnedRun | None, borrowed: RunLike | None) -> None:
        """This holder's own state, before it holds ``owned`` or ``borrowed`` (if any)."""
        self._owned: OwnedRun | None = owned
        self._borrowed: RunLike | None = borrowed
        self._released = False
        # Trackio's failed-write warnings seen by the last flush() (empty when it went well).
        self.last_failures: set[str] = set()
        self._lock = threading.Lock()
        self._store: TraceStore | None = None  # where entries are written behind (if anywhere)
        self._behind: deque[int] = deque()  # the store's requests not yet answered, oldest first

    @property
    def run(self) -> RunLike:
        """The held ``trackio.Run`` (a deferred run is opened here now, joining the writer's)."""
        if self._borrowed is not None:
            return self._borrowed
        assert self._owned is not None
        return self._owned.ensure_run()

    @property
    def opened(self) -> bool:
        """True when the run is open in this process (False: deferred to a writer process)."""
        return self._borrowed is not None or (
            self._owned is not None and self._owned.run is not None
        )

    @property
    def project(self) -> str:
        """The Trackio project the held run logs into."""
        if not self.opened:
            assert self._owned is not None
            return self._owned.key[0]
        return str(self.run.project)

    @property
    def run_name(self) -> str:
        """The held run's name (of a deferred, unnamed run: once its writer reported it)."""
        if not self.opened:
            assert self._owned is not None
            elsewhere = self._owned.elsewhere
            return elsewhere.name if elsewhere is not None else self._owned.key[1] or ""
        return str(self.run.name)

    @property
    def requested_name(self) -> str | None:
        """The run name asked for (None: Trackio picks one)."""
        if self._owned is not None:
            return self._owned.key[1]
        return self.run_name

    @property
    def run_id(self) -> str | None:
        """Trackio's id of the held run, if known (a deferred run's: as its writer reported)."""
        if not self.opened:
            assert self._owned is not None
            elsewhere = self._owned.elsewhere
            return elsewhere.id if elsewhere is not None else None
        return run_id(self.run)

    def share(self) -> TrackioSink:
        """Another holder of the same run (released on its own; the run is finished, when this
        package started it, once every holder released it)."""
        other = TrackioSink.__new__(TrackioSink)
        other._start_holding(self._owned, self._borrowed)
        if self._owned is not None:
            with REGISTRY_LOCK:
                self._owned.holders += 1
        return other

    def opened_elsewhere(self, opened: OpenedElsewhere) -> None:
        """Record the run a writer process opened for this deferred sink (what ``run`` joins)."""
        if self._owned is not None and self._owned.run is None:
            self._owned.elsewhere = opened

    def _hold(
        self,
        opener: RunOpener,
        project: str | None,
        name: str | None,
        run: RunLike | None,
        active: RunLike | None,
        init_kwargs: dict[str, Any],
        defer: bool,
    ) -> None:
        """Hold the run ``opener`` says (:func:`~otel_trackio._plan.choose_opener` decided it):
        borrow the given or active run, or hold this package's run of ``project``/``name`` —
        one it holds already, else one started here, or (``defer``) left to the writer
        process."""
        if opener is RunOpener.GIVEN:
            self._borrowed = run
            return
        if opener is RunOpener.ACTIVE:
            self._borrowed = active
            return
        assert project is not None  # choose_opener refused a run with no project
        key = (project, name)
        with REGISTRY_LOCK:
            owned = None
            if opener is RunOpener.SHARED and active is not None:
                owned = next((o for o in OWNED.values() if o.run is active), None)
            if owned is None or owned.finished:
                owned = OWNED.get(key)
            if owned is None or owned.finished:  # the first holder (or the last one let go)
                started = None if defer else start_run(project, name, init_kwargs, active)
                owned = OwnedRun(started, key, init_kwargs)
                OWNED[key] = owned
            owned.holders += 1
        self._owned = owned
        if not defer:
            owned.ensure_run()  # a run its writer opened that this process now needs: joined

    # -- logging ----------------------------------------------------------------------------

    def log(self, values: Mapping[str, Any], step: int) -> None:
        """Log one Trackio entry at ``step`` on the held run. Raises what ``run.log`` raises."""
        self.run.log(dict(values), step=step)

    def log_traces(
        self,
        key: str,
        traces: Sequence[Mapping[str, Any]],
        step: int,
        *,
        table: tuple[str, Sequence[Mapping[str, Any]]] | None = None,
    ) -> None:
        """Log trace dicts (messages, metadata, spans) as one list of Traces at ``step``; with
        ``table`` (a key and plain rows), that table too, in the same log entry."""
        if traces:
            run: Any = self.run
            entries = trace_entries(traces, run.project, run.name, step, remote=is_remote(run))
            entry: dict[str, Any] = {key: entries}
            if table is not None and table[1]:
                entry[table[0]] = as_table(table[1])
            elif self._queue_as_written(key, entry, step):
                return
            self.run.log(entry, step=step)

    def _queue_as_written(self, key: str, entry: dict[str, Any], step: int) -> bool:
        """Queue a log entry of Traces on the held run as ``run.log`` queues one, skipping the
        deep copy ``run.log`` first makes of every value (our Trace payloads are fresh JSON data
        that nothing changes later; storage serialises them as it writes). Every entry queued
        until the next :meth:`flush` is then written in one storage write: Trackio opens its
        database twice per write, whatever it holds. The run's config goes with its first
        entry, as ``run.log`` sends it. False when ``run.log`` must take it: a remote run, a
        reserved key, Traces logged as ``trackio.Trace`` objects, or a Trackio without these
        members."""
        run: Any = self.run
        queue_lock: Any = getattr(run, "_queue_lock", None)
        next_step = getattr(run, "_next_step", None)
        config_logged = getattr(run, "_config_logged", None)
        json_safe = getattr(getattr(module(), "utils", None), "to_json_safe", None)
        if (
            not isinstance(getattr(run, "_queued_logs", None), list)
            or queue_lock is None
            or json_safe is None
            or not isinstance(next_step, int)
            or not isinstance(config_logged, bool)
            or not payloads_as_stored()
            or key in reserved_keys()
            or key.startswith("__")
            or is_remote(run)
        ):
            return False
        run._next_step = max(run._next_step, step + 1)
        with queue_lock:  # Trackio's writer thread swaps the list for a new one as it takes it
            config = None
            if not run._config_logged and run.config:
                config = json_safe(run.config)
                run._config_logged = True
            run._queued_logs.append(
                {
                    "project": run.project,
                    "run": run.name,
                    "run_id": run_id(run),
                    "metrics": entry,
                    "step": step,
                    "config": config,
                    "log_id": uuid.uuid4().hex,
                }
            )
        return True

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log plain rows (the same columns, in order) as one ``trackio.Table`` at ``step``:
        the Media & Tables tab shows it under ``key``, one column per row key."""
        if rows:
            self.run.log({key: as_table(rows)}, step=step)

    def write_behind_to(self, store: TraceStore) -> None:
        """Write this holder's entries behind, in ``store``'s process (see :meth:`write_behind`)."""
        self._store = store

    def write_behind(self) -> bool:
        """Hand what the held run has queued to the store process and return at once: it is
        durable once :meth:`settle_oldest` (or :meth:`settle`, or :meth:`flush`) says so; the
        store takes the requests in order. False when it cannot be handed over (no store, a run
        it cannot write, Trackio's writer thread busy or holding what was queued, or a write
        of Trackio's that failed waiting to be reported by :meth:`flush`): then :meth:`flush`
        writes it here."""
        store = self._store
        if store is None:
            return False
        run: Any = self.run
        client_lock: Any = getattr(run, "_client_lock", None)
        queue_lock: Any = getattr(run, "_queue_lock", None)
        if (
            client_lock is None
            or queue_lock is None
            or getattr(run, "_storage_mode", None) != "sqlite"
            or is_remote(run)
            or not isinstance(getattr(run, "_warned_failures", None), set)
        ):
            return False
        # Under the client lock, whatever Trackio's own thread took from the queue is written,
        # and a failure of it shows: flush() must report it, so nothing is handed over then.
        if not client_lock.acquire(blocking=False):
            return False
        try:
            if any(key.startswith(_WRITE_FAILURE_PREFIXES) for key in run._warned_failures):
                return False
            with queue_lock:
                entries, run._queued_logs = run._queued_logs, []
        finally:
            client_lock.release()
        if not entries:  # Trackio's own thread took them: flush() waits for its write
            return False
        request = store.submit(entries)
        if request is None:
            with queue_lock:  # back to the front of the queue: flush() writes them here
                run._queued_logs[:0] = entries
            return False
        self._behind.append(request)
        return True

    def settle_oldest(self, timeout_seconds: float) -> bool | None:
        """Wait for the oldest write behind, at most ``timeout_seconds``: True once it is
        stored (or when none is left), False when it failed (``last_failures`` says why: what
        it held is not stored, or only part of it), None while it is still being written."""
        self.last_failures = set()
        if not self._behind or self._store is None:
            return True
        outcome = self._store.wait(self._behind[0], timeout_seconds)
        if outcome == TIMED_OUT:
            return None
        self._behind.popleft()
        if outcome is not None:
            self.last_failures = {f"write-logs-behind: {outcome}"}
            return False
        return True

    def settle(self, timeout_seconds: float = 30.0) -> bool:
        """Wait for every write behind. False when one failed (``last_failures`` says why) or
        one is still going on after ``timeout_seconds``."""
        deadline = time.monotonic() + timeout_seconds
        failures: set[str] = set()
        while self._behind:
            outcome = self.settle_oldest(max(0.0, deadline - time.monotonic()))
            failures |= self.last_failures
            if outcome is None:
                break
        self.last_failures = failures
        return not self._behind and not failures

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Write what the held run has queued to Trackio's local storage now, on this thread.

        ``run.log`` only queues: Trackio's sender thread writes every 0.5 s, so a process killed
        right after an export would lose the last half second. Returns False when Trackio
        reported a failed write for this run (disk full, read-only folder: Trackio only warns,
        see ``last_failures``) or the flush timed out. Remote runs are left to Trackio (True).
        Without the Trackio internals this needs, says once that exports are no longer written
        before they return, and returns True.
        """
        started = time.monotonic()
        if not self.settle(timeout_seconds):
            return False
        timeout_seconds -= time.monotonic() - started
        run = self.run
        if is_remote(run):
            return True  # a Trackio server or Space: Trackio's client sends it
        flush: Callable[[], None] | None = getattr(run, "_flush_queues_inline", None)
        lock: Any = getattr(run, "_client_lock", None)
        if flush is None or lock is None:
            lost(
                "Run._flush_queues_inline / Run._client_lock",
                "exports are no longer written to storage before export() returns; Trackio's "
                "own thread writes them within about 0.5 s, so a crash can lose that much",
            )
            return True
        self.last_failures = set()
        if not lock.acquire(timeout=max(0.0, timeout_seconds)):
            return False  # timed out: what was logged is still queued in Trackio
        try:
            flush()
        finally:
            lock.release()
        self.last_failures = self._take_storage_failures()
        return not self.last_failures

    def _take_storage_failures(self) -> set[str]:
        """Trackio's warn-once keys of failed local writes, removed so the next one shows too."""
        failures: set[str] | None = getattr(self.run, "_warned_failures", None)
        if failures is None:
            lost(
                "Run._warned_failures",
                "a failed write to Trackio storage (disk full, read-only folder) is no longer "
                "detected: it shows only as Trackio's own warning",
            )
            return set()
        found = {key for key in set(failures) if key.startswith(_WRITE_FAILURE_PREFIXES)}
        for key in found:
            failures.discard(key)
        return found

    def next_step(self) -> int | None:
        """The step Trackio would use for a log call without ``step=`` (None when unknown)."""
        step = getattr(self.run, "_next_step", None)
        if step is None:
            lost(
                "Run._next_step",
                "metrics without a step attribute follow the metric exporter's own counter, "
                "not the run's step clock",
            )
            return None
        return int(step)

    def release(self) -> None:
        """Drop this holder; finish the run when this package started it and nobody else holds it.

        Idempotent. Never raises: a failure to finish is logged.
        """
        with self._lock:
            if self._released:
                return
            self._released = True
        owned = self._owned
        if owned is None:
            return
        with REGISTRY_LOCK:
            owned.holders -= 1
            last = owned.holders <= 0 and not owned.finished
            if last:
                owned.finished = True
                if OWNED.get(owned.key) is owned:
                    del OWNED[owned.key]
        run = owned.run
        if not last or run is None:
            return  # still held; or deferred and never opened here (its writer finishes it)
        if finished(run):
            # Trackio's own exit hook finished it first (zero code: the SDK shuts the exporter
            # down after it): finishing again would only print "Run finished" twice.
            forget_active_run(run)
            return
        try:
            run.finish()
        except Exception as exc:  # noqa: BLE001 - finishing must not crash the user's program
            _logger.warning("otel-trackio: finishing Trackio run failed: %s", exc)
        forget_active_run(run)
