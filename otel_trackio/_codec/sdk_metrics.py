"""SDK ``MetricsData`` ↔ bytes: how ``offload=True`` hands the rollout process's metrics to its
writer process (which logs them with the same :class:`~otel_trackio.TrackioMetricExporter` logic
as in process).

The SDK's metric points are plain dataclasses and pickle as they are; only a resource's and an
instrumentation scope's attributes (``BoundedAttributes``, which hold a lock) do not, so those two
travel as plain values and are built again on the other side. No protobuf, no OTLP exporter: the
rollout process needs nothing beyond the SDK. The rollout's latest step (``set_step``) rides
along, for points without a ``step`` attribute.
"""

from __future__ import annotations

import pickle
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData, ResourceMetrics, ScopeMetrics
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

_PROTOCOL = pickle.HIGHEST_PROTOCOL


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
    return pickle.dumps((latest_step, resources), _PROTOCOL)


def decode_sdk_metrics(payload: bytes) -> tuple[int | None, MetricsData]:
    """What :func:`encode_sdk_metrics` made: (the producer's latest step, the metrics)."""
    latest_step, resources = pickle.loads(payload)
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
