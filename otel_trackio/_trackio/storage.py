"""Reads of what a Trackio run has stored: to tell a resent or replayed sample from a new one."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any, TypeVar

from otel_trackio._core.samples import stored_span_key
from otel_trackio._trackio.installed import is_remote, lost, run_id
from otel_trackio._trackio.sink import TrackioSink

_logger = logging.getLogger("otel_trackio")
_T = TypeVar("_T")


def _read_run_storage(
    sink: TrackioSink, run_name: str, read: Callable[[Any], _T], empty: _T, what: str
) -> _T | None:
    """``read(SQLiteStorage)`` for run ``run_name`` of the sink's project: ``empty`` when the
    run has nothing stored yet, or the sink's run is remote (a Trackio server or Space, whose
    storage cannot be read here: said once); None when storage cannot be read now (warned; the
    caller tries again later)."""
    if is_remote(sink.run):
        lost(
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


def _run_of(sink: TrackioSink, run_name: str | None) -> tuple[str, str | None]:
    """(name, Trackio id) of run ``run_name`` of the sink's project, or of the sink's run. By
    its id the sink's run is found through an index, and it is the sink's run even when others
    share its name; a run asked for by name is looked up by name (Trackio then scans the
    project's Traces for its id)."""
    if run_name is not None:
        return run_name, None
    return sink.run_name, run_id(sink.run)


def has_traces_at(sink: TrackioSink, step: int, run_name: str | None = None) -> bool | None:
    """Whether the sink's run (or run ``run_name`` of its project) has a Trace stored at
    ``step`` now (for the sink's run one indexed read, cheap however large the project). None
    when storage cannot be read now; False for a remote run."""
    if is_remote(sink.run):
        return False
    from trackio.sqlite_storage import SQLiteStorage

    name, identity = _run_of(sink, run_name)
    try:
        return bool(
            SQLiteStorage.get_traces(sink.project, name, run_id=identity, step=step, limit=1)
        )
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
    name, identity = _run_of(sink, run_name)

    def read(storage: Any) -> list[dict[str, Any]]:
        return list(storage.get_traces(sink.project, name, run_id=identity, step=step))

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


def stored_metric_values(sink: TrackioSink) -> dict[tuple[int, str], Any]:
    """Every metric value stored in the sink's run, by (step, key): to store data read again
    once (empty for a remote run, or when storage cannot be read now)."""
    if is_remote(sink.run):
        return {}
    from trackio.sqlite_storage import SQLiteStorage

    name, identity = _run_of(sink, None)
    try:
        rows = SQLiteStorage.get_logs(sink.project, name, run_id=identity)
    except TypeError:  # a Trackio without run ids: by name
        rows = SQLiteStorage.get_logs(sink.project, name)
    except Exception as exc:  # noqa: BLE001 - unreadable now: nothing is skipped
        _logger.warning("otel-trackio: could not read the run's metrics: %r", exc)
        return {}
    values: dict[tuple[int, str], Any] = {}
    for row in rows:
        step = row.get("step")
        if isinstance(step, int):
            for key, value in row.items():
                if key not in ("step", "timestamp"):
                    values[(step, key)] = value
    return values
