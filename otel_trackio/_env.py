"""Zero-code setup: exporters and a sampler built from ``OTEL_EXPORTER_TRACKIO_*`` variables.

The OTel SDK configurator (used by ``opentelemetry-instrument``) finds exporters through the
``opentelemetry_traces_exporter`` / ``opentelemetry_metrics_exporter`` entry points and calls
the class with no arguments, so the classes here read their options from the environment::

    OTEL_TRACES_EXPORTER=trackio OTEL_METRICS_EXPORTER=trackio OTEL_LOGS_EXPORTER=none \\
    OTEL_EXPORTER_TRACKIO_PROJECT=my-rl opentelemetry-instrument python app.py

This module is also the ``opentelemetry_environment_variables`` entry point: every module-level
name starting with ``OTEL_`` becomes an ``opentelemetry-instrument`` flag (``--exporter_trackio_
project`` ...). So it must not import any other ``OTEL_*`` name.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import math
import os
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.sdk.trace.sampling import DEFAULT_ON, Sampler

from .exporter import TrackioSpanExporter
from .metrics import TrackioMetricExporter

_logger = logging.getLogger("otel_trackio")

OTEL_EXPORTER_TRACKIO_PROJECT = "OTEL_EXPORTER_TRACKIO_PROJECT"
"""Trackio project to log into. Required for the ``trackio`` exporters."""

OTEL_EXPORTER_TRACKIO_RUN = "OTEL_EXPORTER_TRACKIO_RUN"
"""Trackio run name. Default: a name Trackio generates. Span and metric exporters share it."""

OTEL_EXPORTER_TRACKIO_GROUP = "OTEL_EXPORTER_TRACKIO_GROUP"
"""Trackio run group (``trackio.init(group=...)``)."""

OTEL_EXPORTER_TRACKIO_SERVER_URL = "OTEL_EXPORTER_TRACKIO_SERVER_URL"
"""A self-hosted Trackio server to log to (``trackio.init(server_url=...)``)."""

OTEL_EXPORTER_TRACKIO_SPACE_ID = "OTEL_EXPORTER_TRACKIO_SPACE_ID"
"""A Hugging Face Space to log to (``trackio.init(space_id=...)``)."""

OTEL_EXPORTER_TRACKIO_RESUME = "OTEL_EXPORTER_TRACKIO_RESUME"
"""``never`` (default), ``allow`` or ``must``: whether to continue an existing run of that name."""

OTEL_EXPORTER_TRACKIO_KEY = "OTEL_EXPORTER_TRACKIO_KEY"
"""Trackio key the Traces are logged under. Default ``rollout/traces``."""

OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE = "OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE"
"""Span / data point attribute holding the training step. Default ``step``."""

OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE = "OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE"
"""Span attribute marking a sample's root. Default ``sample_index``."""

OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP = "OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP"
"""Keep at most this many samples per step in this process (a ``StepSampler``). Default: all."""

OTEL_EXPORTER_TRACKIO_SAMPLING_SEED = "OTEL_EXPORTER_TRACKIO_SAMPLING_SEED"
"""Seed of the per-step sampler's choice. Default ``0``."""

OTEL_EXPORTER_TRACKIO_TOKEN_DECODER = "OTEL_EXPORTER_TRACKIO_TOKEN_DECODER"
"""``module:function`` turning token id lists into text; ``none``/``off`` or unset: no decoding."""

OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS = "OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS"
"""An idle trace is logged as partial after this many seconds. Default ``300``."""

OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS = "OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS"
"""Past this many waiting spans the oldest open samples go out as partial. Default ``100000``."""

OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS = "OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS"
"""Longer strings are cut with a visible marker. Default ``65536``."""

OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS = "OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS"
"""``true``: also log histogram buckets as ``trackio.Histogram``. Default ``false``."""

_PREFIX = "OTEL_EXPORTER_TRACKIO_"
_OFF = {"", "none", "off", "false", "0", "no"}
_TRUE = {"1", "true", "yes", "on"}


class TrackioConfigError(ValueError):
    """An ``OTEL_EXPORTER_TRACKIO_*`` variable is missing or malformed; the message names it."""


def _raw(variable: str, environ: Mapping[str, str] | None) -> str | None:
    value = (os.environ if environ is None else environ).get(variable)
    if value is None or not value.strip():
        return None
    return value.strip()


