"""Property-based fault tests: arbitrary spans and metric points must never crash or vanish.

* span → Trace: random span trees (missing middle spans, parent-id cycles, duplicated span ids,
  remote parents, end before start) carrying hostile attribute values go through
  :class:`SampleAssembler` in random ``add()`` batches, then ``flush()``. Every input span must come
  out in exactly one sample, and every sample must convert to a Trace that Trackio can serialise.
* metric → scalar: random points through :class:`MetricConverter`: no exception, only finite
  numbers come out, and every finite point is either logged or counted as left out.
* a smaller number of random trees go end to end through the real exporter into real Trackio
  storage, and every span is counted back.

Examples are derandomised (same inputs on every CI run); set ``OTEL_TRACKIO_FAULT_EXAMPLES`` to
try more.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import os
import uuid
from collections import Counter
from typing import Any

import orjson
import pytest
from conftest import read_traces
from fault_tally import tally
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.util.instrumentation import InstrumentationScope

from otel_trackio import TrackioSettings, TrackioSpanExporter
from otel_trackio._core.assembly import PLACEHOLDER_ATTRIBUTE, SampleAssembler
from otel_trackio._core.assembly.grace import GracePolicy
from otel_trackio._core.assembly.memory import sent_again
from otel_trackio._core.convert import sample_to_trace
from otel_trackio._core.records import EventRecord, LogEventRecord, SpanRecord
from otel_trackio._core.values import parse_step

EXAMPLES = int(os.environ.get("OTEL_TRACKIO_FAULT_EXAMPLES", "60"))
FUZZ = settings(
    max_examples=EXAMPLES,
    deadline=None,
    derandomize=True,
    database=None,
    # No shrinking: inputs are large and CI time is short; a failure prints the raw example.
    phases=[Phase.explicit, Phase.reuse, Phase.generate],
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- hostile values ------------------------------------------------------------------------------

HUGE = "x" * 70_000
DEEP_JSON = "[" * 5_000 + "]" * 5_000
DEEPER_JSON = "[" * 100_000 + "]" * 100_000
ALMOST_JSON = [
    '[{"role": "user", "parts": [{"type": "text", "content": "hi"}]}',
    '{"role": "assistant", "content": "x"',
    '"\\"[1, 2\\""',
    '[{"role": 3, "parts": "not a list"}]',
    '[{"parts": [{"type": "tool_call", "arguments": {"a": NaN}}]}]',
    '[null, 1, "x", {"role": null}]',
    json.dumps(json.dumps([{"role": "user", "content": "double"}])),
    "[" + "1," * 1000 + "]",
    '{"a": 1}{"b": 2}',
]

texts = st.one_of(
    st.text(max_size=40),
    st.sampled_from([HUGE, DEEP_JSON, "", "\x00", "\udcff\udcfe", "é" * 50]),
    st.sampled_from(ALMOST_JSON),
    st.binary(max_size=30).map(lambda b: b.decode("utf-8", "surrogateescape")),
)
numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
    st.sampled_from([0, -1, 2**63 - 1, -(2**63), 1e308, -0.0, math.nan]),
)
scalars = st.one_of(st.none(), st.booleans(), numbers, texts, st.binary(max_size=20))
values = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4),
        st.tuples(inner, inner),
        st.dictionaries(st.text(max_size=5), inner, max_size=3),
    ),
    max_leaves=12,
)
steps = st.one_of(
    st.integers(min_value=-5, max_value=5),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.sampled_from(["3", " 4 ", "-2", "step", "1e3", "", "7.0", 2.0, 2.5, math.nan, True]),
    st.lists(st.integers(), max_size=2),
)
ATTRIBUTE_KEYS = [
    "gen_ai.operation.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "gen_ai.provider.name",
    "gen_ai.input.messages",
    "gen_ai.output.messages",
    "gen_ai.system_instructions",
    "gen_ai.usage.input_tokens",
    "gen_ai.usage.output_tokens",
    "gen_ai.usage.cost",
    "gen_ai.tool.call.arguments",
    "gen_ai.tool.call.result",
    "input.value",
    "output.value",
    "error.type",
    "rollout_n",
    "validate",
    "service.name",
    "free.form",
]
attributes = st.dictionaries(
    st.one_of(st.sampled_from(ATTRIBUTE_KEYS), st.text(max_size=8)), values, max_size=5
)


@st.composite
def span_attributes(draw: st.DrawFn) -> dict[str, Any]:
    attrs = draw(attributes)
    if draw(st.booleans()):
        attrs["step"] = draw(steps)
    if draw(st.booleans()):
        attrs["sample_index"] = draw(st.one_of(values, st.integers(0, 3)))
    if draw(st.booleans()):
        attrs["gen_ai.operation.name"] = draw(st.sampled_from(["chat", "execute_tool", "x"]))
    return attrs


timestamps = st.integers(min_value=0, max_value=2**64 - 1)


@st.composite
def span_forests(draw: st.DrawFn) -> list[SpanRecord]:
    """Spans of a few traces: ids from a small pool, so duplicates and cycles happen."""
    n = draw(st.integers(min_value=1, max_value=25))
    trace_ids = draw(st.lists(st.integers(0, 2**128 - 1), min_size=1, max_size=3))
    id_pool = draw(st.lists(st.integers(0, 2**64 - 1), min_size=1, max_size=max(1, n)))
    spans = []
    for _ in range(n):
        span_id = draw(st.sampled_from(id_pool))
        parent = draw(st.one_of(st.none(), st.sampled_from(id_pool), st.integers(0, 2**64 - 1)))
        start = draw(timestamps)
        end = draw(st.one_of(timestamps, st.just(start), st.integers(0, start)))
        events = draw(
            st.lists(
                st.builds(
                    EventRecord,
                    st.sampled_from(["exception", "log", ""]),
                    timestamps,
                    st.dictionaries(
                        st.sampled_from(["exception.type", "exception.message", "k"]),
                        values,
                        max_size=2,
                    ),
                ),
                max_size=2,
            )
        )
        spans.append(
            SpanRecord(
                trace_id=draw(st.sampled_from(trace_ids)),
                span_id=span_id,
                name=draw(texts),
                start_ns=start,
                end_ns=end,
                parent_id=parent,
                parent_is_remote=draw(st.booleans()),
                attributes=draw(span_attributes()),
                events=tuple(events),
                status=draw(st.sampled_from(["unset", "ok", "error"])),
                status_description=draw(st.one_of(st.none(), texts)),
                kind=draw(st.sampled_from(["INTERNAL", "CLIENT", "SERVER"])),
                resource=draw(st.dictionaries(st.just("service.name"), values, max_size=1)),
            )
        )
    return spans


def _split(spans: list[SpanRecord], cuts: list[int]) -> list[list[SpanRecord]]:
    points = sorted({c % (len(spans) + 1) for c in cuts})
    batches, last = [], 0
    for p in [*points, len(spans)]:
        batches.append(spans[last:p])
        last = p
    return batches


def _assert_counters_agree(assembler: SampleAssembler) -> None:
    """The counters the assembler keeps up by hand agree with a recount of what it holds."""
    assert assembler.recount() == (assembler.buffered_spans, assembler.pending_events)


def _assert_drained(assembler: SampleAssembler) -> None:
    """Nothing is left in the assembler (after a flush)."""
    assert (assembler.buffered_spans, assembler.pending_events, assembler.open_traces) == (0, 0, 0)


def _assemble(spans: list[SpanRecord], cuts: list[int], max_spans: int = 100_000) -> list:
    assembler = SampleAssembler(TrackioSettings(max_buffered_spans=max_spans))
    samples = []
    for batch in _split(spans, cuts):
        samples.extend(assembler.add(batch))
        _assert_counters_agree(assembler)
    samples.extend(assembler.flush())
    _assert_drained(assembler)
    return samples


def _copies(spans: list[SpanRecord]) -> tuple[list[list[SpanRecord]], Counter[tuple[int, int]]]:
    """Each span with the copies of it sent again after it; how many different spans have
    each (trace id, span id)."""
    copies: list[list[SpanRecord]] = []
    for span in spans:
        group = next((g for g in copies if sent_again(g[0], span)), None)
        if group is None:
            copies.append([span])
        else:
            group.append(span)
    return copies, Counter((g[0].trace_id, g[0].span_id) for g in copies)


def _check_every_span_once(spans: list[SpanRecord], samples: list, area: str) -> None:
    """Every span comes out once; a span sent again (the same as an earlier one: see
    ``sent_again``) comes out once with its copies, unless another span took its id."""
    seen = Counter(
        id(s)
        for sample in samples
        for s in sample.spans
        if PLACEHOLDER_ATTRIBUTE not in s.attributes  # log events' stand-ins for absent spans
    )
    copies, reused = _copies(spans)
    missing = repeated = 0
    for group in copies:
        out = sum(seen[id(s)] for s in group)
        missing += out == 0
        if len(group) == 1 or reused[(group[0].trace_id, group[0].span_id)] == 1:
            repeated += max(0, out - 1)
    tally.lost(area, missing)
    assert missing == 0, f"{missing} spans never came out"
    assert repeated == 0, f"{repeated} spans came out twice"
    assert all(n == 1 for n in seen.values())


def _convert_all(samples: list, area: str) -> None:
    settings = TrackioSettings(max_value_chars=4096)
    for sample in samples:
        try:
            trace = sample_to_trace(sample, settings)
        except Exception:
            tally.crashed(area)
            raise
        assert len(trace["spans"]) == len(sample.spans)
        assert len(trace["spans"]) == len(sample.spans)
        # Trackio serialises with orjson and drops a key it cannot serialise: the whole list of
        # Traces logged under it would be lost.
        orjson.dumps(trace)


@st.composite
def log_events(draw: st.DrawFn, spans: list[SpanRecord]) -> list[LogEventRecord]:
    """GenAI log events naming spans of the forest, spans that never come, or other traces."""
    traces = sorted({s.trace_id for s in spans}) or [1]
    known = [(s.trace_id, s.span_id) for s in spans]
    out = []
    for n in range(draw(st.integers(0, 12))):
        trace_id, span_id = draw(
            st.one_of(
                st.sampled_from(known),
                st.tuples(st.sampled_from(traces), st.integers(1, 2**64 - 1)),
                st.tuples(st.integers(1, 2**128 - 1), st.integers(1, 2**64 - 1)),
            )
        )
        name = draw(st.sampled_from(["gen_ai.user.message", "gen_ai.choice", "gen_ai.other"]))
        content = {"n": n, "content": draw(values), "message": draw(values)}
        event = EventRecord(name, draw(timestamps), content, from_log=True)
        out.append(LogEventRecord(trace_id, span_id, event, sampled=draw(st.booleans())))
    return out


# -- span → Trace --------------------------------------------------------------------------------


@FUZZ
@given(span_forests(), st.lists(st.integers(0, 100), max_size=5))
def test_assembly_emits_every_span_exactly_once(spans, cuts):
    tally.tried("properties")
    try:
        samples = _assemble(spans, cuts)
    except Exception:
        tally.crashed("properties")
        raise
    _check_every_span_once(spans, samples, "properties")
    _convert_all(samples, "properties")


@FUZZ
@given(
    span_forests(),
    st.lists(st.integers(0, 100), max_size=5),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 5)), max_size=4),
)
def test_a_batch_sent_again_comes_out_once(spans, cuts, resends):
    """A client retrying a request whose response it never got: each (batch, later) pair
    sends batch number ``batch`` again after batch number ``batch + later`` (new records, as
    decoding a request again makes). Every span comes out once, as if sent once."""
    tally.tried("properties")
    batches = _split(spans, cuts)
    sent: list[list[SpanRecord]] = []
    for number, batch in enumerate(batches):
        sent.append(batch)
        for again, later in resends:
            if again < len(batches) and again + later == number:
                sent.append([dataclasses.replace(span) for span in batches[again]])
    assembler = SampleAssembler(TrackioSettings())
    try:
        samples = [sample for batch in sent for sample in assembler.add(batch)]
        samples.extend(assembler.flush())
    except Exception:
        tally.crashed("properties")
        raise
    copies, reused = _copies(spans)
    if any(n > 1 for n in reused.values()):
        return  # another span took an id: which copy goes out on its own is not defined
    out = Counter(
        (s.trace_id, s.span_id)
        for sample in samples
        for s in sample.spans
        if PLACEHOLDER_ATTRIBUTE not in s.attributes
    )
    assert out == Counter((g[0].trace_id, g[0].span_id) for g in copies)


@FUZZ
@given(span_forests(), st.lists(st.integers(0, 100), max_size=5), st.integers(1, 6))
def test_a_tiny_span_buffer_still_loses_nothing(spans, cuts, max_spans):
    tally.tried("properties")
    try:
        samples = _assemble(spans, cuts, max_spans=max_spans)
    except Exception:
        tally.crashed("properties")
        raise
    _check_every_span_once(spans, samples, "properties")
    _convert_all(samples, "properties")


@FUZZ
@given(span_forests(), st.randoms(use_true_random=False))
def test_arrival_order_does_not_matter_for_completeness(spans, rng):
    tally.tried("properties")
    shuffled = list(spans)
    rng.shuffle(shuffled)
    samples = _assemble(shuffled, [rng.randrange(30) for _ in range(3)])
    _check_every_span_once(shuffled, samples, "properties")


@pytest.mark.parametrize("key", ["gen_ai.input.messages", "input.value", "gen_ai.tool.call.result"])
def test_json_nested_deeper_than_python_can_parse(key):
    """``json.loads`` raises RecursionError (not ValueError) here: the sample must still convert."""
    tally.tried("properties")
    span = SpanRecord(1, 2, "chat", 0, 5, attributes={key: DEEPER_JSON, "sample_index": 0})
    samples = _assemble([span], [])
    _check_every_span_once([span], samples, "properties")
    _convert_all(samples, "properties")


# -- metric → scalar -----------------------------------------------------------------------------

metric_attributes = st.dictionaries(
    st.one_of(st.sampled_from(["step", "split", "__x", "metrics"]), st.text(max_size=6)),
    st.one_of(steps, st.text(max_size=10), st.booleans(), st.lists(st.integers(), max_size=3)),
    max_size=3,
)
metric_numbers = st.one_of(
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.floats(allow_nan=True, allow_infinity=True),
)


@st.composite
def metric_data(draw: st.DrawFn) -> tuple[MetricsData, int]:
    metrics = []
    points = 0
    for _ in range(draw(st.integers(1, 4))):
        kind = draw(st.sampled_from(["sum", "gauge", "histogram"]))
        # Valid UTF-8 only: see test_metric_series_with_non_utf8_attribute_is_not_dropped.
        name = draw(st.one_of(st.sampled_from(["loss", "step", "__m", "time", HUGE]), st.text()))
        temporality = draw(st.sampled_from(list(AggregationTemporality)[1:]))
        n = draw(st.integers(0, 4))
        points += n
        if kind in ("sum", "gauge"):
            data_points = [
                NumberDataPoint(
                    attributes=draw(metric_attributes),
                    start_time_unix_nano=0,
                    time_unix_nano=0,
                    value=draw(metric_numbers),
                )
                for _ in range(n)
            ]
            data: Any = (
                Sum(data_points, temporality, draw(st.booleans()))
                if kind == "sum"
                else Gauge(data_points)
            )
        else:
            data_points = []
            for _ in range(n):
                # OTLP requires ascending bounds (the SDK always sends them so).
                bounds = sorted(draw(st.lists(st.floats(allow_nan=False), max_size=4)))
                counts = draw(st.lists(st.integers(0, 2**40), min_size=0, max_size=len(bounds) + 2))
                data_points.append(
                    HistogramDataPoint(
                        attributes=draw(metric_attributes),
                        start_time_unix_nano=0,
                        time_unix_nano=0,
                        count=draw(st.integers(0, 2**40)),
                        sum=draw(metric_numbers),
                        bucket_counts=counts,
                        explicit_bounds=bounds,
                        min=draw(metric_numbers),
                        max=draw(metric_numbers),
                    )
                )
            data = Histogram(data_points, temporality)
        metrics.append(Metric(name=name, description="", unit="", data=data))
    resource = ResourceMetrics(
        Resource.create({}),
        [ScopeMetrics(InstrumentationScope("fuzz"), metrics, "")],
        "",
    )
    return MetricsData([resource]), points


@FUZZ
@given(metric_data(), st.booleans())
def test_metric_conversion_never_crashes_and_emits_only_finite_numbers(data_and_points, dist):
    from otel_trackio._core.metric_convert import Distribution, MetricConverter

    data, points = data_and_points
    tally.tried("properties")
    converter = MetricConverter(distributions=dist)
    try:
        conversion = converter.convert(data, lambda: 7)
        for step in conversion.by_step:
            converter.commit(conversion, step)
        again = converter.convert(data, lambda: 7)
    except Exception:
        tally.crashed("properties")
        raise
    assert conversion.points == points == again.points
    for step, series in conversion.by_step.items():
        assert isinstance(step, int)
        for key, value in series.items():
            assert isinstance(key, str)
            if isinstance(value, Distribution):
                assert len(value.edges) == len(value.counts) + 1
                assert all(math.isfinite(e) for e in value.edges)
                assert list(value.edges) == sorted(value.edges)
            else:
                assert isinstance(value, (int, float)) and not isinstance(value, bool)
                assert math.isfinite(value)
    orjson.dumps(
        {
            str(s): {k: v for k, v in m.items() if not isinstance(v, Distribution)}
            for s, m in conversion.by_step.items()
        }
    )


def test_metric_series_with_non_utf8_attribute_is_not_dropped():
    from otel_trackio._core.metric_convert import MetricConverter

    point = NumberDataPoint({"file": "bad\udcff"}, 0, 0, 1.0)
    metric = Metric("loss", "", "", Gauge([point]))
    data = MetricsData(
        [
            ResourceMetrics(
                Resource.create({}), [ScopeMetrics(InstrumentationScope("x"), [metric], "")], ""
            )
        ]
    )
    conversion = MetricConverter().convert(data, lambda: 0)
    orjson.dumps({k: v for series in conversion.by_step.values() for k, v in series.items()})


# -- end to end: real exporter, real Trackio storage ---------------------------------------------

E2E = settings(FUZZ, max_examples=max(5, EXAMPLES // 20))


def _stored_span_count(project: str, run: str) -> tuple[int, int]:
    traces = read_traces(project, run)
    return len(traces), sum(len(t["spans"]) for t in traces)


@E2E
@given(span_forests(), st.lists(st.integers(0, 100), max_size=3))
def test_end_to_end_every_span_is_read_back(spans, cuts):
    # The in-process engine (records fed to its pipeline): offload off for this exporter.
    project = f"fuzz-{uuid.uuid4().hex[:12]}"
    tally.tried("end-to-end")
    exporter = TrackioSpanExporter(project, name="fuzz", max_value_chars=4096, offload=False)
    try:
        results = [exporter._export_records(batch) for batch in _split(spans, cuts)]
        exporter.shutdown()
    except Exception:
        tally.crashed("end-to-end")
        raise
    samples, stored_spans = _stored_span_count(project, "fuzz")
    tally.lost("end-to-end", exporter.stats.samples_logged - samples)
    assert all(r.name == "SUCCESS" for r in results)
    assert exporter.stats.samples_lost == 0
    assert samples == exporter.stats.samples_logged
    copies, reused = _copies(spans)
    left_out = exporter.stats.unusable_step_spans  # samples whose own step is no step
    if all(n == 1 for n in reused.values()):
        assert stored_spans + left_out == len(copies)  # a span sent again is stored once
    else:  # another span took an id: a copy of either may go out on its own, and a write
        # retried (a busy machine: the store timed out) stores what storage lacks by span id,
        # so of spans sharing an id at least one is stored
        assert len(reused) <= stored_spans + left_out <= len(spans)


@pytest.mark.parametrize(
    "step",
    [2**63 - 1, -(2**63), -3, "12", 2**64, 10**30, True, 3.5, "abc", "1e400", "2**63"],
    ids=["int64-max", "int64-min", "negative", "str", "uint64-over", "huge", "bool", "float",
         "text", "float-text", "expression"],
)  # fmt: skip
def test_extreme_steps_end_to_end(step, project, caplog):
    """A step SQLite can hold is stored at that step; a value that is no step (or one SQLite
    cannot hold) is not stored at a guessed one: counted and warned, never lost silently in
    Trackio's background thread."""
    tally.tried("end-to-end")
    exporter = TrackioSpanExporter(project, name="steps", offload=False)  # records fed in process
    exporter._export_records([SpanRecord(1, 1, "root", 0, 10, attributes={"step": 5})])
    record = SpanRecord(2, 2, "root", 0, 10, attributes={"step": step, "sample_index": 0})
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        result = exporter._export_records([record])
        exporter.shutdown()
    assert result.name == "SUCCESS"
    stored = sorted(int(t["step"]) for t in read_traces(project, "steps"))
    usable = parse_step(step) is not None
    tally.lost("end-to-end", usable and len(stored) < 2)
    if usable:
        assert stored == sorted([5, int(step)])
    else:  # never at step 5, the latest another sample carried
        assert stored == [5]
        assert exporter.stats.unusable_steps == 1
        assert "1 samples not stored: their 'step' is no step" in caplog.text


