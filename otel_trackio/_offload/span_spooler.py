"""The offloading processor's queue: each span is encoded as it ends, on the thread that ends it,
and a thread of the spooler's own appends the encoded chunks to the spool.

Why not a ``BatchSpanProcessor`` queue of spans, encoded by its export thread: on an asyncio
rollout the event loop's thread is busy all the time, and whatever the export thread does holds
the GIL the loop needs. Encoding a batch there read every span from memory the loop's CPU had
just written (cold in the export thread's CPU cache, several times slower than where it was made),
then let go of the GIL for the write and took it back from the loop. Here the rollout thread reads
each span as it ends (its row), packs :data:`CHUNK_SPANS` rows into one payload and lets the span
go: the span is freed on the thread that made it, the rows with the payload.
The spooler's thread only writes bytes (figure 13 in ``docs/performance.md``).

What it keeps: at most ``max_queue_size`` spans waiting, beside the batch being written (more
are dropped, counted and warned, as a ``BatchSpanProcessor`` drops when its queue is full), and
about :data:`MAX_WAITING_BYTES` of them (past it, the thread ending a span waits for the spool,
briefly); a chunk waits at most ``schedule_delay`` before it is appended;
:meth:`SpanSpooler.flush` appends everything ended before it.
"""

from __future__ import annotations

import os
import threading
import time
import weakref
from collections.abc import Callable
from typing import Any, NamedTuple

from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec.spool import SpanChunk
from otel_trackio._offload.client import NEVER_FITS, OffloadClient

CHUNK_SPANS = 64
"""Spans per encoded chunk: large enough that packing costs little per span (one MessagePack call
per chunk), small enough that a chunk's spans are still in the CPU's cache when it is packed (64
GenAI spans of ~2 KB: ~130 KB). Chosen, not tuned."""
CHUNK_BYTES = 4 * 1024 * 1024
"""A chunk of spans this large is packed early: spans carrying images (a megabyte each) are packed
a few at a time, judged by the size of the spans packed before them."""
MAX_WAITING_BYTES = 32 * 1024 * 1024
"""Packed spans waiting for the spooler's thread, at most: past it the thread that ends a span
waits for the spool to take them (at most :data:`MAX_WAIT_SECONDS`), so a rollout of large spans
faster than the disk keeps a bounded memory."""
MAX_WAIT_SECONDS = 10.0
CLOSE_RETRY_SECONDS = 0.2
"""At close, how often spans waiting for room in the spool are offered again."""
MAX_HELD_BYTES = 64 * 1024 * 1024
"""Spans the spool could not take (its disk full, its bound reached) wait in memory up to this
many bytes, offered again with each append; past it the oldest are given up, counted."""


class Packed(NamedTuple):
    """One packed chunk: its payload, its spans, the sample roots among them."""

    payload: bytes
    spans: int
    roots: int


