"""Trackio behind one door: the only module that imports ``trackio`` for logging, and the only one
that names its private members.

What it does: find or start a run, log Traces and scalars to it with an explicit ``step=``, make
what was logged durable, finish the run. OTel exporters run on the SDK's worker threads, which do
not see the ``ContextVar`` that ``trackio.log()`` reads, so everything here holds a
:class:`trackio.Run` object and calls ``run.log(..., step=...)`` on it.

Trackio's private surface used, and what is lost without it (each missing piece is reported once,
with one warning, and Trackio's public behaviour is used instead):

- ``Run._flush_queues_inline``, ``Run._client_lock``, ``Run._is_local``: what was logged is
  written before ``export()`` returns (durable exports). Without: Trackio's own thread writes it
  within about 0.5 s.
- ``Run._warned_failures``: failed storage writes (disk full, read-only) are detected and counted
  as lost samples. Without: they stay Trackio's own warnings.
- ``Run._next_step``: step-less metrics follow the run's own step clock. Without: they follow the
  metric exporter's own counter.
- ``trackio.context_vars.current_run``: the run active in the user's thread is reused. Without:
  ``project`` or ``run=`` must be given.
- ``trackio.utils.RESERVED_KEYS``: series Trackio would rename are prefixed ``otel/``. Without:
  the list of Trackio 0.43.
- ``Trace._to_dict``'s payload shape: Traces are logged as stored payload dicts (no deep copy).
  Without: they are logged as ``trackio.Trace`` objects (slower).

Trackio is imported only when a run is opened (or read) in this process: with ``offload=True``
the writer process opens the run (:meth:`TrackioSink.deferred`), so a rollout process that never
imports ``trackio`` itself never loads it — its ~55k objects would make every full garbage
collection on the rollout's event loop slower (``bench/bench_asyncio.py``).

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

import functools
import logging
import os
import sys
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, TypeVar, runtime_checkable

from otel_trackio._core.names import folder_name
from otel_trackio._core.samples import stored_span_key
from otel_trackio._engine.warn import Warnings

_logger = logging.getLogger("otel_trackio")
_T = TypeVar("_T")

#: Trackio 0.43's ``utils.RESERVED_KEYS``, used only when the installed Trackio lacks the list.
FALLBACK_RESERVED_KEYS: frozenset[str] = frozenset(
    {"project", "run", "timestamp", "step", "time", "metrics"}
)
# Trackio's warn-once keys for local writes that failed (it warns and drops the batch).
_WRITE_FAILURE_PREFIXES = ("write-logs", "local-sender-loop")


@runtime_checkable
class RunLike(Protocol):
    """What otel-trackio needs of a ``trackio.Run``: its public ``log`` and ``finish``."""

    project: str
    name: str

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Queue one entry of values at ``step``."""

    def finish(self) -> None:
        """Write what is queued and close the run."""


# -- what the installed Trackio offers, detected once -------------------------------------------

_missing = Warnings()  # once per process and missing piece


def _trackio() -> ModuleType:
    """The ``trackio`` module, imported on first use (see the module docstring for why)."""
    import trackio

    return trackio


def _lost(what: str, message: str) -> None:
    """Say once per process what guarantee is lost because Trackio lacks ``what``."""
    version = getattr(_trackio(), "__version__", "?")
    _missing(what, f"the installed Trackio {version} lacks {what}: {message}")


@functools.cache
def _current_run_var() -> Any:
    try:
        from trackio import context_vars
    except ImportError:
        return None
    return getattr(context_vars, "current_run", None)


def active_run() -> RunLike | None:
    """The Trackio run active in the calling thread (``trackio.init`` sets it), if any. A process
    that never imported ``trackio`` has none, and this does not import it."""
    if "trackio" not in sys.modules:
        return None
    variable = _current_run_var()
    if variable is None:
        _lost(
            "trackio.context_vars.current_run",
            "an active run cannot be reused; pass project=... or run=...",
        )
        return None
    run: RunLike | None = variable.get()
    return run


def _forget_active_run(run: RunLike) -> None:
    variable = _current_run_var()
    if variable is not None and variable.get() is run:
        variable.set(None)


def init_accepts(keyword: str) -> bool:
    """Whether the installed ``trackio.init`` takes ``keyword`` (False when Trackio is not
    installed or its signature cannot be read)."""
    try:
        import inspect

        return keyword in inspect.signature(_trackio().init).parameters
    except (ImportError, TypeError, ValueError):
        return False


