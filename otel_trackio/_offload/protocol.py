"""What a rollout process and its offload writer tell each other, through files in the spool
directory: the writer's config (:data:`CONFIG_FILE`, written by the rollout process, completed by
the writer once it opened the run) and the writer's report on opening the run
(:data:`OPENED_FILE`). Kept apart from the writer so the rollout process imports none of the
writer's engine."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from otel_trackio._engine.sink import OpenedElsewhere
from otel_trackio.settings import TrackioSettings

CONFIG_FILE = "writer.pickle"
OPENED_FILE = "opened.json"
"""What the writer reports once it has the run: ``{"name", "id", "banner"}`` (``banner``: what
``trackio.init`` printed, for the rollout's terminal), or ``{"error"}``."""
FINISH_FLAG = "--finish"
"""The writer's flag to keep the CPU priority it started with (a writer started at shutdown to
store what is left, or by ``otel-trackio drain``) rather than take the lowest."""
STOPPED = 3
"""Exit status of a writer stopped by a signal with data left in its spool."""
OPEN_FAILED = 4
"""Exit status of a writer that could not open the run (the reason is in :data:`OPENED_FILE`);
it is not started again."""


@dataclass(frozen=True)
class WriterConfig:
    """What the rollout process tells its writer (pickled into the spool directory).

    ``run_id`` None: the rollout process has not opened the run; the writer opens it (with
    ``name`` None, Trackio picks the name) and writes the name and id back here."""

    settings: TrackioSettings
    project: str
    name: str | None
    parent_pid: int
    run_id: str | None = None


@dataclass(frozen=True)
class OpenedReport:
    """The writer's report on opening the run: the run, and what Trackio printed meanwhile."""

    run: OpenedElsewhere
    banner: str = ""


def read_opened(path: Path) -> OpenedReport | str | None:
    """The run the writer of spool ``path`` opened, the reason it could not (a string), or None
    while it has not said yet."""
    try:
        report: dict[str, Any] = json.loads((path / OPENED_FILE).read_bytes())
    except (FileNotFoundError, ValueError):
        return None
    if "error" in report:
        return str(report["error"])
    run = OpenedElsewhere(str(report["name"]), report.get("id"))
    return OpenedReport(run, str(report.get("banner") or ""))
