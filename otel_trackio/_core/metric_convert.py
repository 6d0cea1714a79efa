"""Pure conversion of OTel metric points into Trackio scalars, grouped by step.

No I/O and no trackio import: :class:`MetricConverter` takes SDK ``MetricsData`` (as produced by a
``MetricReader`` or decoded from OTLP) and returns ``{step: {series: value}}``. The exporter in
:mod:`otel_trackio.metric_exporter` does the logging.

Mapping:

* a counter (a monotonic ``Sum``) → what was added at the point's step (the running total with
  ``counter_increments=False``), whatever the temporality; a non-monotonic ``Sum`` (an
  up-down counter: a level, such as requests in flight) and a ``Gauge`` → the point's value;
* ``Histogram`` and ``ExponentialHistogram`` → the chosen statistics among ``<series>/count``,
  ``/sum``, ``/mean``, ``/min``, ``/max`` and, when asked, ``<series>/distribution`` (a
  :class:`Distribution` of bucket counts);
* series name: the metric name, then one ``/<key>=<value>`` per point attribute, keys sorted, the
  step attribute left out;
* step: the point's step attribute when it holds an integer, else the caller's fallback step.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    ExponentialHistogram,
    Gauge,
    Histogram,
    MetricsData,
    Sum,
)

from otel_trackio._core.values import parse_step, utf8
from otel_trackio._settings import HISTOGRAM_STATS

# Series whose key Trackio would rename (reserved, or starting with "__") get this prefix.
RENAME_PREFIX = "otel/"


@dataclass(frozen=True, slots=True)
class Distribution:
    """Bucket counts and their ``len(counts) + 1`` finite, non-decreasing edges."""

    counts: tuple[int, ...]
    edges: tuple[float, ...]


Value = int | float | Distribution


@dataclass(slots=True)
class Conversion:
    """What one ``MetricsData`` became: values by step, and what was left out."""

    by_step: dict[int, dict[str, Value]] = field(default_factory=dict)
    points_by_step: dict[int, int] = field(default_factory=dict)
    # step -> {series: value signature}, remembered by ``MetricConverter.commit`` once logged.
    signatures: dict[int, dict[str, Any]] = field(default_factory=dict)
    # step -> {counter stream: its new _CounterState}, kept by ``commit`` once logged.
    counters: dict[int, dict[Any, _CounterState]] = field(default_factory=dict)
    # step -> the delta points' (series, start, end), remembered by ``commit`` once logged.
    intervals: dict[int, list[tuple[str, int, int]]] = field(default_factory=dict)
    resent: int = 0  # delta points sent again (their interval was logged already): left out
    unsupported_types: set[str] = field(default_factory=set)
    points: int = 0
    skipped_nonfinite: int = 0
    skipped_series: list[str] = field(default_factory=list)
    unsupported: int = 0
    renamed: int = 0
    unchanged: int = 0

    @property
    def values(self) -> int:
        """Number of values (scalars and distributions) to log."""
        return sum(len(v) for v in self.by_step.values())


@dataclass(frozen=True, slots=True)
class ConverterMemory:
    """What a :class:`MetricConverter` remembers of what it logged, as plain data: for a
    process that takes over a run's metrics after another stopped (a restarted receiver or
    offload writer), so that a point sent again, or replayed from a spool, is not logged twice
    and counters go on from where they stood.

    ``logged``: (series, step) → the value (signature) logged there; ``counters``: counter
    stream → (step, total, base); ``intervals``: the delta points logged, (series, start, end).
    Each holds the most recent entries, oldest first.
    """

    logged: tuple[tuple[tuple[str, int], Any], ...] = ()
    counters: tuple[tuple[Any, tuple[int, float, float]], ...] = ()
    intervals: tuple[tuple[str, int, int], ...] = ()


@dataclass(frozen=True, slots=True)
class _CounterState:
    """Where a counter stream stood when last logged: at ``step`` its running total was
    ``total``, of which ``base`` was reached before that step."""

    step: int
    total: float
    base: float


class MetricConverter:
    """Turns ``MetricsData`` into ``{step: {series: value}}``.

    Stateful to skip re-logging: a cumulative or gauge point whose (series, step) already got
    the same value in an earlier conversion is left out, so a cumulative point carrying an old
    ``step`` attribute is not logged again at every export. A delta point is new unless its
    series and interval (start and end time) were logged already: a client sending a request
    again, its answer lost, would otherwise add it twice. And to plot counters per step: each
    counter stream's total where its last step began.

    Args:
        step_attribute: the point attribute holding the step (never part of series names).
        stats: the statistics logged for a histogram point (``<series>/<stat>``), among
            ``count``, ``sum``, ``mean``, ``min``, ``max``.
        distributions: also produce a ``<series>/distribution`` for histogram points.
        counter_increments: a counter plots what was added at each step (its value at a step
            grows with each export until the step is over); False: its running total, as the
            SDK's cumulative points carry it.
        reserved_keys: keys Trackio reserves (the exporter passes Trackio's list); a series
            named so, or starting with ``__``, is logged as ``otel/<name>``.
        max_remembered: bound of the (series, step) memory; it is cleared when full.
    """

    def __init__(
        self,
        *,
        step_attribute: str = "step",
        stats: Iterable[str] = HISTOGRAM_STATS,
        distributions: bool = False,
        counter_increments: bool = True,
        reserved_keys: Iterable[str] = (),
        max_remembered: int = 200_000,
    ) -> None:
        self.step_attribute = step_attribute
        self.stats = tuple(stats)
        self.distributions = distributions
        self.counter_increments = counter_increments
        self._counters: dict[Any, _CounterState] = {}
        self.reserved_keys = frozenset(reserved_keys)
        self.max_remembered = max_remembered
        self._last: dict[tuple[str, int], Any] = {}
        self._intervals: dict[tuple[str, int, int], None] = {}  # delta points logged

    def convert(self, data: MetricsData, fallback_step: Callable[[], int]) -> Conversion:
        """Convert every point of ``data``; ``fallback_step`` is called at most once, when needed.

        Resource and scope are ignored: series are named by metric name and point attributes.
        """
        out = Conversion()
        fallback: list[int] = []

        def step_for(attributes: Mapping[str, Any]) -> int:
            step = self._own_step(attributes)
            if step is not None:
                return step
            if not fallback:
                fallback.append(int(fallback_step()))
            return fallback[0]

        for resource_metrics in getattr(data, "resource_metrics", None) or ():
            for scope_metrics in getattr(resource_metrics, "scope_metrics", None) or ():
                for metric in getattr(scope_metrics, "metrics", None) or ():
                    self._convert_metric(metric, step_for, out)
        return out

    # -- per metric --------------------------------------------------------------------------

    def _convert_metric(
        self, metric: Any, step_for: Callable[[Mapping[str, Any]], int], out: Conversion
    ) -> None:
        data = metric.data
        name = str(metric.name)
        delta = getattr(data, "aggregation_temporality", None) == AggregationTemporality.DELTA
        if isinstance(data, (Sum, Gauge)):
            counter = self.counter_increments and isinstance(data, Sum) and data.is_monotonic
            for point in data.data_points:
                attributes = point.attributes or {}
                series = self.series_name(name, attributes)
                step = step_for(attributes)
                out.points += 1
                if delta and self._sent_again(out, step, series, point):
                    continue
                value, always = point.value, delta
                if counter:
                    value = self._step_amount(out, step, series, point, attributes, delta)
                    always = False  # one amount per (series, step), growing: skip repeats
                if self._put(out, step, series, value, always):
                    _count_point(out, step)
        elif isinstance(data, (Histogram, ExponentialHistogram)):
            exponential = isinstance(data, ExponentialHistogram)
            for histogram_point in data.data_points:
                attributes = histogram_point.attributes or {}
                series = self.series_name(name, attributes)
                step = step_for(attributes)
                out.points += 1
                if delta and self._sent_again(out, step, series, histogram_point):
                    continue
                self._put_histogram(out, step, series, histogram_point, exponential, delta)
        else:
            out.unsupported += 1
            out.unsupported_types.add(type(data).__name__)

    def _sent_again(self, out: Conversion, step: int, series: str, point: Any) -> bool:
        """True (counted) when this delta point's interval was logged already; else it is
        noted, to be remembered once logged."""
        interval = (
            series,
            int(getattr(point, "start_time_unix_nano", 0) or 0),
            int(getattr(point, "time_unix_nano", 0) or 0),
        )
        if not interval[2]:
            return False  # no end time: nothing tells a resend from a new point
        if interval in self._intervals:
            out.resent += 1
            return True
        out.intervals.setdefault(step, []).append(interval)
        return False

    def _own_step(self, attributes: Mapping[str, Any]) -> int | None:
        return parse_step(attributes.get(self.step_attribute)) if attributes else None

    def _step_amount(
        self,
        out: Conversion,
        step: int,
        series: str,
        point: Any,
        attributes: Mapping[str, Any],
        delta: bool,
    ) -> Any:
        """What a counter stream added at ``step`` so far (its new state waits for commit).

        A stream carrying the step attribute is one step's own: its cumulative value is that
        step's amount already. Otherwise the amount is the running total less the total
        where the step began (a total that went down is a restarted counter: counted from 0).
        Delta points add up within a step. Values that are no number are left to ``_put``.
        """
        value = point.value
        if not _finite(value) or isinstance(value, bool):
            return value
        own_step = self._own_step(attributes) is not None
        if own_step and not delta:
            return value
        if delta:  # deltas add up: per series (and step, when the step is an attribute)
            key: tuple[Any, ...] = (series, step if own_step else None)
        else:  # a restarted process starts a new stream (a new start time)
            key = (series, getattr(point, "start_time_unix_nano", 0))
        last = self._counters.get(key)
        total = value + (last.total if delta and last is not None else 0)
        if last is None:
            base: float = 0
        elif last.step == step:
            base = last.base
        else:
            base = last.total
        if total < base:
            base = 0
        out.counters.setdefault(step, {})[key] = _CounterState(step, total, base)
        return total - base

    def _put_histogram(
        self,
        out: Conversion,
        step: int,
        series: str,
        point: Any,
        exponential: bool,
        delta: bool,
    ) -> None:
        count = point.count
        total = point.sum
        # OTLP makes sum, min and max optional; decoders mark them absent with None, NaN (sum),
        # +inf (min) and -inf (max), which the SDK never produces itself: left out, not "bad".
        if total is None or (isinstance(total, float) and math.isnan(total)):
            total = None
        lo, hi = getattr(point, "min", None), getattr(point, "max", None)
        lo = None if lo == math.inf else lo
        hi = None if hi == -math.inf else hi
        if not delta:
            signature = (count, total)
            if self._last.get((series, step)) == signature:
                out.unchanged += 1
                return
            out.signatures.setdefault(step, {})[series] = signature
        values: dict[str, Any] = {"count": count, "sum": total}
        if count:
            values["mean"] = total / count if _finite(total) else None
            values["min"], values["max"] = lo, hi
        stored = False
        for stat in self.stats:
            if values.get(stat) is not None:
                stored = self._put(out, step, f"{series}/{stat}", values[stat], True) or stored
        if stored:
            _count_point(out, step)
        if not count:
            return
        if self.distributions:
            dist = (
                exponential_distribution(point)
                if exponential
                else explicit_distribution(point.bucket_counts, point.explicit_bounds, lo, hi)
            )
            if dist is not None:
                out.by_step.setdefault(step, {})[self._key(f"{series}/distribution", out)] = dist

    def _put(self, out: Conversion, step: int, series: str, value: Any, always: bool) -> bool:
        """Store one scalar; False when it was left out (not finite, or unchanged)."""
        if isinstance(value, bool):
            value = int(value)
        if not isinstance(value, (int, float)) or (
            isinstance(value, float) and not math.isfinite(value)
        ):
            out.skipped_nonfinite += 1
            _note(out, series)
            return False
        if not always:
            if self._last.get((series, step)) == value:
                out.unchanged += 1
                return False
            out.signatures.setdefault(step, {})[series] = value
        out.by_step.setdefault(step, {})[self._key(series, out)] = value
        return True

    def commit(self, out: Conversion, step: int) -> None:
        """Remember what ``out`` held at ``step`` once it was logged (so it is not logged again)."""
        for series, signature in out.signatures.get(step, {}).items():
            if len(self._last) >= self.max_remembered:
                self._last.clear()
            self._last[(series, step)] = signature
        for key, state in out.counters.get(step, {}).items():
            if len(self._counters) >= self.max_remembered:
                self._counters.clear()
            self._counters[key] = state
        for interval in out.intervals.get(step, ()):
            if len(self._intervals) >= self.max_remembered:
                self._intervals.pop(next(iter(self._intervals)))
            self._intervals[interval] = None

    def memory(self, limit: int = 20_000) -> ConverterMemory:
        """What this converter remembers (at most the ``limit`` most recent entries of each
        kind): what a successor needs, see :class:`ConverterMemory`."""

        def recent(items: Iterable[Any], size: int) -> tuple[Any, ...]:
            return tuple(items)[max(0, size - limit) :]

        return ConverterMemory(
            logged=recent(self._last.items(), len(self._last)),
            counters=recent(
                ((key, (c.step, c.total, c.base)) for key, c in self._counters.items()),
                len(self._counters),
            ),
            intervals=recent(self._intervals, len(self._intervals)),
        )

    def recall(self, memory: ConverterMemory) -> None:
        """Take over what a predecessor remembered (what this converter knows itself wins)."""
        for key, signature in memory.logged:
            self._last.setdefault(key, signature)
        for stream, (step, total, base) in memory.counters:
            self._counters.setdefault(stream, _CounterState(step, total, base))
        for interval in memory.intervals:
            self._intervals.setdefault(interval, None)

    def _key(self, series: str, out: Conversion) -> str:
        if series in self.reserved_keys or series.startswith("__"):
            out.renamed += 1
            return RENAME_PREFIX + series
        return series

    def series_name(self, metric_name: str, attributes: Mapping[str, Any]) -> str:
        """``<metric>/<k1>=<v1>/<k2>=<v2>``: keys sorted, the step attribute left out."""
        if not attributes:
            return metric_name
        parts = [
            f"{key}={format_attribute(attributes[key])}"
            for key in sorted(attributes)
            if key != self.step_attribute
        ]
        name = "/".join([metric_name, *parts]) if parts else metric_name
        return utf8(name)


def format_attribute(value: Any) -> str:
    """An attribute value as it appears in a series name (``true``/``false``, lists joined)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        return ",".join(format_attribute(v) for v in value)
    return str(value)


def explicit_distribution(
    bucket_counts: Iterable[int],
    bounds: Iterable[float],
    lo: float | None,
    hi: float | None,
) -> Distribution | None:
    """Explicit-bucket counts as a distribution; the open outer buckets end at min / max."""
    counts = [int(c) for c in bucket_counts]
    edges = [float(b) for b in bounds]
    if not counts or sum(counts) <= 0 or len(edges) != len(counts) - 1:
        return None
    # (left, right, count); None is an open end.
    intervals: list[list[Any]] = [
        [edges[i - 1] if i > 0 else None, edges[i] if i < len(edges) else None, c]
        for i, c in enumerate(counts)
    ]
    return _close(_trim(intervals), lo, hi)


def exponential_distribution(point: Any) -> Distribution | None:
    """Exponential-bucket counts (positive, zero, negative) as a contiguous distribution."""
    try:
        base_exp = 2.0 ** -int(
            point.scale
        )  # bucket i covers (2**(i*base_exp), 2**((i+1)*base_exp)]
        intervals: list[list[Any]] = []
        negative = point.negative
        for i, c in enumerate(negative.bucket_counts):
            index = negative.offset + i
            intervals.append([-(2.0 ** ((index + 1) * base_exp)), -(2.0 ** (index * base_exp)), c])
        positive = point.positive
        for i, c in enumerate(positive.bucket_counts):
            index = positive.offset + i
            intervals.append([2.0 ** (index * base_exp), 2.0 ** ((index + 1) * base_exp), c])
        if point.zero_count:
            magnitudes = [min(abs(a), abs(b)) for a, b, c in intervals if c]
            width = min(magnitudes) if magnitudes else 1e-9
            intervals.append([-width, width, point.zero_count])
    except (OverflowError, AttributeError, TypeError):
        return None
    intervals = [iv for iv in intervals if iv[0] is not None]
    intervals.sort(key=lambda iv: (iv[0], iv[1]))
    if not intervals or sum(int(iv[2]) for iv in intervals) <= 0:
        return None
    filled: list[list[Any]] = []
    for iv in intervals:
        if filled and iv[0] > filled[-1][1]:
            filled.append([filled[-1][1], iv[0], 0])  # gap between bucket ranges
        elif filled and iv[0] < filled[-1][1]:
            iv = [filled[-1][1], max(iv[1], filled[-1][1]), iv[2]]
        filled.append(list(iv))
    return _close(_trim(filled), None, None)


def _trim(intervals: list[list[Any]]) -> list[list[Any]]:
    start, end = 0, len(intervals)
    while start < end and not intervals[start][2]:
        start += 1
    while end > start and not intervals[end - 1][2]:
        end -= 1
    return intervals[start:end]


def _close(intervals: list[list[Any]], lo: float | None, hi: float | None) -> Distribution | None:
    if not intervals:
        return None
    first, last = intervals[0], intervals[-1]
    if first[0] is None:
        right = first[1]
        first[0] = lo if _finite(lo) and (right is None or lo <= right) else right
    if last[1] is None:
        left = last[0]
        last[1] = hi if _finite(hi) and (left is None or hi >= left) else left
    if first[0] is None or last[1] is None:
        return None
    edges = [float(first[0]), *(float(iv[1]) for iv in intervals)]
    if not all(math.isfinite(e) for e in edges):
        return None
    return Distribution(counts=tuple(int(iv[2]) for iv in intervals), edges=tuple(edges))


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def _count_point(out: Conversion, step: int) -> None:
    out.points_by_step[step] = out.points_by_step.get(step, 0) + 1


def _note(out: Conversion, series: str) -> None:
    if len(out.skipped_series) < 5 and series not in out.skipped_series:
        out.skipped_series.append(series)
