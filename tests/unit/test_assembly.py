"""The assembler's parts on their own (``otel_trackio._core.assembly``): identity, the memory of
what was logged, log events on spans. The assembler as a whole: ``test_whole_samples.py``,
``test_properties.py`` and ``test_log_events.py``."""

from __future__ import annotations

from otel_trackio._core.assembly.events import (
    PLACEHOLDER_ATTRIBUTE,
    PLACEHOLDER_NAME,
    attach_events,
    placeholder,
)
from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio._core.assembly.identity import Identifier
from otel_trackio._core.assembly.memory import EmittedSamples
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord
from otel_trackio._core.samples import OwnSteps, SampleIdentity


def _span(span_id: int, **attributes) -> SpanRecord:
    return SpanRecord(
        trace_id=1, span_id=span_id, name="s", start_ns=0, end_ns=1, attributes=attributes
    )


def test_identity_takes_the_roots_tags_and_falls_back_to_the_latest_step():
    steps = OwnSteps()
    identify = Identifier("step", "sample_index", steps).identify
    first = identify([_span(1, step=4, sample_index=2)], _span(1, step=4, sample_index=2))
    assert (first.step, first.sample_index, first.root_span_id) == (4, 2, 1)
    assert steps.latest() == 4
    second = identify([_span(2, sample_index=3)], None, reason="flush")
    assert (second.step, second.partial_reason, second.root_span_id) == (4, "flush", None)


def test_the_memory_places_late_spans_and_forgets_past_its_limit():
    memory = EmittedSamples(limit=2)
    one = SampleIdentity(trace_id=1, root_span_id=1, step=0, sample_index=0)
    memory.remember([_span(1), _span(2), _span(3)], one)
    assert memory.identity_of(1, 3) == one
    assert memory.identity_of(1, 1) is None  # beyond the limit
    assert memory.identity_of(2, 3) is None  # another trace
    assert memory.only_sample_of(1) == one
    memory.remember([_span(4)], SampleIdentity(trace_id=1, root_span_id=4, step=0, sample_index=1))
    assert memory.only_sample_of(1) is None  # two samples came from trace 1


def test_a_span_sent_again_is_known_by_its_trace_and_span_id_together():
    """A source that numbers span ids per trace (span 1 of trace 1, span 1 of trace 2): each
    trace's span is remembered apart, so one sent again after the other went out still goes
    out once. Keyed by span id alone, the second trace's span made the first one forgotten."""
    from otel_trackio._core.assembly import SampleAssembler
    from otel_trackio.settings import TrackioSettings

    def root(trace_id: int) -> SpanRecord:
        return SpanRecord(
            trace_id=trace_id, span_id=1, name="rollout", start_ns=0, end_ns=1,
            attributes={"step": 0, "sample_index": trace_id},
        )  # fmt: skip

    assembler = SampleAssembler(TrackioSettings(), grace=GracePolicy(explicit=0.0))
    out = [*assembler.add([root(1)]), *assembler.add([root(2)]), *assembler.add([root(1)])]
    out += assembler.flush()
    assert sorted(s.identity.sample_index for s in out) == [1, 2]
    assert assembler.resent == 1
    memory = EmittedSamples()
    one = SampleIdentity(trace_id=1, root_span_id=1, step=0, sample_index=1)
    two = SampleIdentity(trace_id=2, root_span_id=1, step=0, sample_index=2)
    memory.remember([root(1)], one)
    memory.remember([root(2)], two)
    assert (memory.identity_of(1, 1), memory.identity_of(2, 1)) == (one, two)
    assert memory.went_out(root(1)) and memory.went_out(root(2))


def test_log_events_join_a_span_once_after_its_own_events_and_in_time_order():
    span = _span(1)
    span.events = (EventRecord("own", 5),)
    late, early = EventRecord("b", 9, from_log=True), EventRecord("a", 2, from_log=True)
    attach_events(span, [late, early])
    attach_events(span, [late])  # a retried export
    assert [e.name for e in span.events] == ["own", "a", "b"]


def test_a_placeholder_carries_the_events_of_a_span_not_here():
    events = [
        LogEventRecord(1, 7, EventRecord("gen_ai.choice", 3, from_log=True)),
        LogEventRecord(1, 7, EventRecord("gen_ai.user.message", 1, from_log=True)),
        LogEventRecord(1, 7, EventRecord("gen_ai.user.message", 1, from_log=True)),  # retried
    ]
    span = placeholder(events, "span not received")
    assert (span.span_id, span.name, span.start_ns, span.end_ns) == (7, PLACEHOLDER_NAME, 1, 3)
    assert span.attributes == {PLACEHOLDER_ATTRIBUTE: "span not received"}
    assert [e.name for e in span.events] == ["gen_ai.user.message", "gen_ai.choice"]
