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
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from otel_trackio._codec.otlp import ItemLimits, decode_logs, decode_metrics, decode_traces
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
    M,
    RequestError,
    encode_message,
    encoding_of,
    logs_response,
    metrics_response,
    parse_request,
    status_body,
    trace_response,
)
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._limits import DEFAULT_LIMITS, ReceiverLimits
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._stats import Outcome

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
    """
    limits = limits or DEFAULT_LIMITS
    if max_body_bytes is not None:
        limits = dataclasses.replace(limits, max_body_bytes=max_body_bytes)
    auth = BearerCheck(token)
    budget = BodyBudget(limits.inflight_bytes)
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
            router.count_refused(busy=exc.status == 503)
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

    def endpoint(
        message_type: type[M],
        export: Callable[[M], Outcome],
        respond: Callable[[int, str], Message],
    ) -> Callable[[Request], Awaitable[Response]]:
        """One OTLP signal: body → decompressed → parsed → exported → its response message."""

        def process(
            body: bytes, content_encoding: str | None, encoding: Encoding, claim: BodyClaim
        ) -> Message:
            data = decompress(body, content_encoding, limits, claim.take)
            slot = large_json if encoding == "json" and len(data) > SMALL_REQUEST_BYTES else None
            with slot or contextlib.nullcontext():
                request = parse_request(
                    data, encoding, message_type, limits.max_json_depth, item_limits
                )
            del data  # the decoded request is all that is needed from here
            outcome = export(request)
            return respond(outcome.rejected, outcome.message)

        async def receive(request: Request) -> Response:
            with router.in_flight.taking():  # until answered: maybe not in the spool yet
                return await handle(request, process)

        return receive

    traces = endpoint(
        trace_service_pb2.ExportTraceServiceRequest,
        lambda request: router.export_spans(decode_traces(request, item_limits)),
        trace_response,
    )
    metrics = endpoint(
        metrics_service_pb2.ExportMetricsServiceRequest,
        lambda request: router.export_metrics(decode_metrics(request)),
        metrics_response,
    )
    logs = endpoint(
        logs_service_pb2.ExportLogsServiceRequest,
        lambda request: router.export_logs(decode_logs(request, item_limits)),
        logs_response,
    )

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        try:
            yield
        finally:
            await run_in_threadpool(on_shutdown or router.shutdown)

    return Starlette(
        routes=[
            Route("/v1/traces", traces, methods=["POST"]),
            Route("/v1/metrics", metrics, methods=["POST"]),
            Route("/v1/logs", logs, methods=["POST"]),
        ],
        lifespan=lifespan,
    )


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
