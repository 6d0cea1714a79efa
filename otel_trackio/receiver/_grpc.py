"""OTLP/gRPC: the receiver's second door, beside OTLP/HTTP, served by ``grpcio``.

The three collector services of ``opentelemetry-proto`` (``TraceService``, ``MetricsService``,
``LogsService``, by the full names of its generated descriptors) answer ``Export`` on the same
router, spool, acknowledgement rule, limits and token as OTLP/HTTP (:mod:`._signals`): OK only once
the data is spooled, with ``partial_success`` for rejected items. Refusals get the status the
official exporters act on:

- ``UNAUTHENTICATED``: the ``authorization`` metadata lacks the bearer token;
- ``RESOURCE_EXHAUSTED``: a message over ``max_body_bytes`` (compressed or not: grpcio checks
  both), or too many calls at once;
- ``INVALID_ARGUMENT``: a message that does not decode;
- ``UNAVAILABLE`` with ``google.rpc.RetryInfo`` (the exporters wait that long, then send again):
  the spool is full, storage stalls, the request bodies held are at their bound, or the
  receiver is stopping.

grpcio does HTTP/2, decompression (gzip) and the message size limit; a request's bytes are
parsed here, so that undecodable data is told apart from a failure of ours.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import grpc
from google.protobuf.duration_pb2 import Duration
from google.protobuf.message import Message
from google.rpc.error_details_pb2 import RetryInfo

from otel_trackio._codec.otlp import ItemLimits
from otel_trackio._engine.warn import Warnings
from otel_trackio.receiver._auth import BearerCheck
from otel_trackio.receiver._body import BodyBudget
from otel_trackio.receiver._decode import RequestError, parse_request
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._limits import ReceiverLimits
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._signals import SIGNALS, Signal

_logger = logging.getLogger("otel_trackio.receiver")

MAX_WORKERS = 16
"""Threads answering calls at most; more calls wait for one (up to :data:`MAX_CONCURRENT_CALLS`).
A call's message is read on its worker thread, so the workers bound the messages held at once:
as many as ``max_inflight_bytes`` holds of ``max_body_bytes``-sized ones (at least 2)."""
MAX_CONCURRENT_CALLS = 256
"""Calls taken at once, waiting ones included; past it grpcio answers ``RESOURCE_EXHAUSTED``
before reading the message (the clients retry)."""

_STATUS_OF_HTTP = {
    400: grpc.StatusCode.INVALID_ARGUMENT,
    401: grpc.StatusCode.UNAUTHENTICATED,
    413: grpc.StatusCode.RESOURCE_EXHAUSTED,
    415: grpc.StatusCode.INVALID_ARGUMENT,
    503: grpc.StatusCode.UNAVAILABLE,
}
_RETRY_INFO = "google.rpc.retryinfo-bin"


def workers(limits: ReceiverLimits) -> int:
    """Worker threads for ``limits``: the request bytes held stay within the HTTP side's bound."""
    return max(2, min(MAX_WORKERS, limits.inflight_bytes // max(1, limits.max_body_bytes)))


def _retry_after(seconds: float) -> tuple[tuple[str, bytes], ...]:
    delay = Duration(seconds=int(seconds), nanos=int((seconds % 1) * 1e9))
    return ((_RETRY_INFO, RetryInfo(retry_delay=delay).SerializeToString()),)


class GrpcListener:
    """An OTLP/gRPC server on ``host:port`` (0: a free port, see :attr:`port`) feeding
    ``router``; ``budget`` is the request bytes held at once, shared with the HTTP side."""

    def __init__(
        self,
        router: Router,
        *,
        host: str,
        port: int,
        token: str | None,
        limits: ReceiverLimits,
        budget: BodyBudget,
    ) -> None:
        self._router = router
        self._limits = limits
        self._budget = budget
        self._auth = BearerCheck(token)
        self._items = ItemLimits(
            router.settings.max_span_attributes, router.settings.max_span_events
        )
        self._warn = Warnings(every_seconds=60.0)
        self._server = grpc.server(
            ThreadPoolExecutor(max_workers=workers(limits), thread_name_prefix="otel-trackio-grpc"),
            options=[
                ("grpc.max_receive_message_length", limits.max_body_bytes),
                ("grpc.so_reuseport", 0),  # a port another receiver holds is refused
            ],
            maximum_concurrent_rpcs=MAX_CONCURRENT_CALLS,
        )
        self._server.add_generic_rpc_handlers(
            [
                grpc.method_handlers_generic_handler(
                    signal.grpc_service,
                    {
                        "Export": grpc.unary_unary_rpc_method_handler(
                            self._export(signal),
                            request_deserializer=None,  # the bytes: parsed in _export
                            response_serializer=_serialise,
                        )
                    },
                )
                for signal in SIGNALS
            ]
        )
        address = f"[{host.strip('[]')}]:{port}" if ":" in host.strip("[]") else f"{host}:{port}"
        try:
            bound = self._server.add_insecure_port(address)
        except RuntimeError as exc:
            raise OSError(f"cannot listen for OTLP/gRPC on {address}: {exc}") from None
        if not bound:
            raise OSError(f"cannot listen for OTLP/gRPC on {address}: the port is taken")
        self.port: int = bound

    def start(self) -> None:
        """Serve on grpcio's threads."""
        self._server.start()

    def stop(self, grace_seconds: float = 5.0) -> None:
        """Stop taking calls; calls in progress get ``grace_seconds`` to finish."""
        self._server.stop(grace_seconds).wait()

    def _export(self, signal: Signal) -> Callable[[bytes, grpc.ServicerContext], Message]:
        router, limits, items = self._router, self._limits, self._items

        def export(data: bytes, context: grpc.ServicerContext) -> Message:
            with router.in_flight.taking():  # until answered: maybe not in the spool yet
                claim = self._budget.claim()
                refusal: tuple[grpc.StatusCode, str, tuple[tuple[str, bytes], ...]]
                try:
                    metadata = dict(context.invocation_metadata() or ())
                    if not self._auth.allows(_text(metadata.get("authorization"))):
                        raise RequestError(401, "missing or wrong bearer token")
                    claim.take(len(data))
                    request = parse_request(
                        data, "protobuf", signal.request_type, limits.max_json_depth, items
                    )
                    del data
                    outcome = signal.export(router, request, items)
                    return signal.respond(outcome.rejected, outcome.message)
                except RequestError as exc:
                    router.count_refused(exc.status)
                    if exc.warn:
                        self._warn(
                            str(exc.status), f"refused a gRPC call from {context.peer()}: {exc}"
                        )
                    code = _STATUS_OF_HTTP.get(exc.status, grpc.StatusCode.INTERNAL)
                    retry = _retry_after(1) if code == grpc.StatusCode.UNAVAILABLE else ()
                    refusal = (code, exc.message, retry)
                except ReceiverUnavailable as exc:
                    refusal = (
                        grpc.StatusCode.UNAVAILABLE,
                        str(exc),
                        _retry_after(exc.retry_after_seconds),
                    )
                except Exception as exc:  # answered, never a dead worker
                    _logger.exception("otel-trackio: receiver failed on a gRPC call")
                    refusal = (grpc.StatusCode.INTERNAL, f"internal error: {exc!r}", ())
                finally:
                    claim.release()
            code, message, trailing = refusal
            if trailing:
                context.set_trailing_metadata(trailing)
            context.abort(code, message)
            raise AssertionError("unreachable: abort() raises")

        return export


def _serialise(message: Message) -> bytes:
    data: bytes = message.SerializeToString()
    return data


def _text(value: Any) -> str | None:
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value if isinstance(value, str) else None