def reserved_keys() -> frozenset[str]:
    """Metric keys ``Run.log`` renames to ``__<key>`` (keys starting with ``__`` are too)."""
    keys = getattr(getattr(_trackio(), "utils", None), "RESERVED_KEYS", None)
    if keys is None:
        _lost("trackio.utils.RESERVED_KEYS", "using the reserved metric names of Trackio 0.43")
        return FALLBACK_RESERVED_KEYS
    return frozenset(keys)


def trackio_dir() -> Path:
    """Trackio's folder: ``trackio.utils.TRACKIO_DIR`` once Trackio is imported; before, the same
    rule without importing it (``TRACKIO_DIR``, else ``$HF_HOME/trackio``)."""
    if "trackio" not in sys.modules:
        return default_trackio_dir()
    folder = getattr(getattr(_trackio(), "utils", None), "TRACKIO_DIR", None)
    if folder is None:
        _lost("trackio.utils.TRACKIO_DIR", "spools default to $HF_HOME/trackio")
        return default_trackio_dir()
    return Path(folder)


def default_trackio_dir() -> Path:
    """The folder Trackio 0.43 picks at import: ``TRACKIO_DIR``, else ``trackio`` in the Hugging
    Face home (``huggingface_hub``'s ``HF_HOME``, a light import)."""
    folder = os.environ.get("TRACKIO_DIR")
    if folder:
        return Path(folder)
    try:
        from huggingface_hub.constants import HF_HOME
    except ImportError:  # pragma: no cover - trackio depends on huggingface_hub
        HF_HOME = os.path.expanduser("~/.cache/huggingface")
    return Path(HF_HOME) / "trackio"


def is_remote(run: RunLike) -> bool:
    """True when ``run`` logs to a Trackio server or Space rather than local storage."""
    return getattr(run, "_is_local", True) is False


def run_id(run: RunLike) -> str | None:
    """Trackio's id of ``run`` (its name can be shared by several runs), if it has one."""
    value = getattr(run, "id", None)
    return str(value) if value is not None else None


def join_run(run: RunLike, parent_run_id: str | None) -> None:
    """Make ``run`` (just opened by ``trackio.init`` in a writer process) log into the run of id
    ``parent_run_id`` opened by the rollout process.

    ``trackio.init(resume="allow")`` finds a run by name only once it was written to storage;
    before that it starts a second run of the same name, and the two processes' data would be
    split between them. Trackio has no public way to open a run by id, so the writer's ``Run``
    takes the rollout process's id before it logs anything.
    """
    if parent_run_id is None or run_id(run) == parent_run_id:
        return
    if not hasattr(run, "id"):
        _lost(
            "Run.id",
            "an offload writer may log into a second run of the same name until the first "
            "one is written",
        )
        return
    run.id = parent_run_id


def histogram(counts: Sequence[int], edges: Sequence[float]) -> Any:
    """A ``trackio.Histogram`` from precomputed bucket counts and their ``len + 1`` edges."""
    return _trackio().Histogram(np_histogram=(list(counts), list(edges)))


def _payload(trace: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": _trackio().Trace.TYPE,
        "messages": trace.get("messages") or [],
        "metadata": trace.get("metadata") or {},
        "spans": trace.get("spans") or [],
    }


@functools.cache
def _trace_as_payload() -> bool:
    """True when our payload dict is what ``trackio.Trace._to_dict`` stores for the same Trace."""
    sample: dict[str, Any] = {
        "messages": [{"role": "user", "content": "q"}],
        "metadata": {"step": 1},
        "spans": [{"id": "1", "name": "n", "kind": "span"}],
    }
    try:
        stored = (
            _trackio()
            .Trace(sample["messages"], metadata=sample["metadata"], spans=sample["spans"])
            ._to_dict("p", "r", 0)
        )
    except Exception:  # noqa: BLE001 - any difference means: use the public class
        return False
    return bool(stored == _payload(sample))


