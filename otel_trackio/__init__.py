"""otel-trackio: OpenTelemetry exporters for Hugging Face Trackio.

Rollout code emits plain OTel spans tagged with ``step`` and ``sample_index``; the span exporter
logs one ``trackio.Trace`` per rollout sample at that step (the log exporter adds GenAI events
sent as log records to it), and the metric exporter turns OTel instruments into Trackio scalars.
Every setting lives in :class:`TrackioSettings`.
"""

from __future__ import annotations

from ._configure import TrackioTelemetry, configure
from ._open_samples import lookup_open_sample, register_open_sample, unregister_open_sample
from ._steps import latest_step, set_step
from .instrument import rollout, traced
from .log_exporter import LogExportStats, TrackioLogExporter
from .metric_exporter import MetricExportStats, TrackioMetricExporter
from .sampling import StepSampler
from .settings import TrackioConfigError, TrackioSettings
from .span_exporter import ExportStats, TrackioSpanExporter
from .span_processor import OpenSampleTracker, TrackioSpanProcessor
from .validation import log_generations

__version__ = "0.1.0"

__all__ = [
    "ExportStats",
    "LogExportStats",
    "MetricExportStats",
    "OpenSampleTracker",
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
    "lookup_open_sample",
    "register_open_sample",
    "rollout",
    "set_step",
    "traced",
    "unregister_open_sample",
]
