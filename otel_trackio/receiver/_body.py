"""Request bodies in, bounded: read within a deadline and a budget shared by all connections,
then ``Content-Encoding`` undone in linear time with caps on layers, members and size.

Every way a body can cost more than it should ends in a :class:`RequestError` with its status:
413 (too large, too many gzip members), 400 (too many encoding layers, broken compression), 408
(too slow), 503 with ``Retry-After`` (the receiver holds as many body bytes as it allows; the
client retries). Answers given before a body was read in full close the connection.
"""

from __future__ import annotations

import asyncio
import threading
import zlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from otel_trackio.receiver._decode import RequestError
from otel_trackio.receiver._limits import MIB, ReceiverLimits

Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]

CLOSE = {"Connection": "close"}
#: bodies up to this size may use the budget's headroom (the usual OTLP batch is far smaller).
SMALL_REQUEST_BYTES = 1 * MIB
# Compressed bytes fed to zlib at once: from _FIRST_INPUT after a member starts, doubling up to
# _INPUT_CHUNK. zlib copies what it was fed past a member's end (``unused_data``) and what it
# could not take (``unconsumed_tail``), so each copy stays under twice the member's own size.
_FIRST_INPUT = 64
_INPUT_CHUNK = 64 * 1024
_OUTPUT_STEP = 1 * MIB  # decompressed bytes taken from zlib (and from the budget) at once
_RETRY_AFTER_SECONDS = 1


class BodyBudget:
    """Bytes of request bodies held at once across connections (raw and decompressed).

    Thread-safe: the event loop takes bytes while reading, a worker thread while decompressing.
    A quarter of ``limit`` is headroom only requests up to :data:`SMALL_REQUEST_BYTES` may use.
    """

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self._large_limit = limit - limit // 4
        self._used = 0
        self._used_large = 0
        self._lock = threading.Lock()
        self.refused = 0

    @property
    def used(self) -> int:
        """Bytes held now."""
        return self._used

    def claim(self) -> BodyClaim:
        """A new request's share (empty until it takes bytes); release it once answered."""
        return BodyClaim(self)

    def _take(self, claim: BodyClaim, size: int) -> None:
        with self._lock:
            total = claim.held + size
            large = total > SMALL_REQUEST_BYTES
            moving = claim.held if large and not claim.large else 0
            fits = self._used + size <= self.limit and (
                not large or self._used_large + moving + size <= self._large_limit
            )
            if not fits:
                self.refused += 1
                raise RequestError(
                    503,
                    f"the receiver holds {self._used} bytes of request bodies (limit "
                    f"{self.limit}); retry later",
                    headers={"Retry-After": str(_RETRY_AFTER_SECONDS), **CLOSE},
                    warn=True,
                )
            self._used += size
            if large:
                self._used_large += moving + size
            claim.held, claim.large = total, large

    def _release(self, claim: BodyClaim) -> None:
        with self._lock:
            self._used -= claim.held
            if claim.large:
                self._used_large -= claim.held
            claim.held, claim.large = 0, False


class BodyClaim:
    """The bytes one request holds of a :class:`BodyBudget`."""

    __slots__ = ("_budget", "held", "large")

    def __init__(self, budget: BodyBudget) -> None:
        self._budget = budget
        self.held = 0
        self.large = False

    def take(self, size: int) -> None:
        """Hold ``size`` more bytes; 503 when the budget cannot."""
        self._budget._take(self, size)

    def release(self) -> None:
        """Give every byte back (idempotent)."""
        self._budget._release(self)


DISCARD_FACTOR = 4
"""A body refused as too large is read and dropped up to this many times the limit before the
answer: a client that writes its whole body before it reads (most HTTP clients) then reads the
413, where closing at once would give it a connection reset. Larger ones are cut off."""


