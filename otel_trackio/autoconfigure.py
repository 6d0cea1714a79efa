"""Zero-code setup: the ``trackio`` exporters the OTel SDK configurator builds with no arguments.

The configurator (used by ``opentelemetry-instrument``) finds exporters through the
``opentelemetry_traces_exporter`` / ``opentelemetry_metrics_exporter`` /
``opentelemetry_logs_exporter`` entry points and calls the class with no arguments, so the
classes here read :class:`~otel_trackio.TrackioSettings` from the environment::

    OTEL_TRACES_EXPORTER=trackio OTEL_METRICS_EXPORTER=trackio OTEL_LOGS_EXPORTER=trackio \\
    OTEL_EXPORTER_TRACKIO_PROJECT=my-rl opentelemetry-instrument python app.py

The log exporter sends GenAI log events to the span exporter of the same project and run.

A missing project or a malformed variable must not break the rest of the OTel setup: the
exporter then logs one error naming the variable and sends nothing.
"""

from __future__ import annotations

import atexit
import logging
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricExportResult,
    MetricsData,
)
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler

from otel_trackio._codec.sdk import LogRecordExporter, LogRecordExportResult
from otel_trackio._engine.intake import find_intake
from otel_trackio._engine.report import say
from otel_trackio._engine.stats import ExportStats
from otel_trackio._environment_variables import (
    OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP,
    OTEL_EXPORTER_TRACKIO_OFFLOAD,
    OTEL_EXPORTER_TRACKIO_PROJECT,
)
from otel_trackio._offload.metric_exporter import SpooledMetricExporter
from otel_trackio._plan import resolve_offload
from otel_trackio._settings import TrackioConfigError, TrackioSettings
from otel_trackio._trackio.installed import RunLike
from otel_trackio._wiring import metrics_spool
from otel_trackio.log_exporter import LogExportStats, TrackioLogExporter
from otel_trackio.metric_exporter import (
    DEFAULT_TEMPORALITY,
    MetricExportStats,
    TrackioMetricExporter,
)
from otel_trackio.sampling import StepSampler, step_sampler
from otel_trackio.span_exporter import TrackioSpanExporter
from otel_trackio.span_processor import OpenSampleTracker

_logger = logging.getLogger("otel_trackio")

__all__ = [
    "TrackioEnvLogExporter",
    "TrackioEnvMetricExporter",
    "TrackioEnvSpanExporter",
    "settings_from_env",
]


def settings_from_env(
    environ: Mapping[str, str] | None = None,
    *,
    require_project: bool = True,
    on_bad: Callable[[TrackioConfigError], None] | None = None,
    **overrides: Any,
) -> TrackioSettings:
    """:class:`TrackioSettings` from ``OTEL_EXPORTER_TRACKIO_*``, keyword arguments winning.

    Raises :class:`TrackioConfigError` naming the variable that is malformed (unless ``on_bad``
    takes it: that setting then keeps its default), or naming ``OTEL_EXPORTER_TRACKIO_PROJECT``
    when it is unset and ``require_project`` is true.
    """
    settings = TrackioSettings.from_env(environ, on_bad=on_bad, **overrides)
    # on unless told not to
    settings = resolve_offload(settings, os.environ.get(OTEL_EXPORTER_TRACKIO_OFFLOAD, ""))
    if require_project and settings.project is None:
        raise TrackioConfigError(
            f"otel-trackio: set {OTEL_EXPORTER_TRACKIO_PROJECT} to the Trackio project to log "
            f"into (e.g. {OTEL_EXPORTER_TRACKIO_PROJECT}=my-rl)"
        )
    return settings


