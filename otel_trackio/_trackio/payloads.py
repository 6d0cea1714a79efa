"""Traces, tables and histograms in the shape ``run.log`` takes."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from otel_trackio._trackio.installed import lost, module


def histogram(counts: Sequence[int], edges: Sequence[float]) -> Any:
    """A ``trackio.Histogram`` from precomputed bucket counts and their ``len + 1`` edges."""
    return module().Histogram(np_histogram=(list(counts), list(edges)))


def _payload(trace: Mapping[str, Any]) -> dict[str, Any]:
    return {
        "_type": module().Trace.TYPE,
        "messages": trace.get("messages") or [],
        "metadata": trace.get("metadata") or {},
        "spans": trace.get("spans") or [],
    }


@functools.cache
def payloads_as_stored() -> bool:
    """True when our payload dict is what ``trackio.Trace._to_dict`` stores for the same Trace."""
    sample: dict[str, Any] = {
        "messages": [{"role": "user", "content": "q"}],
        "metadata": {"step": 1},
        "spans": [{"id": "1", "name": "n", "kind": "span"}],
    }
    try:
        stored = (
            module()
            .Trace(sample["messages"], metadata=sample["metadata"], spans=sample["spans"])
            ._to_dict("p", "r", 0)
        )
    except Exception:  # noqa: BLE001 - any difference means: use the public class
        return False
    return bool(stored == _payload(sample))


def trace_entries(traces: Sequence[Mapping[str, Any]]) -> list[Any]:
    """Trace dicts (messages, metadata, spans) as what ``run.log`` takes for a list of Traces.

    They go in as Trackio's stored trace payload (``{"_type": Trace.TYPE, ...}``, what
    ``Trace._to_dict`` makes) rather than ``trackio.Trace`` objects: our dicts are already plain
    JSON with no media, and Trackio's deep copy of every trace is skipped. When the installed
    Trackio stores Traces differently, ``trackio.Trace`` objects are logged instead.
    """
    if payloads_as_stored():
        return [_payload(t) for t in traces]
    lost("Trace._to_dict in the shape of 0.43", "Traces are logged as trackio.Trace objects")
    trackio = module()
    return [
        trackio.Trace(
            messages=list(t.get("messages") or []),
            metadata=dict(t.get("metadata") or {}),
            spans=list(t.get("spans") or []),
        )
        for t in traces
    ]


def as_table(rows: Sequence[Mapping[str, Any]]) -> Any:
    """Plain rows as a ``trackio.Table`` (its columns: the first row's keys, in order)."""
    data: Any = [dict(row) for row in rows]  # Trackio takes dict rows (typed as lists)
    return module().Table(data=data)
