"""Whether spans go through a spool and a writer process (``offload``): decided here only, for
``configure()``, the zero-code setup and a span exporter built by hand alike. Light on purpose:
a rollout process that offloads imports nothing of the in-process engine."""

from __future__ import annotations

import dataclasses
import logging
import os

from otel_trackio.environment_variables import OTEL_EXPORTER_TRACKIO_OFFLOAD
from otel_trackio.settings import TrackioConfigError, TrackioSettings

_logger = logging.getLogger("otel_trackio")


def offload_enabled(settings: TrackioSettings) -> bool:
    """Whether spans go through a spool and a writer process: the ``offload`` setting; when None,
    the ``OTEL_EXPORTER_TRACKIO_OFFLOAD`` variable; else on — for ``configure()``, the zero-code
    setup and a span exporter built by hand alike.

    On by default everywhere because that is what keeps the rollout cheap: in process, the
    conversion and Trackio's writes run on the export thread of the rollout process, taking CPU
    and the GIL from the rollout (``docs/performance.md``, figures 8 and 13). A malformed variable
    is warned about and taken as unset.
    """
    if settings.offload is not None:
        return settings.offload
    raw = os.environ.get(OTEL_EXPORTER_TRACKIO_OFFLOAD, "").strip()
    if not raw:
        return True
    try:
        return bool(TrackioSettings.from_env({OTEL_EXPORTER_TRACKIO_OFFLOAD: raw}).offload)
    except TrackioConfigError as exc:
        _logger.warning("otel-trackio: %s; offloading", exc)
        return True


def with_offload_resolved(settings: TrackioSettings) -> TrackioSettings:
    """``settings`` with ``offload`` set to what :func:`offload_enabled` decides."""
    return dataclasses.replace(settings, offload=offload_enabled(settings))
