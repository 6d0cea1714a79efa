"""The only module that talks to Trackio: finding or starting a run, logging to it, finishing it.

OTel exporters run on the SDK's worker threads, which do not see the ``ContextVar`` that
``trackio.log()`` reads, so everything here holds a :class:`trackio.Run` object and calls
``run.log(..., step=...)`` on it.

Run rules (shared by the span and the metric exporter):

* an explicit ``run`` wins;
* else the run active in the thread that builds the exporter, when it matches the requested
  project (and name, if one was given) or when no project was requested;
* else a run this package already started in this process for the same project and name
  (so a span exporter and a metric exporter share one run);
* else a new run through ``trackio.init``. When a *different* user run is active in this thread,
  ``trackio.init`` is called on a helper thread, because calling it here would finish that run.

A run started here is finished when the last exporter holding it releases it; a run that was
borrowed is never finished.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import trackio
from trackio import context_vars

_logger = logging.getLogger("otel_trackio")

# The payload type Trackio's storage recognises as a trace.
_TRACE_TYPE: str = trackio.Trace.TYPE

_registry_lock = threading.Lock()
# Trackio's warn-once keys for local writes that failed (it warns and drops the batch).
_WRITE_FAILURE_PREFIXES = ("write-logs", "local-sender-loop")
# (project, requested name) -> lease shared by every exporter of this process asking for it.
_owned: dict[tuple[str, str | None], _OwnedRun] = {}


class _OwnedRun:
    """A run this package started, with the number of exporters holding it."""

    def __init__(self, run: trackio.Run, key: tuple[str, str | None]) -> None:
        self.run = run
        self.key = key
        self.holders = 0
        self.finished = False


class TrackioSink:
    """A held Trackio run, and the one place that calls ``run.log`` / ``run.finish``.

    Build it on the user's thread (it may need that thread's active run); use it from any thread.
    """

    def __init__(
        self,
        project: str | None = None,
        name: str | None = None,
        *,
        run: trackio.Run | None = None,
        **trackio_init_kwargs: Any,
    ) -> None:
        self._owned: _OwnedRun | None = None
        self._released = False
        # Trackio's failed-write warnings seen by the last flush() (empty when it went well).
        self.last_failures: set[str] = set()
        self._lock = threading.Lock()
        self.run: trackio.Run = self._resolve(project, name, run, trackio_init_kwargs)

    @property
    def project(self) -> str:
        """The Trackio project the held run logs into."""
        return str(self.run.project)

    @property
    def run_name(self) -> str:
        """The held run's name."""
        return str(self.run.name)

    @property
    def owns_run(self) -> bool:
        """True when this package started the run (and will finish it)."""
        return self._owned is not None

    def _resolve(
        self,
        project: str | None,
        name: str | None,
        run: trackio.Run | None,
        init_kwargs: dict[str, Any],
    ) -> trackio.Run:
        if run is not None:
            return run
        active = context_vars.current_run.get()
        if active is not None and _matches(active, project, name):
            return active
        if project is None:
            raise ValueError(
                "otel-trackio needs a Trackio project: pass project=..., pass run=..., "
                "or call trackio.init() before creating the exporter."
            )
        key = (project, name)
        with _registry_lock:
            owned = _owned.get(key)
            if owned is None or owned.finished:
                owned = _OwnedRun(_start_run(project, name, init_kwargs, active), key)
                _owned[key] = owned
            owned.holders += 1
        self._owned = owned
        return owned.run

    def log(self, metrics: Mapping[str, Any], step: int) -> None:
        """Log one Trackio entry at ``step`` on the held run. Raises what ``run.log`` raises."""
        self.run.log(dict(metrics), step=step)

    def log_traces(self, key: str, traces: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log trace dicts (messages, metadata, spans) as one list of Traces at ``step``.

        They go in as Trackio's stored trace payload (``{"_type": Trace.TYPE, ...}``, what
        ``Trace._to_dict`` makes) rather than ``trackio.Trace`` objects: our dicts are already
        plain JSON with no media, and skipping Trackio's deep copy of every trace makes the whole
        export about 15% cheaper. ``tests/test_exporter.py`` checks they are stored as Traces.
        """
        if not traces:
            return
        payloads = [
            {
                "_type": _TRACE_TYPE,
                "messages": t.get("messages") or [],
                "metadata": t.get("metadata") or {},
                "spans": t.get("spans") or [],
            }
            for t in traces
        ]
        self.run.log({key: payloads}, step=step)

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Write what the held run has queued to Trackio's local storage now, on this thread.

        ``run.log`` only queues: Trackio's sender thread writes every 0.5 s, so a process killed
        right after an export would lose the last half second. This makes ``force_flush``
        durable. Returns False when Trackio has reported a failed write for this run (disk full,
        read-only folder: Trackio only warns about it, see ``last_failures``) or the flush timed
        out. Remote runs and
        runs without these internals are left to Trackio (True).
        """
        run = self.run
        flush = getattr(run, "_flush_queues_inline", None)
        lock = getattr(run, "_client_lock", None)
        if not getattr(run, "_is_local", False) or flush is None or lock is None:
            return True
        if not lock.acquire(timeout=max(0.0, timeout_seconds)):
            return False
        try:
            flush()
        finally:
            lock.release()
        self.last_failures = self._take_storage_failures()
        return not self.last_failures

    def _take_storage_failures(self) -> set[str]:
        """Trackio's warn-once keys of failed local writes, removed so the next one shows too."""
        failures = getattr(self.run, "_warned_failures", None)
        if not failures:
            return set()
        found = {key for key in set(failures) if key.startswith(_WRITE_FAILURE_PREFIXES)}
        for key in found:
            failures.discard(key)
        return found

    def next_step(self) -> int:
        """The step Trackio would use for a log call without ``step=``."""
        return int(getattr(self.run, "_next_step", 0) or 0)

    @staticmethod
    def reserved_keys() -> frozenset[str]:
        """Metric keys ``Run.log`` renames to ``__<key>`` (keys starting with ``__`` are too)."""
        return frozenset(trackio.utils.RESERVED_KEYS)

    @staticmethod
    def histogram(counts: Sequence[int], edges: Sequence[float]) -> trackio.Histogram:
        """A ``trackio.Histogram`` from precomputed bucket counts and their ``len + 1`` edges."""
        return trackio.Histogram(np_histogram=(list(counts), list(edges)))

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
        with _registry_lock:
            owned.holders -= 1
            last = owned.holders <= 0 and not owned.finished
            if last:
                owned.finished = True
                if _owned.get(owned.key) is owned:
                    del _owned[owned.key]
        if last:
            try:
                owned.run.finish()
            except Exception as exc:  # noqa: BLE001 - finishing must not crash the user's program
                _logger.warning("otel-trackio: finishing Trackio run failed: %s", exc)
            if context_vars.current_run.get() is owned.run:
                context_vars.current_run.set(None)


def _matches(run: trackio.Run, project: str | None, name: str | None) -> bool:
    if project is None:
        return name is None or run.name == name
    return run.project == project and (name is None or run.name == name)


def _start_run(
    project: str, name: str | None, init_kwargs: dict[str, Any], active: trackio.Run | None
) -> trackio.Run:
    if active is None:
        # No user run to disturb: start it here, so the user's own trackio.log() lands in it too.
        return trackio.init(project=project, name=name, **init_kwargs)
    # trackio.init() finishes the run active in the calling thread: start ours on a thread that
    # has none, and leave the user's run untouched.
    result: list[trackio.Run] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            result.append(trackio.init(project=project, name=name, **init_kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=start, name="otel-trackio-init", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]
