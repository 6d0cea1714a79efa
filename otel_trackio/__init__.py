"""otel-trackio: OpenTelemetry exporters for Hugging Face Trackio.

Rollout code emits plain OTel spans tagged with ``step`` and ``sample_index``; the span exporter
logs one ``trackio.Trace`` per rollout sample at that step, and the metric exporter turns OTel
instruments into Trackio scalars.
"""

from __future__ import annotations

from ._open_samples import lookup_open_sample, register_open_sample, unregister_open_sample
from ._steps import latest_step, set_step
from .exporter import ExportStats, TrackioSpanExporter

__version__ = "0.1.0"

__all__ = [
    "ExportStats",
    "TrackioSpanExporter",
    "__version__",
    "latest_step",
    "lookup_open_sample",
    "register_open_sample",
    "set_step",
    "unregister_open_sample",
]
