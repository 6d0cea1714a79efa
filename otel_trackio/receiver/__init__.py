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
    "ReceiverLimits": "._limits",
    "ReceiverTotals": "._stats",
    "ReceiverUnavailable": "._routing",
    "RoutesExhausted": "._errors",
    "create_app": ".app",
    "is_loopback": ".server",
}

__all__ = sorted([*_EXPORTS, "missing_extra"])


def missing_extra(exc: ImportError, extra: str = "receiver") -> str:
    """The one line to print when an optional extra is not installed: which extra, how to install
    it, and what was missing (``otel-trackio serve``, the receiver's imports and the examples)."""
    return (
        f"needs the {extra} extra: pip install 'otel-trackio[{extra}]' "
        f"(from a clone: pip install '.[{extra}]'); missing: {exc.name or exc}"
    )


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    try:
        loaded = import_module(module, __name__)
    except ModuleNotFoundError as exc:
        hint = f"otel_trackio.receiver {missing_extra(exc)}"
        raise ModuleNotFoundError(hint, name=exc.name) from exc
    return getattr(loaded, name)
