"""``ReceiverLimits``: what one client may cost the receiver, each limit and its default once.

The receiver faces clients it does not control: careless ones (a stuck connection, a request far
larger than usual) and hostile ones (compression bombs, deep nesting, bodies held open). Every
limit below turns such a request into a clear 4xx or 503 answer instead of CPU, memory or a
connection held for ever; ``otel-trackio serve`` exposes each as an option (see ``cli.py``).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

MIB = 1024 * 1024


@dataclass(frozen=True)
class ReceiverLimits:
    """The receiver's limits on requests (HTTP level; per-span limits live in
    :class:`~otel_trackio.TrackioSettings`, e.g. ``max_span_attributes``).

    Attributes:
        max_body_bytes: largest body, and separately its decompressed size (413 past it).
        max_inflight_bytes: request bodies held at once across all connections, raw and
            decompressed (503 with ``Retry-After`` past it). None: 64 MiB, or twice
            ``max_body_bytes`` when that is more. A quarter of it is kept for requests under
            1 MiB, so a few large bodies held open never starve the usual small batches.
        max_content_codings: ``Content-Encoding`` layers undone at most (``gzip, gzip`` is two;
            400 past it).
        max_gzip_members: gzip members in one body at most (a gzip stream may be several
            concatenated ones; 413 past it).
        max_json_depth: nesting of a JSON body at most (arrays and objects; 400 past it).
            Protobuf bodies are bounded by the protobuf runtime (100 nested messages).
        read_timeout_seconds: the longest silence while a request is read, and the time the
            header section of a request may take as a whole (the connection is closed;
            408 once a body has started).
        body_timeout_seconds: the time the body of one request may take as a whole (408).
        max_header_bytes: largest header section (431, connection closed).
        max_routes: (project, run) routes a receiver serves at most; a new one past it gets
            503 with ``Retry-After`` and a warning (the client retries; nothing is acknowledged
            and dropped), while the quiet route used least recently (idle for at least
            :data:`ROOM_IDLE_SECONDS`) is closed to make room.
        route_idle_seconds: a route that received nothing for this long, with nothing waiting
            in it, is closed (its run finished, its memory freed); data for it later opens it
            again, continuing the same run. So a receiver serving run after run never fills up.
    """

    max_body_bytes: int = 20 * MIB
    max_inflight_bytes: int | None = None
    max_content_codings: int = 2
    max_gzip_members: int = 64
    max_json_depth: int = 128
    read_timeout_seconds: float = 10.0
    body_timeout_seconds: float = 30.0
    max_header_bytes: int = 64 * 1024
    max_routes: int = 64
    route_idle_seconds: float = 3600.0

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if value is not None and not value > 0:
                raise ValueError(f"{f.name} must be positive, got {value!r}")
        if self.max_inflight_bytes is not None and self.max_inflight_bytes < self.max_body_bytes:
            raise ValueError(
                f"max_inflight_bytes ({self.max_inflight_bytes}) must be at least "
                f"max_body_bytes ({self.max_body_bytes})"
            )

    @property
    def inflight_bytes(self) -> int:
        """``max_inflight_bytes`` with its default resolved."""
        if self.max_inflight_bytes is not None:
            return self.max_inflight_bytes
        return max(64 * MIB, 2 * self.max_body_bytes)


ROOM_IDLE_SECONDS = 30.0
"""When every route is in use, how long the quiet route closed to make room must have been idle
(so that two busy runs never take turns closing each other)."""

DEFAULT_LIMITS = ReceiverLimits()
