"""otel-trackio: OpenTelemetry exporters for Hugging Face Trackio.

Rollout code emits plain OTel spans tagged with ``step`` and ``sample_index``; the span exporter
logs one ``trackio.Trace`` per rollout sample at that step (the log exporter adds GenAI events
sent as log records to it), and the metric exporter turns OTel instruments into Trackio scalars.
Every setting lives in :class:`TrackioSettings`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from otel_trackio._engine.report import RunSummary
from otel_trackio._engine.steps import latest_step, set_step
from otel_trackio._trackio.installed import RunLike
from otel_trackio.instrument import rollout, traced
from otel_trackio.log_exporter import LogExportStats, TrackioLogExporter
from otel_trackio.metric_exporter import MetricExportStats, TrackioMetricExporter
from otel_trackio.sampling import StepSampler
from otel_trackio.settings import TrackioConfigError, TrackioSettings
from otel_trackio.span_exporter import ExportStats, TrackioSpanExporter
from otel_trackio.span_processor import OpenSampleTracker, TrackioSpanProcessor
from otel_trackio.telemetry import TrackioTelemetry, configure

if TYPE_CHECKING:
    from otel_trackio.validation import log_generations

__version__ = "0.1.0"

# Imported on first use: the Trace conversion they need stays out of a rollout process that only
# offloads (fewer objects for its garbage collector to walk on the event loop's thread).
_LAZY = {"log_generations": "otel_trackio.validation"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'otel_trackio' has no attribute {name!r}")
    import importlib

    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


__all__ = [
    "ExportStats",
    "LogExportStats",
    "MetricExportStats",
    "OpenSampleTracker",
    "RunLike",
    "RunSummary",
    "StepSampler",
    "TrackioConfigError",
    "TrackioLogExporter",
    "TrackioMetricExporter",
    "TrackioSettings",
    "TrackioSpanExporter",
    "TrackioSpanProcessor",
    "TrackioTelemetry",
    "__version__",
    "configure",
    "latest_step",
    "log_generations",
    "rollout",
    "set_step",
    "traced",
]
