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
import time
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import Sample, missing_spans
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._spool.segments import Position
from otel_trackio._trackio.storage import has_traces_at, stored_span_ids

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
    steps kept, read again at most every :attr:`REREAD_SECONDS` for a sample not found) when it
    holds a span of a replayed entry, when its step had Traces in storage as this drainer first
    met it (stored before it began, or by another process logging to the run), or when the
    assembler let go of spans it had logged at that step (it remembers a bounded number): only
    its spans not stored are logged (a continuation when some were). What this process logs
    itself needs it only then — the assembler knows those spans (see
    :class:`~otel_trackio._core.assembly.SampleAssembler`) — so samples of a step new to the run
    cost one indexed read for the step, none per sample.

    It also remembers, for every sample logged or found stored, the last entry it came in
    while that entry may still be replayed (see the module's docstring).
    """

    _STEPS_KEPT = 8
    REREAD_SECONDS = 1.0
    """A step's stored spans read longer ago than this are read again for a sample not found
    in them (another process may be storing at that step meanwhile)."""

    def __init__(
        self,
        pipeline: TracePipeline,
        replayed: set[int],
        origin: Callable[[SpanRecord], Position | None],
        *,
        earlier_runs: Callable[[], Sequence[str]] = tuple,
        sole_producer: bool = False,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        """``earlier_runs``: the runs of the project that earlier starts of this drainer's
        spool stored into under other names (a receiver started without ``--name`` makes a new
        run each start), whose storage is looked up too while a client may still send their
        requests again. ``sole_producer``: no other process may store these very samples (the
        offload writer: its rollout process spools each span once, where a receiver's client
        may send a request again to the other receiver of the run): only replayed entries and
        forgotten steps are looked up, and a step new to this drainer costs no read."""
        self._pipeline = pipeline
        self._replayed = replayed  # span ids of replayed entries, shared by a drainer's routes
        self._origin = origin
        self._earlier_runs = earlier_runs
        self._sole_producer = sole_producer
        self._clock = clock
        # Steps met so far, and those of them that had Traces in storage when first met (from
        # before this drainer, or from another process logging to the run).
        self._met: set[int] = set()
        self._foreign: set[int] = set()
        self._by_step: OrderedDict[int, tuple[float, set[str]]] = OrderedDict()
        self._accounted: list[int] = []  # heap: the last entry of each sample counted
        self._found = 0
        self._found_steps: set[int] = set()

    def __call__(self, sample: Sample) -> Sample | None:
        step = sample.identity.step
        replayed = bool(self._replayed) and any(s.span_id in self._replayed for s in sample.spans)
        if not replayed and not self._stored_by_others(step) and not self._forgotten(step):
            return sample
        stored = self._stored_at(step, fresh=False)
        if stored is None:
            return sample  # unreadable: a duplicate beats a loss
        remaining = missing_spans(sample, stored)
        if remaining is not None and step in self._foreign:
            # Another process may have stored it since the read: read again, at most every
            # second (this process's own writes need no new read: its assembler knows them).
            again = self._stored_at(step, fresh=True)
            if again is not None and again is not stored:
                remaining = missing_spans(sample, again)
        if replayed:
            for span in sample.spans:
                self._replayed.discard(span.span_id)
        if remaining is None:
            self.accounted([sample])
            if replayed:
                self._found += 1
                self._found_steps.add(step)
        return remaining

    def _forgotten(self, step: int) -> bool:
        """Whether the assembler let go of spans it logged at ``step``, an earlier step than
        the latest (a step still being logged is left alone: its samples are new, and reading
        all of its Traces for each would cost more than the rare sample sent again that late)."""
        if step not in self._pipeline.assembler.forgotten_steps:
            return False
        latest = self._pipeline.assembler.steps.latest()
        return latest is not None and step < latest

    def _stored_by_others(self, step: int) -> bool:
        """Whether ``step`` had Traces in storage when this drainer first met it (one indexed
        read per step): stored before this drainer began, or by another process logging to the
        run (one of a fail-over pair). A sample sent again to this process after another stored
        it is looked up there. Storage unreadable: not (a duplicate beats a loss)."""
        if self._sole_producer:
            return False
        if step not in self._met:
            self._met.add(step)
            sink = self._pipeline.sink
            if has_traces_at(sink, step) or any(
                has_traces_at(sink, step, run) for run in self._earlier_runs()
            ):
                self._foreign.add(step)
        return step in self._foreign

    def _stored_at(self, step: int, *, fresh: bool) -> set[str] | None:
        """The span keys stored at ``step`` (cached for a few steps; ``fresh``: read again if
        the cached read is older than :attr:`REREAD_SECONDS`). None when unreadable."""
        now = self._clock()
        cached = self._by_step.get(step)
        if cached is not None:
            self._by_step.move_to_end(step)
            if not fresh or now - cached[0] < self.REREAD_SECONDS:
                return cached[1]
        pipeline = self._pipeline
        stored = stored_span_ids(pipeline.sink, pipeline.settings.key, step)
        for run in self._earlier_runs():
            earlier = stored_span_ids(pipeline.sink, pipeline.settings.key, step, run)
            if stored is None or earlier is None:
                stored = None
                break
            stored |= earlier
        if stored is None:
            return None if cached is None else cached[1]
        self._by_step[step] = (now, stored)
        while len(self._by_step) > self._STEPS_KEPT:
            self._by_step.popitem(last=False)
        return stored

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
