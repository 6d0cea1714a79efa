"""OTLP/HTTP bodies: content types, compression, protobuf and OTLP JSON into request messages,
and the responses and error statuses back (what the records are made of the messages is
:mod:`otel_trackio._codec.otlp`'s).

Parsing uses the official ``opentelemetry-proto`` messages (``google.protobuf`` does the wire
format and, for JSON bodies, ``json_format``). OTLP JSON differs from protobuf's canonical JSON in
one way that matters here: trace and span ids are hex strings, not base64; :func:`parse_request`
rewrites them before parsing.

Every function raises :class:`RequestError` (with the HTTP status to answer) on bad input.
"""

from __future__ import annotations

import base64
import json
import zlib
from typing import Any, Literal, TypeVar

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import status_pb2
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

Encoding = Literal["protobuf", "json"]
M = TypeVar("M", bound=Message)

_CONTENT_TYPES: dict[str, Encoding] = {
    "application/x-protobuf": "protobuf",
    "application/protobuf": "protobuf",
    "application/json": "json",
}
_ID_KEYS = frozenset({"traceId", "spanId", "parentSpanId", "trace_id", "span_id", "parent_span_id"})


class RequestError(ValueError):
    """A request the receiver refuses, with the HTTP status and a message for the client."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


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


def decompress(body: bytes, content_encoding: str | None, limit: int) -> bytes:
    """Undo ``Content-Encoding`` (gzip, deflate, identity), never producing more than ``limit``.

    Decompression streams with a cap, so a small compressed bomb fails with 413 after ``limit``
    bytes instead of filling memory.
    """
    codings = [c.strip().lower() for c in (content_encoding or "").split(",") if c.strip()]
    data = body
    for coding in reversed(codings):  # the last coding listed was applied last
        if coding in ("identity", ""):
            continue
        if coding in ("gzip", "x-gzip"):
            data = _inflate(data, 16 + zlib.MAX_WBITS, limit, "gzip")
        elif coding == "deflate":
            zlib_header = (
                len(data) >= 2 and data[0] & 0x0F == 8 and (data[0] << 8 | data[1]) % 31 == 0
            )
            data = _inflate(data, zlib.MAX_WBITS if zlib_header else -zlib.MAX_WBITS, limit, coding)
        else:
            raise RequestError(
                415, f"unsupported Content-Encoding {coding!r}: use gzip, deflate or none"
            )
    if len(data) > limit:
        raise RequestError(413, f"body is over the {limit}-byte limit")
    return data


def _inflate(data: bytes, wbits: int, limit: int, name: str) -> bytes:
    out = bytearray()
    pending = data
    inflater = zlib.decompressobj(wbits)
    try:
        while True:
            chunk = inflater.decompress(pending, limit + 1 - len(out))
            out += chunk
            if len(out) > limit:
                raise RequestError(413, f"decompressed body is over the {limit}-byte limit")
            pending = inflater.unconsumed_tail
            if inflater.eof:
                rest = inflater.unused_data
                if name == "gzip" and rest.strip(b"\0"):
                    inflater, pending = zlib.decompressobj(wbits), rest  # another gzip member
                    continue
                return bytes(out)
            if not pending and not chunk:
                raise RequestError(400, f"truncated {name} body")
    except zlib.error as exc:
        raise RequestError(400, f"body is not valid {name} data: {exc}") from None


# -- parsing -----------------------------------------------------------------------------------


def parse_request(body: bytes, encoding: Encoding, message_type: type[M]) -> M:
    """Parse an OTLP request message from protobuf bytes or OTLP JSON; 400 when malformed."""
    message: M = message_type()
    if encoding == "protobuf":
        try:
            message.ParseFromString(body)
        except (DecodeError, ValueError, RuntimeError) as exc:
            raise RequestError(400, f"malformed protobuf body: {exc}") from None
        return message
    try:
        document = json.loads(body)
    except (UnicodeDecodeError, ValueError) as exc:
        raise RequestError(400, f"malformed JSON body: {exc}") from None
    if not isinstance(document, dict):
        raise RequestError(400, "malformed JSON body: the top level must be an object")
    _hex_ids_to_base64(document)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError) as exc:
        raise RequestError(400, f"malformed OTLP JSON: {exc}") from None
    return message


def _hex_ids_to_base64(node: Any) -> None:
    """OTLP JSON writes trace/span ids as hex; protobuf JSON expects base64 for bytes fields."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _ID_KEYS and isinstance(value, str):
                try:
                    raw = bytes.fromhex(value)
                except ValueError:
                    raise RequestError(
                        400, f"malformed OTLP JSON: {key} {value[:40]!r} is not a hex string"
                    ) from None
                node[key] = base64.b64encode(raw).decode("ascii")
            else:
                _hex_ids_to_base64(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids_to_base64(item)


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
