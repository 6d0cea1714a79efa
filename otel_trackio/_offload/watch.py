"""Is the writer process keeping up? What :meth:`OffloadClient.shutdown` watches while it waits.

At shutdown the rollout is over, and what is still spooled must reach Trackio before the process
exits. The writer runs at the lowest CPU priority (so that it never slows the rollout), and an
unprivileged process can never raise it again: on a busy machine it gets a sliver of a core and
the last steps would take minutes. So the exiting process watches it and, when it is *starved*
(it waits for a CPU longer than it runs), *stopped* (SIGSTOP), *stuck* (no progress for a
while: hung) or dead, hands the rest to a writer started at the rollout's own priority.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable
from dataclasses import dataclass
from pathlib import Path

STUCK_SECONDS = 15.0
"""No progress at all for this long, with entries waiting: the writer is stuck (hung). Longer than
Trackio's own lock timeout (10 s), which a healthy writer may wait out."""
WINDOW_SECONDS = 0.5
"""How long the writer's CPU time is watched before it is judged starved."""


@dataclass(frozen=True, slots=True)
class CpuTimes:
    """Nanoseconds a process's threads spent on a CPU, and runnable but waiting for one."""

    running: int
    waiting: int


def is_stopped(pid: int) -> bool:
    """True when the process is stopped (SIGSTOP, a debugger): it runs no more until resumed."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return False
    return state in ("T", "t")


def cpu_times(pid: int) -> CpuTimes | None:
    """The process's CPU times from Linux's ``/proc/<pid>/task/*/schedstat`` (None elsewhere, or
    when the process is gone)."""
    running = waiting = 0
    found = False
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            with contextlib.suppress(OSError, ValueError, IndexError):
                fields = (task / "schedstat").read_text().split()
                running += int(fields[0])
                waiting += int(fields[1])
                found = True
    return CpuTimes(running, waiting) if found else None


class WriterWatch:
    """Watches one writer process's progress and its CPU times.

    Call :meth:`look` regularly with where the drain is (any value that changes as it moves);
    :attr:`verdict` says why the writer should be replaced (None while it keeps up).
    """

    def __init__(self, pid: int | None, progress: Hashable) -> None:
        self._pid = pid
        now = time.monotonic()
        self._progress = progress
        self._progress_at = now
        self._window_start = now
        self._times = cpu_times(pid) if pid is not None else None
        self.verdict: str | None = None
        self.only_slow = False
        """The verdict is starvation: the writer still moves, slowly (not stopped, not stuck)."""

    def look(self, progress: Hashable, waiting: bool) -> str | None:
        """Note the drain's position (``waiting``: entries are still to be drained); the reason
        to replace the writer, or None."""
        if self.only_slow:  # judged starved once: look again from now on
            self.verdict, self.only_slow = None, False
        now = time.monotonic()
        if progress != self._progress:
            self._progress, self._progress_at = progress, now
        elif waiting and self._pid is not None and is_stopped(self._pid):
            self.verdict = "it is stopped"
        elif waiting and now - self._progress_at >= STUCK_SECONDS:
            self.verdict = f"it made no progress for {now - self._progress_at:.0f} s"
        if (
            self.verdict is None
            and self._pid is not None
            and now - self._window_start >= (WINDOW_SECONDS)
        ):
            times = cpu_times(self._pid)
            before = self._times
            if waiting and times is not None and before is not None:
                ran = times.running - before.running
                waited = times.waiting - before.waiting
                if waited > ran:
                    share = ran / max(1, ran + waited)
                    self.only_slow = True
                    self.verdict = (
                        f"it is starved of CPU (it ran {share:.0%} of the time it was ready to)"
                    )
            self._times, self._window_start = times, now
        return self.verdict
