"""The receiver's periodic one-line summary (``otel-trackio serve`` prints it)."""

from __future__ import annotations

import time
from collections.abc import Callable, Collection

from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._stats import ReceiverTotals


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
            f"{totals.rejected} rejected, {totals.runs} run(s){backlog}{busy}"
        )


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
