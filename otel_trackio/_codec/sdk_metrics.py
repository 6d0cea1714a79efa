"""SDK ``MetricsData`` ↔ bytes: how ``offload=True`` hands the rollout process's metrics to its
writer process (which logs them with the same :class:`~otel_trackio.TrackioMetricExporter` logic
as in process).

The SDK's metric points are plain dataclasses and travel as the map of their fields
(:mod:`.packing`: the writer builds only the classes named here); a resource and an
instrumentation scope (whose ``BoundedAttributes`` hold a lock) travel as plain values and are
built again on the other side. No protobuf, no OTLP exporter: the
rollout process needs nothing beyond the SDK. The rollout's latest step (``set_step``) rides
along, for points without a ``step`` attribute.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.metrics import Exemplar
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Buckets,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_trackio._codec.packing import Classes, pack, unpack


def _with_temporality(cls: type) -> Callable[[dict[str, Any]], Any]:
    """How ``cls`` is built again: its temporality travels as the enum's integer."""

    def build(fields: dict[str, Any]) -> Any:
        temporality = AggregationTemporality(fields.pop("aggregation_temporality"))
        return cls(aggregation_temporality=temporality, **fields)

    return build


_POINT_CLASSES = Classes.of(
    Buckets,
    Exemplar,
    ExponentialHistogram,
    ExponentialHistogramDataPoint,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    NumberDataPoint,
    Sum,
    build={cls: _with_temporality(cls) for cls in (Sum, Histogram, ExponentialHistogram)},
)
"""The SDK's data classes a metrics payload may hold (the order is part of the format)."""


def encode_sdk_metrics(data: MetricsData, latest_step: int | None = None) -> bytes:
    """``data`` (and the producer's latest step) as bytes for a spool entry."""
    resources = [
        (
            dict(rm.resource.attributes),
            rm.resource.schema_url,
            rm.schema_url,
            [(_scope(sm.scope), sm.metrics, sm.schema_url) for sm in rm.scope_metrics],
        )
        for rm in data.resource_metrics
    ]
    return pack((latest_step, resources), _POINT_CLASSES)


def decode_sdk_metrics(payload: bytes) -> tuple[int | None, MetricsData]:
    """What :func:`encode_sdk_metrics` made: (the producer's latest step, the metrics)."""
    latest_step, resources = unpack(payload, _POINT_CLASSES)
    return latest_step, MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource(attributes, resource_schema),
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope(*scope), metrics=metrics, schema_url=url
                    )
                    for scope, metrics, url in scopes
                ],
                schema_url=schema_url,
            )
            for attributes, resource_schema, schema_url, scopes in resources
        ]
    )


def _scope(scope: InstrumentationScope) -> tuple[Any, ...]:
    attributes = getattr(scope, "attributes", None)
    return (scope.name, scope.version, scope.schema_url, dict(attributes) if attributes else None)
