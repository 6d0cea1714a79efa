"""The receiver's periodic one-line summary (``otel-trackio serve`` prints it)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Collection

from otel_trackio._engine.report import open_line
from otel_trackio._trackio.installed import trackio_dir
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._stats import ReceiverTotals

_logger = logging.getLogger(__name__)


class Summary:
    """Formats the periodic one-line summary; silent while no data flows."""

    def __init__(self, router: Router, clock: Callable[[], float] = time.monotonic) -> None:
        self._router = router
        self._clock = clock
        self._last = router.totals()
        self._last_time = clock()

    def line(self) -> str | None:
        """The summary since the previous call, or None when nothing happened."""
        now = self._clock()
        totals = self._router.totals()
        previous, elapsed = self._last, max(now - self._last_time, 1e-9)
        self._last, self._last_time = totals, now
        if totals == previous:
            return None
        rate = (totals.spans - previous.spans) / elapsed
        backlog = ""
        if totals.backlog_bytes:
            backlog = (
                f", backlog {totals.backlog_spans} spans "
                f"({totals.backlog_bytes / 1e6:.1f} MB, {totals.behind_seconds} s behind)"
            )
        busy = f", {totals.busy} requests refused busy (503)" if totals.busy else ""
        return (
            f"otel-trackio: {rate:.1f} spans/s, {totals.samples} samples logged "
            f"({totals.partial} partial, {totals.waiting} in their grace period"
            f"{troubles(totals)}), "
            f"{totals.log_events} GenAI log events of {totals.log_records} log records, "
            f"{totals.metrics} metrics logged, "
            f"{rejected(totals)}, {totals.runs} run(s){backlog}{busy}"
        )


def rejected(totals: ReceiverTotals) -> str:
    """``3 rejected (401 no or wrong bearer token: 2, 413 too large: 1)``: how many, and why."""
    if not totals.rejected_why:
        return f"{totals.rejected} rejected"
    why = ", ".join(f"{reason}: {n}" for reason, n in totals.rejected_why)
    return f"{totals.rejected} rejected ({why})"


_TROUBLES = (
    ("lost", "lost"),
    ("retried", "retried"),
    ("unwritten", "not yet stored"),
    ("resent", "spans sent again, kept once"),
    ("already_stored", "samples found stored already, kept once"),
    ("unusable_steps", "not stored (no usable step)"),
)
"""The counters a summary names only when they are not 0, with what they count."""


def troubles(totals: ReceiverTotals, only: Collection[str] | None = None) -> str:
    """The ", N lost, M retried, K not yet stored, J spans sent again, kept once, ..." part of
    a summary line (what is not 0; ``only``: of these counters)."""
    parts = [
        f"{getattr(totals, key)} {label}"
        for key, label in _TROUBLES
        if (only is None or key in only) and getattr(totals, key)
    ]
    return "".join(f", {part}" for part in parts)


def report_runs(router: Router, report: Callable[[str], None]) -> None:
    """The end-of-run summary of each run ``router`` logged into, then how to open them (the
    same lines the in-process exporter prints); never raises."""
    if not router.settings.summary:
        return
    try:
        summaries = router.run_summaries()
    except Exception as exc:  # noqa: BLE001 - a summary must never fail the stop
        _logger.debug("otel-trackio: summary failed: %r", exc)
        return
    projects: list[str] = []
    for summary in summaries:
        said, _, *more = summary.lines()
        for line in (said, *more):  # how to open them: once per project, below
            report(line)
        if summary.project not in projects:
            projects.append(summary.project)
    folder = trackio_dir()
    settings = router.settings
    server = settings.server_url or settings.space_id
    for project in projects:
        report(open_line(project, folder, server=server))
