"""The rollout-process side of the TTL under offload: tell the writer which spans are open long.

The writer logs a trace that saw no span for ``sample_ttl_seconds`` as partial. Open spans are
known only here (an exporter sees a span when it ends), so a sample stuck in a tool call would
show, at the TTL, only what had ended. :class:`OpenSpanReporter` wakes every quarter of the TTL
and, when some trace has a span open for more than half of it, appends one
:data:`~otel_trackio._codec.spool.OPEN_SPANS` report: every open span of those traces, read as
unfinished records (an empty report once none is left, so the writer forgets them). The writer
keeps the latest report (:meth:`~otel_trackio._engine.open_samples.OpenSampleRegistry.
report_open_spans`) and shows those spans in the trace it logs at the TTL.

Cost: one idle thread per offloading exporter, started with the first export; each wake copies
the open-span map once (no lock) — nothing on the rollout's own threads.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence

from otel_trackio._core.records import SpanRecord
from otel_trackio._engine.open_spans import OpenSpans

MIN_INTERVAL_SECONDS = 0.05
"""The shortest wait between two looks (a tiny TTL in a test)."""


class OpenSpanReporter:
    """Reports the spans open longer than half the TTL, every quarter of it, through ``send``.

    Args:
        open_spans: the exporter's tracked open spans.
        ttl_seconds: the run's ``sample_ttl_seconds`` (0 or less: no TTL, nothing to report).
        send: appends one report (False when the spool refused it: tried again next time).
    """

    def __init__(
        self,
        open_spans: OpenSpans,
        ttl_seconds: float,
        send: Callable[[Sequence[SpanRecord]], bool],
    ) -> None:
        self._open_spans = open_spans
        self._ttl_ns = int(max(0.0, ttl_seconds) * 1e9)
        self._interval = max(MIN_INTERVAL_SECONDS, ttl_seconds / 4)
        self._send = send
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._reported = False  # the last report named some trace
        self._start_lock = threading.Lock()

    def start(self) -> None:
        """Start looking (once; later calls do nothing)."""
        if self._thread is not None or self._ttl_ns <= 0:
            return
        with self._start_lock:
            if self._thread is None and not self._stop.is_set():
                self._thread = threading.Thread(
                    target=self._run, name="otel-trackio-open-spans", daemon=True
                )
                self._thread.start()

    def stop(self) -> None:
        """Stop looking (idempotent; returns once the thread has ended)."""
        self._stop.set()
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(5.0)

    def report_once(self) -> None:
        """Look now: report the traces with a span open longer than half the TTL."""
        long_open = self._open_spans.traces_open_since(time.time_ns() - self._ttl_ns // 2)
        if not long_open and not self._reported:
            return  # nothing open long, and the writer holds no report to clear
        records = self._open_spans.records(trace_ids=long_open) if long_open else []
        if self._send(records):
            self._reported = bool(records)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self.report_once()
            except Exception:  # noqa: BLE001 - a report is a nicety; the thread must live
                continue
