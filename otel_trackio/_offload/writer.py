"""The writer process of ``offload=True``: ``python -m otel_trackio._offload SPOOL_DIR``.

Started (as a fresh interpreter, never a fork, at a lower CPU priority: ``nice`` 10) by
:class:`~._spool.offload.OffloadClient`. It logs
into the same Trackio run as the rollout process (same project and name, ``resume="allow"``:
Trackio's file lock lets several processes write one run), drains the spool through the span
pipeline, and stops:

- after a ``CLOSE`` entry (the exporter shut down): everything drained, open samples logged;
- when the rollout process is gone (killed): what it spooled is drained, open samples are logged
  as partial (they will never end), then it exits — no orphan process;
- on SIGTERM: after the current cycle, leaving the rest in the spool for the next start.

At start it also drains spools of the same run left behind by writers that died with their
rollout process (abandoned: no producer, no drainer), so "the next start finishes it".
"""

from __future__ import annotations

import contextlib
import logging
import os
import pickle
import signal
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.run import build_run_engine
from otel_trackio._engine.sink import TrackioSink, join_run
from otel_trackio._spool.drain import BACKOFF_SECONDS, Drainer
from otel_trackio._spool.paths import remove_spool, spool_root
from otel_trackio._spool.segments import is_locked
from otel_trackio.settings import TrackioSettings

_logger = logging.getLogger("otel_trackio")

CONFIG_FILE = "writer.pickle"
STOPPED = 3
"""Exit status of a writer stopped by a signal with data left in its spool."""


@dataclass(frozen=True)
class WriterConfig:
    """What the rollout process tells its writer (pickled into the spool directory)."""

    settings: TrackioSettings
    project: str
    name: str
    parent_pid: int
    run_id: str | None = None


def abandoned(path: Path) -> list[Path]:
    """Spools of the same run (siblings of ``path``) that nobody appends to nor drains."""
    out = []
    with contextlib.suppress(FileNotFoundError):
        for sibling in sorted(path.parent.iterdir()):
            if sibling == path or not sibling.is_dir():
                continue
            if not (sibling / CONFIG_FILE).exists():
                continue
            if not is_locked(sibling / "producer.lock") and not is_locked(sibling / "drain.lock"):
                out.append(sibling)
    return out


def _parent_gone(parent_pid: int) -> bool:
    if os.getppid() != parent_pid:
        return True  # re-parented: the rollout process died
    try:
        os.kill(parent_pid, 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def _stored(pipeline: TracePipeline, stop: threading.Event) -> bool:
    """Log the open samples and wait until everything is in Trackio's storage (a failing write
    is retried with a growing wait); False when stopped first (the spool keeps the rest)."""
    wait = BACKOFF_SECONDS[0]
    stored = pipeline.flush()
    while not stored and not stop.is_set():
        stop.wait(wait)
        wait = min(BACKOFF_SECONDS[1], wait * 2)
        stored = pipeline.retry_writes() and pipeline.flush()
    return stored


def main(argv: list[str] | None = None) -> int:
    """Drain one spool into Trackio until the rollout process closes it or is gone.

    ``argv``: the spool directory, and ``--orphan`` when its rollout process is known to be
    gone (``otel-trackio drain``): everything in it is drained, then the open samples logged.
    """
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0])
    orphaned = "--orphan" in args[1:]
    if not orphaned:
        # The rollout comes first: on a busy machine the writer takes the CPU it leaves.
        with contextlib.suppress(OSError):
            os.nice(10)
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with open(path / CONFIG_FILE, "rb") as handle:
        config: WriterConfig = pickle.load(handle)
    settings = config.settings
    init = {**settings.init_kwargs, "resume": "allow", "auto_log_cpu": False, "auto_log_gpu": False}
    sink = TrackioSink(config.project, config.name, init_kwargs=init)
    join_run(sink.run, config.run_id)
    registry = OpenSampleRegistry()
    # Metrics stay in the rollout process with offload=True: this engine has no metric path.
    own = build_run_engine(settings, transport="offload", sink=sink, open_samples=registry)
    pipeline = own.spans
    stop = threading.Event()
    done = False
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    try:
        for left in abandoned(path):  # what writers that died with their process left
            with contextlib.suppress(RuntimeError):  # someone else took it meanwhile
                leftover = Drainer(
                    left, lambda route: own, open_roots=registry, fsync=settings.spool_fsync
                )
                leftover.run(stop, producer_gone=lambda: True)
                finished = not stop.is_set() and _stored(pipeline, stop)
                leftover.close()
                if finished:
                    remove_spool(left, spool_root(settings))
        drainer = Drainer(path, lambda route: own, open_roots=registry, fsync=settings.spool_fsync)
        drainer.run(stop, producer_gone=lambda: orphaned or _parent_gone(config.parent_pid))
        # A closed or dead producer: its open samples never end; log them, and make sure
        # everything is stored before the spool goes.
        done = not stop.is_set() and _stored(pipeline, stop)
        drainer.close()
        if done and not drainer.producer_closed:
            # Its rollout process is gone and everything is in Trackio: nothing left to finish.
            # (After a CLOSE the exporter reads the final counters, then removes the spool.)
            remove_spool(path, spool_root(settings))
    finally:
        pipeline.close(flush=False)  # what is not logged stays in the spool
    return 0 if done else STOPPED