class TrackioEnvSpanExporter(SpanExporter):
    """A :class:`TrackioSpanExporter` configured by ``OTEL_EXPORTER_TRACKIO_*`` (entry ``trackio``).

    Keyword arguments (settings, ``run=``, ``trackio.init`` options) override the environment.
    When the project is missing or a variable is malformed, construction logs one error naming
    the variable and the exporter sends nothing, so the rest of the OTel setup keeps working.

    With ``OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP`` set and the global SDK tracer provider
    still on the SDK's default sampler (no ``OTEL_TRACES_SAMPLER``), that provider gets the
    per-step sampler: the SDK configurator builds this exporter right after installing the
    provider, before any application tracer exists.
    """

    def __init__(self, *, run: RunLike | None = None, **overrides: Any) -> None:
        self.exporter: TrackioSpanExporter | None = None
        settings = _env_settings(overrides, has_run=run is not None)
        if settings is None:
            return
        self.exporter = TrackioSpanExporter(run=run, settings=settings)
        if settings.max_samples_per_step is not None:
            sampler = _install_sampler(settings)
            if isinstance(sampler, StepSampler):  # its drops go in the summary
                self.exporter.step_sampler = sampler
        # Registered after trackio.init() registered its own exit hook (which finishes the run),
        # so it runs before it: every span still queued is logged while the run is open.
        provider = trace.get_tracer_provider()
        self._exit_provider = provider if isinstance(provider, TracerProvider) else None
        if self._exit_provider is not None:
            # The configurator builds its own BatchSpanProcessor around this exporter: record
            # spans as they start beside it, so open samples show where they stopped.
            self._exit_provider.add_span_processor(
                OpenSampleTracker(settings.sample_attribute, exporter=self.exporter)
            )
        atexit.register(self._flush_at_exit)

    @property
    def run(self) -> RunLike | None:
        """The ``trackio.Run`` spans go to (None when misconfigured)."""
        return self.exporter.run if self.exporter is not None else None

    @property
    def key(self) -> str | None:
        """The Trackio key of the Traces (None when misconfigured)."""
        return self.exporter.key if self.exporter is not None else None

    @property
    def stats(self) -> ExportStats:
        """What the exporter did (all zero when misconfigured)."""
        return self.exporter.stats if self.exporter is not None else ExportStats()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        """Export to Trackio; FAILURE when misconfigured (the error was logged once)."""
        if self.exporter is None:
            return SpanExportResult.FAILURE
        return self.exporter.export(spans)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Log every open sample now (as partial)."""
        return self.exporter.force_flush(timeout_millis) if self.exporter is not None else True

    def shutdown(self) -> None:
        """Log open samples and finish the run if this exporter started it. Idempotent."""
        if self.exporter is not None:
            self.exporter.shutdown()

    def _flush_at_exit(self) -> None:
        """Log queued spans and open samples before Trackio's own exit hook finishes the run."""
        try:
            if self._exit_provider is not None:
                self._exit_provider.force_flush()
            self.force_flush()
        except Exception as exc:  # noqa: BLE001 - never fail the interpreter's exit
            _logger.warning("otel-trackio: flushing at exit failed: %s", exc)


class TrackioEnvMetricExporter(MetricExporter):
    """A :class:`TrackioMetricExporter` configured by ``OTEL_EXPORTER_TRACKIO_*`` (entry
    ``trackio``). It shares the span exporter's Trackio run (same project and run name in one
    process): when that one offloads to a writer process that holds the run, metrics go through
    its spool too (Trackio stays out of this process). Keyword arguments and configuration errors
    behave as for :class:`TrackioEnvSpanExporter`."""

    def __init__(self, *, run: RunLike | None = None, **overrides: Any) -> None:
        super().__init__(preferred_temporality=dict(DEFAULT_TEMPORALITY))
        self.exporter: TrackioMetricExporter | SpooledMetricExporter | None = None
        settings = _env_settings(overrides, has_run=run is not None)
        if settings is None:
            return
        # The span exporter of the same run in this process takes log events there.
        spans = find_intake(settings.project, settings.name) if run is None else None
        spool = metrics_spool(spans)
        if spool is not None:  # metrics follow the run: to the writer that holds it
            self.exporter = SpooledMetricExporter(spool)
            self._spool = spool
            return
        self.exporter = TrackioMetricExporter(run=run, settings=settings)
        self._preferred_temporality = self.exporter._preferred_temporality
        self._preferred_aggregation = self.exporter._preferred_aggregation

    @property
    def run(self) -> RunLike | None:
        """The ``trackio.Run`` metrics go to (None when misconfigured; offloaded, asking for it
        opens it in this process, joined to the writer's)."""
        if isinstance(self.exporter, SpooledMetricExporter):
            return self._spool.sink.run
        return self.exporter.run if self.exporter is not None else None

    @property
    def stats(self) -> MetricExportStats:
        """What the exporter did (all zero when misconfigured)."""
        return self.exporter.stats if self.exporter is not None else MetricExportStats()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        """Export to Trackio; FAILURE when misconfigured (the error was logged once)."""
        if self.exporter is None:
            return MetricExportResult.FAILURE
        return self.exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        """Nothing is buffered: True unless shut down."""
        return self.exporter.force_flush(timeout_millis) if self.exporter is not None else True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        """Stop exporting; finish the run if this exporter started it and holds it last."""
        if self.exporter is not None:
            self.exporter.shutdown(timeout_millis=timeout_millis, **kwargs)


class TrackioEnvLogExporter(LogRecordExporter):
    """A :class:`TrackioLogExporter` configured by ``OTEL_EXPORTER_TRACKIO_*`` (entry ``trackio``
    of ``opentelemetry_logs_exporter``): GenAI log events join the samples of the span exporter
    of the same project and run in this process (the configurator builds that one first).
    Keyword arguments and configuration errors behave as for :class:`TrackioEnvSpanExporter`."""

    def __init__(self, **overrides: Any) -> None:
        self.exporter: TrackioLogExporter | None = None
        settings = _env_settings(overrides, has_run=False)
        if settings is None:
            return
        self.exporter = TrackioLogExporter(settings=settings)

    @property
    def stats(self) -> LogExportStats:
        """What the exporter did (all zero when misconfigured)."""
        return self.exporter.stats if self.exporter is not None else LogExportStats()

    def export(self, batch: Sequence[Any]) -> LogRecordExportResult:
        """Export GenAI events; FAILURE when misconfigured (the error was logged once)."""
        if self.exporter is None:
            return LogRecordExportResult.FAILURE
        return self.exporter.export(batch)

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        """Nothing waits in the exporter itself."""
        return self.exporter.force_flush(timeout_millis) if self.exporter is not None else True

    def shutdown(self, timeout_millis: int = 30000, **kwargs: Any) -> None:
        """Stop exporting. Idempotent."""
        if self.exporter is not None:
            self.exporter.shutdown(timeout_millis)


