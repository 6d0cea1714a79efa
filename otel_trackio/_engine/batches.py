"""Batching: the order of a step's samples, and their conversion to Trace dicts.

One ``run.log`` per step lists its Traces in sample order (Trackio numbers them, the ``:N`` chip,
as listed); a sample that cannot be converted fully is logged bare rather than lost.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from typing import Any

from otel_trackio._core.convert import TraceDict, bare_trace, merged_rollouts, sample_to_trace
from otel_trackio._core.samples import Sample
from otel_trackio._core.values import as_float
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.warn import Warnings
from otel_trackio._settings import TrackioSettings


def order_key(value: Any) -> tuple[int, float, str]:
    """Numbers (and strings of numbers) first, by value; then other values, by text; None last."""
    if value is None:
        return (2, 0.0, "")
    number = as_float(value)
    if number is not None:
        return (0, number, "")
    return (1, 0.0, str(value))


def sample_order(sample: Sample) -> tuple[tuple[int, float, str], tuple[int, float, str]]:
    """Sort key of a sample within its step: (``sample_index``, ``rollout_n``), any types."""
    return (order_key(sample.identity.sample_index), order_key(sample.identity.rollout_n))


class Converter:
    """Sample → Trace dict; a sample that fails to convert is logged bare (counted, warned)."""

    def __init__(self, settings: TrackioSettings, stats: ExportStats, warn: Warnings) -> None:
        self._settings = settings
        self._stats = stats
        self._warn = warn

    def __call__(self, sample: Sample) -> TraceDict:
        merged = merged_rollouts(sample, self._settings)
        if merged > 1:
            attribute = self._settings.sample_attribute
            self._warn(
                "merged",
                f"a trace without {attribute!r} holds {merged} spans with a "
                f"{self._settings.step_attribute!r} or an outcome of their own: it is stored as "
                f"one sample (disagreeing scores as a list). If they are several rollouts, put "
                f"{attribute!r} on each rollout's root span (or use otel_trackio.rollout())",
            )
        try:
            return sample_to_trace(sample, self._settings)
        except Exception as exc:  # noqa: BLE001 - a bad span must not cost the sample
            self._stats.conversion_errors += 1
            self._warn("convert", f"could not convert a sample fully, logged it bare: {exc!r}")
            return bare_trace(sample, repr(exc))


#: About how many spans a write behind hands its store process at a time: the next part is
#: converted while the store writes this one, instead of one waiting for the other.
WRITE_BEHIND_PART_SPANS = 512


def in_parts(samples: Iterable[Sample], spans_per_part: int) -> list[list[Sample]]:
    """Samples in step and sample order, cut into parts of about ``spans_per_part`` spans each
    (a sample is never cut); at least one part, maybe empty."""
    ordered = sorted(samples, key=lambda s: (order_key(s.identity.step), sample_order(s)))
    parts: list[list[Sample]] = [[]]
    spans = 0
    for sample in ordered:
        if spans >= spans_per_part:
            parts.append([])
            spans = 0
        parts[-1].append(sample)
        spans += len(sample.spans)
    return parts


#: How long the conversion beside a rollout keeps the GIL before it hands it over (seconds).
YIELD_EVERY_SECONDS = 0.001


def by_step(
    samples: Iterable[Sample],
    convert: Callable[[Sample], TraceDict],
    *,
    beside_rollout: bool = True,
) -> dict[int, list[tuple[Sample, TraceDict]]]:
    """Each step's samples with their Trace dicts, in sample order within a step.

    ``beside_rollout``: the conversion shares its process with the rollout (in process), so it
    hands the GIL over once it has held it for ``YIELD_EVERY_SECONDS``: a rollout thread waking
    from a model call would otherwise wait up to the interpreter's switch interval (5 ms) for it.
    Handing it over after every sample instead would cost a sleep and two thread switches per
    sample. A writer process or the receiver has no rollout to hand it to."""
    steps: dict[int, list[tuple[Sample, TraceDict]]] = {}
    held_since = time.perf_counter()
    for sample in samples:
        steps.setdefault(sample.identity.step, []).append((sample, convert(sample)))
        if beside_rollout and time.perf_counter() - held_since >= YIELD_EVERY_SECONDS:
            time.sleep(0)
            held_since = time.perf_counter()
    for converted in steps.values():
        converted.sort(key=lambda pair: sample_order(pair[0]))
    return steps


def step_durations(samples: Iterable[Sample], key: str) -> dict[int, dict[str, float]]:
    """Each step's own spans (samples marked ``step_spans``) as ``{"<key>/<name>": seconds}``:
    a span's duration, spans of one name summed."""
    out: dict[int, dict[str, float]] = {}
    for sample in samples:
        values = out.setdefault(sample.identity.step, {})
        for span in sample.spans:
            name = f"{key}/{span.name}"
            values[name] = values.get(name, 0.0) + max(0, span.end_ns - span.start_ns) / 1e9
    return out
