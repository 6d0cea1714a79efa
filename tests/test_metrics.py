"""TrackioMetricExporter end to end: a real MeterProvider in, real Trackio storage read back."""

from __future__ import annotations

import logging
import math

import pytest
import trackio
from conftest import read_logs, read_traces, run_python
from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import Counter, Histogram, MeterProvider, UpDownCounter
from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    HistogramDataPoint,
    Metric,
    MetricExportResult,
    MetricsData,
    NumberDataPoint,
    PeriodicExportingMetricReader,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.metrics.export import Histogram as HistogramData
from opentelemetry.sdk.metrics.view import ExponentialBucketHistogramAggregation
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from trackio import context_vars
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio import TrackioMetricExporter, TrackioSpanExporter, set_step
from otel_trackio._core.metric_convert import (
    MetricConverter,
    explicit_distribution,
    exponential_distribution,
)
from otel_trackio._settings import HISTOGRAM_STATS
from otel_trackio._trackio.installed import FALLBACK_RESERVED_KEYS


def _provider(exporter: TrackioMetricExporter) -> MeterProvider:
    """A provider whose reader exports only on force_flush / shutdown (no timer thread)."""
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=math.inf)
    return MeterProvider(metric_readers=[reader])


def _by_step(project: str, run: str) -> dict[int, dict]:
    """Stored rows merged per step (several log calls at one step merge; later wins)."""
    merged: dict[int, dict] = {}
    for row in read_logs(project, run):
        merged.setdefault(row["step"], {}).update(
            {k: v for k, v in row.items() if k not in ("step", "timestamp")}
        )
    return merged


def _series(project: str, run: str, key: str) -> dict[int, object]:
    return {step: row[key] for step, row in _by_step(project, run).items() if key in row}


def _data(metrics: list[Metric]) -> MetricsData:
    """MetricsData as the OTLP receiver builds it: any resource, any scope."""
    return MetricsData(
        resource_metrics=[
            ResourceMetrics(
                resource=Resource.create({"service.name": "remote"}),
                scope_metrics=[
                    ScopeMetrics(
                        scope=InstrumentationScope("remote.scope"),
                        metrics=metrics,
                        schema_url="",
                    )
                ],
                schema_url="",
            )
        ]
    )


def _gauge(name: str, *points: tuple[float, dict]) -> Metric:
    return Metric(
        name=name,
        description=None,
        unit=None,
        data=Gauge(data_points=[NumberDataPoint(attrs, 0, 1, value) for value, attrs in points]),
    )


# -- sums, gauges, attribute sets, steps --------------------------------------------------------


@pytest.mark.parametrize("totals", [False, True])
def test_counters_log_per_step_amounts_and_updown_counters_levels_per_attribute_set(
    project, totals
):
    exporter = TrackioMetricExporter(project=project, name="r", counter_totals=totals)
    provider = _provider(exporter)
    meter = provider.get_meter("rollout")
    tokens = meter.create_counter("gen_ai.client.token.usage")
    inflight = meter.create_up_down_counter("rollout.inflight")

    set_step(3)
    tokens.add(100, {"gen_ai.token.type": "input", "gen_ai.request.model": "m"})
    tokens.add(7, {"gen_ai.token.type": "output", "gen_ai.request.model": "m"})
    inflight.add(4)
    provider.force_flush()

    set_step(4)
    tokens.add(50, {"gen_ai.token.type": "input", "gen_ai.request.model": "m"})
    inflight.add(-3)
    provider.force_flush()
    provider.shutdown()

    rows = _by_step(project, "r")
    inp = "gen_ai.client.token.usage/gen_ai.request.model=m/gen_ai.token.type=input"
    out = "gen_ai.client.token.usage/gen_ai.request.model=m/gen_ai.token.type=output"
    assert rows[3][inp] == 100 and rows[3][out] == 7 and rows[3]["rollout.inflight"] == 4
    if totals:  # counter_totals=True: the running total
        assert rows[4][inp] == 150
        assert rows[4][out] == 7  # unchanged total, new step: logged so the line goes on
    else:  # by default: what was added at the step
        assert rows[4][inp] == 50
        assert rows[4][out] == 0  # nothing added at step 4: logged so the line goes on
    assert rows[4]["rollout.inflight"] == 1  # an up-down counter is a level: its value
    assert exporter.stats.failed_exports == 0


