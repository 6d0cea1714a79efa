"""uvicorn's HTTP protocol with a deadline and a size cap on each request's header section.

uvicorn closes a keep-alive connection idle for ``timeout_keep_alive`` seconds, but any byte
cancels that timer, and nothing bounds a new connection that never completes its headers: a
client sending one byte a second holds a connection for ever. Here the header section of every
request must be complete within ``read_timeout_seconds`` of the connection opening (or of the
previous response) and within ``max_header_bytes``; otherwise the connection gets a 408 / 431
and is closed. The body's own deadline is read in the ASGI app (:mod:`._body`).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import Callable
from typing import Any

from otel_trackio._engine.warn import Warnings
from otel_trackio.receiver._limits import ReceiverLimits

try:  # what uvicorn's "auto" picks: httptools when installed, else h11
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol as _Base
except ImportError:  # pragma: no cover - depends on the install
    from uvicorn.protocols.http.h11_impl import H11Protocol as _Base  # type: ignore[assignment]

_REASONS = {408: "Request Timeout", 431: "Request Header Fields Too Large"}


HTTP2_PREFACE = b"PRI * HTTP/2.0"
"""How an HTTP/2 connection (an OTLP/gRPC client) opens: not OTLP/HTTP."""


def no_delay(transport: asyncio.BaseTransport) -> None:
    """Send each write at once (``TCP_NODELAY``): a response written in two parts (its head,
    then its body) would otherwise wait for the client's delayed acknowledgement of the first,
    40 ms on Linux, on every call. Never raises."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


def guarded_protocol(
    limits: ReceiverLimits, on_http2: Callable[[str], None] | None = None
) -> type[asyncio.Protocol]:
    """The HTTP protocol class for ``uvicorn.Config(http=...)`` enforcing ``limits``' header
    deadline (``read_timeout_seconds``) and ``max_header_bytes``. A connection that opens with
    the HTTP/2 preface (a gRPC client at the HTTP port) is closed and reported to ``on_http2``
    (with the client's address), not answered with a bare "Invalid HTTP request"."""
    warn = Warnings(every_seconds=60.0)

    class GuardedHTTPProtocol(_Base):
        """uvicorn's protocol, closing connections whose headers come too slowly or too big."""

        _header_timer: asyncio.TimerHandle | None = None
        _waiting_cycle: Any = None  # ``self.cycle`` when we began waiting for headers
        _awaiting_headers = False
        _header_bytes = 0

        def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
            super().connection_made(transport)
            no_delay(transport)
            self._await_headers()

        def data_received(self, data: bytes) -> None:
            awaiting = self._awaiting_headers
            if awaiting and not self._header_bytes and data.startswith(HTTP2_PREFACE[:3]):
                if HTTP2_PREFACE.startswith(data[: len(HTTP2_PREFACE)]):
                    self._stop_waiting()
                    client = self.client
                    if on_http2 is not None:
                        on_http2(f"{client[0]}:{client[1]}" if client else "a client")
                    self.transport.close()
                    return
            super().data_received(data)
            if not awaiting:
                return
            if self.cycle is not self._waiting_cycle:  # the headers are in: a request began
                self._stop_waiting()
                return
            self._header_bytes += len(data)
            if self._header_bytes > limits.max_header_bytes:
                self._refuse(431, f"header section over {limits.max_header_bytes} bytes")

        def on_response_complete(self) -> None:
            super().on_response_complete()
            cycle = self.cycle
            if not self.transport.is_closing() and (cycle is None or cycle.response_complete):
                self._await_headers()  # keep-alive: the next request's headers, in time

        def connection_lost(self, exc: Exception | None) -> None:
            self._stop_waiting()
            super().connection_lost(exc)

        def _await_headers(self) -> None:
            self._stop_waiting()
            self._awaiting_headers = True
            self._waiting_cycle = self.cycle
            self._header_bytes = 0
            self._header_timer = self.loop.call_later(
                limits.read_timeout_seconds, self._headers_too_slow
            )

        def _stop_waiting(self) -> None:
            self._awaiting_headers = False
            if self._header_timer is not None:
                self._header_timer.cancel()
                self._header_timer = None

        def _headers_too_slow(self) -> None:
            self._header_timer = None
            if not self._awaiting_headers or self.transport.is_closing():
                return
            if not self._header_bytes:  # an idle connection: just close it
                self._stop_waiting()
                self.transport.close()
                return
            self._refuse(
                408, f"header section not complete within {limits.read_timeout_seconds:g} s"
            )

        def _refuse(self, status: int, reason: str) -> None:
            self._stop_waiting()
            client = self.client
            source = f"{client[0]}:{client[1]}" if client else "a client"
            warn(f"headers {status}", f"closed a connection from {source}: {status} {reason}")
            text = reason.encode("ascii", "replace")
            head = (
                f"HTTP/1.1 {status} {_REASONS[status]}\r\ncontent-type: text/plain; "
                f"charset=utf-8\r\ncontent-length: {len(text)}\r\nconnection: close\r\n\r\n"
            )
            self.transport.write(head.encode("ascii") + text)
            self.transport.close()

    return GuardedHTTPProtocol
