"""Figure 17: the per-step outcome table when samples of earlier steps arrive late (stragglers).

Async RL finishes some samples of a step after the next step's samples began: each such straggler
of a step whose outcome table was already logged makes that step's table be logged again. This
measures what that costs. The same finished SDK spans (``--steps`` steps of ``--per-step``
samples, 5 spans each, built untimed) go through an in-process ``TrackioSpanExporter.export()``
in batches of 512 spans, then ``shutdown()``:

  * ordered: every sample in step order;
  * stragglers: one sample in ten of each step held back and delivered spread over the next
    step's batches (the last step's with the first batches after it).

Both arms store the same Traces and end with every step's whole table. The figure is the time per
sample, stragglers / ordered (best of ``--rounds``, the arms alternated in one process, each on a
run of its own); it also prints how many rows the tables logged in all, per sample stored.
"""

from __future__ import annotations

import argparse
import os
import sys
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio import TrackioSpanExporter

PROJECT = "bench-stragglers"
TABLE_KEY = "rollout/outcomes"


def samples_by_step(steps: int, per_step: int) -> list[list[list[Any]]]:
    """Each step's samples, each sample its finished spans (children first, root last)."""
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("bench")
    out: list[list[list[Any]]] = []
    for step in range(steps):
        samples: list[list[Any]] = []
        for i in range(per_step):
            memory.clear()
            w.emit_sample(tracer, i, step)
            samples.append(list(memory.get_finished_spans()))
        out.append(samples)
    provider.shutdown()
    return out


def ordered(steps: list[list[list[Any]]]) -> list[Any]:
    return [span for samples in steps for sample in samples for span in sample]


def with_stragglers(steps: list[list[list[Any]]], every: int = 10) -> list[Any]:
    """One sample in ``every`` of each step comes late, spread over the next step's samples."""
    out: list[Any] = []
    late: list[list[Any]] = []
    for samples in steps:
        on_time = [s for i, s in enumerate(samples) if i % every]
        gap = max(1, len(on_time) // max(1, len(late)))
        for position, sample in enumerate(on_time):
            out.extend(sample)
            if late and position % gap == gap - 1:
                out.extend(late.pop(0))
        for sample in late:  # whatever the spreading left over
            out.extend(sample)
        late = [s for i, s in enumerate(samples) if not i % every]
    for sample in late:
        out.extend(sample)
    return out


def run_arm(spans: list[Any]) -> tuple[float, str]:
    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        exporter = TrackioSpanExporter(project=PROJECT, name=name, offload=False)

        def go() -> None:
            for batch in w.chunks(spans):
                exporter.export(batch)
            exporter.shutdown()

        return w.timed(go), name


def table_rows_logged(run: str) -> tuple[int, dict[int, int]]:
    """Rows over every outcome table the run logged, and the rows of each step's last table."""
    total = 0
    last: dict[int, int] = {}
    for row in SQLiteStorage.get_logs(PROJECT, run):
        table = row.get(TABLE_KEY)
        if isinstance(table, dict):
            rows = len(table.get("_value") or [])
            total += rows
            last[row["step"]] = rows
    return total, last


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--per-step", type=int, default=4096)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    n = args.steps * args.per_step

    steps = samples_by_step(args.steps, args.per_step)
    arms = {"ordered": ordered(steps), "stragglers": with_stragglers(steps)}
    assert len(arms["ordered"]) == len(arms["stragglers"]) == n * w.SPANS_PER_SAMPLE
    run_arm(ordered(samples_by_step(1, 50)))  # warm-up
    best = {arm: float("inf") for arm in arms}
    rows: dict[str, int] = {}
    for r in range(args.rounds):
        for arm, spans in arms.items():
            seconds, run = run_arm(spans)
            assert w.count_traces(PROJECT, run) == n, f"{arm}: Traces missing in storage"
            total, last = table_rows_logged(run)
            assert last == {s: args.per_step for s in range(args.steps)}, (arm, last)
            best[arm] = min(best[arm], seconds)
            rows[arm] = total
            print(
                f"round {r + 1} {arm}: {seconds:.2f} s, {seconds / n * 1e3:.3f} ms per sample, "
                f"{total / n:.2f} table rows logged per sample",
                file=sys.stderr,
            )
    ratio = best["stragglers"] / best["ordered"]
    w.write_result(
        f"17. outcome tables with stragglers / in order, {args.per_step:,} samples per step",
        f"{ratio:.2f}x",
        "<= 1.10x",
        ratio <= 1.10,
    )
    w.cleanup()
    print(
        f"stragglers / ordered, time per sample, {args.per_step:,} samples per step: {ratio:.2f}x "
        f"(ordered {best['ordered'] / n * 1e3:.3f} ms, stragglers "
        f"{best['stragglers'] / n * 1e3:.3f} ms per sample; table rows logged per sample "
        f"{rows['ordered'] / n:.2f} vs {rows['stragglers'] / n:.2f}; target <= 1.10x)"
    )


if __name__ == "__main__":
    main()