def test_one_log_call_per_step_holds_every_scalar(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    provider = _provider(exporter)
    meter = provider.get_meter("m")
    for i in range(5):
        meter.create_counter(f"c{i}").add(i + 1, {"k": "v"})
    set_step(9)
    provider.force_flush()
    assert exporter.stats.log_calls == 1
    provider.shutdown()
    rows = read_logs(project, "r")
    assert len(rows) == 1 and rows[0]["step"] == 9
    assert {k: v for k, v in rows[0].items() if k.startswith("c")} == {
        f"c{i}/k=v": i + 1 for i in range(5)
    }


def test_observable_gauge_with_step_attribute_logs_at_that_step(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    provider = _provider(exporter)
    meter = provider.get_meter("m")
    readings: list[tuple[float, dict]] = [(0.25, {"step": 2, "split": "train"})]

    def observe(options: CallbackOptions) -> list[Observation]:
        return [Observation(v, a) for v, a in readings]

    meter.create_observable_gauge("reward.mean", callbacks=[observe])
    provider.force_flush()
    readings[:] = [(0.5, {"step": "3", "split": "train"}), (0.75, {"step": 3, "split": "val"})]
    provider.force_flush()
    provider.shutdown()

    assert _series(project, "r", "reward.mean/split=train") == {2: 0.25, 3: 0.5}
    assert _series(project, "r", "reward.mean/split=val") == {3: 0.75}
    # the step attribute never shows up in a name
    assert not any("step=" in k for row in _by_step(project, "r").values() for k in row)


def test_sync_gauge_logs_the_last_value_set(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    provider = _provider(exporter)
    gauge = provider.get_meter("m").create_gauge("lr")
    gauge.set(0.1)
    gauge.set(0.05)
    set_step(8)
    provider.force_flush()
    provider.shutdown()
    assert _series(project, "r", "lr") == {8: 0.05}


def _plotted(project: str, run: str, key: str) -> dict[int, object]:
    """What a plot of ``key`` shows at each step: the last value logged at that step."""
    return _series(project, run, key)


@pytest.mark.parametrize("how", ["set_step", "step attribute", "delta temporality"])
def test_a_counter_adding_10_per_step_plots_10_at_each_step(project, how):
    """Exported several times per step (a periodic reader does), the plot still shows what
    the step added, not a running total."""
    preferred = {Counter: AggregationTemporality.DELTA} if how == "delta temporality" else None
    exporter = TrackioMetricExporter(project=project, name="r", preferred_temporality=preferred)
    provider = _provider(exporter)
    tokens = provider.get_meter("m").create_counter("tokens")
    for step in range(4):
        set_step(step)
        attributes = {"step": step} if how == "step attribute" else {}
        for _ in range(2):  # two exports within the step, 5 tokens each
            tokens.add(5, attributes)
            provider.force_flush()
    provider.shutdown()
    assert _plotted(project, "r", "tokens") == {0: 10, 1: 10, 2: 10, 3: 10}
    at_step_1 = [r["tokens"] for r in read_logs(project, "r") if r["step"] == 1 and "tokens" in r]
    assert at_step_1 == [5, 10]  # the step's amount so far, then the whole of it


def test_counter_totals_plot_the_running_total(project):
    exporter = TrackioMetricExporter(project=project, name="r", counter_totals=True)
    provider = _provider(exporter)
    tokens = provider.get_meter("m").create_counter("tokens")
    for step in range(3):
        set_step(step)
        tokens.add(10)
        provider.force_flush()
    provider.shutdown()
    assert _plotted(project, "r", "tokens") == {0: 10, 1: 20, 2: 30}


def test_a_restarted_counter_counts_from_zero(project):
    """A remote process restarting sends a new stream (a new start time, a lower total): its
    first amount is its own total, not a negative difference."""

    def point(value: int, start: int, step: int) -> MetricsData:
        data = Sum(
            data_points=[NumberDataPoint({}, start, start + 1, value)],
            aggregation_temporality=AggregationTemporality.CUMULATIVE,
            is_monotonic=True,
        )
        set_step(step)
        return _data([Metric(name="tokens", description=None, unit=None, data=data)])

    exporter = TrackioMetricExporter(project=project, name="r")
    for value, start, step in [(10, 1, 0), (30, 1, 1), (4, 2, 2), (9, 2, 3)]:
        assert exporter.export(point(value, start, step)) is MetricExportResult.SUCCESS
    exporter.shutdown()
    assert _plotted(project, "r", "tokens") == {0: 10, 1: 20, 2: 4, 3: 5}


def test_an_exporter_taking_over_a_run_recalls_what_its_predecessor_logged(project):
    """A restarted receiver's exporter recalls what the one before it logged (kept beside the
    spool): a point sent again is not logged twice, and a counter's amount per step goes on
    from the predecessor's total rather than from zero."""

    def point(value: int, step: int) -> MetricsData:
        data = Sum(
            data_points=[NumberDataPoint({}, 1, 2 + value, value)],
            aggregation_temporality=AggregationTemporality.CUMULATIVE,
            is_monotonic=True,
        )
        set_step(step)
        return _data([Metric(name="tokens", description=None, unit=None, data=data)])

    before = TrackioMetricExporter(project=project, name="r")
    for value, step in [(10, 0), (30, 1)]:
        assert before.export(point(value, step)) is MetricExportResult.SUCCESS
    memory = before.memory()
    before.shutdown()
    after = TrackioMetricExporter(project=project, name="r", resume="allow")
    after.recall(memory)
    for value, step in [(30, 1), (45, 2)]:  # the last point sent again, then a new one
        assert after.export(point(value, step)) is MetricExportResult.SUCCESS
    after.shutdown()
    rows = [(r["step"], r["tokens"]) for r in read_logs(project, "r") if "tokens" in r]
    assert rows == [(0, 10), (1, 20), (2, 15)]
    assert after.stats.skipped_unchanged == 1


def test_the_converter_memory_keeps_the_most_recent_entries():
    conv = MetricConverter()
    data = _data(
        [
            Metric(
                name="tokens",
                description=None,
                unit=None,
                data=Sum(
                    data_points=[NumberDataPoint({"step": i}, i, i + 1, 1) for i in range(10)],
                    aggregation_temporality=AggregationTemporality.DELTA,
                    is_monotonic=True,
                ),
            )
        ]
    )
    out = conv.convert(data, lambda: 0)
    for step in out.by_step:
        conv.commit(out, step)
    memory = conv.memory(limit=3)
    assert [interval[1] for interval in memory.intervals] == [7, 8, 9]
    assert [key[1] for key, _ in memory.logged] == [7, 8, 9]
    successor = MetricConverter()
    successor.recall(memory)
    again = successor.convert(data, lambda: 0)
    assert again.resent == 3 and sorted(again.by_step) == list(range(7))  # the older ones: new


def test_cumulative_points_with_an_old_step_are_not_logged_again(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    provider = _provider(exporter)
    counter = provider.get_meter("m").create_counter("correct")
    counter.add(2, {"step": 1})
    provider.force_flush()
    counter.add(5, {"step": 2})
    provider.force_flush()
    counter.add(1, {"step": 2})
    provider.force_flush()
    provider.shutdown()

    logs = read_logs(project, "r")
    at_1 = [row for row in logs if "correct" in row and row["step"] == 1]
    assert len(at_1) == 1 and at_1[0]["correct"] == 2  # not repeated by later exports
    assert [r["correct"] for r in logs if "correct" in r and r["step"] == 2] == [5, 6]
    assert exporter.stats.skipped_unchanged == 2  # step 1 at the 2nd and 3rd export


# -- histograms -----------------------------------------------------------------------------------


def test_histograms_with_step_attribute_are_delta_per_step(project):
    exporter = TrackioMetricExporter(project=project, name="r", histogram_stats=HISTOGRAM_STATS)
    provider = _provider(exporter)
    hist = provider.get_meter("m").create_histogram("reward")
    for v in (1.0, 2.0, 6.0):
        hist.record(v, {"step": 0})
    provider.force_flush()
    for v in (10.0, 30.0):
        hist.record(v, {"step": 1})
    provider.force_flush()
    provider.shutdown()

    rows = _by_step(project, "r")
    assert {k: rows[0][k] for k in rows[0] if k.startswith("reward/")} == {
        "reward/count": 3,
        "reward/sum": 9.0,
        "reward/mean": 3.0,
        "reward/min": 1.0,
        "reward/max": 6.0,
    }
    # delta by default: step 1 holds only what was recorded for it, step 0 is not repeated
    assert rows[1]["reward/count"] == 2 and rows[1]["reward/sum"] == 40.0
    assert rows[1]["reward/min"] == 10.0 and rows[1]["reward/max"] == 30.0
    assert sum(1 for r in read_logs(project, "r") if "reward/count" in r) == 2


def test_histograms_log_mean_min_and_max_by_default_and_the_chosen_stats_when_asked(project):
    """Five plots per instrument bury the Metrics page: by default what verl logs of a reward,
    mean (for a 0/1 reward: the success rate), min and max (did any sample fail, score)."""
    exporters = {
        "default": TrackioMetricExporter(project=project, name="default"),
        "chosen": TrackioMetricExporter(project=project, name="chosen", histogram_stats=["sum"]),
    }
    for exporter in exporters.values():
        provider = _provider(exporter)
        hist = provider.get_meter("m").create_histogram("reward")
        for v in (0.0, 1.0, 1.0, 0.5):
            hist.record(v, {"step": 3})
        provider.force_flush()
        provider.shutdown()
        assert exporter.stats.points_logged == 1
    keys = {
        run: {k: v for k, v in _by_step(project, run)[3].items() if k.startswith("reward/")}
        for run in exporters
    }
    assert keys == {
        "default": {"reward/mean": 0.625, "reward/min": 0.0, "reward/max": 1.0},
        "chosen": {"reward/sum": 2.5},
    }


def test_histogram_without_step_uses_the_latest_known_step_per_interval(project):
    exporter = TrackioMetricExporter(project=project, name="r", histogram_stats=HISTOGRAM_STATS)
    provider = _provider(exporter)
    latency = provider.get_meter("m").create_histogram("tool.latency", unit="ms")
    set_step(5)
    latency.record(10, {"tool": "search"})
    latency.record(30, {"tool": "search"})
    latency.record(2, {"tool": "calc"})
    provider.force_flush()
    set_step(6)
    latency.record(50, {"tool": "search"})
    provider.force_flush()
    provider.shutdown()

    assert _series(project, "r", "tool.latency/tool=search/mean") == {5: 20.0, 6: 50.0}
    assert _series(project, "r", "tool.latency/tool=search/count") == {5: 2, 6: 1}
    assert _series(project, "r", "tool.latency/tool=calc/max") == {5: 2}


def test_preferred_temporality_switches_histograms_to_cumulative_and_counters_to_delta(project):
    exporter = TrackioMetricExporter(
        project=project,
        name="r",
        histogram_stats=("count", "sum"),
        preferred_temporality={
            Histogram: AggregationTemporality.CUMULATIVE,
            Counter: AggregationTemporality.DELTA,
        },
    )
    assert exporter._preferred_temporality[UpDownCounter] is AggregationTemporality.CUMULATIVE
    provider = _provider(exporter)
    meter = provider.get_meter("m")
    hist, counter = meter.create_histogram("h"), meter.create_counter("c")
    set_step(1)
    hist.record(1.0)
    counter.add(3)
    provider.force_flush()
    set_step(2)
    hist.record(3.0)
    counter.add(4)
    provider.force_flush()
    provider.shutdown()

    assert _series(project, "r", "h/count") == {1: 1, 2: 2}
    assert _series(project, "r", "h/sum") == {1: 1.0, 2: 4.0}
    assert _series(project, "r", "c") == {1: 3, 2: 4}


def test_delta_points_sent_again_are_logged_once(project):
    """An OTLP client sends a metrics request again when its answer was lost: delta points
    (same series, same interval) must not add up twice; a new interval still counts."""
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader

    delta = {Counter: AggregationTemporality.DELTA, Histogram: AggregationTemporality.DELTA}
    reader = InMemoryMetricReader(preferred_temporality=delta)
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("m")
    counter, hist = meter.create_counter("c"), meter.create_histogram("h")
    exporter = TrackioMetricExporter(project=project, name="r", histogram_stats=("count",))
    set_step(1)
    counter.add(3)
    hist.record(2.0)
    first = reader.get_metrics_data()
    assert exporter.export(first) is MetricExportResult.SUCCESS
    assert exporter.export(first) is MetricExportResult.SUCCESS  # sent again
    counter.add(4)
    assert exporter.export(reader.get_metrics_data()) is MetricExportResult.SUCCESS  # new
    exporter.shutdown()
    provider.shutdown()

    assert _series(project, "r", "c") == {1: 7}  # 3 + 4, not 3 + 3 + 4
    assert _series(project, "r", "h/count") == {1: 1}
    assert exporter.stats.skipped_resent == 2


def test_default_temporality_is_cumulative_counters_and_delta_histograms(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    pref = exporter._preferred_temporality
    assert pref[Counter] is AggregationTemporality.CUMULATIVE
    assert pref[UpDownCounter] is AggregationTemporality.CUMULATIVE
    assert pref[Histogram] is AggregationTemporality.DELTA
    exporter.shutdown()


def test_distributions_are_logged_as_trackio_histograms_when_asked(project):
    exporter = TrackioMetricExporter(project=project, name="r", log_distributions=True)
    provider = _provider(exporter)
    hist = provider.get_meter("m").create_histogram("len")
    values = [1, 3, 7, 7, 12, 40, 900]
    for v in values:
        hist.record(v)
    set_step(2)
    provider.force_flush()
    provider.shutdown()

    dist = _by_step(project, "r")[2]["len/distribution"]
    assert dist["_type"] == "trackio.histogram"
    assert sum(dist["values"]) == len(values)
    assert len(dist["bins"]) == len(dist["values"]) + 1
    assert dist["bins"] == sorted(dist["bins"])
    assert dist["bins"][0] <= min(values) and dist["bins"][-1] >= max(values)


def test_exponential_histograms_via_preferred_aggregation(project):
    exporter = TrackioMetricExporter(
        project=project,
        name="r",
        log_distributions=True,
        histogram_stats=HISTOGRAM_STATS,
        preferred_aggregation={Histogram: ExponentialBucketHistogramAggregation()},
    )
    provider = _provider(exporter)
    hist = provider.get_meter("m").create_histogram("reward")
    values = [0.0, 0.5, 1.5, 3.0, 3.5, 100.0]  # the SDK histogram takes no negatives
    for v in values:
        hist.record(v, {"step": 4})
    provider.force_flush()
    provider.shutdown()

    row = _by_step(project, "r")[4]
    assert row["reward/count"] == 6
    assert row["reward/sum"] == pytest.approx(sum(values))
    assert row["reward/mean"] == pytest.approx(sum(values) / 6)
    assert (row["reward/min"], row["reward/max"]) == (0.0, 100.0)
    dist = row["reward/distribution"]
    assert sum(dist["values"]) == 6
    assert dist["bins"] == sorted(dist["bins"]) and dist["bins"][0] <= 0.0
    assert 64.0 <= dist["bins"][-1] and dist["values"][-1] == 1  # 100 in its own bucket


# -- step fallbacks and the shared run -----------------------------------------------------------


def test_shared_run_with_the_span_exporter_and_its_steps(project, tracer_provider, in_process):
    # In process: a metric exporter built by hand reads the steps its process's span exporter
    # saw (offloaded, the writer sees them; configure()'s metrics follow the spool there).
    spans = TrackioSpanExporter(project=project, name="shared")
    metrics = TrackioMetricExporter(project=project, name="shared")
    assert metrics.run is spans.run
    tracer_provider.add_span_processor(SimpleSpanProcessor(spans))
    tracer = tracer_provider.get_tracer("t")
    meters = _provider(metrics)
    reward = meters.get_meter("m").create_histogram("reward")

    with tracer.start_as_current_span("rollout", attributes={"step": 7, "sample_index": 0}):
        reward.record(0.5)  # no step attribute: the step the span exporter saw
    meters.force_flush()
    meters.shutdown()  # the span exporter still holds the run: it must stay open
    with tracer.start_as_current_span("rollout", attributes={"step": 8, "sample_index": 0}):
        pass
    tracer_provider.shutdown()

    assert SQLiteStorage.get_runs(project) == ["shared"]
    assert [t["step"] for t in read_traces(project, "shared")] == [7, 8]
    assert _series(project, "shared", "reward/mean") == {7: 0.5}


STEPLESS_LOSS = """
import otel_trackio
from opentelemetry import metrics
from otel_trackio import rollout
handle = otel_trackio.configure({project!r}, "loss", offload={offload})
loss = metrics.get_meter("train").create_gauge("loss")
for step in range(3):
    for index in range(2):
        with rollout(step, index):
            pass
    loss.set(1.0 / (step + 1))  # after the step, without a step attribute
handle.shutdown()
"""


@pytest.mark.parametrize("offload", [True, False], ids=["offload (default)", "in process"])
def test_a_stepless_loss_set_after_each_step_lands_at_the_latest_rollout_step(
    project, trackio_dir, offload
):
    """docs/metrics.md: a point without a step takes the latest rollout step known — with the
    samples of that step still held for their GenAI log events (configure()'s default) too."""
    result = run_python(STEPLESS_LOSS.format(project=project, offload=offload), trackio_dir)
    assert result.returncode == 0, result.stderr
    assert _series(project, "loss", "loss") == {2: pytest.approx(1 / 3)}


def test_without_any_known_step_a_metrics_only_run_advances(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    provider = _provider(exporter)
    counter = provider.get_meter("m").create_counter("episodes")
    for _ in range(3):
        counter.add(1)
        provider.force_flush()
    provider.shutdown()
    assert _series(project, "r", "episodes") == {0: 1, 1: 1, 2: 1}


def test_without_any_known_step_metrics_join_the_users_steps_without_shifting_them(project):
    run = trackio.init(project=project, name="user")
    exporter = TrackioMetricExporter(run=run)
    provider = _provider(exporter)
    counter = provider.get_meter("m").create_counter("episodes")
    run.log({"loss": 1.0})  # auto step 0
    run.log({"loss": 0.9})  # auto step 1
    counter.add(2)
    provider.force_flush()  # joins step 1
    run.log({"loss": 0.8})  # still auto step 2
    counter.add(1)
    provider.force_flush()  # joins step 2
    provider.force_flush()  # nothing changed: nothing logged
    run.log({"loss": 0.7})  # auto step 3, not shifted by the exports
    provider.shutdown()
    run.finish()

    assert _series(project, "user", "loss") == {0: 1.0, 1: 0.9, 2: 0.8, 3: 0.7}
    assert _series(project, "user", "episodes") == {1: 2, 2: 1}


# -- bad values, names, lifecycle ------------------------------------------------------------------


def test_nan_and_inf_are_skipped_counted_and_warned_once(project, caplog):
    exporter = TrackioMetricExporter(project=project, name="r")
    caplog.set_level(logging.WARNING, logger="otel_trackio")
    data = _data(
        [
            _gauge("g", (math.nan, {"k": "a"}), (math.inf, {"k": "b"}), (1.5, {"k": "c"})),
            _gauge("h", (-math.inf, {"step": 1}), (2, {"step": 1})),
        ]
    )
    set_step(0)
    assert exporter.export(data) is MetricExportResult.SUCCESS
    # the real SDK can still overflow to inf: two huge adds
    provider = _provider(exporter)
    big = provider.get_meter("m").create_up_down_counter("big")
    big.add(1e308)
    big.add(1e308)
    provider.force_flush()
    provider.shutdown()

    assert exporter.stats.skipped_nonfinite == 4
    warnings = [r for r in caplog.records if "NaN" in r.getMessage()]
    assert len(warnings) == 1 and "3 " in warnings[0].getMessage()
    rows = _by_step(project, "r")
    assert rows[0]["g/k=c"] == 1.5 and "g/k=a" not in rows[0] and "g/k=b" not in rows[0]
    assert rows[1]["h"] == 2
    assert not any("big" in k for row in rows.values() for k in row)


def test_names_colliding_with_trackio_reserved_keys_are_renamed(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    data = _data([_gauge("step", (4, {})), _gauge("time", (2.5, {})), _gauge("__x", (1, {}))])
    set_step(1)
    assert exporter.export(data) is MetricExportResult.SUCCESS
    exporter.shutdown()
    row = _by_step(project, "r")[1]
    assert (row["otel/step"], row["otel/time"], row["otel/__x"]) == (4, 2.5, 1)
    assert not any(k.startswith("__") for k in row)
    assert exporter.stats.renamed_keys == 3


def test_reserved_key_copy_matches_trackio():
    assert set(trackio.utils.RESERVED_KEYS) <= FALLBACK_RESERVED_KEYS


def test_export_never_raises_and_counts_failures(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    assert exporter.export(object()) is MetricExportResult.SUCCESS  # nothing in it
    broken = _data([Metric(name="x", description=None, unit=None, data=None)])
    assert exporter.export(broken) is MetricExportResult.SUCCESS
    assert exporter.stats.unsupported_metrics == 1
    bad_points = _data([Metric(name="y", description=None, unit=None, data=Gauge([None]))])
    assert exporter.export(bad_points) is MetricExportResult.FAILURE
    assert exporter.stats.failed_exports == 1
    exporter.shutdown()


def test_lifecycle_shutdown_is_idempotent_and_export_after_it_fails(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    run = exporter.run
    assert exporter.force_flush() is True
    exporter.shutdown(timeout=500)  # what PeriodicExportingMetricReader passes
    exporter.shutdown(timeout_millis=10)
    assert exporter.force_flush() is False
    data = _data([_gauge("g", (1, {"step": 0}))])
    assert exporter.export(data) is MetricExportResult.FAILURE
    assert read_logs(project, "r") == []
    # the exporter started the run, so it finished it: a new exporter starts a fresh one
    again = TrackioMetricExporter(project=project, name="r")
    assert again.run is not run
    again.shutdown()


def test_a_borrowed_run_is_never_finished(project):
    run = trackio.init(project=project, name="mine")
    exporter = TrackioMetricExporter(project=project)
    assert exporter.run is run
    provider = _provider(exporter)
    provider.get_meter("m").create_counter("c").add(1, {"step": 0})
    provider.force_flush()
    provider.shutdown()
    assert context_vars.current_run.get() is run
    run.log({"after": 1.0}, step=1)  # still usable
    run.finish()
    assert _series(project, "mine", "c") == {0: 1}
    assert _series(project, "mine", "after") == {1: 1.0}


# -- the pure converter --------------------------------------------------------------------------


def test_series_names_sort_keys_and_leave_out_the_step():
    conv = MetricConverter()
    name = conv.series_name("m", {"b": 2, "a": True, "step": 3, "c": ["x", "y"]})
    assert name == "m/a=true/b=2/c=x,y"
    assert conv.series_name("m", {"step": 3}) == "m"
    assert conv.series_name("m", {}) == "m"


def test_converter_calls_the_fallback_once_and_only_when_needed():
    calls: list[int] = []

    def fallback() -> int:
        calls.append(1)
        return 11

    conv = MetricConverter()
    with_steps = _data([_gauge("g", (1, {"step": 2}), (2, {"step": 3, "k": "v"}))])
    assert conv.convert(with_steps, fallback).by_step == {2: {"g": 1}, 3: {"g/k=v": 2}}
    assert calls == []
    without = _data([_gauge("a", (1, {})), _gauge("b", (2, {"k": 1}))])
    assert conv.convert(without, fallback).by_step == {11: {"a": 1, "b/k=1": 2}}
    assert calls == [1]


def test_explicit_distribution_closes_open_buckets_at_min_and_max():
    dist = explicit_distribution([1, 0, 2, 0], [0.0, 5.0, 10.0], -3.0, 9.0)
    assert dist is not None
    assert dist.counts == (1, 0, 2) and dist.edges == (-3.0, 0.0, 5.0, 10.0)
    assert explicit_distribution([0, 0], [1.0], None, None) is None
    only_top = explicit_distribution([0, 0, 4], [1.0, 2.0], 3.0, 8.0)
    assert only_top is not None and only_top.edges == (2.0, 8.0) and only_top.counts == (4,)


def test_histogram_point_without_min_max_logs_count_sum_mean_only():
    conv = MetricConverter()
    point = HistogramDataPoint({}, 0, 1, 2, 6.0, [0, 2], [10.0], math.inf, -math.inf)
    data = _data(
        [
            Metric(
                name="h",
                description=None,
                unit=None,
                data=HistogramData([point], AggregationTemporality.DELTA),
            )
        ]
    )
    out = conv.convert(data, lambda: 0)
    assert out.by_step == {0: {"h/count": 2, "h/sum": 6.0, "h/mean": 3.0}}
    assert out.skipped_nonfinite == 0


def test_exponential_distribution_is_contiguous_across_zero():
    class B:
        def __init__(self, offset: int, counts: list[int]) -> None:
            self.offset, self.bucket_counts = offset, counts

    class P:
        scale, zero_count = 0, 1
        positive, negative = B(0, [2, 1]), B(1, [3])

    dist = exponential_distribution(P())
    assert dist is not None
    # negative (-4, -2], gap to zero bucket (-1, 1), positive (1, 2], (2, 4]
    assert dist.edges == (-4.0, -2.0, -1.0, 1.0, 2.0, 4.0)
    assert dist.counts == (3, 0, 1, 2, 1)


def test_sum_data_from_otlp_like_input_any_resource(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    total = Metric(
        name="requests",
        description=None,
        unit=None,
        data=Sum(
            [NumberDataPoint({"route": "/a", "step": 2}, 0, 1, 12)],
            AggregationTemporality.CUMULATIVE,
            True,
        ),
    )
    assert exporter.export(_data([total])) is MetricExportResult.SUCCESS
    exporter.shutdown()
    assert _series(project, "r", "requests/route=/a") == {2: 12}
    assert not any("service.name" in k for row in _by_step(project, "r").values() for k in row)
    assert exporter.stats.points_logged == 1 and exporter.stats.log_calls == 1


def test_periodic_reader_exports_on_shutdown_and_shuts_the_exporter_down(project):
    exporter = TrackioMetricExporter(project=project, name="r")
    # a long interval: the only export is the reader's final one, on its own thread, followed
    # by exporter.shutdown(timeout=...)
    reader = PeriodicExportingMetricReader(exporter, export_interval_millis=3_600_000)
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("m").create_counter("done").add(3, {"step": 12})
    provider.shutdown()
    assert exporter.force_flush() is False  # shut down by the reader
    assert _series(project, "r", "done") == {12: 3}


def test_otlp_histogram_without_sum_or_min_is_not_a_bad_value():
    """The receiver marks OTLP's optional sum/min/max absent with NaN / +inf / -inf."""
    conv = MetricConverter()
    no_sum = HistogramDataPoint({"k": "a"}, 0, 1, 3, math.nan, [1, 2], [1.0], math.inf, 4.0)
    inf_sum = HistogramDataPoint({"k": "b"}, 0, 1, 1, math.inf, [0, 1], [1.0], 2.0, 2.0)
    hist = HistogramData([no_sum, inf_sum], AggregationTemporality.CUMULATIVE)
    data = _data([Metric(name="h", description=None, unit=None, data=hist)])
    out = conv.convert(data, lambda: 0)
    assert out.by_step[0] == {
        **{"h/k=a/count": 3, "h/k=a/max": 4.0},
        **{"h/k=b/count": 1, "h/k=b/min": 2.0, "h/k=b/max": 2.0},
    }
    assert out.skipped_nonfinite == 1  # only the real inf sum
