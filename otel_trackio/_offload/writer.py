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

At start it also starts a writer for each spool of the project left behind by writers killed with
their rollout process (abandoned: no producer, no drainer), each into the run its spool records.
"""

from __future__ import annotations

import contextlib
import dataclasses
import io
import json
import logging
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData

from otel_trackio._codec.packing import UnreadablePayload
from otel_trackio._codec.routes import Route
from otel_trackio._codec.sdk_metrics import decode_sdk_metrics
from otel_trackio._core.samples import StepMemory
from otel_trackio._engine.open_samples import OpenSampleRegistry
from otel_trackio._engine.pipeline import TracePipeline
from otel_trackio._offload.priority import NICENESS, CatchUp, deprioritise
from otel_trackio._offload.protocol import (
    CONFIG_FILE,
    FINISH_FLAG,
    FINISHING_FILE,
    OPEN_FAILED,
    OPENED_FILE,
    SPLIT_FILE,
    STOPPED,
    WriterConfig,
    decode_config,
    encode_config,
)
from otel_trackio._plan import Role, RunPlan, RunSeen, plan_run
from otel_trackio._spool.drain import BACKOFF_SECONDS, Destination, Drainer
from otel_trackio._spool.paths import remove_spool, spool_project_folder, spool_root
from otel_trackio._spool.segments import is_locked, private, write_atomically
from otel_trackio._trackio.installed import join_run, trackio_dir
from otel_trackio._trackio.runs import (
    make_findable,
    open_run_by_name,
    opening_banner,
    split_from,
)
from otel_trackio._trackio.sink import TrackioSink
from otel_trackio._trackio.store import TraceStore
from otel_trackio._wiring import build_engine, observe

_logger = logging.getLogger("otel_trackio")


def _open_run(path: Path, config: WriterConfig, plan: RunPlan) -> TrackioSink:
    """Open or join the run as ``plan`` says, and say which it is (:data:`OPENED_FILE`, the
    config): a named run is made findable by its name first (one name, one run); a run the
    rollout process opened is joined by its id, and made findable by its name when nothing of it
    is stored yet (a trainer's later ``trackio.init(name, resume="allow")`` then continues it).
    Another run of the same name is warned about."""
    settings = plan.settings
    init: dict[str, Any] = {**settings.init_kwargs, "auto_log_cpu": False, "auto_log_gpu": False}
    joining = config.run_id is not None
    if joining:
        init["resume"] = "allow"
    else:  # this process opens the run: it also logs the machine's CPU/GPU, as Trackio's default
        init = dict(settings.init_kwargs)
    made = None
    if plan.continue_by_name and config.name:
        made = open_run_by_name(config.project, config.name)
    printed = io.StringIO()
    with contextlib.redirect_stdout(printed):  # Trackio's banner, shown by the rollout process
        sink = TrackioSink(config.project, config.name, init_kwargs=init)
    banner = opening_banner(made, printed.getvalue())
    sys.stdout.write(banner)
    join_run(sink.run, config.run_id)
    if joining and make_findable(sink.run):
        sink.flush()
    split = split_from(sink.run)
    if split is not None:
        _logger.warning("otel-trackio: %s", split)
        write_atomically(path / SPLIT_FILE, split.encode())
    if not joining:  # a restart joins this run rather than opening another one
        opened = dataclasses.replace(config, name=sink.run_name, run_id=sink.run_id)
        write_atomically(path / CONFIG_FILE, encode_config(opened))
    report = {"name": sink.run_name, "id": sink.run_id, "banner": banner}
    write_atomically(path / OPENED_FILE, json.dumps(report).encode())
    return sink


def _spooled_metrics(request: bytes, steps: StepMemory) -> Iterable[MetricsData]:
    """A spooled metrics entry of the rollout process; the rollout's latest step (``set_step``)
    joins the steps the run saw in spans (``steps``), for points without a ``step``."""
    latest, data = decode_sdk_metrics(request)
    if latest is not None:
        steps.note(latest)
    return [data]


def abandoned(folder: Path, *, besides: Path | None = None) -> list[Path]:
    """Offload spools under ``folder`` (a project's: ``<root>/<project>/<run>/<process>``) that
    nobody appends to nor drains: left by a writer killed with its rollout process."""
    out = []
    with contextlib.suppress(FileNotFoundError, NotADirectoryError):
        for config in sorted(folder.glob(f"*/*/{CONFIG_FILE}")):
            spool = config.parent
            if spool == besides:
                continue
            if not is_locked(spool / "producer.lock") and not is_locked(spool / "drain.lock"):
                out.append(spool)
    return out


def adopt_abandoned(folder: Path, *, besides: Path | None = None) -> list[subprocess.Popen[bytes]]:
    """Start a writer for each abandoned spool under ``folder`` (see :func:`abandoned`): each
    drains into the run recorded in its own spool, never another. The writers run at the
    lowest priority, detached; a spool another process took meanwhile is left to it."""
    from otel_trackio._offload.client import writer_environment

    started = []
    for spool in abandoned(folder, besides=besides):
        with open(spool / "writer.log", "ab", opener=private) as log:
            started.append(
                subprocess.Popen(
                    [sys.executable, "-m", "otel_trackio._offload", str(spool), ORPHAN_FLAG],
                    stdin=subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    start_new_session=True,
                    env=writer_environment(),
                )
            )
    return started


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


TAKE_SECONDS = 60.0
"""How long a finishing writer waits for the writer it replaces to let go of the spool."""


def _take(
    path: Path,
    destination: Callable[[Route], Destination | None],
    registry: OpenSampleRegistry,
    fsync: str,
    wait_seconds: float,
    between_cycles: Callable[[], object],
) -> Drainer | None:
    """The spool's drainer, once no other process drains it (None after ``wait_seconds``)."""
    deadline = time.monotonic() + wait_seconds
    while True:
        try:
            return Drainer(
                path,
                destination,
                open_roots=registry,
                fsync=fsync,
                between_cycles=between_cycles,
                sole_producer=True,
            )
        except RuntimeError:
            if time.monotonic() >= deadline:
                return None
            time.sleep(0.05)


ORPHAN_FLAG = "--orphan"
"""The spool's rollout process is gone: drain everything, log the open samples, stop."""
TIMEOUT_FLAG = "--timeout"
"""Followed by seconds: an orphan's drain gives up after that long (``otel-trackio drain
--timeout``), what is left staying in the spool, exit status :data:`STOPPED`."""


def main(argv: list[str] | None = None) -> int:
    """Drain one spool into Trackio until the rollout process closes it or is gone.

    ``argv``: the spool directory; ``--orphan`` when its rollout process is known to be gone
    (``otel-trackio drain``, an abandoned spool): everything in it is drained, then the open
    samples logged; ``--finish`` to keep the CPU priority this process started with (a writer
    started at shutdown, or by hand) rather than take the lowest.
    """
    args = sys.argv[1:] if argv is None else argv
    path = Path(args[0])
    orphaned = ORPHAN_FLAG in args[1:]
    finishing = FINISH_FLAG in args[1:]
    timeout = float(args[args.index(TIMEOUT_FLAG) + 1]) if TIMEOUT_FLAG in args[1:] else None
    logging.basicConfig(level=logging.WARNING, format="%(message)s")
    try:
        config = decode_config((path / CONFIG_FILE).read_bytes())
    except (OSError, UnreadablePayload) as exc:
        _logger.error("otel-trackio writer: the spool %s cannot be drained: %s", path, exc)
        return OPEN_FAILED
    settings = config.settings
    registry = OpenSampleRegistry()
    drainer: Drainer | None = None
    # At the lowest priority, a lag past the bound takes a normal share until caught up.
    catch_up = CatchUp(
        settings.writer_max_lag_seconds,
        lambda: drainer.backlog()[1] if drainer is not None else None,
        finishing=(path / FINISHING_FILE).exists,
    )
    pace = (lambda: None) if finishing else catch_up
    if not finishing:  # taken first: a spool another process drains is left to it
        drainer = _take(path, lambda route: own, registry, settings.spool_fsync, 0.0, pace)
        if drainer is None:
            return 0
    # Started now: forked while no thread runs here (Trackio starts with the run), ready at once.
    store = TraceStore(trackio_dir())
    store.start()
    situation = observe(settings, role=Role.WRITER)
    if config.run_id is not None:  # the rollout process opened it: joined by its id
        given = RunSeen(config.project, config.name or "")
        situation = dataclasses.replace(situation, given=given)
    plan = plan_run(settings, situation)
    try:
        sink = _open_run(path, config, plan)
    except Exception as exc:  # noqa: BLE001 - reported to the rollout process, which raises it
        store.close()
        if drainer is not None:
            drainer.close()
        with contextlib.suppress(OSError):
            write_atomically(path / OPENED_FILE, json.dumps({"error": f"{exc}"}).encode())
        _logger.error("otel-trackio writer: could not open the Trackio run: %r", exc)
        return OPEN_FAILED
    if drainer is None:  # finishing: the writer this one replaces lets go of the spool meanwhile
        drainer = _take(path, lambda route: own, registry, settings.spool_fsync, TAKE_SECONDS, pace)
        if drainer is None:
            sink.release()
            store.close()
            return STOPPED
    if not finishing:
        # The rollout comes first: on a busy machine the writer takes the CPU it leaves. (After
        # opening the run, which the rollout process waits for.)
        deprioritise()
        store.lower_priority(NICENESS)
    own = build_engine(
        plan,
        sink=sink,
        open_samples=registry,
        open_spans=registry,
        decode_metrics=lambda request: _spooled_metrics(request, own.spans.assembler.steps),
        store=store,
    )
    pipeline = own.spans
    stop = threading.Event()
    done = False
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    timer = None if timeout is None else threading.Timer(max(0.0, timeout), stop.set)
    if timer is not None:
        timer.daemon = True
        timer.start()
    if not orphaned:  # what writers killed with their rollout process left, each in its run
        adopt_abandoned(spool_project_folder(path), besides=path)
    try:
        drainer.run(stop, producer_gone=lambda: orphaned or _parent_gone(config.parent_pid))
        # A closed or dead producer: its open samples never end; log them, and make sure
        # everything is stored before the spool goes.
        done = not stop.is_set() and _stored(pipeline, stop)
        drainer.close()
        if done and (orphaned or not drainer.producer_closed):
            # Its rollout process is gone and everything is in Trackio: nothing left to finish.
            # (After a CLOSE the exporter reads the final counters, then removes the spool;
            # one that closed it and gave up waiting is gone: an orphan's drain removes it.)
            remove_spool(path, spool_root(settings))
    finally:
        pipeline.close(flush=False)  # what is not logged stays in the spool
        store.close()
    if timer is not None and not done:
        why = drainer.stalled or "storing had not finished"
        _logger.error(
            "otel-trackio drain: stopped after %g s (%s): %d samples waiting in %s; run it "
            "again to go on",
            timeout,
            why,
            pipeline.unwritten_samples,
            path,
        )
    return 0 if done else STOPPED
