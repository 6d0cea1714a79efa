"""The metric exporter of ``configure()`` when a writer process holds the run (``offload=True``):
each export goes to the spool, and the writer logs it with the
:class:`~otel_trackio._engine.metrics.MetricPath` of its run engine — the same steps, series and
stats as in process, without Trackio in the rollout process."""

from __future__ import annotations

from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from otel_trackio._engine.metrics import DEFAULT_TEMPORALITY, MetricExportStats
from otel_trackio._offload.client import OffloadClient


class SpooledMetricExporter(MetricExporter):
    """Hands each metrics export to an :class:`OffloadClient`'s spool. Never raises."""

    def __init__(self, client: OffloadClient) -> None:
        super().__init__(preferred_temporality=dict(DEFAULT_TEMPORALITY))
        self._client = client
        self._shutdown = False
        self.stats = MetricExportStats()
        """What was handed over here (``exports``, ``failed_exports``); the values logged are
        the writer's to count."""

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Spool the export; FAILURE when shut down or refused (spool full or unwritable)."""
        if self._shutdown:
            return MetricExportResult.FAILURE
        self.stats.exports += 1
        try:
            ok = self._client.export_metrics(metrics_data)
        except Exception:  # noqa: BLE001 - export() must never raise
            ok = False
        if not ok:
            self.stats.failed_exports += 1
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is held here (each export is spooled at once): True unless shut down."""
        return not self._shutdown

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Stop taking exports (the spool's writer finishes what was handed over). Idempotent."""
        self._shutdown = True
