"""Assemble finished spans into rollout samples.

A *sample* is the subtree under the outermost span that carries the sample attribute
(``sample_index`` by default). A trace with no such span is one sample rooted at its local root.
Spans arrive children-first and across many export calls, so they wait here, grouped by trace id,
until their sample's root arrives.

Nothing is lost:

* a span whose sample was already emitted comes out as a *continuation* (``partial``, with the
  sample's identity);
* ``flush()``, an idle trace past the TTL and a full buffer emit open spans as *partial* samples;
* spans whose parent never arrives (a missing middle span) stay with their trace and go out with
  the trace's root, or as partial when flushed;
* a duplicated span id never overwrites the first span: the duplicate goes out on its own.

Pure data in, pure data out: no I/O, no Trackio, no clock unless given one.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ._open_samples import lookup_open_sample
from ._records import SpanRecord

# Attribute names copied into a sample's identity (besides the configurable step/sample keys).
IDENTITY_ATTRIBUTES = ("rollout_n", "validate")


@dataclass(slots=True)
class Sample:
    """The spans of one sample, ready for conversion.

    ``root`` is the sample's root span when it is among ``spans``. ``identity`` holds what is
    known of the sample (``step``, ``sample_index``, ``rollout_n``, ``validate`` raw values,
    ``trace_id``, ``root_span_id``). ``partial`` with a ``reason`` (``late``, ``flush``, ``ttl``,
    ``capacity``, ``duplicate``) marks a sample that is not the whole of it.
    """

    spans: list[SpanRecord]
    root: SpanRecord | None
    identity: dict[str, Any] = field(default_factory=dict)
    partial: bool = False
    reason: str | None = None


@dataclass(slots=True)
class _OpenTrace:
    spans: dict[int, SpanRecord] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    last_seen: float = 0.0
    # Complete samples whose step lives on an ancestor that has not ended yet.
    pending: list[Sample] = field(default_factory=list)


class SampleAssembler:
    """Buffers spans by trace and hands back samples as they complete.

    Not thread-safe: the exporter serialises calls.
    """

    def __init__(
        self,
        *,
        step_attribute: str = "step",
        sample_attribute: str = "sample_index",
        ttl_seconds: float = 300.0,
        max_spans: int = 100_000,
        remembered_spans: int = 50_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.step_attribute = step_attribute
        self.sample_attribute = sample_attribute
        self.ttl_seconds = ttl_seconds
        self.max_spans = max(1, max_spans)
        self._remembered_limit = max(0, remembered_spans)
        self._clock = clock
        self._traces: OrderedDict[int, _OpenTrace] = OrderedDict()
        self._buffered = 0
        # span id -> identity of the emitted sample it went out with (for late spans).
        self._emitted: OrderedDict[int, dict[str, Any]] = OrderedDict()

    @property
    def buffered_spans(self) -> int:
        """How many spans wait for their sample's root."""
        return self._buffered

    @property
    def open_traces(self) -> int:
        """How many traces have spans waiting."""
        return len(self._traces)

    # -- public steps -------------------------------------------------------------------------

    def add(self, records: Iterable[SpanRecord]) -> list[Sample]:
        """Take finished spans; return the samples they complete (late spans as continuations)."""
        now = self._clock()
        out: list[Sample] = []
        candidates: list[SpanRecord] = []
        for record in records:
            late_identity = self._late_identity(record)
            if late_identity is not None:
                # Its sample already went out: gather what hangs below it and send it after.
                candidates.append(record)
                self._buffer(record, now, out)
                continue
            if self._buffer(record, now, out) and (
                self.sample_attribute in record.attributes or record.is_local_root
            ):
                candidates.append(record)
        # Outer sample roots first, so that nested tagged spans go with the outermost one.
        for record in candidates:
            if self._is_buffered(record) and self._is_sample_root(record):
                out.extend(self._take_sample(record))
        for record in candidates:
            if self._is_buffered(record) and record.is_local_root:
                out.extend(self._take_sample(record))
        for record in candidates:
            if self._is_buffered(record) and self._late_identity(record) is not None:
                out.extend(self._take_sample(record))
        out.extend(self._evict_over_capacity())
        return out

    def expire(self) -> list[Sample]:
        """Emit, as partial, the traces that saw no new span for ``ttl_seconds``."""
        deadline = self._clock() - self.ttl_seconds
        out: list[Sample] = []
        while self._traces:
            trace_id, trace = next(iter(self._traces.items()))
            if trace.last_seen > deadline:
                break
            out.extend(self._take_partial(trace_id, "ttl"))
        return out

    def flush(self) -> list[Sample]:
        """Emit every open span as partial samples (force_flush / shutdown)."""
        out: list[Sample] = []
        for trace_id in list(self._traces):
            out.extend(self._take_partial(trace_id, "flush"))
        return out

    # -- buffering ----------------------------------------------------------------------------

    def _buffer(self, record: SpanRecord, now: float, out: list[Sample]) -> bool:
        trace = self._traces.get(record.trace_id)
        if trace is None:
            trace = self._traces[record.trace_id] = _OpenTrace()
        else:
            self._traces.move_to_end(record.trace_id)
        trace.last_seen = now
        if record.span_id in trace.spans:
            identity = self._identity_for([record], None)
            out.append(Sample([record], None, identity, partial=True, reason="duplicate"))
            return False
        trace.spans[record.span_id] = record
        if record.parent_id is not None and record.parent_id != record.span_id:
            trace.children.setdefault(record.parent_id, []).append(record.span_id)
        self._buffered += 1
        return True

    def _is_buffered(self, record: SpanRecord) -> bool:
        trace = self._traces.get(record.trace_id)
        return trace is not None and trace.spans.get(record.span_id) is record

    def _is_sample_root(self, record: SpanRecord) -> bool:
        """Tagged, with no tagged ancestor among the buffered spans (nor an emitted sample)."""
        if self.sample_attribute not in record.attributes:
            return False
        late = self._late_identity(record)
        if late is not None and self.sample_attribute in late:
            return False  # a tagged span below an emitted sample continues that sample
        trace = self._traces[record.trace_id]
        seen = {record.span_id}
        parent_id = record.parent_id
        while parent_id is not None and parent_id not in seen:
            seen.add(parent_id)
            parent = trace.spans.get(parent_id)
            if parent is None:
                break
            if self.sample_attribute in parent.attributes:
                return False
            parent_id = parent.parent_id
        return True

    def _late_identity(self, record: SpanRecord) -> dict[str, Any] | None:
        if record.parent_id is None or record.parent_is_remote:
            return None
        identity = self._emitted.get(record.parent_id)
        if identity is None or identity.get("_trace") != record.trace_id:
            return None
        return identity

    # -- taking samples out -------------------------------------------------------------------

    def _take_sample(self, root: SpanRecord) -> list[Sample]:
        trace = self._traces[root.trace_id]
        spans = self._take_subtree(trace, root.span_id)
        late_identity = self._late_identity(root)
        is_sample = self.sample_attribute in root.attributes
        starts_new_sample = is_sample and (
            late_identity is None or self.sample_attribute not in late_identity
        )
        out: list[Sample] = []
        if late_identity is not None and not starts_new_sample:
            identity = late_identity
            out.append(Sample(spans, None, dict(identity), partial=True, reason="late"))
        else:
            if root.parent_id is None and trace.spans:
                # The trace's own root closes the trace: spans cut off by a missing middle span
                # belong here rather than nowhere.
                spans.extend(self._take_all(trace))
            identity = self._identity_for(spans, root)
            sample = Sample(spans, root, identity)
            if self.step_attribute not in identity and not root.is_local_root:
                trace.pending.append(sample)  # wait for the ancestor that carries the step
            else:
                out.append(sample)
            if root.is_local_root and trace.pending:
                out.extend(self._resolve_pending(trace, spans))
        self._forget_if_empty(root.trace_id, trace)
        self._remember(spans, identity)
        return out

    def _resolve_pending(self, trace: _OpenTrace, ancestors: list[SpanRecord]) -> list[Sample]:
        """Give samples waiting for a step the step of their nearest ancestor that has one."""
        by_id = {span.span_id: span for span in ancestors}
        pending, trace.pending = trace.pending, []
        for sample in pending:
            seen: set[int] = set()
            parent_id = sample.root.parent_id if sample.root is not None else None
            while parent_id is not None and parent_id not in seen:
                seen.add(parent_id)
                parent = by_id.get(parent_id)
                if parent is None:
                    break
                if self.step_attribute in parent.attributes:
                    sample.identity[self.step_attribute] = parent.attributes[self.step_attribute]
                    break
                parent_id = parent.parent_id
        return pending

    def _take_partial(self, trace_id: int, reason: str) -> list[Sample]:
        """Emit an open trace as partial samples, one per missing ancestor they hang from."""
        trace = self._traces[trace_id]
        out: list[Sample] = trace.pending  # complete samples, still without a step
        groups: dict[int | None, list[SpanRecord]] = {}
        for span in trace.spans.values():
            groups.setdefault(self._attach_point(trace, span), []).append(span)
        self._buffered -= len(trace.spans)
        del self._traces[trace_id]
        for attach, spans in groups.items():
            identity = self._late_identity_of_id(trace_id, attach)
            if identity is None:
                open_sample = lookup_open_sample(trace_id, attach) if attach is not None else None
                identity = self._identity_for(spans, None, open_sample)
            out.append(Sample(spans, None, dict(identity), partial=True, reason=reason))
            self._remember(spans, identity)
        return out

    def _late_identity_of_id(self, trace_id: int, span_id: int | None) -> dict[str, Any] | None:
        if span_id is None:
            return None
        identity = self._emitted.get(span_id)
        if identity is None or identity.get("_trace") != trace_id:
            return None
        return identity

    def _attach_point(self, trace: _OpenTrace, span: SpanRecord) -> int | None:
        """The id of the first ancestor that is not buffered (None for a local root)."""
        seen = {span.span_id}
        current = span
        while current.parent_id is not None and not current.parent_is_remote:
            parent = trace.spans.get(current.parent_id)
            if parent is None or parent.span_id in seen:
                return current.parent_id
            seen.add(parent.span_id)
            current = parent
        return None

    def _take_subtree(self, trace: _OpenTrace, root_id: int) -> list[SpanRecord]:
        out: list[SpanRecord] = []
        stack = [root_id]
        seen: set[int] = set()
        while stack:
            span_id = stack.pop()
            if span_id in seen:
                continue
            seen.add(span_id)
            span = trace.spans.pop(span_id, None)
            if span is None:
                continue
            out.append(span)
            stack.extend(trace.children.pop(span_id, ()))
        self._buffered -= len(out)
        return out

    def _take_all(self, trace: _OpenTrace) -> list[SpanRecord]:
        spans = list(trace.spans.values())
        self._buffered -= len(spans)
        trace.spans.clear()
        trace.children.clear()
        return spans

    def _forget_if_empty(self, trace_id: int, trace: _OpenTrace) -> None:
        # Child links to spans already taken are harmless: taking a subtree skips them.
        if not trace.spans and not trace.pending:
            self._traces.pop(trace_id, None)

    def _evict_over_capacity(self) -> list[Sample]:
        out: list[Sample] = []
        while self._buffered > self.max_spans and self._traces:
            out.extend(self._take_partial(next(iter(self._traces)), "capacity"))
        return out

    # -- identity -----------------------------------------------------------------------------

    def _identity_for(
        self,
        spans: list[SpanRecord],
        root: SpanRecord | None,
        known: Mapping[str, Any] | None = None,
    ) -> dict[str, Any]:
        """What identifies a sample: its tags from the root, else from any of its spans."""
        keys = (self.step_attribute, self.sample_attribute, *IDENTITY_ATTRIBUTES)
        identity: dict[str, Any] = {"_trace": spans[0].trace_id if spans else 0}
        if root is not None:
            identity["_root"] = root.span_id
        if known:
            for key in keys:
                if key in known:
                    identity[key] = known[key]
        sources = ([root] if root is not None else []) + spans
        for key in keys:
            if key in identity:
                continue
            for span in sources:
                if key in span.attributes:
                    identity[key] = span.attributes[key]
                    break
        return identity

    def _remember(self, spans: list[SpanRecord], identity: dict[str, Any]) -> None:
        if self._remembered_limit <= 0:
            return
        emitted = self._emitted
        for span in spans:
            emitted[span.span_id] = identity
            emitted.move_to_end(span.span_id)
        while len(emitted) > self._remembered_limit:
            emitted.popitem(last=False)
