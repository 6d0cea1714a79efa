"""Assemble finished spans into rollout samples: the buffer by trace, holding complete samples for
their grace period (remote parents adopting their children), eviction past the TTL or capacity.

A *sample* is the subtree under the outermost span that carries the sample attribute
(``sample_index`` by default). A trace with no such span is one sample rooted at its local root.
Spans arrive children-first and across many export calls, so they wait here, grouped by trace id,
until their sample's root arrives. A completed sample is then *held* for as long as the run's
:class:`~otel_trackio._core.assembly.grace.GracePolicy` says (0 in process, where children always
come first) so that spans of it arriving just after their root —
batches sent concurrently over the network, a Collector reordering them — still join it; and a
sample whose step lives on an ancestor that has not ended yet waits for that ancestor. With a
*quick phase* (the OTLP receiver's default) a completed sample goes out as soon as its caller says
everything sent with it has arrived (:meth:`SampleAssembler.settle`), until the run's data shows
it can trail a sample's root (the policy's quick phase).

Nothing is lost:

* a span whose sample was already emitted comes out as a *continuation* (partial, ``late``,
  with the sample's identity);
* ``flush()``, an idle trace past the TTL and a full buffer emit open spans as partial samples
  (``flush``, ``ttl``, ``capacity``); held samples go out whole;
* spans whose parent never arrives (a missing middle span) stay with their trace and go out with
  the trace's root, or as partial when flushed;
* a duplicated span id never overwrites the first span: the duplicate goes out on its own.

Nothing is doubled: a span sent again — the same trace, span id, name, start, end, parent and
status as one buffered, held or logged already (a client retrying a request whose response it never
got) — is dropped and counted (:attr:`SampleAssembler.resent`), and so is a GenAI log event sent
again.

GenAI events sent as OTel log records (``LogEventRecord``, :meth:`SampleAssembler.add_events`)
join the span they name as one more span event, whatever the order of arrival: an event whose
span is buffered or held is attached at once; one that comes first waits in its trace (counted
like a span) and is attached when the span arrives; one for a span already logged goes out as a
continuation. Events whose span never arrives are not lost: they go out with their trace, on a
*placeholder* span (same span id, name :data:`PLACEHOLDER_NAME`, attribute
:data:`PLACEHOLDER_ATTRIBUTE`) — in the sample rooted at the trace's root when that is released,
else at flush/TTL/capacity with the trace's partial sample (or as a continuation of the one
sample already logged from that trace).

Pure: data in, samples out. It reads only what it is given: its settings, a clock, and an
:class:`~otel_trackio._core.samples.OpenSampleLookup` for the identity of roots still open at a
flush.
"""

from __future__ import annotations

import dataclasses
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_trackio._core.assembly.events import attach_events, placeholder
from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio._core.assembly.identity import Identifier
from otel_trackio._core.assembly.memory import EmittedSamples, sent_again
from otel_trackio._core.conventions import rl_frameworks
from otel_trackio._core.conventions.mlflow import normalize_attributes
from otel_trackio._core.records import LogEventRecord, SpanRecord
from otel_trackio._core.samples import (
    OpenSampleLookup,
    OpenSpanSource,
    OwnSteps,
    PartialReason,
    Sample,
    SampleIdentity,
    StepMemory,
)
from otel_trackio._settings import TrackioSettings


@dataclass(slots=True)
class _Held:
    """A complete sample waiting for its grace period to end (or for its ancestor's step)."""

    trace_id: int
    root: SpanRecord
    spans: list[SpanRecord]
    due: float
    waits_for_step: bool
    ancestor_step: Any = None
    completed: float = 0.0
    step_spans: bool = False  # no sample: a step's spans around the samples split out of it


@dataclass(slots=True)
class _OpenTrace:
    spans: dict[int, SpanRecord] = field(default_factory=dict)
    children: dict[int, list[int]] = field(default_factory=dict)
    last_seen: float = 0.0
    # Complete samples of this trace not emitted yet, by root span id; and every span id in them.
    held: dict[int, _Held] = field(default_factory=dict)
    held_spans: dict[int, _Held] = field(default_factory=dict)
    # Held samples whose root's parent lives in another process, by that parent's span id.
    held_by_remote_parent: dict[int, list[_Held]] = field(default_factory=dict)
    # GenAI log events waiting for their span, by span id.
    pending: dict[int, list[LogEventRecord]] = field(default_factory=dict)