def trace_entries(traces: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Trace dicts (messages, metadata, spans) as what ``run.log`` takes for a list of Traces.

    They go in as Trackio's stored trace payload (``{"_type": Trace.TYPE, ...}``, what
    ``Trace._to_dict`` makes) rather than ``trackio.Trace`` objects: our dicts are already plain
    JSON with no media, and skipping Trackio's deep copy of every trace makes the whole export
    about 15% cheaper. When the installed Trackio stores Traces differently, ``trackio.Trace``
    objects are logged instead.
    """
    if _trace_as_payload():
        return [_payload(t) for t in traces]
    _lost("Trace._to_dict in the shape of 0.43", "Traces are logged as trackio.Trace objects")
    trackio = _trackio()
    return [
        trackio.Trace(
            messages=list(t.get("messages") or []),
            metadata=dict(t.get("metadata") or {}),
            spans=list(t.get("spans") or []),
        )
        for t in traces
    ]


def _table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Plain rows as a ``trackio.Table`` (its columns: the first row's keys, in order)."""
    data: Any = [dict(row) for row in rows]  # Trackio takes dict rows (typed as lists)
    return _trackio().Table(data=data)


# -- runs this package started, shared per (project, name) ------------------------------------

_registry_lock = threading.Lock()


@dataclass(frozen=True)
class OpenedElsewhere:
    """A run another process opened for this one (the offload writer): its name and Trackio id."""

    name: str
    id: str | None = None


