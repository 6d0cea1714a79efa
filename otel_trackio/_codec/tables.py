"""The one status and span-kind table of every reader and writer of records.

Records carry names (``"unset"``/``"ok"``/``"error"``; ``"INTERNAL"``, ``"SERVER"``, ...). The SDK's
``StatusCode`` values and OTLP's status codes agree (0, 1, 2); the SDK's ``SpanKind`` values are
OTLP's minus one (OTLP keeps 0 for "unspecified", read as ``INTERNAL``).
"""

from __future__ import annotations

STATUS_NAMES = ("unset", "ok", "error")
"""Record status by SDK ``StatusCode`` value, OTLP ``Status.code`` and spool code alike."""

SPAN_KINDS = ("INTERNAL", "SERVER", "CLIENT", "PRODUCER", "CONSUMER")
"""Record kind by SDK ``SpanKind`` value (and spool code)."""

STATUS_CODES = {name: code for code, name in enumerate(STATUS_NAMES)}
KIND_CODES = {name: code for code, name in enumerate(SPAN_KINDS)}


def status_name(code: int) -> str:
    """The record status of a status code (an unknown one reads ``"unset"``)."""
    return STATUS_NAMES[code] if 0 <= code < len(STATUS_NAMES) else "unset"


def kind_name(code: int) -> str:
    """The record kind of an SDK ``SpanKind`` value or spool code (unknown: ``"INTERNAL"``)."""
    return SPAN_KINDS[code] if 0 <= code < len(SPAN_KINDS) else "INTERNAL"


def kind_from_otlp(code: int) -> str:
    """The record kind of an OTLP ``Span.SpanKind`` (0, unspecified, reads ``"INTERNAL"``)."""
    return kind_name(code - 1) if code > 0 else "INTERNAL"
