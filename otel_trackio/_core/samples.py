"""What a sample is once assembled: its spans and its identity (typed, decided once).

The assembler (:mod:`._assembly`) builds these; the converter (:mod:`._convert`) reads them and
nothing else about a sample's identity.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from typing import Any, Literal, Protocol

from otel_trackio._core.records import SpanRecord
from otel_trackio._core.values import parse_step

PartialReason = Literal["late", "flush", "ttl", "capacity", "duplicate"]
"""Why a sample is not whole: spans after its sample was logged (``late``), still open at
``force_flush``/``shutdown`` (``flush``), idle past the TTL (``ttl``), pushed out of a full
buffer (``capacity``), a span id seen twice (``duplicate``)."""


@dataclass(frozen=True, slots=True)
class SampleIdentity:
    """Who a sample is: its OTel trace and root span, its step and tags.

    ``step`` is resolved once, by :func:`resolve_step`. ``sample_index``, ``rollout_n`` and
    ``validate`` are the raw attribute values (None when absent). ``partial_reason`` is None for a
    whole sample. ``unusable_step`` is the sample's own step value when it is present but no
    step (``true``, ``2.5``, ``"abc"``, beyond signed 64-bit): such a sample is not stored at a
    guessed step (see :class:`~otel_trackio._engine.pipeline.TracePipeline`).
    """

    trace_id: int
    root_span_id: int | None
    step: int
    sample_index: Any = None
    rollout_n: Any = None
    validate: Any = None
    partial_reason: PartialReason | None = None
    unusable_step: Any = None
    stepless: bool = False
    """Neither the sample nor an ancestor carried a step: ``step`` is the latest one seen, or 0."""
    step_spans: bool = False
    """No sample: the spans of a step around the samples split out of it (a step-level span and
    its other children), whose durations are logged rather than a Trace."""

    @property
    def partial(self) -> bool:
        """True when the sample is not the whole of it (see ``partial_reason``)."""
        return self.partial_reason is not None


@dataclass(slots=True)
class Sample:
    """The spans of one sample, ready for conversion; ``root`` when it is among ``spans``."""

    spans: list[SpanRecord]
    root: SpanRecord | None
    identity: SampleIdentity


def resolve_step(own: Any, ancestor: Any, latest: int | None) -> int:
    """The one rule for a sample's step: its own attribute, else its nearest ancestor's, else the
    latest step seen, else 0. Values that are no step (``2.5``, ``"x"``, beyond int64) count as
    absent here; a sample whose own value is one is not stored (``unusable_step``)."""
    for value in (own, ancestor):
        step = parse_step(value)
        if step is not None:
            return step
    return latest if latest is not None else 0


class StepMemory(Protocol):
    """Where the latest step comes from (the fallback of :func:`resolve_step`) and goes to."""

    def latest(self) -> int | None:
        """The latest step, or None when none was seen yet."""

    def note(self, step: int) -> None:
        """Record a step seen in telemetry (the latest only moves forward)."""

    def set(self, step: int | None) -> None:
        """Declare the current step (``set_step``; None: forget it)."""


class OwnSteps:
    """A :class:`StepMemory` of one assembler alone (not thread-safe: the pipeline serialises)."""

    def __init__(self) -> None:
        self._latest: int | None = None

    def latest(self) -> int | None:
        """The latest step noted, or None."""
        return self._latest

    def note(self, step: int) -> None:
        """Record a step; the latest only moves forward."""
        if self._latest is None or step > self._latest:
            self._latest = step

    def set(self, step: int | None) -> None:
        """Declare the current step (None: forget it)."""
        self._latest = step


class OpenSampleLookup(Protocol):
    """What the assembler reads: the start attributes of an open sample root, if known."""

    def lookup(self, trace_id: int, span_id: int) -> Mapping[str, Any] | None:
        """The attributes a started, not yet ended sample root was registered with."""


class OpenSpanSource(Protocol):
    """What the assembler reads when it logs idle traces at the TTL: the spans of those traces
    started and not ended yet (read now, status ``unfinished``), so each partial sample shows
    where it stopped."""

    def open_records(self, trace_ids: Collection[int]) -> list[SpanRecord]:
        """The spans of ``trace_ids`` still open, as unfinished records ending now (one pass,
        however many traces are asked for)."""


def stored_span_key(trace_id: str | None, span_id: str) -> str:
    """How a stored span is told from others: its trace id (32 hex digits, from the
    ``otel.trace_id`` of its Trace) and span id (16 hex digits), ``"<trace>/<span>"``; the span
    id alone for a Trace stored without its trace id. Span ids alone are not enough: a client
    numbering spans 1, 2, 3 in every trace would see one sample's spans taken for another's."""
    return f"{trace_id}/{span_id}" if trace_id else span_id


def missing_spans(sample: Sample, stored: Collection[str]) -> Sample | None:
    """What of ``sample`` is not in storage, given the spans stored (see
    :func:`stored_span_key`): the sample itself when none of its spans is, None when all are,
    else a continuation (partial, ``late``, with the sample's identity) of the spans missing. So
    a replay or a retried write that groups spans differently from the first time still stores
    each span once."""
    trace = f"{sample.identity.trace_id:032x}"
    missing = [
        span
        for span in sample.spans
        if stored_span_key(trace, f"{span.span_id:016x}") not in stored
        and f"{span.span_id:016x}" not in stored
    ]
    if len(missing) == len(sample.spans):
        return sample
    if not missing:
        return None
    root = sample.root if sample.root in missing else None
    identity = dataclasses.replace(sample.identity, partial_reason="late")
    return Sample(missing, root, identity)