@FUZZ
@given(st.data(), span_forests(), st.sampled_from([0.0, 0.5]))
def test_with_time_passing_idle_traces_go_out_and_the_counters_agree(data, spans, grace):
    """Spans and GenAI log events one at a time, in random order, while a clock moves on: the
    TTL logs idle traces as partial (their later spans come out as continuations), held
    samples go out after their grace. After every call the counters the assembler keeps up
    by hand agree with a recount, and at the end every span came out once."""
    tally.tried("properties")
    now = [0.0]
    events = data.draw(log_events(spans))
    items: list = [*spans, *events]
    rnd = data.draw(st.randoms(use_true_random=False))
    rnd.shuffle(items)
    assembler = SampleAssembler(
        TrackioSettings(sample_ttl_seconds=1.0),
        grace=GracePolicy(explicit=grace),
        clock=lambda: now[0],
    )
    samples = []
    try:
        for item in items:
            is_event = isinstance(item, LogEventRecord)
            samples.extend(assembler.add_events([item]) if is_event else assembler.add([item]))
            now[0] += rnd.choice((0.0, 0.0, 0.3, 1.5))
            samples.extend(assembler.expire())
            _assert_counters_agree(assembler)
        samples.extend(assembler.flush())
    except Exception:
        tally.crashed("properties")
        raise
    _assert_drained(assembler)
    _check_every_span_once(spans, samples, "properties")


