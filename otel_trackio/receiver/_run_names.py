"""``runs.json`` in the receiver's spool: the run names Trackio chose for routes asked for
without one, so a restart after an unclean stop (data left in the spool) resumes those runs and
finishes their spooled data there. A start with nothing left in the spool starts fresh runs:
a clean stop removes the spool, ``runs.json`` with it."""

from __future__ import annotations

import json
from pathlib import Path

FILE = "runs.json"


class RunNames:
    """project → the run name Trackio chose for it, kept in ``<spool>/runs.json``."""

    def __init__(self, spool: Path, *, resume: bool) -> None:
        """``resume``: the spool holds data of an earlier start, whose runs are to be resumed
        (else the names of earlier, cleanly finished runs are forgotten)."""
        self._path = spool / FILE
        self._names = self._load() if resume else {}

    def _load(self) -> dict[str, str]:
        try:
            names = json.loads(self._path.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return {str(k): str(v) for k, v in names.items()} if isinstance(names, dict) else {}

    def get(self, project: str) -> str | None:
        """The run name chosen earlier for ``project``, if any."""
        return self._names.get(project)

    def remember(self, project: str, name: str) -> None:
        """Keep ``name`` as ``project``'s run (written at once)."""
        self._names[project] = name
        self._path.write_text(json.dumps(self._names))
