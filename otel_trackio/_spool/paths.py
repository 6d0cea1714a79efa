"""Where spools live: one folder for all, one spool per process (offload) or per receiver run.

- ``offload=True``: ``<root>/<project>/<run>/<host>-<pid>-<random>`` (see
  :func:`process_spool`); its siblings are the same run's other processes.
- ``otel-trackio serve --project P --name N``: ``<root>/receiver/<P>/<N>`` (see
  :func:`receiver_spool`), so a restart with the same arguments finishes what is left.
"""

from __future__ import annotations

import contextlib
import os
import socket
import uuid
from pathlib import Path

from otel_trackio._engine.sink import trackio_dir
from otel_trackio.settings import TrackioSettings


def safe_name(text: str) -> str:
    """``text`` as one path component: anything but letters, digits, ``-_.`` becomes ``_``."""
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in text) or "_"


def spool_root(settings: TrackioSettings) -> Path:
    """The folder holding every spool: ``spool_dir``, else ``otel-trackio-spool`` in Trackio's."""
    return Path(settings.spool_dir) if settings.spool_dir else trackio_dir() / "otel-trackio-spool"


def project_spools(settings: TrackioSettings, project: str) -> Path:
    """The folder of every offload spool of ``project`` (one folder per run inside)."""
    return spool_root(settings) / safe_name(project)


def process_spool(settings: TrackioSettings, project: str, run_name: str | None) -> Path:
    """A fresh spool for this process's spans of ``project``/``run_name`` (``offload=True``).
    A run Trackio is still to name (``run_name`` None) gets a folder of its own: no other
    process's spool is of the same run."""
    run = safe_name(run_name) if run_name is not None else f"_unnamed-{uuid.uuid4().hex[:8]}"
    run_folder = project_spools(settings, project) / run
    unique = f"{safe_name(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return run_folder / unique


def spool_project_folder(spool: Path) -> Path:
    """The folder of all offload spools of the project ``spool`` (a process's) belongs to."""
    return spool.parent.parent


def receiver_spool(settings: TrackioSettings, project: str, name: str | None) -> Path:
    """The default spool of ``otel-trackio serve --project P --name N``: one per project and run
    under the spool folder, so a restart with the same arguments finishes what is left."""
    return spool_root(settings) / "receiver" / safe_name(project) / safe_name(name or "_")


SPOOL_FILES = ("checkpoint.json", "runs.json", "writer.pickle", "writer.log", "opened.json")
"""Files of a spool besides its segments, locks, temporary files and metric memories (``*.seg``,
``*.lock``, ``*.tmp``, ``*.memory``)."""
_SPOOL_SUFFIXES = (".seg", ".lock", ".tmp", ".memory")


def remove_spool(path: Path, root: Path) -> None:
    """Remove a spool that was drained (everything in it is in Trackio): its segments,
    checkpoint, locks and ``runs.json`` — only files a spool has, so a ``--spool`` folder given
    by the user keeps anything else — then the folders it leaves empty, up to ``root`` (the
    spool folder itself stays). A clean stop leaves nothing behind."""
    with contextlib.suppress(FileNotFoundError):
        for entry in path.iterdir():
            if entry.is_file() and (
                entry.name in SPOOL_FILES or entry.name.endswith(_SPOOL_SUFFIXES)
            ):
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
