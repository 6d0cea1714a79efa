"""The run names Trackio chose for routes asked for without one, kept in the receiver's spool.

``runs.json``: project → the run Trackio named for it, so a restart after an unclean stop (data
left in the spool) resumes those runs and finishes their spooled data there. A start with
nothing left in the spool starts fresh runs: a clean stop removes the spool, ``runs.json`` with
it.

``earlier-runs.json``: what a clean stop leaves instead, the runs it finished with the time it
stopped. A client whose answer was lost sends its request again, possibly to the receiver
started next, which makes a new run: for :data:`RESEND_HORIZON_SECONDS` after the stop, the
next start looks a sample's spans up in those runs too, so a request sent again is not stored
a second time in the new run. The file is kept while it names a run inside that horizon.
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Callable
from pathlib import Path

from otel_trackio._spool.segments import write_atomically

FILE = "runs.json"
EARLIER_FILE = "earlier-runs.json"
RESEND_HORIZON_SECONDS = 900.0
"""How long after a clean stop the runs it finished are looked up for requests sent again (an
OTLP client gives a request up after about a minute of retries)."""
_EARLIER_KEPT = 8
"""Earlier runs remembered per project at most (the most recent)."""


class RunNames:
    """project → the run name Trackio chose for it (``runs.json``), and the runs earlier starts
    of this spool stored into (``earlier-runs.json``)."""

    def __init__(
        self, spool: Path, *, resume: bool, clock: Callable[[], float] = time.time
    ) -> None:
        """``resume``: the spool holds data of an earlier start, whose runs are to be resumed
        (else the names of earlier, cleanly finished runs are forgotten, but for the lookup of
        requests sent again)."""
        self._path = spool / FILE
        self._earlier_path = spool / EARLIER_FILE
        self._clock = clock
        self._names = self._load() if resume else {}
        self._earlier = self._load_earlier()

    def _load(self) -> dict[str, str]:
        try:
            names = json.loads(self._path.read_text())
        except (OSError, ValueError):
            return {}
        return {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {}

    def _load_earlier(self) -> dict[str, list[tuple[str, float]]]:
        try:
            earlier = json.loads(self._earlier_path.read_text())
        except (OSError, ValueError):
            return {}
        out: dict[str, list[tuple[str, float]]] = {}
        if isinstance(earlier, dict):
            for project, runs in earlier.items():
                with contextlib.suppress(TypeError, ValueError):
                    out[str(project)] = [(str(name), float(ended)) for name, ended in runs]
        return out

    def get(self, project: str) -> str | None:
        """The run name chosen earlier for ``project``, if any."""
        return self._names.get(project)

    def remember(self, project: str, name: str) -> None:
        """Keep ``name`` as ``project``'s run (written at once)."""
        self._names[project] = name
        self._path.write_text(json.dumps(self._names))

    def earlier(self, project: str) -> tuple[str, ...]:
        """The runs of ``project`` that earlier starts stored into and finished less than
        :data:`RESEND_HORIZON_SECONDS` ago, most recent first (this start's run left out)."""
        since = self._clock() - RESEND_HORIZON_SECONDS
        current = self._names.get(project)
        runs = sorted(self._earlier.get(project, ()), key=lambda run: -run[1])
        return tuple(name for name, ended in runs if ended >= since and name != current)

    def keep_as_earlier(self) -> None:
        """At a clean stop: write ``earlier-runs.json``, this start's runs stopped now beside
        the earlier ones still inside the horizon; nothing to keep removes the file."""
        now = self._clock()
        kept: dict[str, list[tuple[str, float]]] = {}
        for project in {*self._earlier, *self._names}:
            runs = [
                (n, t)
                for n, t in self._earlier.get(project, ())
                if t >= now - RESEND_HORIZON_SECONDS
            ]
            if project in self._names:
                runs = [(n, t) for n, t in runs if n != self._names[project]]
                runs.append((self._names[project], now))
            if runs:
                kept[project] = sorted(runs, key=lambda run: run[1])[-_EARLIER_KEPT:]
        if kept:
            write_atomically(self._earlier_path, json.dumps(kept).encode(), fsync=False)
        else:
            with contextlib.suppress(OSError):
                self._earlier_path.unlink()