async def _discard(receive: Receive, limits: ReceiverLimits, left: int) -> None:
    """Read and drop up to ``left`` more bytes of a refused body, in time (the body's
    deadlines); nothing is kept."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_timeout_seconds
    while left > 0:
        wait = min(limits.read_timeout_seconds, deadline - loop.time())
        if wait <= 0:
            return
        try:
            message = await asyncio.wait_for(receive(), wait)
        except asyncio.TimeoutError:
            return
        if message["type"] == "http.disconnect":
            return
        left -= len(message.get("body", b""))
        if not message.get("more_body", False):
            return


async def read_body(
    receive: Receive, content_length: str | None, limits: ReceiverLimits, claim: BodyClaim
) -> bytes:
    """The raw body from the ASGI ``receive``, refused as soon as it is known to be too large,
    too slow (no byte for ``read_timeout_seconds``, or longer than ``body_timeout_seconds`` in
    all) or over the shared budget (a declared ``Content-Length`` is taken from it at once)."""
    limit = limits.max_body_bytes
    declared: int | None = None
    if content_length is not None:
        try:
            declared = int(content_length)
        except ValueError:
            raise RequestError(
                400, f"bad Content-Length {content_length!r}", headers=CLOSE
            ) from None
        if declared > limit:
            if declared <= DISCARD_FACTOR * limit:
                await _discard(receive, limits, declared)
            raise RequestError(
                413, f"body of {declared} bytes is over the {limit}-byte limit", headers=CLOSE
            )
        claim.take(declared)
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limits.body_timeout_seconds
    chunks: list[bytes] = []
    size = 0
    while True:
        wait = min(limits.read_timeout_seconds, deadline - loop.time())
        try:
            if wait <= 0:
                raise asyncio.TimeoutError
            message = await asyncio.wait_for(receive(), wait)
        except asyncio.TimeoutError:
            raise RequestError(
                408,
                f"body not received in time ({size} bytes in; the receiver waits "
                f"{limits.read_timeout_seconds:g} s for the next bytes and "
                f"{limits.body_timeout_seconds:g} s for a whole body)",
                headers=CLOSE,
                warn=True,
            ) from None
        if message["type"] == "http.disconnect":
            raise RequestError(400, "the client disconnected before its body was in")
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > limit:
            if message.get("more_body", False):
                await _discard(receive, limits, DISCARD_FACTOR * limit - size)
            raise RequestError(413, f"body is over the {limit}-byte limit", headers=CLOSE)
        if declared is None:
            claim.take(len(chunk))
        chunks.append(chunk)
        if not message.get("more_body", False):
            return chunks[0] if len(chunks) == 1 else b"".join(chunks)


def decompress(
    body: bytes,
    content_encoding: str | None,
    limits: ReceiverLimits,
    take: Callable[[int], None] | None = None,
) -> bytes:
    """Undo ``Content-Encoding`` (gzip, deflate, identity), never producing more than
    ``limits.max_body_bytes``; ``take`` is called with each decompressed chunk's size (the
    shared budget). Linear in the body's size however many gzip members it has."""
    limit = limits.max_body_bytes
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    codings = [c for c in codings if c != "identity"]
    if len(codings) > limits.max_content_codings:
        raise RequestError(
            400,
            f"{len(codings)} content codings ({content_encoding!r}); at most "
            f"{limits.max_content_codings}",
            warn=True,
        )
    data = body
    for coding in reversed(codings):  # the last coding listed was applied last
        if coding in ("gzip", "x-gzip"):
            data = _inflate(data, 16 + zlib.MAX_WBITS, "gzip", limits, take)
        elif coding == "deflate":
            zlib_header = (
                len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            )
            wbits = zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS
            data = _inflate(data, wbits, coding, limits, take)
        else:
            raise RequestError(
                415, f"unsupported Content-Encoding {coding!r}: use gzip, deflate or none"
            )
    if len(data) > limit:
        raise RequestError(413, f"body is over the {limit}-byte limit")
    return data


def _inflate(
    data: bytes,
    wbits: int,
    name: str,
    limits: ReceiverLimits,
    take: Callable[[int], None] | None,
) -> bytes:
    """Inflate ``data`` (several members for gzip), feeding zlib growing slices of a view so
    neither its ``unconsumed_tail`` nor its ``unused_data`` ever copies the rest of the body."""
    limit = limits.max_body_bytes
    view = memoryview(data)
    end = len(view)
    position = 0  # the first byte not yet given to zlib
    out = bytearray()
    members = 0
    inflater = zlib.decompressobj(wbits)
    pending: bytes | memoryview = b""
    feed = _FIRST_INPUT
    try:
        while True:
            if not pending and position < end:
                pending = view[position : position + feed]
                position += len(pending)
                feed = min(2 * feed, _INPUT_CHUNK)
            chunk = inflater.decompress(pending, min(_OUTPUT_STEP, limit + 1 - len(out)))
            if chunk:
                if take is not None:
                    take(len(chunk))
                out += chunk
                if len(out) > limit:
                    raise RequestError(413, f"decompressed body is over the {limit}-byte limit")
            pending = inflater.unconsumed_tail
            if inflater.eof:
                members += 1
                position -= len(inflater.unused_data)  # the first byte after this member
                if name != "gzip" or _only_padding(view, position):
                    return bytes(out)
                if members >= limits.max_gzip_members:
                    raise RequestError(
                        413,
                        f"more than {limits.max_gzip_members} gzip members in one body",
                        warn=True,
                    )
                inflater, pending = zlib.decompressobj(wbits), b""  # another gzip member
                feed = _FIRST_INPUT
            elif not chunk and not pending and position >= end:
                raise RequestError(400, f"truncated {name} body")
    except zlib.error as exc:
        raise RequestError(400, f"body is not valid {name} data: {exc}") from None


def _only_padding(view: memoryview, position: int) -> bool:
    """True when nothing but zero bytes follow ``position`` (gzip tools may pad with them)."""
    if position >= len(view):
        return True
    if view[position] != 0:
        return False
    rest = view[position:]
    return bytes(rest).count(0) == len(rest)  # one copy: it returns or the next member fails
