"""Write accounting: samples handed to ``run.log`` are kept until Trackio's storage holds them.

A sample counts as logged once the sink's flush succeeded. A failed or timed-out write keeps the
samples for the next write (warned, repeatedly, with how many wait and for how long); after a
failure Trackio reported (it dropped the batch), they are first looked up in its storage and
logged again, minus the spans stored already. In process nothing else keeps them, so past
``max_buffered_spans`` kept spans the oldest are given up (counted lost).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from otel_trackio._core.convert import TraceDict
from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import Sample, missing_spans
from otel_trackio._engine.batches import sample_order
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.warn import Warnings, no_space, no_space_on, out_of_space
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.installed import trackio_dir
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.storage import stored_span_ids

_logger = logging.getLogger("otel_trackio")

#: Writes behind a drain hands over before it waits for the oldest: while the store is busy the
#: next ones wait in its pipe, and it takes them together.
MAX_WRITES_BEHIND = 4


@dataclass(slots=True)
class Unwritten:
    """A sample handed to ``run.log`` whose write to storage has not succeeded yet."""

    sample: Sample
    trace: TraceDict


class WriteLedger:
    """The samples logged since storage was last written, and the writes that make them durable.

    Not thread-safe: the pipeline's lock guards it.
    """

    def __init__(
        self,
        settings: TrackioSettings,
        sink: TrackioSink,
        stats: ExportStats,
        warn: Warnings,
        convert: Callable[[Sample], TraceDict],
        *,
        written: Callable[[list[Sample]], None] = lambda samples: None,
    ) -> None:
        self._settings = settings
        self._written = written  # told of the samples each successful write stored
        self._sink = sink
        self._stats = stats
        self._warn = warn
        self._convert = convert
        self._unwritten: list[Unwritten] = []
        self._log_again = False
        # How many kept samples each write behind not yet answered holds, oldest (the first
        # kept) first.
        self._behind: deque[int] = deque()
        self.failing_since: float | None = None
        """When (monotonic) writes to storage started failing; None while they succeed."""
        self.stopped = False
        """True once :meth:`stop` was called: nothing more is written."""
        self.last_failure = ""
        """What the last write's failure said ("" after one that worked)."""

    def __len__(self) -> int:
        return len(self._unwritten)

    def keep(self, converted: Iterable[tuple[Sample, TraceDict]]) -> None:
        """Keep samples about to be handed to ``run.log`` until a write stores them."""
        self._unwritten.extend(Unwritten(sample, trace) for sample, trace in converted)

    def log_failed(self) -> None:
        """A ``run.log`` call failed: its kept samples are logged again with the next write."""
        self._log_again = True

    def spans(self) -> Iterator[SpanRecord]:
        """The span records of every kept sample."""
        return (span for kept in self._unwritten for span in kept.sample.spans)

    def stop(self) -> None:
        """Write nothing more: from now on :meth:`write` and :meth:`write_behind` fail at once
        without touching storage, whose write may be waiting out a lock (a spool keeps what is
        not stored, for its next drainer). The one member any thread may call."""
        self.stopped = True

    def write_behind(self, timeout_seconds: float) -> bool:
        """Hand what was logged since the last hand-over to the sink's store process and return
        before it is stored (a spool keeps it meanwhile, or in process this ledger does).
        The store writes hand-overs in order, several at once when they wait for it; each
        counts as logged once the store says it is stored, which is asked here without
        waiting, unless :data:`MAX_WRITES_BEHIND` are not answered yet: then the oldest is
        waited for. When a write failed, or nothing can be handed over, this is :meth:`write`."""
        if not self._unwritten:
            return True
        if self.stopped:
            return False
        if self._log_again or self.failing_since is not None:
            return self.write(timeout_seconds)
        try:
            while self._behind:
                full = len(self._behind) >= MAX_WRITES_BEHIND
                outcome = self._sink.settle_oldest(timeout_seconds if full else 0.0)
                if outcome is None and not full:
                    break  # still being written: the next call asks again
                if outcome is False:  # failed: logged again, minus what is stored
                    self._log_again = True
                if not outcome:
                    return self.write(timeout_seconds)
                stored = self._behind.popleft()
                self._stored(self._unwritten[:stored])
                self._unwritten = self._unwritten[stored:]
            new = len(self._unwritten) - sum(self._behind)
            if not new:
                return True
            if self._sink.write_behind():
                self._behind.append(new)
                return True
        except Exception:  # noqa: BLE001 - the synchronous write says what went wrong
            pass
        return self.write(timeout_seconds)

    @property
    def writing_behind(self) -> bool:
        """True while a write behind holds samples not yet known to be stored."""
        return bool(self._behind)

    @property
    def failure_text(self) -> str:
        """Why the last write failed, in plain words ("" after one that worked): a full disk
        is ``no space left on <Trackio's folder>``."""
        folder = trackio_dir()
        if self.last_failure and (no_space(self.last_failure) or out_of_space(folder)):
            return no_space_on(folder)  # Trackio's own failures name no cause: the disk says
        return self.last_failure

    def write(self, timeout_seconds: float) -> bool:
        """Make what was logged durable in Trackio's storage. On success the samples count as
        logged; on a failure they stay kept (see the module's docstring)."""
        if self.stopped:
            return not self._unwritten
        self._behind.clear()  # the sink's flush settles the writes behind first
        if not self._unwritten:
            return True
        failures = ""
        try:
            ok, failures = self._flush_sink(timeout_seconds)
            if ok and self._log_again:
                ok = self._relog()
                if ok:
                    ok, failures = self._flush_sink(timeout_seconds)
        except Exception as exc:  # noqa: BLE001 - flushing must not crash the user's program
            ok, failures = False, repr(exc)
            self._log_again = True
        self.last_failure = "" if ok else failures
        if ok:
            written = self._unwritten
            self._unwritten = []
            self._log_again = False
            self._stored(written)
            if self.failing_since is not None:
                _logger.warning(
                    "otel-trackio: Trackio's storage takes writes again after %.0f s; "
                    "%d samples kept meanwhile are stored",
                    time.monotonic() - self.failing_since,
                    len(written),
                )
                self.failing_since = None
            return True
        if self.failing_since is None:
            self.failing_since = time.monotonic()
        self._stats.failed_writes += 1
        self._stats.failed_exports += 1
        self._drop_past_bound()
        self._warn(
            "storage",
            f"Trackio could not write to its storage ({self.failure_text}) for "
            f"{time.monotonic() - self.failing_since:.0f} s; {len(self._unwritten)} samples "
            "kept and retried (nothing acknowledged is given up; "
            f"{self._stats.samples_logged} stored so far)",
        )
        return False

    def _stored(self, written: list[Unwritten]) -> None:
        """Count samples storage now holds as logged."""
        self._stats.samples_logged += len(written)
        self._stats.partial_samples += sum(1 for u in written if u.sample.identity.partial)
        self._stats.samples_without_step += sum(1 for u in written if u.sample.identity.stepless)
        self._written([kept.sample for kept in written])

    def _flush_sink(self, timeout_seconds: float) -> tuple[bool, str]:
        """(the sink's flush succeeded, what failed). A failure Trackio reported means it
        dropped what it was writing: log it again next time."""
        if self._sink.flush(max(0.0, timeout_seconds)):
            return True, ""
        failures = ", ".join(sorted(self._sink.last_failures))
        if failures:
            self._log_again = True
        return False, failures or "timed out"

    def _relog(self) -> bool:
        """Log again the kept samples Trackio dropped, minus the spans its storage holds
        (False when storage cannot be read now: tried again later)."""
        key = self._settings.key
        by_step: dict[int, list[Unwritten]] = {}
        for kept in self._unwritten:
            by_step.setdefault(kept.sample.identity.step, []).append(kept)
        again: list[Unwritten] = []
        stored_now: list[Unwritten] = []
        for step, kept_at_step in by_step.items():
            stored = stored_span_ids(self._sink, key, step)
            if stored is None:
                return False
            to_log: list[Unwritten] = []
            for kept in kept_at_step:
                remaining = missing_spans(kept.sample, stored)
                if remaining is None:
                    stored_now.append(kept)
                elif remaining is kept.sample:
                    to_log.append(kept)
                else:
                    to_log.append(Unwritten(remaining, self._convert(remaining)))
            if to_log:
                to_log.sort(key=lambda kept: sample_order(kept.sample))
                self._sink.log_traces(key, [k.trace for k in to_log], step)
                self._stats.log_calls += 1
                self._stats.samples_retried += len(to_log)
            again.extend(to_log)
        self._unwritten = stored_now + again
        self._log_again = False
        return True

    def _drop_past_bound(self) -> None:
        """In process, where nothing else keeps them: past ``max_buffered_spans`` spans of kept
        samples, the oldest are given up (counted lost and warned)."""
        bound = self._settings.max_buffered_spans
        held = sum(len(kept.sample.spans) for kept in self._unwritten)
        dropped = 0
        while self._unwritten and held > bound:
            held -= len(self._unwritten.pop(0).sample.spans)
            dropped += 1
        if dropped:
            self._stats.samples_lost += dropped
            self._warn(
                "lost",
                f"Trackio's storage failing: {dropped} samples given up past the bound of "
                f"{bound} kept spans ({self._stats.samples_lost} lost so far)",
            )
