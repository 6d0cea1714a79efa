"""The three OTLP signals as both transports serve them: one table, so OTLP/HTTP (``app.py``) and
OTLP/gRPC (``_grpc.py``) parse, export and answer a request the same way.

A request message becomes records (:mod:`otel_trackio._codec.otlp`), the router spools them and
says what it rejected, and the answer carries that ``partial_success``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from google.protobuf.message import Message
from opentelemetry.proto.collector.logs.v1 import logs_service_pb2
from opentelemetry.proto.collector.metrics.v1 import metrics_service_pb2
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from otel_trackio._codec.otlp import ItemLimits, decode_logs, decode_metrics, decode_traces
from otel_trackio.receiver._decode import logs_response, metrics_response, trace_response
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._stats import Outcome


@dataclass(frozen=True)
class Signal:
    """One OTLP signal: where it is served, its request message, how it is exported."""

    path: str
    """The OTLP/HTTP path (``/v1/traces``)."""
    grpc_service: str
    """The gRPC service's full name, from ``opentelemetry-proto``'s generated descriptors."""
    request_type: type[Message]
    export: Callable[[Router, Any, ItemLimits], Outcome]
    """Decode a parsed request into records and spool them through the router."""
    respond: Callable[[int, str], Message]
    """The response message: how many items were rejected, and why."""


def _service(module: Any, name: str) -> str:
    return str(module.DESCRIPTOR.services_by_name[name].full_name)


SIGNALS = (
    Signal(
        "/v1/traces",
        _service(trace_service_pb2, "TraceService"),
        trace_service_pb2.ExportTraceServiceRequest,
        lambda router, request, limits: router.export_spans(decode_traces(request, limits)),
        trace_response,
    ),
    Signal(
        "/v1/metrics",
        _service(metrics_service_pb2, "MetricsService"),
        metrics_service_pb2.ExportMetricsServiceRequest,
        lambda router, request, limits: router.export_metrics(decode_metrics(request)),
        metrics_response,
    ),
    Signal(
        "/v1/logs",
        _service(logs_service_pb2, "LogsService"),
        logs_service_pb2.ExportLogsServiceRequest,
        lambda router, request, limits: router.export_logs(decode_logs(request, limits)),
        logs_response,
    ),
)