def _number(
    variable: str, environ: Mapping[str, str] | None, kind: type[int] | type[float], low: float
) -> Any:
    value = _raw(variable, environ)
    if value is None:
        return None
    try:
        number = kind(value)
    except ValueError:
        number = None
    if number is None or not math.isfinite(number) or number < low:
        raise TrackioConfigError(
            f"{variable}={value!r} is not a valid {kind.__name__} (>= {low:g})"
        )
    return number


def _flag(variable: str, environ: Mapping[str, str] | None) -> bool | None:
    value = _raw(variable, environ)
    if value is None:
        return None
    lowered = value.lower()
    if lowered in _TRUE:
        return True
    if lowered in _OFF:
        return False
    raise TrackioConfigError(f"{variable}={value!r} is not a boolean (true/false)")


def load_token_decoder(spec: str | None) -> Callable[[Sequence[int]], str] | None:
    """The callable named by a ``module:function`` spec; None for an empty/``none``/``off`` spec."""
    if spec is None or spec.strip().lower() in _OFF:
        return None
    module_name, _, attribute = spec.strip().partition(":")
    if not module_name or not attribute:
        raise TrackioConfigError(
            f"{OTEL_EXPORTER_TRACKIO_TOKEN_DECODER}={spec!r}: expected 'module:function' or 'none'"
        )
    try:
        target: Any = importlib.import_module(module_name)
        for part in attribute.split("."):
            target = getattr(target, part)
    except (ImportError, AttributeError) as exc:
        raise TrackioConfigError(
            f"{OTEL_EXPORTER_TRACKIO_TOKEN_DECODER}={spec!r} cannot be imported: {exc}"
        ) from exc
    if not callable(target):
        raise TrackioConfigError(f"{OTEL_EXPORTER_TRACKIO_TOKEN_DECODER}={spec!r} is not callable")
    return target


def trackio_init_options_from_env(
    environ: Mapping[str, str] | None = None, *, require_project: bool = True
) -> dict[str, Any]:
    """``project``, ``name`` and the ``trackio.init`` options set in the environment.

    Raises :class:`TrackioConfigError` naming ``OTEL_EXPORTER_TRACKIO_PROJECT`` when it is unset
    (unless ``require_project`` is false: the caller passes the project or run itself).
    """
    project = _raw(OTEL_EXPORTER_TRACKIO_PROJECT, environ)
    if project is None and require_project:
        raise TrackioConfigError(
            f"otel-trackio: set {OTEL_EXPORTER_TRACKIO_PROJECT} to the Trackio project to log "
            "into (e.g. OTEL_EXPORTER_TRACKIO_PROJECT=my-rl)"
        )
    options: dict[str, Any] = {"project": project, "name": _raw(OTEL_EXPORTER_TRACKIO_RUN, environ)}
    for variable, argument in (
        (OTEL_EXPORTER_TRACKIO_GROUP, "group"),
        (OTEL_EXPORTER_TRACKIO_SERVER_URL, "server_url"),
        (OTEL_EXPORTER_TRACKIO_SPACE_ID, "space_id"),
    ):
        value = _raw(variable, environ)
        if value is not None:
            options[argument] = value
    resume = _raw(OTEL_EXPORTER_TRACKIO_RESUME, environ)
    if resume is not None:
        if resume not in ("never", "allow", "must"):
            raise TrackioConfigError(
                f"{OTEL_EXPORTER_TRACKIO_RESUME}={resume!r}: expected never, allow or must"
            )
        options["resume"] = resume
    return options


def span_exporter_options_from_env(
    environ: Mapping[str, str] | None = None, *, require_project: bool = True
) -> dict[str, Any]:
    """Keyword arguments for :class:`TrackioSpanExporter` read from ``OTEL_EXPORTER_TRACKIO_*``."""
    options = trackio_init_options_from_env(environ, require_project=require_project)
    for variable, argument in (
        (OTEL_EXPORTER_TRACKIO_KEY, "key"),
        (OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE, "step_attribute"),
        (OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE, "sample_attribute"),
    ):
        value = _raw(variable, environ)
        if value is not None:
            options[argument] = value
    ttl = _number(OTEL_EXPORTER_TRACKIO_SAMPLE_TTL_SECONDS, environ, float, 0)
    if ttl is not None:
        options["sample_ttl_seconds"] = ttl
    spans = _number(OTEL_EXPORTER_TRACKIO_MAX_BUFFERED_SPANS, environ, int, 1)
    if spans is not None:
        options["max_buffered_spans"] = spans
    chars = _number(OTEL_EXPORTER_TRACKIO_MAX_VALUE_CHARS, environ, int, 1)
    if chars is not None:
        options["max_value_chars"] = chars
    decoder = load_token_decoder(_raw(OTEL_EXPORTER_TRACKIO_TOKEN_DECODER, environ))
    if decoder is not None:
        options["token_decoder"] = decoder
    return options


