"""Span entries this process appended to its spool, kept decoded until its drainer takes them.

The OTLP receiver decodes a request into span records, spools them (the entry is what makes them
durable before the client is answered), and its drain thread reads the same entry back a moment
later. Reading it back is decoding the records a second time. :class:`DecodedEntries` holds the
records of the entries still to be drained, keyed by their payload: the drainer takes an entry's
records from it when it finds them, and decodes the payload when it does not (an entry of an
earlier start, or one not kept because the bound was reached). An entry's records are taken once:
an entry handed over again (a retry after a failed write) is decoded again, so no two hand-overs
share record objects.
"""

from __future__ import annotations

import threading

from otel_trackio._codec.routes import Route
from otel_trackio._core.records import SpanRecord

#: The most spans kept decoded, waiting for the drain (past it, entries are decoded when drained).
MAX_KEPT_SPANS = 16_384

SpanEntry = tuple[Route, list[SpanRecord]]
"""What a :data:`~otel_trackio._codec.spool.SPANS` entry holds, as
:func:`~otel_trackio._codec.spool.decode_spans` reads it: its route and its span records."""


class DecodedEntries:
    """The decoded span entries of a spool's producer in this process, for its drainer.
    Thread-safe."""

    def __init__(self, max_spans: int = MAX_KEPT_SPANS) -> None:
        self._max_spans = max_spans
        self._kept: dict[bytes, SpanEntry] = {}
        self._spans = 0
        self._lock = threading.Lock()
        self.taken = 0
        """How many entries' records were taken (not decoded again)."""

    def keep(self, payload: bytes, decoded: SpanEntry) -> bool:
        """Keep the records of an entry about to be appended (call :meth:`forget` when the
        append fails); False when the bound leaves no room (it is then decoded when drained)."""
        with self._lock:
            if payload in self._kept or self._spans + len(decoded[1]) > self._max_spans:
                return False
            self._kept[payload] = decoded
            self._spans += len(decoded[1])
            return True

    def forget(self, payload: bytes) -> None:
        """An entry kept is not in the spool after all (its append failed)."""
        self._pop(payload)

    def take(self, payload: bytes) -> SpanEntry | None:
        """The drain's: the records of the entry of this payload, once (counted in
        :attr:`taken`); None when not kept."""
        decoded = self._pop(payload)
        if decoded is not None:
            self.taken += 1
        return decoded

    def _pop(self, payload: bytes) -> SpanEntry | None:
        with self._lock:
            decoded = self._kept.pop(payload, None)
            if decoded is not None:
                self._spans -= len(decoded[1])
            return decoded

    @property
    def spans(self) -> int:
        """How many spans are kept."""
        return self._spans
