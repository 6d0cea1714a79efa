"""``TrackioSettings`` (every otel-trackio setting, in one frozen dataclass) and
``TrackioConfigError`` (a bad value or an unknown keyword).

A user builds settings here (``TrackioSettings(key="val/traces")``,
``TrackioSettings.from_env(**overrides)``) and hands them to an exporter or ``configure()``. What
each setting means, its default and its environment variable are declared once, in
``otel_trackio._settings``, which every layer of the package reads.
"""

from otel_trackio._settings import TokenDecoder, TrackioConfigError, TrackioSettings

__all__ = ["TokenDecoder", "TrackioConfigError", "TrackioSettings"]
