"""OTLP/HTTP bodies: content types, protobuf and OTLP JSON into request messages,
and the responses and error statuses back (what the records are made of the messages is
:mod:`otel_trackio._codec.otlp`'s).

Parsing uses the official ``opentelemetry-proto`` messages (``google.protobuf`` does the wire
format and, for JSON bodies, ``json_format``). OTLP JSON differs from protobuf's canonical JSON in
one way that matters here: trace and span ids are hex strings, not base64; :func:`parse_request`
rewrites them before parsing (and bounds the document's depth and its attribute lists). Request
bodies are read and decompressed in :mod:`._body`.

Every function raises :class:`RequestError` (with the HTTP status to answer) on bad input.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Mapping
from typing import Any, Literal, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from otel_trackio._codec.otlp import NO_LIMITS, ItemLimits

Encoding = Literal["protobuf", "json"]
M = TypeVar("M", bound=Message)

_CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


class RequestError(ValueError):
    """A request the receiver refuses, with the HTTP status and a message for the client.

    ``headers`` go on the answer (``Retry-After``, ``Connection: close``); ``warn``: the
    receiver also logs a (rate-limited) warning line, for refusals an operator should see.
    """

    def __init__(
        self,
        status: int,
        message: str,
        *,
        headers: Mapping[str, str] | None = None,
        warn: bool = False,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.headers = dict(headers or {})
        self.warn = warn


# -- content type and encoding -----------------------------------------------------------------


def encoding_of(content_type: str | None) -> Encoding:
    """``"protobuf"`` or ``"json"`` from a Content-Type header; 415 for anything else."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    encoding = _CONTENT_TYPES.get(media)
    if encoding is None:
        raise RequestError(
            415,
            f"unsupported content type {content_type!r}: OTLP/HTTP takes "
            "application/x-protobuf or application/json",
        )
    return encoding


# -- parsing -----------------------------------------------------------------------------------


#: the nesting of a JSON body allowed by default (arrays and objects; see ``ReceiverLimits``).
MAX_JSON_DEPTH = 128


def parse_request(
    body: bytes,
    encoding: Encoding,
    message_type: type[M],
    max_json_depth: int = MAX_JSON_DEPTH,
    limits: ItemLimits = NO_LIMITS,
) -> M:
    """Parse an OTLP request message from protobuf bytes or OTLP JSON; 400 when malformed or,
    for JSON, nested deeper than ``max_json_depth`` (checked before any recursive step). JSON
    attribute and event lists are cut to ``limits`` before the message is built (the cut counted
    in ``droppedAttributesCount`` / ``droppedEventsCount``), as building it is the costly part."""
    message: M = message_type()
    if encoding == "protobuf":
        try:
            message.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise RequestError(400, f"malformed protobuf body: {exc}") from None
        return message
    try:
        document = json.loads(body)
    except RecursionError:  # the C parser's own guard, far deeper than max_json_depth
        raise _too_deep(max_json_depth) from None
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(document, dict):
        raise RequestError(400, "malformed JSON body: the top level must be an object")
    _prepare_json(document, max_json_depth, limits)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise RequestError(400, f"malformed OTLP JSON: {exc}") from None
    return message


def _too_deep(max_depth: int) -> RequestError:
    return RequestError(
        400, f"malformed OTLP JSON: nested deeper than {max_depth} levels", warn=True
    )


def _prepare_json(document: dict[str, Any], max_depth: int, limits: ItemLimits) -> None:
    """Make OTLP JSON protobuf JSON, bounded: trace/span ids from hex to base64 (protobuf JSON
    expects base64 for bytes fields), attribute and event lists cut to ``limits``.

    Walks the document with an explicit stack (no recursion), refusing it past ``max_depth``.
    """
    stack: list[tuple[Any, int]] = [(document, 1)]
    while stack:
        node, depth = stack.pop()
        if depth > max_depth:
            raise _too_deep(max_depth)
        if isinstance(node, dict):
            _cut(node, "attributes", limits.attributes, "droppedAttributesCount")
            _cut(node, "events", limits.events, "droppedEventsCount")
            for key, value in node.items():
                if key in _ID_KEYS and isinstance(value, str):
                    try:
                        raw = bytes.fromhex(value)
                    except ValueError:
                        raise RequestError(
                            400, f"malformed OTLP JSON: {key} {value[:40]!r} is not a hex string"
                        ) from None
                    node[key] = base64.b64encode(raw).decode("ascii")
                elif isinstance(value, (dict, list)):
                    stack.append((value, depth + 1))
        else:
            stack.extend((item, depth + 1) for item in node if isinstance(item, (dict, list)))


def _cut(node: dict[str, Any], key: str, limit: int | None, counter: str) -> None:
    """Keep the first ``limit`` items of the list ``node[key]``, adding the rest to the count
    ``node[counter]`` (which protobuf ignores on messages without that field)."""
    items = node.get(key)
    if limit is None or not isinstance(items, list) or len(items) <= limit:
        return
    before = node.get(counter)
    dropped = int(str(before)) if isinstance(before, int) or str(before).isdigit() else 0
    node[key] = items[:limit]
    node[counter] = dropped + len(items) - limit


def encode_message(message: Message, encoding: Encoding) -> bytes:
    """A response message in the request's encoding (OTLP JSON for ``"json"``)."""
    if encoding == "protobuf":
        return bytes(message.SerializeToString())
    return str(json_format.MessageToJson(message, indent=None)).encode("utf-8")


def status_body(status: int, message: str, encoding: Encoding) -> bytes:
    """An error response body: a ``google.rpc.Status`` in the request's encoding."""
    return encode_message(status_pb2.Status(code=_grpc_code(status), message=message), encoding)


def _grpc_code(status: int) -> int:
    return {400: 3, 401: 16, 413: 8, 415: 3, 429: 8, 503: 14}.get(status, 13)


# -- responses ------------------------------------------------------------------------------


def trace_response(rejected: int, message: str) -> trace_service_pb2.ExportTraceServiceResponse:
    """An ``ExportTraceServiceResponse``; ``partial_success`` only when there is news."""
    response = trace_service_pb2.ExportTraceServiceResponse()
    if rejected or message:
        response.partial_success.rejected_spans = rejected
        response.partial_success.error_message = message
    return response


def logs_response(rejected: int, message: str) -> logs_service_pb2.ExportLogsServiceResponse:
    """An ``ExportLogsServiceResponse``; ``partial_success`` only when there is news."""
    response = logs_service_pb2.ExportLogsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_log_records = rejected
        response.partial_success.error_message = message
    return response


def metrics_response(
    rejected: int, message: str
) -> metrics_service_pb2.ExportMetricsServiceResponse:
    """An ``ExportMetricsServiceResponse``; ``partial_success`` only when there is news."""
    response = metrics_service_pb2.ExportMetricsServiceResponse()
    if rejected or message:
        response.partial_success.rejected_data_points = rejected
        response.partial_success.error_message = message
    return response