class SampleAssembler:
    """Buffers spans by trace and hands back samples as they complete.

    Not thread-safe: the pipeline serialises calls.

    Args:
        settings: attribute names, ``sample_ttl_seconds``, ``max_buffered_spans``.
        grace: the run's grace rule (default: ``settings``' on the in-process path), asked how
            long a completed sample waits for spans arriving after its root. In its *quick
            phase* (the receiver's default) completed samples also go out at :meth:`settle`
            (everything sent with them has arrived), until the run shows that its data can
            trail a sample's root — one sample's spans from several processes (resources, or a
            remote parent inside the sample), a span joining a held sample, a span or log event
            arriving after its sample went out (see :meth:`saw_trailing_spans`).
        open_samples: where roots still open at a flush are looked up (None: nowhere).
        open_spans: where the spans still open of a trace logged at the TTL are read (None:
            nowhere; in process, the exporter's tracked open spans).
        remembered_spans: span ids of emitted samples remembered, to place late spans.
        steps: where the latest step is read (a sample without a step takes it) and noted
            (default: this assembler's own).
        clock: monotonic seconds.
    """

    def __init__(
        self,
        settings: TrackioSettings | None = None,
        *,
        grace: GracePolicy | None = None,
        open_samples: OpenSampleLookup | None = None,
        open_spans: OpenSpanSource | None = None,
        remembered_spans: int = 50_000,
        steps: StepMemory | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        settings = settings or TrackioSettings()
        self.step_attribute = settings.step_attribute
        self.sample_attribute = settings.sample_attribute
        self.ttl_seconds = settings.sample_ttl_seconds
        self.max_spans = settings.max_buffered_spans
        self.grace = grace if grace is not None else GracePolicy.of(settings)
        self._open_samples = open_samples
        self._open_spans = open_spans
        self._clock = clock
        self._traces: OrderedDict[int, _OpenTrace] = OrderedDict()
        self._buffered = 0  # spans waiting, held samples included, and pending log events
        self._pending = 0  # log events waiting for their span
        # Log events flagged unsampled whose span never came, left out (see LogEventRecord).
        self.unsampled_events_dropped = 0
        # Spans and log events sent again (the same as one here or logged already), dropped.
        self.resent = 0
        # Held samples in the order they completed (so the first is due first).
        self._held: OrderedDict[tuple[int, int], _Held] = OrderedDict()
        # What was logged already (to place late spans and log events).
        self._memory = EmittedSamples(remembered_spans)
        self._identifier = Identifier(
            settings.step_attribute,
            settings.sample_attribute,
            steps if steps is not None else OwnSteps(),
        )

    @property
    def steps(self) -> StepMemory:
        """Where the latest step is read and noted."""
        return self._identifier.steps

    @property
    def forgotten_steps(self) -> set[int]:
        """The steps at which spans that went out are no longer remembered (see
        :class:`~otel_trackio._core.assembly.memory.EmittedSamples`)."""
        return self._memory.forgotten_steps

    @property
    def buffered_spans(self) -> int:
        """How many spans wait here (for their sample's root, or held in a complete sample),
        log events waiting for their span included (both count against ``max_buffered_spans``)."""
        return self._buffered

    @property
    def pending_events(self) -> int:
        """How many GenAI log events wait for their span."""
        return self._pending

    def recount(self) -> tuple[int, int]:
        """(:attr:`buffered_spans`, :attr:`pending_events`) counted afresh from what waits
        here, where those are kept up as spans come and go (O(1) for the buffer's bound); the
        property tests check after every call that both agree."""
        pending = sum(len(e) for t in self._traces.values() for e in t.pending.values())
        spans = sum(len(t.spans) for t in self._traces.values())
        held = sum(len(h.spans) for h in self._held.values())
        return spans + held + pending, pending

    @property
    def open_traces(self) -> int:
        """How many traces have spans waiting."""
        return len(self._traces)

    @property
    def held_samples(self) -> int:
        """How many complete samples wait for their grace period or their step."""
        return len(self._held)

    def records(self) -> Iterator[SpanRecord]:
        """Every span record waiting here: buffered for a root, or held in a complete sample."""
        for trace in self._traces.values():
            yield from trace.spans.values()
            for held in trace.held.values():
                yield from held.spans

    def waiting_events(self) -> Iterator[LogEventRecord]:
        """GenAI log events waiting for their span."""
        for trace in self._traces.values():
            for events in trace.pending.values():
                yield from events

    def next_due(self) -> float | None:
        """Clock time at which :meth:`expire` has something to do (None: nothing held or open)."""
        due = [h.due for h in self._held.values() if not h.waits_for_step][:1]
        if self._traces and self.ttl_seconds > 0:
            oldest = next(iter(self._traces.values())).last_seen
            due.append(oldest + self.ttl_seconds)
        return min(due) if due else None

    # -- public steps -------------------------------------------------------------------------

    def add(self, records: Iterable[SpanRecord]) -> list[Sample]:
        """Take finished spans; return the samples that are due (late spans as continuations)."""
        now = self._clock()
        out: list[Sample] = []
        candidates: list[SpanRecord] = []
        for record in records:
            _speak_plainly(record, self.step_attribute, self.sample_attribute)
            if self._memory.went_out(record):
                self.resent += 1  # sent again after its sample went out
                continue
            if not self._buffer(record, now, out):
                continue
            trace = self._traces[record.trace_id]
            if trace.held_by_remote_parent:
                self._adopt(trace, record)
            held = trace.held_spans.get(record.parent_id) if record.parent_id is not None else None
            if held is not None:
                # Its sample is complete and held (in the OTLP receiver, possibly across a
                # process boundary: a model server continuing the rollout's trace).
                self._join(trace, held, record)
            elif (
                self._late_identity(record) is not None
                or self.sample_attribute in record.attributes
                or record.is_local_root
            ):
                candidates.append(record)
        # Outer sample roots first, so that nested tagged spans go with the outermost one.
        for record in candidates:
            if self._is_buffered(record) and self._is_sample_root(record):
                out.extend(self._complete(record, now))
        for record in candidates:
            if self._is_buffered(record) and record.is_local_root:
                out.extend(self._complete(record, now))
        for record in candidates:
            if self._is_buffered(record) and self._late_identity(record) is not None:
                out.extend(self._complete(record, now))
        out.extend(self._take_due(now))
        out.extend(self._evict_over_capacity())
        return out

    def add_events(self, events: Iterable[LogEventRecord]) -> list[Sample]:
        """Take GenAI log events: each joins its span (now, or when the span arrives); return
        the samples that are due (events of spans already logged as continuations)."""
        now = self._clock()
        late: dict[tuple[int, int], list[LogEventRecord]] = {}
        for event in events:
            trace = self._traces.get(event.trace_id)
            record = self._waiting_span(trace, event.span_id) if trace is not None else None
            if trace is not None and record is not None:
                self._touch(event.trace_id, now)
                attach_events(record, [event.event])
            elif self._memory.event_went_out(event):
                self.resent += 1  # sent again after its span went out with it
            elif self._memory.identity_of(event.trace_id, event.span_id) is not None:
                self.saw_trailing_spans()  # it came after its sample had gone out
                late.setdefault((event.trace_id, event.span_id), []).append(event)
            else:
                waiting = self._touch(event.trace_id, now).pending.setdefault(event.span_id, [])
                if any(event.event == w.event for w in waiting):
                    self.resent += 1  # a retried export: once
                else:
                    waiting.append(event)
                    self._buffered += 1
                    self._pending += 1
        out = self._late_events(late)
        out.extend(self._take_due(now))
        out.extend(self._evict_over_capacity())
        return out

    def expire(self) -> list[Sample]:
        """Emit held samples whose grace period ended, and, as partial, the traces that saw no
        new span for ``ttl_seconds`` — with their spans still open, when ``open_spans`` knows
        them, shown unfinished as at a flush (see :meth:`flush`)."""
        now = self._clock()
        out = self._take_due(now)
        deadline = now - self.ttl_seconds
        idle: list[int] = []
        for trace_id, trace in self._traces.items():  # the least recently active first
            if trace.last_seen > deadline:
                break
            idle.append(trace_id)
        open_by_trace: dict[int, list[SpanRecord]] = {}
        if idle and self._open_spans is not None:
            # One look at the open spans for all of them: many traces idle at once (a model
            # server gone) must not cost a pass over every open span each.
            for record in self._open_spans.open_records(idle):
                open_by_trace.setdefault(record.trace_id, []).append(record)
        for trace_id in idle:
            self._join_open(open_by_trace.get(trace_id, ()), self._traces[trace_id].last_seen)
            out.extend(self._take_partial(trace_id, "ttl"))
        return out

    def flush(self, open_spans: Iterable[SpanRecord] = ()) -> list[Sample]:
        """Emit everything: held samples whole, every buffered span as partial samples.

        ``open_spans``: spans started and not ended yet, read at the flush (status
        ``unfinished``, ending now). Each joins its sample first, so a sample stuck in a tool
        call shows its open root and that tool span — and one with no span ended at all is
        logged too. One already shown by an earlier flush is not shown again; when it ends, it
        comes out as a continuation (``late``) of that sample.
        """
        self._join_open(open_spans, self._clock())
        out: list[Sample] = []
        for trace_id in list(self._traces):
            out.extend(self._take_partial(trace_id, "flush"))
        return out

    # -- buffering ----------------------------------------------------------------------------

    def _join_open(self, open_spans: Iterable[SpanRecord], now: float) -> None:
        """Spans still open join their traces (``now``: the trace's activity time they get),
        those here already or shown before excepted."""
        for record in open_spans:
            trace = self._traces.get(record.trace_id)
            if trace is not None and (
                record.span_id in trace.spans or record.span_id in trace.held_spans
            ):
                continue  # it ended after all and is here already
            if self._memory.identity_of(record.trace_id, record.span_id) is None:
                self._buffer(record, now, [])

    def _touch(self, trace_id: int, now: float) -> _OpenTrace:
        """The open trace (made if new), marked as the most recently active."""
        trace = self._traces.get(trace_id)
        if trace is None:
            trace = self._traces[trace_id] = _OpenTrace()
        else:
            self._traces.move_to_end(trace_id)
        trace.last_seen = now
        return trace

    def _buffer(self, record: SpanRecord, now: float, out: list[Sample]) -> bool:
        # A dialect that writes the identity its own way (MLflow: JSON-encoded values, trace
        # tags) is read as plain attributes from here on.
        record.attributes = normalize_attributes(record.attributes)
        trace = self._touch(record.trace_id, now)
        if record.span_id in trace.spans or record.span_id in trace.held_spans:
            first = self._waiting_span(trace, record.span_id)
            if first is not None and sent_again(first, record):
                self.resent += 1  # sent again while its sample waits here
                return False
            identity = self._identifier.identify([record], None, reason="duplicate")
            out.append(Sample([record], None, identity))
            return False
        waiting = trace.pending.pop(record.span_id, None)
        if waiting:
            # Its log events came first: they join it now.
            attach_events(record, [w.event for w in waiting])
            self._buffered -= len(waiting)
            self._pending -= len(waiting)
        trace.spans[record.span_id] = record
        if record.parent_id is not None and record.parent_id != record.span_id:
            trace.children.setdefault(record.parent_id, []).append(record.span_id)
        self._buffered += 1
        return True

    @staticmethod
    def _waiting_span(trace: _OpenTrace, span_id: int) -> SpanRecord | None:
        """The span ``span_id`` when it waits here (buffered, or held in a complete sample)."""
        record = trace.spans.get(span_id)
        if record is None:
            held = trace.held_spans.get(span_id)
            if held is not None:
                record = next((s for s in held.spans if s.span_id == span_id), None)
        return record

    def _is_buffered(self, record: SpanRecord) -> bool:
        trace = self._traces.get(record.trace_id)
        return trace is not None and trace.spans.get(record.span_id) is record

    @staticmethod
    def _ancestors(spans: Mapping[int, SpanRecord], span: SpanRecord) -> Iterator[SpanRecord]:
        """The ancestors of ``span`` found in ``spans``, nearest first; the walk stops at a
        missing span, a remote parent or a cycle."""
        seen = {span.span_id}
        current = span
        while (
            current.parent_id is not None
            and not current.parent_is_remote
            and current.parent_id not in seen
        ):
            parent = spans.get(current.parent_id)
            if parent is None:
                return
            seen.add(parent.span_id)
            yield parent
            current = parent

    def _is_sample_root(self, record: SpanRecord) -> bool:
        """Tagged, with no tagged ancestor among the buffered spans (nor an emitted sample)."""
        if self.sample_attribute not in record.attributes:
            return False
        late = self._late_identity(record)
        if late is not None and late.sample_index is not None:
            return False  # a tagged span below an emitted sample continues that sample
        trace = self._traces[record.trace_id]
        return not any(
            self.sample_attribute in a.attributes for a in self._ancestors(trace.spans, record)
        )

    def _late_identity(self, record: SpanRecord) -> SampleIdentity | None:
        # A remote parent counts too: the OTLP receiver gets the spans of every process. So does
        # the span itself, logged unfinished by a flush before it ended.
        return self._memory.identity_of(record.trace_id, record.parent_id) or (
            self._memory.identity_of(record.trace_id, record.span_id)
        )

    # -- completing and holding samples -------------------------------------------------------

    def _complete(self, root: SpanRecord, now: float) -> list[Sample]:
        """``root``'s subtree is complete: a continuation of an emitted sample, or a sample held
        for its grace period (and its ancestor's step)."""
        trace = self._traces[root.trace_id]
        spans = self._take_subtree(trace, root.span_id)
        late = self._late_identity(root)
        is_tagged = self.sample_attribute in root.attributes
        if late is not None and not (is_tagged and late.sample_index is None):
            self.saw_trailing_spans()  # these came after their sample had gone out
            self._buffered -= len(spans)
            self._forget_if_empty(root.trace_id, trace)
            continuation = dataclasses.replace(late, partial_reason="late")
            self._memory.remember(spans, late)
            return [Sample(spans, None, continuation)]
        if root.parent_id is None and trace.spans:
            # The trace's own root closes the trace: spans cut off by a missing middle span
            # belong here rather than nowhere.
            spans.extend(self._take_all(trace))
        waits = not root.is_local_root and not any(
            self.step_attribute in s.attributes for s in spans
        )
        if self.grace.quick and _shows_other_processes(root, spans, is_tagged):
            self.saw_trailing_spans()  # the other process's spans may still be on their way
        if self.grace.awaits_log_events(spans):
            self.expect_log_events()  # its messages may still be on their way as log events
        held = _Held(
            root.trace_id, root, spans, now + self.grace.hold_seconds, waits, completed=now
        )
        # An untagged root whose trace gave samples of their own is the step around them.
        held.step_spans = not is_tagged and (
            self._memory.sent_samples_of(root.trace_id)
            or any(self.sample_attribute in h.root.attributes for h in trace.held.values())
        )
        trace.held[root.span_id] = held
        for span in spans:
            trace.held_spans[span.span_id] = held
        if root.parent_is_remote and root.parent_id is not None:
            trace.held_by_remote_parent.setdefault(root.parent_id, []).append(held)
        self._held[(root.trace_id, root.span_id)] = held
        if root.is_local_root:
            self._give_step_to_waiting(trace, spans)
        return []

    def _adopt(self, trace: _OpenTrace, parent: SpanRecord) -> None:
        """``parent`` arrived while samples rooted at its remote children are held (the OTLP
        receiver gets every process's spans): they go back to the buffer, below their parent."""
        for held in trace.held_by_remote_parent.pop(parent.span_id, ()):
            if trace.held.pop(held.root.span_id, None) is None:
                continue
            self._held.pop((held.trace_id, held.root.span_id), None)
            for span in held.spans:
                trace.held_spans.pop(span.span_id, None)
                trace.spans[span.span_id] = span
                if span.parent_id is not None and span.parent_id != span.span_id:
                    trace.children.setdefault(span.parent_id, []).append(span.span_id)

    def _join(self, trace: _OpenTrace, held: _Held, record: SpanRecord) -> None:
        """A span (and what hangs below it) arriving while its sample is held joins it. It shows
        that the run's spans can trail their root (another process, batches sent concurrently
        or retried): the quick phase ends."""
        self.saw_trailing_spans()
        for span in self._take_subtree(trace, record.span_id):
            held.spans.append(span)
            trace.held_spans[span.span_id] = held

    @property
    def settles(self) -> bool:
        """True when :meth:`settle` may release something: samples are held in the quick phase.
        A few plain reads, so a caller may peek without serialising."""
        return bool(self._held) and self.grace.settles

    def settle(self, before: float) -> list[Sample]:
        """Everything sent with the samples that completed before ``before`` (clock time) has
        arrived (the OTLP receiver: every request begun by then is handed over): in the quick
        phase they go out now, those waiting for their ancestor's step excepted. Spans of
        another process can still trail them — that is what the quick phase gambles on, and
        the first one that does ends it."""
        if not self.grace.settles:
            return []
        out: list[Sample] = []
        for key, held in list(self._held.items()):  # in completion order
            if held.completed >= before:
                break
            if not held.waits_for_step:
                del self._held[key]
                out.append(self._release(held))
        return out

    def expect_log_events(self) -> None:
        """GenAI log events feed this run (or may): from now on a completed sample waits for
        them as long as the grace policy holds it, those held at this moment included (in the
        quick phase no longer until settled, and no longer than that hold)."""
        if self.grace.log_events:
            return
        self.grace.feed_log_events()
        hold = self.grace.hold_seconds
        for held in self._held.values():  # completion order, so still ordered by due time
            held.due = min(held.due, held.completed + hold)

    def saw_trailing_spans(self) -> None:
        """Spans (or GenAI log events) of this run can trail their sample's root: from now on
        every sample is held for the whole grace period, those held at this moment included."""
        if not self.grace.saw_trailing():
            return
        seconds = self.grace.seconds
        for held in self._held.values():  # completion order, so still ordered by due time
            held.due = max(held.due, held.completed + seconds)

    def _give_step_to_waiting(self, trace: _OpenTrace, ancestors: list[SpanRecord]) -> None:
        """Held samples waiting for a step get the step of their nearest ancestor that has one."""
        by_id = {span.span_id: span for span in ancestors}
        for held in trace.held.values():
            if held.waits_for_step:
                held.waits_for_step = False
                for parent in self._ancestors(by_id, held.root):
                    if self.step_attribute in parent.attributes:
                        held.ancestor_step = parent.attributes[self.step_attribute]
                        break

    def _take_due(self, now: float) -> list[Sample]:
        out: list[Sample] = []
        for key, held in list(self._held.items()):
            if held.due > now:
                break
            if not held.waits_for_step:
                del self._held[key]
                out.append(self._release(held))
        return out

    def _release(self, held: _Held) -> Sample:
        """Emit a held sample (already removed from ``self._held``)."""
        trace = self._traces.get(held.trace_id)
        if trace is not None:
            trace.held.pop(held.root.span_id, None)
            for span in held.spans:
                trace.held_spans.pop(span.span_id, None)
            if held.root.parent_is_remote and held.root.parent_id is not None:
                siblings = trace.held_by_remote_parent.get(held.root.parent_id, [])
                if held in siblings:
                    siblings.remove(held)
                if not siblings:
                    trace.held_by_remote_parent.pop(held.root.parent_id, None)
            self._forget_if_empty(held.trace_id, trace)
        self._buffered -= len(held.spans)
        spans = held.spans
        if trace is not None and trace.pending and held.root.parent_id is None:
            # The trace's own root closes the trace: log events whose span never came go with it.
            spans = [*spans, *self._take_pending(trace)]
            self._forget_if_empty(held.trace_id, trace)
        identity = self._identifier.identify(spans, held.root, ancestor_step=held.ancestor_step)
        if held.step_spans:
            identity = dataclasses.replace(identity, step_spans=True)
        self._memory.remember(spans, identity)
        return Sample(spans, held.root, identity)

    def _take_partial(self, trace_id: int, reason: PartialReason) -> list[Sample]:
        """Emit an open trace: held samples whole, other spans as partial samples, one per
        missing ancestor they hang from."""
        trace = self._traces[trace_id]
        out: list[Sample] = []
        for held in list(trace.held.values()):
            self._held.pop((trace_id, held.root.span_id), None)
            out.append(self._release(held))
        groups: dict[tuple[int | None, int | None], list[SpanRecord]] = {}
        roots: dict[tuple[int | None, int | None], SpanRecord] = {}
        for span in trace.spans.values():
            attach, root = self._partial_place(trace, span)
            key = (attach, root.span_id if root is not None else None)
            groups.setdefault(key, []).append(span)
            if root is not None:
                roots[key] = root
        self._buffered -= len(trace.spans)
        placeholders = self._take_pending(trace)
        if placeholders:
            groups.setdefault((None, None), []).extend(placeholders)
        self._traces.pop(trace_id, None)
        for key, spans in groups.items():
            attach, root = key[0], roots.get(key)
            late = self._memory.identity_of(trace_id, attach)
            if late is None and attach is None and len(spans) == len(placeholders):
                # Only log events whose span never came: the trace's one logged sample, if any.
                late = self._memory.only_sample_of(trace_id)
            if late is not None:
                identity = dataclasses.replace(late, partial_reason=reason)
                self._memory.remember(spans, late)
            else:
                known = None
                if attach is not None and self._open_samples is not None:
                    known = self._open_samples.lookup(trace_id, attach)
                identity = self._identifier.identify(spans, root, known=known, reason=reason)
                self._memory.remember(spans, dataclasses.replace(identity, partial_reason=None))
            out.append(Sample(spans, root, identity))
        return out

    def _partial_place(
        self, trace: _OpenTrace, span: SpanRecord
    ) -> tuple[int | None, SpanRecord | None]:
        """Where a span flushed early goes: the id of its first ancestor that is not buffered
        (None for a local root), and its sample's root when that is buffered too — the
        outermost span carrying the sample attribute, else the local root on top (a span
        still open at the flush)."""
        top = span
        root = span if self.sample_attribute in span.attributes else None
        for top in self._ancestors(trace.spans, span):
            if self.sample_attribute in top.attributes:
                root = top
        if top.is_local_root:
            return None, root or top
        return top.parent_id, root

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
        return out

    def _take_all(self, trace: _OpenTrace) -> list[SpanRecord]:
        spans = list(trace.spans.values())
        trace.spans.clear()
        trace.children.clear()
        return spans

    def _forget_if_empty(self, trace_id: int, trace: _OpenTrace) -> None:
        # Child links to spans already taken are harmless: taking a subtree skips them.
        if not trace.spans and not trace.held and not trace.pending:
            self._traces.pop(trace_id, None)

    # -- log events whose span is not here ----------------------------------------------------

    def _take_pending(self, trace: _OpenTrace) -> list[SpanRecord]:
        """The trace's waiting log events, on one placeholder span per span id; events flagged
        unsampled are dropped (counted): their span was never coming."""
        out: list[SpanRecord] = []
        count = 0
        for events in trace.pending.values():
            count += len(events)
            kept = [e for e in events if e.sampled]
            self.unsampled_events_dropped += len(events) - len(kept)
            if kept:
                out.append(placeholder(kept, "span not received"))
        self._buffered -= count
        self._pending -= count
        trace.pending.clear()
        return out

    def _late_events(self, late: dict[tuple[int, int], list[LogEventRecord]]) -> list[Sample]:
        """Log events of spans already logged: one continuation per sample, with its identity."""
        by_sample: dict[int, tuple[SampleIdentity, list[SpanRecord]]] = {}
        for (trace_id, span_id), events in late.items():
            identity = self._memory.identity_of(trace_id, span_id)
            if identity is None:  # not possible: checked when they came
                continue
            entry = by_sample.setdefault(id(identity), (identity, []))
            entry[1].append(placeholder(events, "span already logged"))
        out: list[Sample] = []
        for identity, spans in by_sample.values():
            self._memory.remember(spans, identity)  # their events went out: once
            out.append(Sample(spans, None, dataclasses.replace(identity, partial_reason="late")))
        return out

    def _evict_over_capacity(self) -> list[Sample]:
        out: list[Sample] = []
        while self._buffered > self.max_spans and self._traces:
            out.extend(self._take_partial(next(iter(self._traces)), "capacity"))
        return out


def _shows_other_processes(root: SpanRecord, spans: list[SpanRecord], is_tagged: bool) -> bool:
    """True when a completed sample shows spans of its trace in more than one process: a span
    below the root whose parent is remote, spans of another resource than the root's, or an
    untagged root whose parent is remote (a piece of a sample rooted in another process)."""
    if root.parent_is_remote and not is_tagged:
        return True
    resource = root.resource
    return any(
        span is not root
        and (span.parent_is_remote or (span.resource is not resource and span.resource != resource))
        for span in spans
    )


def _speak_plainly(record: SpanRecord, step_attribute: str, sample_attribute: str) -> None:
    """A span of an RL framework that traces in its own words (xtuner, ROLL, ``rl.*``) given
    the step, sample and outcome attributes it means (see
    :mod:`~otel_trackio._core.conventions.rl_frameworks`); others untouched."""
    tags = rl_frameworks.sample_tags(
        record.name, record.attributes, top=record.parent_id is None or record.parent_is_remote
    )
    if tags is None:
        return
    names = {rl_frameworks.STEP: step_attribute, rl_frameworks.SAMPLE: sample_attribute}
    added = {names.get(key, key): value for key, value in tags.items()}
    added = {key: value for key, value in added.items() if key not in record.attributes}
    if added:
        record.attributes = {**record.attributes, **added}
