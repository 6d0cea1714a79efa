"""Cost of one TrackioMetricExporter.export() of 1,000 series, into a temp Trackio project.

1,000 series = 8 counters and 2 histograms (5 values each) over 100 attribute sets (1,800 Trackio
values per export); the data is collected once from a real MeterProvider and exported
``--exports`` times at successive steps (each export is one ``run.log`` of every value).
The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time

os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="otel-trackio-bench-")
os.environ.setdefault("TRACKIO_DISABLE_TELEMETRY", "1")

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from otel_trackio import TrackioMetricExporter, set_step
from otel_trackio._settings import HISTOGRAM_STATS

SETS = 100


def collect_series():
    """MetricsData holding 8 * 100 sum series + 2 * 100 histograms (5 values each)."""
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    meter = provider.get_meter("bench")
    counters = [meter.create_counter(f"bench.counter{i}") for i in range(8)]
    hists = [meter.create_histogram(f"bench.hist{i}") for i in range(2)]
    for s in range(SETS):
        attrs = {"worker": f"w{s % 10}", "shard": s // 10}
        for c in counters:
            c.add(s + 1, attrs)
        for h in hists:
            h.record(s * 0.5, attrs)
            h.record(s * 1.5, attrs)
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--exports", type=int, default=50)
    args = parser.parse_args()

    data = collect_series()
    # All five statistics per histogram (the default logs two), as when the figure was recorded.
    exporter = TrackioMetricExporter(
        project="bench-metrics", name="bench", histogram_stats=HISTOGRAM_STATS
    )
    set_step(0)
    exporter.export(data)  # warm-up
    series = exporter.stats.points_logged
    values = exporter.stats.values_logged
    times: list[float] = []
    for i in range(1, args.exports + 1):
        set_step(i)  # a new step each time, so nothing is skipped as unchanged
        t0 = time.perf_counter()
        exporter.export(data)
        times.append(time.perf_counter() - t0)
    t0 = time.perf_counter()
    exporter.shutdown()
    finish = time.perf_counter() - t0
    assert exporter.stats.failed_exports == 0, exporter.stats

    print(f"series per export: {series}, Trackio values: {values}, 1 log call", file=sys.stderr)
    print(
        f"median {statistics.median(times) * 1000:.2f} ms, max {max(times) * 1000:.2f} ms over "
        f"{len(times)} exports; run finish (writes queued logs) {finish * 1000:.0f} ms",
        file=sys.stderr,
    )
    mean_ms = statistics.mean(times) * 1000
    print(f"metrics export, {series} series ({values} values): {mean_ms:.2f} ms per export")


if __name__ == "__main__":
    main()
