"""otel-trackio: OpenTelemetry exporters for Hugging Face Trackio.

Rollout code emits plain OTel spans tagged with ``step`` and ``sample_index``; the span exporter
logs one ``trackio.Trace`` per rollout sample at that step, and the metric exporter turns OTel
instruments into Trackio scalars.
"""

from __future__ import annotations

from ._open_samples import lookup_open_sample, register_open_sample, unregister_open_sample
from ._steps import latest_step, set_step
from .exporter import ExportStats, TrackioSpanExporter
from .generations import log_generations
from .instrument import rollout, traced
from .metrics import MetricExportStats, TrackioMetricExporter
from .sampling import StepSampler
from .setup import TrackioTelemetry, configure

__version__ = "0.1.0"

__all__ = [
    "ExportStats",
    "MetricExportStats",
    "StepSampler",
    "TrackioMetricExporter",
    "TrackioSpanExporter",
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
