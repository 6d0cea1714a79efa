"""Compatibility shim: the GenAI readers live in :mod:`otel_trackio.conventions`."""

from __future__ import annotations

from .conventions import ReadOptions, SpanFacts, parse_json, read_span_facts

__all__ = ["ReadOptions", "SpanFacts", "parse_json", "read_span_facts"]