@FUZZ
@given(st.data(), span_forests(), st.integers(1, 40), st.sampled_from([0.0, 5.0]))
def test_log_events_in_any_order_come_out_once_with_a_tiny_buffer(data, spans, max_spans, grace):
    """Spans and GenAI log events interleaved at random, in random batches, a small buffer:
    every span once, every sampled event exactly once (on its span or a placeholder), an
    unsampled one at most once (else counted as dropped), and every sample converts."""
    tally.tried("properties")
    events = data.draw(log_events(spans))
    items: list = [*spans, *events]
    data.draw(st.randoms(use_true_random=False)).shuffle(items)
    assembler = SampleAssembler(
        TrackioSettings(max_buffered_spans=max_spans), grace=GracePolicy(explicit=grace)
    )
    samples = []
    try:
        batch: list = []
        for item in [*items, None]:
            if batch and (item is None or type(item) is not type(batch[0])):
                is_events = isinstance(batch[0], LogEventRecord)
                samples.extend(assembler.add_events(batch) if is_events else assembler.add(batch))
                _assert_counters_agree(assembler)  # after every call
                batch = []
            if item is not None:
                batch.append(item)
        samples.extend(assembler.flush())
    except Exception:
        tally.crashed("properties")
        raise
    _assert_drained(assembler)
    _check_every_span_once(spans, samples, "properties")
    out = Counter(id(e) for sample in samples for span in sample.spans for e in span.events)
    sampled = [e.event for e in events if e.sampled]
    lost = sum(1 for e in sampled if out[id(e)] == 0)
    tally.lost("properties", lost)
    assert lost == 0, f"{lost} log events never came out"
    assert all(out[id(e.event)] <= 1 for e in events), "a log event came out twice"
    unsampled_out = sum(1 for e in events if not e.sampled and out[id(e.event)])
    unsampled = sum(1 for e in events if not e.sampled)
    assert unsampled_out + assembler.unsampled_events_dropped == unsampled
    _convert_all(samples, "properties")
