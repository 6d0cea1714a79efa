"""Samples whose root span has started but not ended, known by trace and span id.

An exporter only sees spans once they end, so when it must flush a sample early (shutdown, TTL,
a full buffer) the root, which carries ``step`` and ``sample_index``, is not there yet.
``otel_trackio.rollout()`` registers each sample root here when it starts and removes it when it
ends, so such partial samples keep their identity. Plain OTel users may call these too.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

_lock = threading.Lock()
_open: dict[tuple[int, int], Mapping[str, Any]] = {}


def register_open_sample(trace_id: int, span_id: int, identity: Mapping[str, Any]) -> None:
    """Remember the identity attributes (``step``, ``sample_index``, ...) of a started root."""
    with _lock:
        _open[(trace_id, span_id)] = identity


def unregister_open_sample(trace_id: int, span_id: int) -> None:
    """Forget a sample root once it has ended."""
    with _lock:
        _open.pop((trace_id, span_id), None)


def lookup_open_sample(trace_id: int, span_id: int) -> Mapping[str, Any] | None:
    """The identity of a started, not yet ended sample root, if it was registered."""
    return _open.get((trace_id, span_id))
