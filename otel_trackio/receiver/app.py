"""The ASGI app: ``POST /v1/traces``, ``/v1/metrics`` and ``/v1/logs`` as OTLP/HTTP says.

The event loop only reads bodies and writes responses; decompressing, decoding and every Trackio
call run in Starlette's thread pool (``run_in_threadpool``).
"""

from __future__ import annotations

import contextlib
import hmac
import logging
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

from otel_trackio._codec.otlp import decode_logs, decode_metrics, decode_traces
from otel_trackio.receiver._decode import (
    Encoding,
    M,
    RequestError,
    decompress,
    encode_message,
    encoding_of,
    logs_response,
    metrics_response,
    parse_request,
    status_body,
    trace_response,
)
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._stats import Outcome

_logger = logging.getLogger("otel_trackio.receiver")

DEFAULT_MAX_BODY_BYTES = 20 * 1024 * 1024
_MEDIA_TYPES: dict[Encoding, str] = {
    "protobuf": "application/x-protobuf",
    "json": "application/json",
}


def create_app(
    router: Router,
    *,
    token: str | None = None,
    max_body_bytes: int = DEFAULT_MAX_BODY_BYTES,
    on_shutdown: Callable[[], None] | None = None,
) -> Starlette:
    """An OTLP/HTTP receiver app feeding ``router``.

    Args:
        router: where decoded spans, GenAI log events and metrics go.
        token: when set, requests need ``Authorization: Bearer <token>`` (else 401).
        max_body_bytes: limit for the body and, separately, for the decompressed body (413).
        on_shutdown: called (in a worker thread) when the ASGI server stops the app; by default
            ``router.shutdown`` (open samples logged as partial, runs finished).
    """
    expected = f"Bearer {token}".encode() if token else None

    def authorized(request: Request) -> bool:
        if expected is None:
            return True
        given = request.headers.get("authorization", "").encode("utf-8", "replace")
        return hmac.compare_digest(given, expected)

    async def handle(
        request: Request, process: Callable[[bytes, str | None, Encoding], Any]
    ) -> Response:
        content_type = request.headers.get("content-type")
        encoding: Encoding = "json" if "json" in (content_type or "").lower() else "protobuf"
        try:
            if not authorized(request):
                raise RequestError(401, "missing or wrong bearer token")
            encoding = encoding_of(content_type)
            body = await _read_body(request, max_body_bytes)
            content_encoding = request.headers.get("content-encoding")
            message = await run_in_threadpool(process, body, content_encoding, encoding)
        except RequestError as exc:
            router.count_refused()
            return _error(exc.status, exc.message, encoding)
        except ReceiverUnavailable as exc:  # shutting down, or the spool is full
            return _error(503, str(exc), encoding, {"Retry-After": str(exc.retry_after_seconds)})
        except Exception as exc:
            _logger.exception("otel-trackio: receiver failed on a request")
            return _error(500, f"internal error: {exc!r}", encoding)
        return Response(encode_message(message, encoding), media_type=_MEDIA_TYPES[encoding])

    def endpoint(
        message_type: type[M],
        export: Callable[[M], Outcome],
        respond: Callable[[int, str], Message],
    ) -> Callable[[Request], Awaitable[Response]]:
        """One OTLP signal: body → decompressed → parsed → exported → its response message."""

        def process(body: bytes, content_encoding: str | None, encoding: Encoding) -> Message:
            data = decompress(body, content_encoding, max_body_bytes)
            outcome = export(parse_request(data, encoding, message_type))
            return respond(outcome.rejected, outcome.message)

        async def receive(request: Request) -> Response:
            return await handle(request, process)

        return receive

    traces = endpoint(
        trace_service_pb2.ExportTraceServiceRequest,
        lambda request: router.export_spans(decode_traces(request)),
        trace_response,
    )
    metrics = endpoint(
        metrics_service_pb2.ExportMetricsServiceRequest,
        lambda request: router.export_metrics(decode_metrics(request)),
        metrics_response,
    )
    logs = endpoint(
        logs_service_pb2.ExportLogsServiceRequest,
        lambda request: router.export_logs(decode_logs(request)),
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


async def _read_body(request: Request, limit: int) -> bytes:
    """The raw body, refusing (413) as soon as it is known to be over ``limit``."""
    declared = request.headers.get("content-length")
    if declared is not None:
        try:
            length = int(declared)
        except ValueError:
            raise RequestError(400, f"bad Content-Length {declared!r}") from None
        if length > limit:
            raise RequestError(413, f"body of {length} bytes is over the {limit}-byte limit")
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise RequestError(413, f"body is over the {limit}-byte limit")
        chunks.append(chunk)
    return b"".join(chunks)


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
