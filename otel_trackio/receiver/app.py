"""The ASGI app: ``POST /v1/traces``, ``/v1/metrics`` and ``/v1/logs`` as OTLP/HTTP says.

The event loop only reads bodies and writes responses; decompressing, decoding and every Trackio
call run in Starlette's thread pool (``run_in_threadpool``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from google.protobuf.message import Message
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from otel_trackio._codec.otlp import ItemLimits
from otel_trackio._engine.warn import Warnings
from otel_trackio.receiver._auth import BearerCheck
from otel_trackio.receiver._body import (
    SMALL_REQUEST_BYTES,
    BodyBudget,
    BodyClaim,
    decompress,
    read_body,
)
from otel_trackio.receiver._decode import (
    Encoding,
    RequestError,
    encode_message,
    encoding_of,
    parse_request,
    status_body,
)
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._limits import DEFAULT_LIMITS, ReceiverLimits
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._signals import SIGNALS, Signal
from otel_trackio.receiver.proxy import ModelProxy

_logger = logging.getLogger("otel_trackio.receiver")

DEFAULT_MAX_BODY_BYTES = DEFAULT_LIMITS.max_body_bytes
_MEDIA_TYPES: dict[Encoding, str] = {
    "protobuf": "application/x-protobuf",
    "json": "application/json",
}


def create_app(
    router: Router,
    *,
    token: str | None = None,
    max_body_bytes: int | None = None,
    limits: ReceiverLimits | None = None,
    on_shutdown: Callable[[], None] | None = None,
    budget: BodyBudget | None = None,
    proxy: ModelProxy | None = None,
) -> Starlette:
    """An OTLP/HTTP receiver app feeding ``router``.

    Args:
        router: where decoded spans, GenAI log events and metrics go; its settings'
            ``max_span_attributes`` / ``max_span_events`` cap what is decoded.
        token: when set, requests need ``Authorization: Bearer <token>`` (else 401).
        max_body_bytes: limit for the body and, separately, for the decompressed body (413);
            shorthand for ``limits.max_body_bytes``.
        limits: what one request may cost (:class:`ReceiverLimits`: body sizes, the body bytes
            held across connections, encoding layers, gzip members, JSON depth, timeouts).
        on_shutdown: called (in a worker thread) when the ASGI server stops the app; by default
            ``router.shutdown`` (open samples logged as partial, runs finished).
        budget: the request bytes held at once (shared with the receiver's OTLP/gRPC door);
            default: one of ``limits.inflight_bytes`` for this app alone.
        proxy: the OpenAI-compatible routes of ``serve --upstream`` (:mod:`.proxy`), if any.
    """
    limits = limits or DEFAULT_LIMITS
    if max_body_bytes is not None:
        limits = dataclasses.replace(limits, max_body_bytes=max_body_bytes)
    auth = BearerCheck(token)
    budget = budget or BodyBudget(limits.inflight_bytes)
    item_limits = ItemLimits(router.settings.max_span_attributes, router.settings.max_span_events)
    warn = Warnings(every_seconds=60.0)
    # JSON costs ~10x its size in Python objects while parsed (protobuf ~5x, outside Python):
    # large JSON bodies are parsed one at a time, so their peak memory does not add up.
    large_json = threading.BoundedSemaphore(1)

    async def handle(
        request: Request, process: Callable[[bytes, str | None, Encoding, BodyClaim], Any]
    ) -> Response:
        content_type = request.headers.get("content-type")
        encoding: Encoding = "json" if "json" in (content_type or "").lower() else "protobuf"
        claim = budget.claim()
        try:
            if not auth.allows(request.headers.get("authorization")):
                raise RequestError(401, "missing or wrong bearer token")
            encoding = encoding_of(content_type)
            body = await read_body(
                request.receive, request.headers.get("content-length"), limits, claim
            )
            content_encoding = request.headers.get("content-encoding")
            message = await run_in_threadpool(process, body, content_encoding, encoding, claim)
        except RequestError as exc:
            router.count_refused(exc.status)
            if exc.warn:
                client = request.client
                source = f"{client.host}:{client.port}" if client else "a client"
                warn(str(exc.status), f"refused a request from {source}: {exc.status} {exc}")
            return _error(exc.status, exc.message, encoding, exc.headers)
        except ReceiverUnavailable as exc:  # shutting down, the spool is full, no route left
            return _error(503, str(exc), encoding, {"Retry-After": str(exc.retry_after_seconds)})
        except Exception as exc:
            _logger.exception("otel-trackio: receiver failed on a request")
            return _error(500, f"internal error: {exc!r}", encoding)
        finally:
            claim.release()
        return Response(encode_message(message, encoding), media_type=_MEDIA_TYPES[encoding])

    def endpoint(signal: Signal) -> Callable[[Request], Awaitable[Response]]:
        """One OTLP signal: body → decompressed → parsed → exported → its response message."""

        def process(
            body: bytes, content_encoding: str | None, encoding: Encoding, claim: BodyClaim
        ) -> Message:
            data = decompress(body, content_encoding, limits, claim.take)
            slot = large_json if encoding == "json" and len(data) > SMALL_REQUEST_BYTES else None
            with slot or contextlib.nullcontext():
                request = parse_request(
                    data, encoding, signal.request_type, limits.max_json_depth, item_limits
                )
            del data  # the decoded request is all that is needed from here
            outcome = signal.export(router, request, item_limits)
            return signal.respond(outcome.rejected, outcome.message)

        async def receive(request: Request) -> Response:
            with router.in_flight.taking():  # until answered: maybe not in the spool yet
                return await handle(request, process)

        return receive

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            if proxy is not None:  # its open samples end (partial) before the runs do
                await proxy.aclose()
                await run_in_threadpool(proxy.close)
            await run_in_threadpool(on_shutdown or router.shutdown)

    routes = [Route(signal.path, endpoint(signal), methods=["POST"]) for signal in SIGNALS]
    return Starlette(routes=[*routes, *(proxy.routes() if proxy else [])], lifespan=lifespan)


def _error(
    status: int, message: str, encoding: Encoding, headers: dict[str, str] | None = None
) -> Response:
    if status == 401:
        headers = {**(headers or {}), "WWW-Authenticate": "Bearer"}
    return Response(
        status_body(status, message, encoding),
        status_code=status,
        media_type=_MEDIA_TYPES[encoding],
        headers=headers,
    )
