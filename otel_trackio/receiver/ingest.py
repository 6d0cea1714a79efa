"""``otel-trackio ingest``: the OpenTelemetry Collector's ``file`` exporter output into a run.

The Collector's ``file`` exporter writes one OTLP/JSON export request per line (traces, metrics
or logs), rotates its files (``traces.jsonl``, then older ones beside it) and may gzip them. Each
line is read as the receiver reads an OTLP/HTTP JSON body and handed to the same
:class:`~otel_trackio.receiver._routing.Router` (its spool, its drain, its runs): the Traces,
metrics and GenAI log events come out as if the Collector had sent them to ``otel-trackio
serve``. A line that is no OTLP/JSON request is counted and said with its file and line number,
and the rest goes on. Ingesting the same file again stores nothing twice: the run's steps already
in storage are looked up span by span, as a receiver restarted on a resent request does.
"""

from __future__ import annotations

import gzip
import json
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from otel_trackio._codec.otlp import ItemLimits
from otel_trackio._settings import TrackioSettings
from otel_trackio.receiver._decode import RequestError, parse_request
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._limits import DEFAULT_LIMITS
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._signals import SIGNALS, Signal
from otel_trackio.receiver._summary import report_runs

#: A request's top-level key -> its signal (traces, metrics, logs).
_SIGNAL_BY_KEY = {
    "resourceSpans": SIGNALS[0],
    "resourceMetrics": SIGNALS[1],
    "resourceLogs": SIGNALS[2],
}
MALFORMED_SAID = 10
"""Malformed lines said one by one, at most; the rest are counted in the last line."""


@dataclass
class IngestResult:
    """What one ``ingest`` read: lines, requests by signal, lines it could not read."""

    lines: int = 0
    requests: int = 0
    malformed: int = 0
    stored_everything: bool = True


def collector_files(paths: Sequence[str | Path]) -> list[Path]:
    """The files to read: each path given, a folder's ``*.json``/``*.jsonl`` files (and their
    ``.gz``), oldest first (rotated files before the current one)."""
    found: list[Path] = []
    for given in map(Path, paths):
        if given.is_dir():
            inside = [
                p
                for p in given.iterdir()
                if p.is_file() and p.name.endswith((".json", ".jsonl", ".json.gz", ".jsonl.gz"))
            ]
            found.extend(sorted(inside, key=lambda p: (p.stat().st_mtime, p.name)))
        else:
            found.append(given)
    return found


def _open(path: Path) -> IO[bytes]:
    raw = path.open("rb")
    if raw.read(2) == b"\x1f\x8b":  # gzip, whatever the name says
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw)  # type: ignore[return-value]
    raw.seek(0)
    return raw


def _lines(path: Path) -> Iterator[tuple[int, bytes]]:
    with _open(path) as handle:
        for number, line in enumerate(handle, 1):
            if line.strip():
                yield number, line


def _signal_of(line: bytes) -> Signal | None:
    """The signal a line's request is for, from its first key (None: none of the three)."""
    head = line.lstrip()[:64]
    for key, signal in _SIGNAL_BY_KEY.items():
        if f'"{key}"'.encode() in head:
            return signal
    try:
        keys = json.loads(line)
    except ValueError:
        return None
    if isinstance(keys, dict):
        for key, signal in _SIGNAL_BY_KEY.items():
            if key in keys:
                return signal
    return None


def ingest(
    paths: Sequence[str | Path],
    project: str,
    name: str | None,
    *,
    settings: TrackioSettings | None = None,
    report: Callable[[str], None] = print,
    progress: Callable[[int, int], None] | None = None,
    drain_seconds: float = 600.0,
) -> IngestResult:
    """Read the Collector ``file`` exporter's output at ``paths`` into ``project``/``name``;
    what was read. ``progress(bytes_read, bytes_total)`` is called as the files are read."""
    files = collector_files(paths)
    total = sum(p.stat().st_size for p in files)
    limits = DEFAULT_LIMITS
    items = ItemLimits(
        (settings or TrackioSettings()).max_span_attributes,
        (settings or TrackioSettings()).max_span_events,
    )
    result = IngestResult()
    router = Router(project, name, settings=settings, stored_once=True)
    done = 0
    try:
        for path in files:
            for number, line in _lines(path):
                result.lines += 1
                signal = _signal_of(line)
                try:
                    if signal is None:
                        raise RequestError(400, "no resourceSpans, resourceMetrics or resourceLogs")
                    request = parse_request(
                        line, "json", signal.request_type, limits.max_json_depth, items
                    )
                except RequestError as exc:
                    result.malformed += 1
                    if result.malformed <= MALFORMED_SAID:
                        report(f"otel-trackio ingest: {path}:{number}: skipped: {exc.message}")
                    continue
                _export(router, signal, request, items)
                result.requests += 1
            done += path.stat().st_size
            if progress is not None:
                progress(done, total)
    finally:
        result.stored_everything = router.shutdown(drain_seconds)
    if result.malformed > MALFORMED_SAID:
        report(
            f"otel-trackio ingest: {result.malformed} lines skipped in all (the first "
            f"{MALFORMED_SAID} said above)"
        )
    report_runs(router, report)
    return result


WAIT_FOR_ROOM_SECONDS = 600.0
"""How long one request waits for room in a full spool (the drain makes it) before ``ingest``
gives up."""


def _export(router: Router, signal: Signal, request: Any, items: ItemLimits) -> None:
    """Hand one request to the router, waiting while its spool is full (it drains)."""
    deadline = time.monotonic() + WAIT_FOR_ROOM_SECONDS
    while True:
        try:
            signal.export(router, request, items)
            return
        except ReceiverUnavailable as exc:
            if time.monotonic() >= deadline:
                raise
            time.sleep(min(1.0, exc.retry_after_seconds))


def progress_bar(stream: IO[str] = sys.stderr) -> Callable[[int, int], None] | None:
    """A one-line progress bar on a terminal (None when ``stream`` is not one)."""
    if not stream.isatty():
        return None

    def show(done: int, total: int) -> None:
        share = done / total if total else 1.0
        filled = int(share * 30)
        stream.write(f"\r  [{'#' * filled}{'.' * (30 - filled)}] {share:4.0%} of {total:,} bytes")
        if done >= total:
            stream.write("\n")
        stream.flush()

    return show
