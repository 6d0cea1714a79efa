"""``ExportStats``: the counters of one run's span pipeline, one type on every path.

The in-process exporter reads its pipeline's; with ``offload=True`` the writer process saves the
same counters into its spool checkpoint (:meth:`ExportStats.as_dict`) and the exporter reads them
back (:meth:`ExportStats.from_dict`) without losing a field.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(slots=True)
class ExportStats:
    """Counters of what a span pipeline did, for summaries, tests and the fault tally.

    ``samples_logged`` counts samples written to Trackio's storage (not merely handed to
    ``run.log``); ``samples_retried`` the samples logged again after a failed write;
    ``failed_writes`` the writes that failed or timed out (each retried); ``samples_lost`` what
    was given up (said in a warning each time); ``unusable_steps`` the samples not stored because
    their own step value is no step (warned), ``unusable_step_spans`` their spans."""

    spans_received: int = 0
    log_events_received: int = 0
    samples_logged: int = 0
    partial_samples: int = 0
    log_calls: int = 0
    failed_exports: int = 0
    samples_lost: int = 0
    conversion_errors: int = 0
    evicted_samples: int = 0
    already_stored: int = 0
    samples_retried: int = 0
    failed_writes: int = 0
    unusable_steps: int = 0
    unusable_step_spans: int = 0
    samples_without_step: int = 0  # stored at a step no span of theirs carried (latest, or 0)
    # Spans this process never handed on (the spool or the queue full, a span not encodable):
    # their samples are missing, or partial.
    spans_refused: int = 0
    samples_refused: int = 0  # the sample roots among them: those samples are lost
    step_durations_logged: int = 0  # scalars of the steps' own spans (step_durations_key)
    # The steps Traces were logged at: how many distinct ones, the first and the last (both 0
    # while ``steps_logged`` is 0).
    steps_logged: int = 0
    first_step: int = 0
    last_step: int = 0

    def logged_at(self, step: int, new_step: bool) -> None:
        """Traces were logged at ``step`` (``new_step``: the first time at that step)."""
        if new_step:
            if not self.steps_logged or step < self.first_step:
                self.first_step = step
            if not self.steps_logged or step > self.last_step:
                self.last_step = step
            self.steps_logged += 1

    def as_dict(self) -> dict[str, int]:
        """Every counter by its field name (what a spool checkpoint stores)."""
        return dataclasses.asdict(self)

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ExportStats:
        """The counters :meth:`as_dict` gave (other keys ignored, missing ones 0)."""
        return cls(**{f.name: int(data.get(f.name) or 0) for f in dataclasses.fields(cls)})

    def steps_from(self, steps: Iterable[int]) -> None:
        """Set the step counters from the distinct steps Traces were logged at."""
        distinct = set(steps)
        self.steps_logged = len(distinct)
        self.first_step = min(distinct, default=0)
        self.last_step = max(distinct, default=0)

    @classmethod
    def total(cls, parts: Iterable[ExportStats]) -> ExportStats:
        """The sum of several pipelines' counters (a drainer feeding many)."""
        out = cls()
        stepped: list[ExportStats] = []
        for part in parts:
            for f in dataclasses.fields(cls):
                setattr(out, f.name, getattr(out, f.name) + getattr(part, f.name))
            if part.steps_logged:
                stepped.append(part)
        # Steps are a range, not a count: the earliest first step, the latest last step.
        out.first_step = min((p.first_step for p in stepped), default=0)
        out.last_step = max((p.last_step for p in stepped), default=0)
        return out


_MAX_RANGE = 10_000_000
"""A longer range in a checkpoint is not one a run logged (a damaged file): ignored."""


def step_ranges(steps: Iterable[int]) -> list[list[int]]:
    """Distinct steps as ``[first, last]`` ranges of consecutive steps (compact in a checkpoint:
    a run's steps are mostly consecutive)."""
    out: list[list[int]] = []
    for step in sorted(set(steps)):
        if out and step == out[-1][1] + 1:
            out[-1][1] = step
        else:
            out.append([step, step])
    return out


def steps_in(ranges: Iterable[Any]) -> set[int]:
    """The steps :func:`step_ranges` gave (malformed ranges ignored)."""
    out: set[int] = set()
    for pair in ranges:
        try:
            first, last = int(pair[0]), int(pair[1])
        except (TypeError, ValueError, IndexError):
            continue
        if 0 <= last - first <= _MAX_RANGE:
            out.update(range(first, last + 1))
    return out