class SpanSpooler:
    """Encodes ended spans into chunks on the calling thread and appends them to ``client``'s
    spool from a thread of its own.

    Args:
        client: the offloading exporter's spool and writer process.
        max_queue_size: spans ended but not yet appended, at most (more are dropped, counted).
        schedule_delay_seconds: the longest a span waits before it is appended.
        batch_spans: the thread is woken once this many spans are packed.
    """

    def __init__(
        self,
        client: OffloadClient,
        *,
        max_queue_size: int,
        schedule_delay_seconds: float,
        batch_spans: int,
    ) -> None:
        self._client = client
        self._max_queued = max(1, max_queue_size)
        self._delay = max(0.001, schedule_delay_seconds)
        self._batch_spans = max(1, batch_spans)
        self._chunk_spans = min(CHUNK_SPANS, self._batch_spans)
        self._closed = False
        self._reset()
        if hasattr(os, "register_at_fork"):  # a forked child starts empty, with its own thread
            os.register_at_fork(after_in_child=_call_if_alive(weakref.WeakMethod(self._reset)))

    def _reset(self) -> None:
        self._lock = threading.Lock()  # the chunk and the packed payloads
        self._write_lock = threading.Lock()  # one append at a time: the spool keeps their order
        self._wake = threading.Event()
        self._chunk = SpanChunk()
        self._packed: list[Packed] = []
        # What the spool could not take (its disk full, its bound reached): kept, oldest first,
        # and offered again first; past MAX_HELD_BYTES the oldest are given up (counted, said).
        self._held: list[Packed] = []
        self._held_bytes = 0
        self._packed_spans = 0
        self._packed_bytes = 0
        self._bytes_per_span = 0  # of the last chunk packed: large spans are packed few at a time
        self._taken = threading.Condition(self._lock)  # the spooler's thread took the packed
        self._thread: threading.Thread | None = None

    # -- the rollout's threads -----------------------------------------------------------------

    def add(self, span: ReadableSpan) -> None:
        """Encode one ended span (dropped when the queue is full, counted; or once closed)."""
        if self._thread is None:  # the first span: it is appended within the delay
            self._start()
        with self._lock:
            if self._closed:
                return
            if self._packed_spans + self._chunk.spans >= self._max_queued:
                self._client.refuse_spans(
                    1,
                    "queue",
                    f"{self._max_queued} spans wait to be spooled (max_queue_size): "
                    "spans are dropped until the spool takes them",
                    refusals=0,
                )
                return
            try:
                self._chunk.add(span)
            except Exception as exc:  # noqa: BLE001 - a span processor never raises into end()
                self._client.refuse_spans(1, "encode", f"could not encode a span: {exc!r}")
                return
            spans = self._chunk.spans
            if spans < self._chunk_spans and spans * self._bytes_per_span < CHUNK_BYTES:
                return
            self._pack()
            wake = self._packed_spans >= self._batch_spans
            if self._packed_bytes > MAX_WAITING_BYTES and not self._closed:
                self._wake.set()  # more than the memory bound waits: until the spool takes it
                self._taken.wait_for(
                    lambda: self._packed_bytes <= MAX_WAITING_BYTES or self._closed,
                    MAX_WAIT_SECONDS,
                )
        if wake:
            self._wake.set()

    def _pack(self) -> None:
        """The chunk as a payload, a new chunk started (the caller holds ``_lock``). A chunk
        that cannot be packed (a hand-made span with a value that is not data) is refused
        whole, counted, as ``export()`` refuses such a batch."""
        chunk, self._chunk = self._chunk, SpanChunk()
        try:
            payload = chunk.payload()
        except Exception as exc:  # noqa: BLE001 - the rollout's thread, or the spooler's
            self._client.refuse_spans(
                chunk.spans,
                "encode",
                f"could not encode {chunk.spans} spans: {exc!r}",
                samples=chunk.roots,
            )
            return
        self._packed.append(Packed(payload, chunk.spans, chunk.roots))
        self._packed_spans += chunk.spans
        self._packed_bytes += len(payload)
        self._bytes_per_span = len(payload) // max(1, chunk.spans)

    # -- the spooler's thread, and flushes -------------------------------------------------------

    def _start(self) -> None:
        with self._lock:
            if self._thread is not None or self._closed:
                return
            self._thread = threading.Thread(
                target=self._run, name="otel-trackio-span-spooler", daemon=True
            )
            self._thread.start()

    def _run(self) -> None:
        while not self._closed:
            woken = self._wake.wait(self._delay)
            self._wake.clear()
            if self._closed:
                return
            self.append(pack_partial=not woken)

    def append(self, *, pack_partial: bool = True, last: bool = False) -> bool:
        """Append the chunks held back, then the packed ones (and, with ``pack_partial``, the
        chunk being filled) to the spool, in one write; False when the spool could not take
        them all: they are held (up to :data:`MAX_HELD_BYTES`, the oldest given up past it,
        counted and said) and offered again with the next append, unless ``last``."""
        with self._write_lock:
            with self._lock:
                if pack_partial and self._chunk.spans:
                    self._pack()
                packed = self._packed
                self._packed, self._packed_spans, self._packed_bytes = [], 0, 0
                self._taken.notify_all()
            offered = [*self._held, *packed]
            if not offered:
                return True
            waited = sum(part.spans for part in self._held)
            refused = self._offer(offered)
            waiting: list[Packed] = []
            if refused is not None:
                if len(offered) > 1 or refused[0] == NEVER_FITS:
                    refused, waiting = self._offer_each(offered)
                else:
                    waiting = offered
            if not waiting:
                self._held, self._held_bytes = [], 0
                if waited:
                    self._client.said(
                        "taken",
                        f"the spool takes spans again: {waited} spans that waited in memory "
                        "are spooled",
                    )
                return refused is None
            assert refused is not None
            kind, why = refused
            self._held = waiting
            self._held_bytes = sum(len(part.payload) for part in waiting)
            lost = lost_roots = 0
            while self._held and (last or self._held_bytes > MAX_HELD_BYTES):
                part = self._held.pop(0)
                self._held_bytes -= len(part.payload)
                lost += part.spans
                lost_roots += part.roots
            if lost:
                self._client.refuse_spans(
                    lost,
                    kind,
                    f"{why}; {lost_roots} samples lost ({lost} spans: they could not wait any "
                    "longer)",
                    samples=lost_roots,
                )
            if self._held:
                self._client.said(
                    "held",
                    f"{why}; {sum(part.spans for part in self._held)} spans wait in memory "
                    f"({self._held_bytes / 1e6:.1f} MB, at most {MAX_HELD_BYTES // 10**6} MB) "
                    "until it takes them",
                )
            return False

    def _offer_each(self, parts: list[Packed]) -> tuple[tuple[str, str] | None, list[Packed]]:
        """Offer ``parts`` one at a time, oldest first, as many as there is room for now: (why
        the first one not taken was not, what still waits). A part larger than the spool's
        bound is given up at once, counted: no use waiting for room."""
        refused: tuple[str, str] | None = None
        for i, part in enumerate(parts):
            why = self._offer([part])
            if why is None:
                continue
            if why[0] == NEVER_FITS:
                self._client.refuse_spans(
                    part.spans,
                    why[0],
                    f"{why[1]}; {part.roots} samples lost ({part.spans} spans)",
                    samples=part.roots,
                )
                refused = why
                continue
            return why, parts[i:]
        return refused, []

    def _offer(self, parts: list[Packed]) -> tuple[str, str] | None:
        """Append ``parts`` in one write: None, or why the spool did not take them."""
        spans = sum(part.spans for part in parts)
        try:
            return self._client.try_spool_spans([part.payload for part in parts], spans)
        except Exception as exc:  # noqa: BLE001 - as export(): the thread must live on
            return ("spool", f"could not spool {spans} spans: {exc!r}")

    def flush(self) -> bool:
        """Append every span ended before this call; False when the spool refused some."""
        return self.append(pack_partial=True)

    def close(self, timeout_seconds: float = 30.0) -> bool:
        """Append what is left and stop the thread (idempotent); spans ended later are dropped.
        Spans waiting for room in the spool get up to ``timeout_seconds`` more (the writer
        drains it meanwhile); what still finds none is given up, counted."""
        with self._lock:
            if self._closed:
                return True
            self._closed = True
            self._taken.notify_all()  # a thread waiting for room goes on
            thread = self._thread
        self._wake.set()
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout_seconds)
        if not self.append(pack_partial=True):
            # The rollout is over and spans wait for room the writer makes: it stores first
            # now (at the lowest priority a busy machine would leave it a sliver).
            self._client.give_writer_normal_share()
        while not self.append(pack_partial=True) and time.monotonic() < deadline:
            time.sleep(CLOSE_RETRY_SECONDS)  # room comes back as the writer drains the spool
        return self.append(pack_partial=True, last=True)


def _call_if_alive(method: weakref.WeakMethod[Any]) -> Callable[[], None]:
    """A fork handler that calls ``method`` while its object lives (and nothing after)."""

    def call() -> None:
        bound = method()
        if bound is not None:
            bound()

    return call