def metric_exporter_options_from_env(
    environ: Mapping[str, str] | None = None, *, require_project: bool = True
) -> dict[str, Any]:
    """Keyword arguments for :class:`TrackioMetricExporter` from ``OTEL_EXPORTER_TRACKIO_*``."""
    options = trackio_init_options_from_env(environ, require_project=require_project)
    step_attribute = _raw(OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE, environ)
    if step_attribute is not None:
        options["step_attribute"] = step_attribute
    distributions = _flag(OTEL_EXPORTER_TRACKIO_LOG_DISTRIBUTIONS, environ)
    if distributions is not None:
        options["log_distributions"] = distributions
    return options


def sampling_from_env(environ: Mapping[str, str] | None = None) -> tuple[int | None, int]:
    """``(max_samples_per_step, seed)`` from the environment; ``None`` means keep every sample."""
    cap = _number(OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP, environ, int, 0)
    seed = _number(OTEL_EXPORTER_TRACKIO_SAMPLING_SEED, environ, int, -(2**63))
    return cap, (0 if seed is None else seed)


def make_step_sampler(
    max_samples_per_step: int,
    seed: int = 0,
    *,
    step_attribute: str = "step",
    sample_attribute: str = "sample_index",
) -> Sampler:
    """A ``StepSampler``: decides for spans carrying ``sample_index`` (wherever they sit, also
    under a step-level span) and lets every other span follow its parent."""
    from .sampling import StepSampler

    return StepSampler(
        max_samples_per_step,
        seed=seed,
        deterministic=True,
        step_attribute=step_attribute,
        sample_attribute=sample_attribute,
    )


def _sampler_attributes(environ: Mapping[str, str] | None = None) -> dict[str, str]:
    return {
        "step_attribute": _raw(OTEL_EXPORTER_TRACKIO_STEP_ATTRIBUTE, environ) or "step",
        "sample_attribute": _raw(OTEL_EXPORTER_TRACKIO_SAMPLE_ATTRIBUTE, environ) or "sample_index",
    }


def step_sampler_factory(arg: str | None = None) -> Sampler:
    """The ``trackio_step`` sampler entry point (``OTEL_TRACES_SAMPLER=trackio_step``).

    The cap comes from ``OTEL_TRACES_SAMPLER_ARG``, else
    ``OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP``; with neither, every sample is kept.
    """
    cap, seed = sampling_from_env()
    if arg is not None and str(arg).strip():
        try:
            cap = int(str(arg).strip())
        except ValueError as exc:
            raise TrackioConfigError(
                f"OTEL_TRACES_SAMPLER_ARG={arg!r}: the trackio_step sampler needs an integer cap"
            ) from exc
    if cap is None:
        return DEFAULT_ON
    return make_step_sampler(cap, seed, **_sampler_attributes())


