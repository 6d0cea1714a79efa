"""The writer process of ``offload=True``: ``python -m otel_trackio._offload SPOOL_DIR``.

Started (as a fresh interpreter, never a fork; at the lowest CPU priority, ``nice`` 19, once the
run is open) by
:class:`~otel_trackio._offload.client.OffloadClient`. Unless the rollout process holds the run
itself (given or active there), the writer is the one that opens it (``trackio.init`` with the
user's options), so the rollout process never imports Trackio; it reports the run it opened in
:data:`OPENED_FILE` and records it in its config, so a restarted writer joins the same run.
Otherwise it joins the rollout's run (``resume="allow"`` and its id: Trackio's file lock lets
several processes write one run). It drains the spool through the span pipeline (metrics too:
the run engine's metric path), and stops:

- after a ``CLOSE`` entry (the exporter shut down): everything drained, open samples logged;
- when the rollout process is gone (killed): what it spooled is drained, open samples are logged
  as partial (they will never end), then it exits — no orphan process;
- on SIGTERM: after the current cycle, leaving the rest in the spool for the next start.

At start it also drains spools of the same run left behind by writers that died with their
rollout process (abandoned: no producer, no drainer), so "the next start finishes it".
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import pickle
import signal
import sys
import threading
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData

from otel_trackio._codec.sdk_metrics import decode_sdk_metrics
from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._engine.run import build_run_engine
from otel_trackio._engine.sink import TrackioSink, join_run
from otel_trackio._engine.steps import note_step
from otel_trackio._offload.protocol import (
    CONFIG_FILE,
    OPEN_FAILED,
    OPENED_FILE,
    STOPPED,
    WriterConfig,
)
from otel_trackio._spool.drain import BACKOFF_SECONDS, Drainer
from otel_trackio._spool.paths import remove_spool, spool_root
from otel_trackio._spool.segments import is_locked, write_atomically

_logger = logging.getLogger("otel_trackio")

NICENESS = 19
"""The writer's CPU priority once the run is open: the lowest, so that on a machine with no core
to spare the rollout's threads (and anything else) run first; the spool holds what waits."""

_AUTOGROUP = Path("/proc/self/autogroup")
"""Linux's autogroup of this process's session (present when the kernel schedules by autogroup,
``kernel.sched_autogroup_enabled``, the default of most distributions)."""


def _deprioritise() -> None:
    """Take the lowest CPU priority: ``nice`` 19, and the same for this process's autogroup.

    The writer runs in a session of its own (the client starts it with ``start_new_session``:
    Ctrl-C reaches only the rollout). Under autogroup scheduling the kernel first shares the CPU
    between sessions' autogroups, each at its group's own nice (0), and only then between the
    threads inside one by their nice: ``os.nice`` alone ranks the writer below nothing but
    itself, and it takes a fair share of a busy CPU from the rollout (docs/performance.md, figure
    13). The autogroup's nice is set only when this process leads its session, so that a writer
    started by hand from a shell never lowers the shell's session with it.
    """
    with contextlib.suppress(OSError):
        os.nice(NICENESS)
    if os.getsid(0) != os.getpid():
        return
    with contextlib.suppress(OSError):  # no autogroup (another OS, or disabled): nice suffices
        _AUTOGROUP.write_text(f"{NICENESS}\n")


def _open_run(path: Path, config: WriterConfig) -> TrackioSink:
    """Open or join the run, and say which it is (:data:`OPENED_FILE`, the config)."""
    settings = config.settings
    init: dict[str, Any] = {**settings.init_kwargs, "auto_log_cpu": False, "auto_log_gpu": False}
    joining = config.run_id is not None
    if joining:
        init["resume"] = "allow"
    else:  # this process opens the run: it also logs the machine's CPU/GPU, as Trackio's default
        init = dict(settings.init_kwargs)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # Trackio's banner, shown by the rollout process
        sink = TrackioSink(config.project, config.name, init_kwargs=init)
    sys.stdout.write(printed.getvalue())
    join_run(sink.run, config.run_id)
    if not joining:  # a restart joins this run rather than opening another one
        opened = dataclasses.replace(config, name=sink.run_name, run_id=sink.run_id)
        write_atomically(path / CONFIG_FILE, pickle.dumps(opened))
    report = {"name": sink.run_name, "id": sink.run_id, "banner": printed.getvalue()}
    write_atomically(path / OPENED_FILE, json.dumps(report).encode())
    return sink


def _spooled_metrics(request: bytes) -> Iterable[MetricsData]:
    """A spooled metrics entry of the rollout process; the rollout's latest step (``set_step``)
    joins the steps this process saw in spans, for points without a ``step``."""
    latest, data = decode_sdk_metrics(request)
    if latest is not None:
        note_step(latest)
    return [data]


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
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    with open(path / CONFIG_FILE, "rb") as handle:
        config: WriterConfig = pickle.load(handle)
    settings = config.settings
    try:
        sink = _open_run(path, config)
    except Exception as exc:  # noqa: BLE001 - reported to the rollout process, which raises it
        with contextlib.suppress(OSError):
            write_atomically(path / OPENED_FILE, json.dumps({"error": f"{exc}"}).encode())
        _logger.error("otel-trackio writer: could not open the Trackio run: %r", exc)
        return OPEN_FAILED
    if not orphaned:
        # The rollout comes first: on a busy machine the writer takes the CPU it leaves. (After
        # opening the run, which the rollout process waits for.)
        _deprioritise()
    registry = OpenSampleRegistry()
    own = build_run_engine(
        settings,
        transport="offload",
        sink=sink,
        open_samples=registry,
        open_spans=registry,
        decode_metrics=_spooled_metrics,
    )
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
