"""OTLP/HTTP receiver: many processes and machines send OTLP, one Trackio run gets it all.

``otel-trackio serve --project P`` (see :mod:`otel_trackio.receiver.cli`) or, from Python,
:class:`OTLPReceiver` (``start()`` for a background thread, ``serve_forever()`` in the foreground)
and :func:`create_app` for an ASGI server of your own. Decoded spans and metrics go through the
same exporters as the in-process path (:class:`~otel_trackio.TrackioSpanExporter`,
:class:`~otel_trackio.TrackioMetricExporter`).

Needs the ``receiver`` extra (``pip install 'otel-trackio[receiver]'``).
"""

from __future__ import annotations

from importlib import import_module
from typing import Any

# Imported on first use, so ``otel-trackio serve`` can say which extra is missing.
_EXPORTS = {
    "DEFAULT_MAX_BODY_BYTES": ".app",
    "OTLPReceiver": ".server",
    "Outcome": "._routing",
    "Router": "._routing",
    "ReceiverLimits": "._limits",
    "ReceiverStats": "._routing",
    "ReceiverUnavailable": "._routing",
    "RoutesExhausted": "._routing",
    "create_app": ".app",
    "is_loopback": ".server",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(import_module(module, __name__), name)
