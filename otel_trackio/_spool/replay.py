"""What a drainer taking over a spool finds in Trackio's storage, and how the run's counters
stay whole across drainers.

A drainer killed between a write to storage and its next checkpoint stored samples its
checkpoint does not count. The next drainer replays the entries from the checkpoint's oldest
open one; every replayed sample is looked up in storage (:class:`ReplayCheck`), so none is
logged twice. To count the ones its predecessor stored but never counted, each checkpoint also
records how many of the samples it *does* count will be replayed (their entries are at or after
its oldest open entry): of the replayed samples the next drainer finds stored, those beyond that
number were stored after the checkpoint, and join the run's count of samples logged.
"""

from __future__ import annotations

import heapq
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import Sample, missing_spans
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.sink import stored_span_ids, stored_steps
from otel_trackio._spool.segments import Position

REPLAYABLE_KEY = "replayable_samples"
"""The checkpoint's count (in its stats) of counted samples a takeover would replay."""


def _place(position: Position) -> int:
    """A position as one int (kept per sample while it may be replayed: small)."""
    return (position.seq << 40) | position.offset


@dataclass(slots=True)
class ReplayCounts:
    """What one pipeline's :class:`ReplayCheck` saw, as a checkpoint records it."""

    replayable: int
    """Samples logged or found stored whose entries a takeover would replay."""
    found_stored: int
    """Replayed samples found wholly in storage (stored by an earlier drainer)."""
    found_steps: set[int] = field(default_factory=set)
    """The steps of those."""


class ReplayCheck:
    """Which spans of a released sample are in Trackio's storage already, put there by a
    process before this one: a drainer that crashed, or a receiver killed after it stored a
    request whose response its client never got (the client sends it again). Installed as the
    pipeline's ``stored_filter`` for the drainer's life; every call is under the pipeline's lock.

    A sample is looked up by span id in the storage of its step (read once per step, a few
    steps kept) when it holds a span of a replayed entry, or when its step had Traces in
    storage as this drainer began (read once, at the first sample), or at which the assembler
    let go of spans it had logged (it remembers a bounded number): only its spans not stored
    are logged (a continuation when some were). What this process logs itself needs it only
    then — the assembler knows those spans (see
    :class:`~otel_trackio._core.assembly.SampleAssembler`) — so samples of new steps pass
    untouched, without a read.

    It also remembers, for every sample logged or found stored, the last entry it came in
    while that entry may still be replayed (see the module's docstring).
    """

    _STEPS_KEPT = 8

    def __init__(
        self,
        pipeline: TracePipeline,
        replayed: set[int],
        origin: Callable[[SpanRecord], Position | None],
    ) -> None:
        self._pipeline = pipeline
        self._replayed = replayed  # span ids of replayed entries, shared by a drainer's routes
        self._origin = origin
        self._steps_before: set[int] | None = None  # steps with Traces as this drainer began
        self._by_step: OrderedDict[int, set[str]] = OrderedDict()
        self._accounted: list[int] = []  # heap: the last entry of each sample counted
        self._found = 0
        self._found_steps: set[int] = set()

    def __call__(self, sample: Sample) -> Sample | None:
        step = sample.identity.step
        replayed = bool(self._replayed) and any(s.span_id in self._replayed for s in sample.spans)
        if (
            not replayed
            and step not in self._stored_before()
            and step not in self._pipeline.assembler.forgotten_steps
        ):
            return sample
        stored = self._by_step.get(step)
        if stored is None:
            pipeline = self._pipeline
            stored = stored_span_ids(pipeline.sink, pipeline.settings.key, step)
            if stored is None:
                return sample  # unreadable: a duplicate beats a loss
            self._by_step[step] = stored
            while len(self._by_step) > self._STEPS_KEPT:
                self._by_step.popitem(last=False)
        else:
            self._by_step.move_to_end(step)
        if replayed:
            for span in sample.spans:
                self._replayed.discard(span.span_id)
        remaining = missing_spans(sample, stored)
        if remaining is None:
            self.accounted([sample])
            if replayed:
                self._found += 1
                self._found_steps.add(step)
        return remaining

    def accounted(self, samples: Iterable[Sample]) -> None:
        """These samples are counted: stored by this drainer, or found stored."""
        for sample in samples:
            places = [p for span in sample.spans if (p := self._origin(span)) is not None]
            if places:
                heapq.heappush(self._accounted, _place(max(places)))

    def counts(self, oldest: Position) -> ReplayCounts:
        """What a checkpoint whose oldest open entry is ``oldest`` records."""
        start = _place(oldest)
        while self._accounted and self._accounted[0] < start:
            heapq.heappop(self._accounted)
        return ReplayCounts(len(self._accounted), self._found, set(self._found_steps))

    def _stored_before(self) -> set[int]:
        if self._steps_before is None:
            self._steps_before = stored_steps(self._pipeline.sink)
        return self._steps_before or set()