class TrackioEnvSpanExporter(TrackioSpanExporter):
    """A :class:`TrackioSpanExporter` built from ``OTEL_EXPORTER_TRACKIO_*`` (entry ``trackio``).

    Keyword arguments override the environment. When ``OTEL_EXPORTER_TRACKIO_PROJECT`` is unset
    (or a variable is malformed) construction logs one error naming the variable and returns an
    exporter that sends nothing, so the rest of the OTel setup (other exporters,
    instrumentations) keeps working.

    When ``OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP`` is set and the global SDK tracer provider
    still has the SDK's default sampler (no ``OTEL_TRACES_SAMPLER``), that provider gets the
    per-step sampler, so tracers created afterwards sample per step. The SDK configurator builds
    this exporter right after installing the provider, before any application tracer exists.
    """

    _env_options: dict[str, Any]
    _env_sampling: tuple[int | None, int]

    def __new__(cls, **overrides: Any) -> Any:
        """Read the environment first: a configuration error gives the disabled exporter."""
        try:
            options = span_exporter_options_from_env(require_project=_needs_project(overrides))
            sampling = sampling_from_env()
        except TrackioConfigError as exc:
            _report_config_error(exc)
            return _DisabledSpanExporter()
        self = super().__new__(cls)
        self._env_options = options
        self._env_sampling = sampling
        return self

    def __init__(self, **overrides: Any) -> None:
        options = {**self._env_options, **overrides}
        super().__init__(**options)
        cap, seed = self._env_sampling
        if cap is not None:
            _install_sampler(
                cap,
                seed,
                step_attribute=self._options.step_attribute,
                sample_attribute=self._options.sample_attribute,
            )
        # Registered after trackio.init() registered its own exit hook (which finishes the run),
        # so it runs before it: every span still queued is logged while the run is open.
        provider = trace.get_tracer_provider()
        self._exit_provider = provider if isinstance(provider, TracerProvider) else None
        atexit.register(self._flush_at_exit)

    def _flush_at_exit(self) -> None:
        """Log queued spans and open samples before Trackio's own exit hook finishes the run."""
        try:
            if self._exit_provider is not None:
                self._exit_provider.force_flush()
            self.force_flush()
        except Exception as exc:  # noqa: BLE001 - never fail the interpreter's exit
            _logger.warning("otel-trackio: flushing at exit failed: %s", exc)


class TrackioEnvMetricExporter(TrackioMetricExporter):
    """A :class:`TrackioMetricExporter` built from ``OTEL_EXPORTER_TRACKIO_*`` (entry ``trackio``).

    Keyword arguments override the environment. It shares the span exporter's Trackio run (same
    project and run name in one process). Configuration errors behave as for
    :class:`TrackioEnvSpanExporter`.
    """

    _env_options: dict[str, Any]

    def __new__(cls, **overrides: Any) -> Any:
        """Read the environment first: a configuration error gives the disabled exporter."""
        try:
            options = metric_exporter_options_from_env(require_project=_needs_project(overrides))
        except TrackioConfigError as exc:
            _report_config_error(exc)
            return _DisabledMetricExporter()
        self = super().__new__(cls)
        self._env_options = options
        return self

    def __init__(self, **overrides: Any) -> None:
        super().__init__(**{**self._env_options, **overrides})


class _DisabledSpanExporter(SpanExporter):
    """Stands in for a misconfigured trackio span exporter: drops spans (the error was logged)."""

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        return SpanExportResult.FAILURE

    def shutdown(self) -> None:
        return None


class _DisabledMetricExporter(MetricExporter):
    """Stands in for a misconfigured trackio metric exporter: drops metrics."""

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        return MetricExportResult.FAILURE

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        return None


_reported: set[str] = set()


def _needs_project(overrides: Mapping[str, Any]) -> bool:
    return overrides.get("project") is None and overrides.get("run") is None


def _report_config_error(exc: TrackioConfigError) -> None:
    message = str(exc)
    if not message.startswith("otel-trackio:"):
        message = f"otel-trackio: {message}"
    if message not in _reported:  # the span and the metric exporter hit the same error
        _reported.add(message)
        _logger.error("%s; nothing is sent to Trackio.", message)


def _install_sampler(cap: int, seed: int, **attributes: str) -> None:
    provider = trace.get_tracer_provider()
    if not isinstance(provider, TracerProvider):
        _logger.warning(
            "otel-trackio: %s is set but no SDK tracer provider is installed yet; "
            "use OTEL_TRACES_SAMPLER=trackio_step or "
            "otel_trackio.configure(max_samples_per_step=...)",
            OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP,
        )
        return
    if provider.sampler is not DEFAULT_ON:
        if not _is_step_sampler(provider.sampler):
            _logger.warning(
                "otel-trackio: %s ignored: the tracer provider already has sampler %s "
                "(set OTEL_TRACES_SAMPLER=trackio_step to combine them)",
                OTEL_EXPORTER_TRACKIO_MAX_SAMPLES_PER_STEP,
                provider.sampler.get_description(),
            )
        return
    provider.sampler = make_step_sampler(cap, seed, **attributes)


def _is_step_sampler(sampler: Sampler) -> bool:
    return "StepSampler" in sampler.get_description()
