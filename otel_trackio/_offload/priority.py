"""The writer's CPU priority: the lowest while it keeps up, a normal share while it catches up.

The writer runs at ``nice`` 19 so that on a machine with no core to spare the rollout (and
anything else) runs first, and the spool holds what waits. On a saturated node that could leave
it behind without bound: the run's latest steps, the ones a researcher opens first, would reach
Trackio only at shutdown. So the lag is bounded (``writer_max_lag_seconds``): past it, the writer
takes a normal share of the CPU until it is back within a quarter of the bound, then the lowest
again, and says so.

What makes that possible: the writer leads a session of its own, and Linux shares the CPU between
sessions' *autogroups* first (``kernel.sched_autogroup_enabled``, the default of most
distributions). The writer's threads are alone in its autogroup, so the group's nice is what
ranks it against the rest of the machine — and an unprivileged process may set its autogroup's
nice back to 0 (only a thread's own nice can never be raised again). Without autogroups the
writer cannot catch up by itself: it warns once, and ``shutdown()`` still finishes the job.
"""

from __future__ import annotations

import contextlib
import logging
import os
import time
from collections.abc import Callable
from pathlib import Path

_logger = logging.getLogger("otel_trackio")

NICENESS = 19
"""The writer's CPU priority once the run is open: the lowest."""
CATCHING_UP = 0
"""Its autogroup's nice while it catches up: a normal share."""


def leads_its_session(pid: int | None = None) -> bool:
    """True when process ``pid`` (default: this one) leads its session: its autogroup is its
    own, not a shell's."""
    pid = os.getpid() if pid is None else pid
    try:
        return os.getsid(pid) == pid
    except OSError:
        return False


def set_autogroup_nice(nice: int, pid: int | None = None) -> bool:
    """Set the autogroup nice of process ``pid``'s session (default: this process's), only when
    it leads that session; False when it cannot (no autogroup: another OS, or disabled).

    Linux's autogroup of a session is present when the kernel schedules by autogroup
    (``kernel.sched_autogroup_enabled``, the default of most distributions). A process may set
    it for another process of its user; only a nice below 0 takes privilege: so ``shutdown()``
    gives its writer a normal share again (:data:`CATCHING_UP`) when the rollout is over.
    """
    if not leads_its_session(pid):
        return False
    try:
        Path(f"/proc/{'self' if pid is None else pid}/autogroup").write_text(f"{nice}\n")
    except OSError:
        return False
    return True


def deprioritise() -> None:
    """Take the lowest CPU priority: ``nice`` 19, and the same for this process's autogroup.

    The writer runs in a session of its own (the client starts it with ``start_new_session``:
    Ctrl-C reaches only the rollout). Under autogroup scheduling ``os.nice`` alone ranks the
    writer below nothing but itself, and it takes a fair share of a busy CPU from the rollout.
    The autogroup's nice is set only when this process leads its session, so that a writer
    started by hand from a shell never lowers the shell's session with it.
    """
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    set_autogroup_nice(NICENESS)


class CatchUp:
    """Called between drain cycles: past ``max_lag_seconds`` behind, a normal CPU share (warned);
    back within a quarter of it, the lowest again.

    Args:
        max_lag_seconds: how far behind (the oldest entry not yet handed over, in seconds) the
            writer may fall at the lowest priority.
        behind: the drain's lag now, in seconds (None: nothing waits).
        check_seconds: how often the lag is looked at, at most.
        finishing: whether the rollout process is shutting down (it then gave the writer a
            normal share, see :func:`set_autogroup_nice`, which this never takes back).
    """

    def __init__(
        self,
        max_lag_seconds: float,
        behind: Callable[[], float | None],
        check_seconds: float = 1.0,
        finishing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._max = max_lag_seconds
        self._behind = behind
        self._every = check_seconds
        self._finishing = finishing
        self._next = 0.0
        self.catching_up = False
        self._said_cannot = False

    def __call__(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self._every
        if self._finishing():  # the rollout process is shutting down and gave a normal share
            self.catching_up = True  # kept until the end
            return
        behind = self._behind() or 0.0
        if not self.catching_up and behind > self._max:
            if set_autogroup_nice(CATCHING_UP):
                self.catching_up = True
                _logger.warning(
                    "otel-trackio: the offload writer is %.0f s behind (more than "
                    "writer_max_lag_seconds=%g): it takes a normal CPU share until it catches up",
                    behind,
                    self._max,
                )
            elif not self._said_cannot:
                self._said_cannot = True
                _logger.warning(
                    "otel-trackio: the offload writer is %.0f s behind (more than "
                    "writer_max_lag_seconds=%g) and cannot raise its priority here (no autogroup "
                    "scheduling); shutdown() stores the rest",
                    behind,
                    self._max,
                )
        elif self.catching_up and behind <= self._max / 4:
            set_autogroup_nice(NICENESS)
            self.catching_up = False
            _logger.info("otel-trackio: the offload writer caught up (%.0f s behind)", behind)
