"""The outcome table of each step (``outcome_table_key``).

Rows are noted as Traces are logged; one ``trackio.Table`` is logged when the step is over (see
:class:`~otel_trackio._core.outcomes.StepTables`).
"""

from __future__ import annotations

from otel_trackio._core.convert import TraceDict
from otel_trackio._core.outcomes import StepTables, outcome_row
from otel_trackio._engine.batches import order_key
from otel_trackio._engine.warn import Warnings
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.sink import TrackioSink


class OutcomeTables:
    """Each step's outcome rows, until it is over; then its table, logged to ``sink``."""

    def __init__(self, settings: TrackioSettings, sink: TrackioSink, warn: Warnings) -> None:
        self._settings = settings
        self._sink = sink
        self._warn = warn
        self.tables = StepTables(order_key)

    def note(self, step: int, traces: list[TraceDict]) -> None:
        """Keep the outcome rows of a step's logged Traces for its table."""
        if self._settings.outcome_table_key is not None:
            names = self._settings.outcome_attributes
            self.tables.add(step, [outcome_row(trace, names) for trace in traces])

    def log(self, *, flush: bool) -> None:
        """Log the outcome table of each step that is over (of every step, at a flush). A
        table that cannot be logged is warned about: the Traces it sums up are stored."""
        key = self._settings.outcome_table_key
        for step, rows in self.tables.take_all() if flush else self.tables.due():
            if key is None:
                continue
            try:
                self._sink.log_table(key, rows, step)
            except Exception as exc:  # noqa: BLE001
                self._warn("table", f"the outcome table of step {step} was not logged: {exc!r}")
