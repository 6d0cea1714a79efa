"""Why the receiver refuses a request it would otherwise take (the HTTP layer answers 503)."""

from __future__ import annotations


class ReceiverUnavailable(RuntimeError):
    """The receiver is shutting down or cannot take the data now; the client may retry."""

    retry_after_seconds = 5


class ReceiverBusy(ReceiverUnavailable):
    """The spool is at its bound: the client should retry after the drain made room."""

    retry_after_seconds = 2


class RoutesExhausted(ReceiverUnavailable):
    """A new (project, run) past ``max_routes``: refused retryably (503), never acknowledged
    and dropped; the operator raises ``--max-routes`` (a warning says so)."""

    retry_after_seconds = 30