class _OwnedRun:
    """A run this package started (or left to a writer process to open: ``run`` None until
    something here needs it), with the number of exporters holding it."""

    def __init__(
        self,
        run: RunLike | None,
        key: tuple[str, str | None],
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.key = key
        self.init_kwargs = dict(init_kwargs or {})
        self.elsewhere: OpenedElsewhere | None = None
        self.holders = 0
        self.finished = False
        self._opening = threading.Lock()

    def ensure_run(self) -> RunLike:
        """The run in this process, opened now when so far only a writer process had it open
        (then resumed by the name it reported, and joined by its id)."""
        with self._opening:
            if self.run is None:
                project, name = self.key
                kwargs = dict(self.init_kwargs)
                elsewhere = self.elsewhere
                if elsewhere is not None:
                    name = elsewhere.name
                    kwargs["resume"] = "allow"
                run = _start_run(project, name, kwargs, active_run())
                if elsewhere is not None:
                    join_run(run, elsewhere.id)
                self.run = run
            return self.run


# (project, requested name) -> lease shared by every exporter of this process asking for it.
_owned: dict[tuple[str, str | None], _OwnedRun] = {}


class TrackioSink:
    """A held Trackio run, and the one place that calls ``run.log`` / ``run.finish``.

    Build it on the user's thread (it may need that thread's active run); use it from any thread.
    With ``defer=True`` (``offload=True``: a writer process logs) and neither ``run`` given nor a
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
        self._resolve(project, name, run, dict(init_kwargs or {}), defer)

    def _start_holding(self, owned: _OwnedRun | None, borrowed: RunLike | None) -> None:
        """This holder's own state, before it holds ``owned`` or ``borrowed`` (if any)."""
        self._owned: _OwnedRun | None = owned
        self._borrowed: RunLike | None = borrowed
        self._released = False
        # Trackio's failed-write warnings seen by the last flush() (empty when it went well).
        self.last_failures: set[str] = set()
        self._lock = threading.Lock()

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
            with _registry_lock:
                self._owned.holders += 1
        return other

    def opened_elsewhere(self, opened: OpenedElsewhere) -> None:
        """Record the run a writer process opened for this deferred sink (what ``run`` joins)."""
        if self._owned is not None and self._owned.run is None:
            self._owned.elsewhere = opened

    def _resolve(
        self,
        project: str | None,
        name: str | None,
        run: RunLike | None,
        init_kwargs: dict[str, Any],
        defer: bool,
    ) -> None:
        if run is not None:
            self._borrowed = run
            return
        active = active_run()
        if active is not None and _matches(active, project, name):
            with _registry_lock:  # a run this package started here: hold it, don't borrow it
                owned = next((o for o in _owned.values() if o.run is active), None)
                if owned is not None and not owned.finished:
                    owned.holders += 1
                    self._owned = owned
                    return
            self._borrowed = active
            return
        if project is None:
            raise ValueError(
                "otel-trackio needs a Trackio project: pass project=..., pass run=..., "
                "or call trackio.init() before creating the exporter."
            )
        key = (project, name)
        with _registry_lock:
            owned = _owned.get(key)
            if owned is None or owned.finished:
                started = None if defer else _start_run(project, name, init_kwargs, active)
                owned = _OwnedRun(started, key, init_kwargs)
                _owned[key] = owned
            owned.holders += 1
        self._owned = owned
        if not defer:
            owned.ensure_run()  # a deferred run this process now needs: opened (joined) here

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
            entry: dict[str, Any] = {key: trace_entries(traces)}
            if table is not None and table[1]:
                entry[table[0]] = _table(table[1])
            self.run.log(entry, step=step)

    def log_table(self, key: str, rows: Sequence[Mapping[str, Any]], step: int) -> None:
        """Log plain rows (the same columns, in order) as one ``trackio.Table`` at ``step``:
        the Media & Tables tab shows it under ``key``, one column per row key."""
        if rows:
            self.run.log({key: _table(rows)}, step=step)

    def flush(self, timeout_seconds: float = 30.0) -> bool:
        """Write what the held run has queued to Trackio's local storage now, on this thread.

        ``run.log`` only queues: Trackio's sender thread writes every 0.5 s, so a process killed
        right after an export would lose the last half second. Returns False when Trackio
        reported a failed write for this run (disk full, read-only folder: Trackio only warns,
        see ``last_failures``) or the flush timed out. Remote runs are left to Trackio (True).
        Without the Trackio internals this needs, says once that exports are no longer written
        before they return, and returns True.
        """
        run = self.run
        if is_remote(run):
            return True  # a Trackio server or Space: Trackio's client sends it
        flush: Callable[[], None] | None = getattr(run, "_flush_queues_inline", None)
        lock: Any = getattr(run, "_client_lock", None)
        if flush is None or lock is None:
            _lost(
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
            _lost(
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
            _lost(
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
        with _registry_lock:
            owned.holders -= 1
            last = owned.holders <= 0 and not owned.finished
            if last:
                owned.finished = True
                if _owned.get(owned.key) is owned:
                    del _owned[owned.key]
        run = owned.run
        if not last or run is None:
            return  # still held; or deferred and never opened here (its writer finishes it)
        if _finished(run):
            # Trackio's own exit hook finished it first (zero code: the SDK shuts the exporter
            # down after it): finishing again would only print "Run finished" twice.
            _forget_active_run(run)
            return
        try:
            run.finish()
        except Exception as exc:  # noqa: BLE001 - finishing must not crash the user's program
            _logger.warning("otel-trackio: finishing Trackio run failed: %s", exc)
        _forget_active_run(run)


def _finished(run: RunLike) -> bool:
    """True once ``run.finish()`` ran (Trackio 0.43 sets the run's private ``_stop_flag``)."""
    flag = getattr(run, "_stop_flag", None)
    return isinstance(flag, threading.Event) and flag.is_set()


def _read_run_storage(
    sink: TrackioSink, run_name: str, read: Callable[[Any], _T], empty: _T, what: str
) -> _T | None:
    """``read(SQLiteStorage)`` for run ``run_name`` of the sink's project: ``empty`` when the
    run has nothing stored yet, or the sink's run is remote (a Trackio server or Space, whose
    storage cannot be read here: said once); None when storage cannot be read now (warned; the
    caller tries again later)."""
    if is_remote(sink.run):
        _lost(
            "local storage for this run",
            "after a writer crash or a request sent again, samples of a remote run may be "
            "logged twice",
        )
        return empty
    from trackio.sqlite_storage import SQLiteStorage

    try:
        if run_name not in SQLiteStorage.get_runs(sink.project):
            return empty
        return read(SQLiteStorage)
    except Exception as exc:  # noqa: BLE001 - unreadable now: the caller retries
        _logger.warning("otel-trackio: could not read %s: %r", what, exc)
        return None


def has_traces_at(sink: TrackioSink, step: int, run_name: str | None = None) -> bool | None:
    """Whether the sink's run (or run ``run_name`` of its project) has a Trace stored at
    ``step`` now (one indexed read, cheap however large the run). None when storage cannot be
    read now; False for a remote run."""
    if is_remote(sink.run):
        return False
    from trackio.sqlite_storage import SQLiteStorage

    name = sink.run_name if run_name is None else run_name
    try:
        return bool(SQLiteStorage.get_traces(sink.project, name, step=step, limit=1))
    except Exception as exc:  # noqa: BLE001 - unreadable now: the caller decides
        _logger.warning("otel-trackio: could not read the traces of step %d: %r", step, exc)
        return None


def stored_span_ids(
    sink: TrackioSink, key: str, step: int, run_name: str | None = None
) -> set[str] | None:
    """The spans of every Trace stored under ``key`` at ``step`` in the sink's run (or run
    ``run_name`` of its project), each by its trace and span id
    (:func:`~otel_trackio._core.samples.stored_span_key`): to tell which spans of a replayed or
    retried sample are stored already. None when storage cannot be read now (try again later);
    empty for a remote run, whose storage cannot be read here."""
    name = sink.run_name if run_name is None else run_name

    def read(storage: Any) -> list[dict[str, Any]]:
        return list(storage.get_traces(sink.project, name, step=step))

    nothing: list[dict[str, Any]] = []
    rows = _read_run_storage(sink, name, read, nothing, "stored traces")
    if rows is None:
        return None
    out: set[str] = set()
    for row in rows:
        if row.get("key") != key:
            continue
        spans = [span for span in row.get("spans") or [] if isinstance(span, Mapping)]
        trace = next(
            (
                str(metadata["otel.trace_id"])
                for span in spans
                if isinstance(metadata := span.get("metadata"), Mapping)
                and metadata.get("otel.trace_id")
            ),
            None,
        )
        out.update(stored_span_key(trace, str(span.get("id"))) for span in spans)
    return out


def _matches(run: RunLike, project: str | None, name: str | None) -> bool:
    if project is None:
        return name is None or run.name == name
    return run.project == project and (name is None or run.name == name)


def claim_project_file(project: str) -> None:
    """Refuse ``project`` when Trackio would store it in the file of another project name.
    Trackio leaves some characters out of a project's file name (``a/b``, ``a.b`` and ``ab``
    are all ``ab.db``): two such projects would share their runs. The first name to use a file
    claims it (a small file beside it in Trackio's folder); another name raises
    :class:`~otel_trackio.settings.TrackioConfigError` saying which."""
    from trackio.sqlite_storage import SQLiteStorage

    from otel_trackio.settings import TrackioConfigError

    filename = SQLiteStorage.get_project_db_filename(project)
    claim = trackio_dir() / f"{filename}.otel-trackio-project"
    try:
        claim.parent.mkdir(parents=True, exist_ok=True)
        with open(claim, "x", encoding="utf-8") as handle:
            handle.write(project)
        return
    except FileExistsError:
        pass
    except OSError:
        return  # a read-only folder: Trackio itself will say what is wrong
    try:
        owner = claim.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if owner and owner != project:
        raise TrackioConfigError(
            f"project {project!r} would be stored in Trackio's file {filename}, which holds "
            f"project {owner!r} (Trackio leaves some characters out of file names), and the two "
            "would share their runs: choose a project name that differs in letters or digits"
        )


def _start_run(
    project: str, name: str | None, init_kwargs: dict[str, Any], active: RunLike | None
) -> RunLike:
    if not init_kwargs.get("server_url") and not init_kwargs.get("space_id"):
        claim_project_file(project)
    if active is None:
        # No user run to disturb: start it here, so the user's own trackio.log() lands in it too.
        started: RunLike = _trackio().init(project=project, name=name, **init_kwargs)
        return started
    # trackio.init() finishes the run active in the calling thread: start ours on a thread that
    # has none, and leave the user's run untouched.
    result: list[RunLike] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            result.append(_trackio().init(project=project, name=name, **init_kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=start, name="otel-trackio-init", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def open_run_by_name(project: str, name: str) -> None:
    """Make sure the run ``project``/``name`` exists in local storage, found by its name, so
    that processes starting together each resume it (``resume="allow"``) instead of each
    creating a run of that name: Trackio finds a run by name only once something was written to
    it. One process of this machine at a time (a file lock in Trackio's folder); the first writes
    an empty log entry at step 0, the others find the run. The calling thread's active run, if
    any, stays active."""
    import fcntl

    from trackio.sqlite_storage import SQLiteStorage

    folder = trackio_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{folder_name(project)}.otel-trackio-open.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if name in SQLiteStorage.get_runs(project):
            return
        previous = active_run()
        run = _start_run(project, name, {"resume": "allow"}, previous)
        run.log({}, step=0)
        run.finish()
        _forget_active_run(run)


def continue_run_by_name(project: str, name: str, config: Any = None) -> None:
    """Make the run ``project``/``name`` the calling thread's active Trackio run, continuing the
    run of that name (made to exist first, :func:`open_run_by_name`) rather than starting a second
    one: a logger that writes into the active run (verl's ``Tracking``) then writes into the run
    the Traces go to. An active run already there stays."""
    if active_run() is not None:
        return
    open_run_by_name(project, name)
    _start_run(project, name, {"config": config, "resume": "allow"}, None)