_reported: set[str] = set()


def _env_settings(overrides: Mapping[str, Any], *, has_run: bool) -> TrackioSettings | None:
    """The zero-code exporters' settings (a project is needed unless given or a run is); None
    after reporting a configuration error once."""
    try:
        needs_project = overrides.get("project") is None and not has_run
        return settings_from_env(
            require_project=needs_project, on_bad=_report_default_kept, **overrides
        )
    except TrackioConfigError as exc:
        _report_config_error(exc)
        return None


def _report_default_kept(exc: TrackioConfigError) -> None:
    """A malformed variable under zero code: said once; its setting keeps its default and the
    run goes on (only a missing project stops it: there is no project to guess)."""
    message = f"otel-trackio: {exc}; its default is used instead"
    if message not in _reported:  # the span and the metric exporter read the same variables
        _reported.add(message)
        _logger.error("%s", message)


def _report_config_error(exc: TrackioConfigError) -> None:
    message = str(exc)
    if not message.startswith("otel-trackio:"):
        message = f"otel-trackio: {message}"
    if message not in _reported:  # the span and the metric exporter hit the same error
        _reported.add(message)
        _logger.error("%s; nothing is sent to Trackio.", message)


def _install_sampler(settings: TrackioSettings) -> Sampler | None:
    """Give the global provider the per-step sampler (the one installed, else None)."""
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        _logger.warning(
            "otel-trackio: %s is set but no SDK tracer provider is installed yet; "
            "use OTEL_TRACES_SAMPLER=trackio_step or "
            "otel_trackio.configure(max_samples_per_step=...)",
            OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP,
        )
        return None
    if provider.sampler is not DEFAULT_ON:
        if "StepSampler" not in provider.sampler.get_description():
            _logger.warning(
                "otel-trackio: %s ignored: the tracer provider already has sampler %s "
                "(set OTEL_TRACES_SAMPLER=trackio_step to combine them)",
                OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP,
                provider.sampler.get_description(),
            )
        return None
    sampler = step_sampler(settings)
    provider.sampler = sampler
    return sampler


_EXPORTER_VARIABLES = {"metrics": "OTEL_METRICS_EXPORTER", "logs": "OTEL_LOGS_EXPORTER"}


def missing_exporters(environ: Mapping[str, str] | None = None) -> list[tuple[str, str, str]]:
    """(variable, value, entry point) of every metrics/logs exporter the environment names that
    is not installed — ``OTEL_METRICS_EXPORTER=otlp`` (what ``opentelemetry-distro`` sets when
    the variable is unset) without ``opentelemetry-exporter-otlp``: the SDK's setup then fails
    as a whole (``Requested component 'otlp_proto_grpc' not found``) and nothing is traced."""
    from importlib.metadata import entry_points

    from opentelemetry.sdk import _configuration

    env = os.environ if environ is None else environ
    out = []
    for signal, variable in _EXPORTER_VARIABLES.items():
        value = env.get(variable, "")
        for name in (n.strip() for n in value.split(",")):
            if not name or name.lower() == "none":
                continue
            try:
                component = str(_configuration._get_exporter_entry_point(name, signal))  # type: ignore[arg-type]
            except Exception:  # noqa: BLE001 - a bad protocol: the SDK says it itself
                continue
            if not entry_points(group=f"opentelemetry_{signal}_exporter", name=component):
                out.append((variable, value, component))
    return out


def _say_missing_exporters() -> None:
    """Zero code with only ``OTEL_TRACES_EXPORTER=trackio``: say, once, in one line, which
    exporter variable names an exporter that is not installed, and what to set instead."""
    missing = missing_exporters()
    if not missing:
        return
    named = ", ".join(f"{variable}={value} ({component})" for variable, value, component in missing)
    say(
        f"otel-trackio: {named} names an exporter that is not installed, so the OpenTelemetry "
        "setup fails and nothing is traced; set "
        + " and ".join(f"{variable}=trackio (or none)" for variable, _, _ in missing)
        + " — opentelemetry-distro sets otlp when they are unset"
    )


if "trackio" in os.environ.get("OTEL_TRACES_EXPORTER", ""):
    # The SDK configurator imports this module (the trackio entry point) before it fails on a
    # missing exporter: the one moment otel-trackio can say why nothing will be traced.
    _say_missing_exporters()
