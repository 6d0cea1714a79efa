"""Where spools live: one folder for all, one spool per process (offload) or per receiver run.

- ``offload=True``: ``<root>/<project>/<run>/<host>-<pid>-<random>`` (see
  :func:`process_spool`); its siblings are the same run's other processes.
- ``otel-trackio serve --project P --name N``: ``<root>/receiver/<P>/<N>`` (see
  :func:`receiver_spool`), so a restart with the same arguments finishes what is left.

Each name is one folder by :func:`~otel_trackio._core.names.folder_name`: distinct names never
share one, and none leads out of the spool folder. Spool folders are made ``0700`` (they hold
prompts and answers), and a drained spool's removal deletes only the files a spool makes.
"""

from __future__ import annotations

import contextlib
import os
import re
import socket
import uuid
from pathlib import Path

from otel_trackio._core.names import folder_name
from otel_trackio._plan import spool_root as planned_root
from otel_trackio._settings import TrackioSettings
from otel_trackio._trackio.installed import trackio_dir

UNNAMED = "%unnamed"
"""The folder of a run Trackio is still to name (no encoded name is this: see
:func:`~otel_trackio._core.names.folder_name`)."""


def spool_root(settings: TrackioSettings) -> Path:
    """The folder holding every spool: ``spool_dir``, else ``otel-trackio-spool`` in Trackio's
    (the plan's rule, :func:`otel_trackio._plan.spool_root`)."""
    return planned_root(settings, trackio_dir())


def project_spools(settings: TrackioSettings, project: str) -> Path:
    """The folder of every offload spool of ``project`` (one folder per run inside)."""
    return spool_root(settings) / folder_name(project)


def process_spool(root: Path, project: str, run_name: str | None) -> Path:
    """A fresh spool under ``root`` (:func:`spool_root`) for this process's spans of
    ``project``/``run_name`` (``offload=True``). A run Trackio is still to name (``run_name``
    None) gets a folder of its own: no other process's spool is of the same run."""
    run = folder_name(run_name) if run_name is not None else f"{UNNAMED}-{uuid.uuid4().hex[:8]}"
    run_folder = root / folder_name(project) / run
    unique = f"{folder_name(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return run_folder / unique


def spool_project_folder(spool: Path) -> Path:
    """The folder of all offload spools of the project ``spool`` (a process's) belongs to."""
    return spool.parent.parent


def receiver_spool(settings: TrackioSettings, project: str, name: str | None) -> Path:
    """The default spool of ``otel-trackio serve --project P --name N``: one per project and run
    under the spool folder, so a restart with the same arguments finishes what is left."""
    run = UNNAMED if name is None else folder_name(name)
    return spool_root(settings) / "receiver" / folder_name(project) / run


SPOOL_FILES = (
    "checkpoint.json",
    "runs.json",
    "writer.config",
    "writer.log",
    "opened.json",
    "finishing",
)
"""Files of a spool besides its segments, locks, metric memories and temporary files."""
_SPOOL_FILE = re.compile(
    r"(?:\d{12}\.seg|drain\.lock|producer\.lock|metrics-[0-9a-f]{16}\.memory|"
    + "|".join(re.escape(name) for name in SPOOL_FILES)
    + r")(?:\.\d+\.tmp)?"
)


def is_spool_file(name: str) -> bool:
    """A file name a spool makes: a segment, a lock, a metric memory, one of
    :data:`SPOOL_FILES`, or the temporary file of an atomic write of one of those."""
    return _SPOOL_FILE.fullmatch(name) is not None


def remove_spool(path: Path, root: Path) -> None:
    """Remove a spool that was drained (everything in it is in Trackio): its segments,
    checkpoint, locks and ``runs.json`` — only files a spool has, so a ``--spool`` folder given
    by the user keeps anything else — then the folders it leaves empty, up to ``root`` (the
    spool folder itself stays). A clean stop leaves nothing behind."""
    with contextlib.suppress(FileNotFoundError):
        for entry in path.iterdir():
            if entry.is_file() and is_spool_file(entry.name):
                with contextlib.suppress(OSError):
                    entry.unlink()
    root = root.resolve()
    folder = path.resolve()
    while folder != root:
        try:
            folder.rmdir()
        except FileNotFoundError:
            pass
        except OSError:  # not empty: another spool, or the user's own files
            return
        if root not in folder.parents:
            return
        folder = folder.parent
