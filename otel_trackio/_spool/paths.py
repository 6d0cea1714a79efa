"""Where spools live: one folder for all, one spool per process (offload) or per receiver run.

- ``offload=True``: ``<root>/<project>/<run>/<host>-<pid>-<random>`` (see
  :func:`process_spool`); its siblings are the same run's other processes.
- ``otel-trackio serve --project P --name N``: ``<root>/receiver/<P>/<N>`` (see
  :func:`receiver_spool`), so a restart with the same arguments finishes what is left.
"""

from __future__ import annotations

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


def process_spool(settings: TrackioSettings, project: str, run_name: str) -> Path:
    """A fresh spool for this process's spans of ``project``/``run_name`` (``offload=True``)."""
    run_folder = spool_root(settings) / safe_name(project) / safe_name(run_name)
    unique = f"{safe_name(socket.gethostname())}-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    return run_folder / unique


def receiver_spool(settings: TrackioSettings, project: str, name: str | None) -> Path:
    """The default spool of ``otel-trackio serve --project P --name N``: one per project and run
    under the spool folder, so a restart with the same arguments finishes what is left."""
    return spool_root(settings) / "receiver" / safe_name(project) / safe_name(name or "_")
