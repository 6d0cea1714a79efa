"""The rollout-process side of ``offload=True``: spool the spans, let a writer process log them.

``export()`` turns SDK spans into lean tuples and appends them to this process's own spool; no
conversion, no JSON parsing and no Trackio call happen here, and unless this
process holds the run itself (given, or active here) Trackio is never even imported: the writer
process (``python -m otel_trackio._offload``, a fresh interpreter: never a fork of the rollout)
opens the run, reports it, and drains the spool into it; metrics go the same way
(:meth:`OffloadClient.export_metrics`). What each call means:

- ``export()`` SUCCESS: the spans are in the spool (written to the OS: they survive this process
  being killed, not a power loss). FAILURE when the spool is at its bound or cannot be written.
- ``force_flush()`` True: everything handed over before it is durable in Trackio (open samples
  logged as partial, as in process), within the timeout.
- ``shutdown()``: asks the writer to drain everything and stop, and returns once all of it is in
  Trackio (a writer that does not keep up hands over to one at this process's priority), or at
  ``shutdown_timeout_seconds``; what is left then stays spooled for the next start.
- A writer that died is started again by a call (an export looks at most every 0.25 s); a
  rollout process that died leaves a writer that drains what was spooled, logs the open samples
  as partial and exits.
"""

from __future__ import annotations

import contextlib
import logging
import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

from opentelemetry.sdk.metrics.export import MetricsData
from opentelemetry.sdk.trace import ReadableSpan

from otel_trackio._codec import spool as codec
from otel_trackio._codec.packing import UnpackableValue
from otel_trackio._codec.routes import NO_ROUTE
from otel_trackio._codec.sdk_metrics import encode_sdk_metrics
from otel_trackio._core.records import LogEventRecord, SpanRecord
from otel_trackio._engine.open_samples import OPEN_SAMPLES
from otel_trackio._engine.open_spans import OpenSpans
from otel_trackio._engine.report import say
from otel_trackio._engine.stats import ExportStats
from otel_trackio._engine.steps import latest_step
from otel_trackio._engine.warn import Warnings, no_space, no_space_on
from otel_trackio._offload.open_span_report import OpenSpanReporter
from otel_trackio._offload.priority import CATCHING_UP, set_autogroup_nice
from otel_trackio._offload.protocol import (
    CONFIG_FILE,
    FINISH_FLAG,
    FINISHING_FILE,
    OPEN_FAILED,
    SPLIT_FILE,
    OpenedReport,
    WriterConfig,
    encode_config,
    read_opened,
)
from otel_trackio._offload.watch import WriterWatch, is_stopped
from otel_trackio._settings import TrackioSettings
from otel_trackio._spool.paths import process_spool, remove_spool, spool_root
from otel_trackio._spool.segments import (
    Checkpoint,
    Position,
    Producer,
    SpoolFull,
    bytes_from,
    load_checkpoint,
    private,
    write_atomically,
)
from otel_trackio._trackio.installed import trackio_dir
from otel_trackio._trackio.sink import TrackioSink

NEVER_FITS = "never fits"
"""The kind of refusal of spans larger than the spool's bound itself: no use waiting for room."""

_logger = logging.getLogger("otel_trackio")


_IN_WRITER = "OTEL_TRACKIO_OFFLOAD_WRITER"
"""Set in a writer process's environment: what runs there never starts a writer of its own."""
_NO_SELF_TRACING = ("OTEL_TRACES_EXPORTER", "OTEL_METRICS_EXPORTER", "OTEL_LOGS_EXPORTER")
WRITER_CHECK_SECONDS = 0.25
"""How often ``export()`` looks whether the writer process is alive (at most). The look is a
system call (``waitpid``), which lets go of the GIL: done for every batch, it made the export
thread take the GIL back from the event loop once more per batch."""
OPEN_TIMEOUT_SECONDS = 120.0
"""How long building an offloading exporter waits for its writer to open the run (a fresh
interpreter importing Trackio: about a second, more on a busy machine)."""


GIVE_UP_SECONDS = 120.0
"""Shutdown with no time limit stops waiting when the drain has not moved for this long (storage
refusing every write: Trackio's lock held by another process, a full disk)."""
HANDOVER_BYTES = 1024 * 1024
"""A writer that is only slow (starved of CPU) keeps a backlog smaller than this: starting one at
this process's priority (a fresh interpreter importing Trackio) would take longer."""
STOP_SECONDS = 5.0
"""How long a writer asked to stop (SIGTERM) may take to checkpoint and exit before SIGKILL."""
MAX_FINISHERS = 3
"""How many writers a shutdown starts at its own priority, at most (one that keeps dying)."""


def _stop_process(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM (the writer stops after its current entry, checkpointed), then SIGKILL (at once
    for a stopped writer, which would never see the SIGTERM)."""
    if not is_stopped(process.pid):
        with contextlib.suppress(OSError):
            process.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            process.wait(STOP_SECONDS)
    if process.poll() is None:
        with contextlib.suppress(OSError):
            process.kill()
        process.wait()


class Progress:
    """Lines on stderr while a shutdown waits long for the writer: bytes left, samples stored
    and their rate — never silence."""

    FIRST_SECONDS = 3.0
    EVERY_SECONDS = 5.0

    def __init__(self, client: OffloadClient, started: float) -> None:
        self._client = client
        self._started = started
        self._next = started + self.FIRST_SECONDS
        self._stored_at_start = self._stored()
        self._shown = False

    def _stored(self) -> int:
        checkpoint = load_checkpoint(self._client.path)
        return int(checkpoint.stats.get("samples_logged") or 0) if checkpoint else 0

    def show(self) -> None:
        now = time.monotonic()
        if now < self._next:
            return
        self._next = now + self.EVERY_SECONDS
        self._shown = True
        stored = self._stored() - self._stored_at_start
        rate = stored / max(1e-9, now - self._started)
        say(
            f"otel-trackio: storing the run's last samples in Trackio: "
            f"{self._client.backlog() / 1e6:.1f} MB left in the spool, {stored} samples stored "
            f"({rate:.0f}/s) in {now - self._started:.0f} s"
        )

    def done(self) -> None:
        if self._shown:
            say(
                f"otel-trackio: everything is stored "
                f"({time.monotonic() - self._started:.0f} s after shutdown began)"
            )


def writer_environment() -> dict[str, str]:
    """The writer process's environment: this process's, minus what would make it trace itself.

    Under ``opentelemetry-instrument`` the ``PYTHONPATH`` carries the auto-instrumentation's
    ``sitecustomize`` and ``OTEL_TRACES_EXPORTER=trackio``: a writer inheriting both would build
    an offloading exporter, start a writer of its own, which would do the same, and so on.
    """
    env = dict(os.environ)
    env["TRACKIO_DIR"] = str(trackio_dir())
    env[_IN_WRITER] = "1"
    for name in _NO_SELF_TRACING:
        env[name] = "none"
    python_path = [
        entry
        for entry in env.get("PYTHONPATH", "").split(os.pathsep)
        if entry
        and Path(entry).parts[-3:] != ("opentelemetry", "instrumentation", "auto_instrumentation")
    ]
    if python_path:
        env["PYTHONPATH"] = os.pathsep.join(python_path)
    else:
        env.pop("PYTHONPATH", None)
    return env


def in_writer_process() -> bool:
    """True in an offload writer process (its environment says so): it never offloads again."""
    return bool(os.environ.get(_IN_WRITER))


def portable(settings: TrackioSettings) -> str | None:
    """Why ``settings`` cannot cross to a writer process (None when they can): a token decoder
    must be importable there (a module-level function, a bound method of a picklable object)."""
    try:
        encode_config(WriterConfig(settings, "", None, 0))
    except ValueError as exc:
        return str(exc)
    return None


class OffloadClient:
    """Appends span batches to this process's spool and keeps its writer process running.

    Args:
        settings: the exporter's settings (the writer gets them too).
        sink: the run: held in this process (the writer joins it), or deferred (the writer opens
            it, and this waits until it has: a run Trackio cannot open raises here, as
            ``trackio.init`` would have).
        open_spans: the spans started and not ended, reported to the writer once open long.
        root: the folder of every spool (the plan's; default: the settings').
    """

    def __init__(
        self,
        settings: TrackioSettings,
        sink: TrackioSink,
        open_spans: OpenSpans | None = None,
        *,
        root: Path | None = None,
    ) -> None:
        self.settings = settings
        self.sink = sink
        self.root = root if root is not None else spool_root(settings)
        name = sink.run_name if sink.opened else sink.requested_name
        self.path = process_spool(self.root, sink.project, name)
        self.producer = Producer(
            self.path, int(settings.spool_max_mb * 1024 * 1024), fsync=settings.spool_fsync
        )
        run_id = sink.run_id if sink.opened else None
        config = WriterConfig(settings, sink.project, name, os.getpid(), run_id)
        write_atomically(self.path / CONFIG_FILE, encode_config(config))
        self._lock = threading.Lock()
        self._count_lock = threading.Lock()  # the counters: the rollout's threads count too
        self._process: subprocess.Popen[bytes] | None = None
        self._closing = False
        self._closed = False
        self._finishing = False
        self._step_sent: int | None = None  # the latest step the writer was told
        self._flushes = 0
        self._expects_logs = False
        self._final: Checkpoint | None = None
        self.split: str | None = None
        """What the writer said of its run being one of several of its name (None: not)."""
        self._next_writer_check = 0.0
        self._warn = Warnings()
        self.spans_spooled = 0
        self.spans_refused = 0
        self.samples_refused = 0
        self.refused_why = ""
        """Why spans were last given up before the spool (the summary says it)."""
        self.left_behind: str | None = None
        """What a shutdown that ended early left in the spool (the summary says it)."""
        self._last_progress: tuple[Any, ...] | None = None
        self._moved_at = 0.0
        self.exports_refused = 0
        self.writer_starts = 0
        # Spans open long reach the writer, for the traces it logs at the TTL.
        self._open_span_reporter = (
            OpenSpanReporter(open_spans, settings.sample_ttl_seconds, self.report_open_spans)
            if open_spans is not None
            else None
        )
        self._start_writer()
        # Opened here or not, the run is the writer's to make findable by its name before a
        # trainer's own trackio.init(name, resume="allow") looks for it: wait for its report.
        self._wait_until_opened()

    def _wait_until_opened(self) -> None:
        """Wait for the writer to open the run (and show what Trackio said as it did, as
        ``trackio.init`` here would have); raise when it could not (its reason)."""
        self._wait(lambda: self._opened() is not None, OPEN_TIMEOUT_SECONDS)
        opened = self._opened()
        if isinstance(opened, OpenedReport):
            joined = self.sink.opened  # the user saw Trackio's banner of their own run
            self.sink.opened_elsewhere(opened.run)
            if opened.banner and not joined:
                sys.stdout.write(opened.banner)
                sys.stdout.flush()
            return
        if opened is None:
            self._warn(
                "open",
                f"the writer process has not opened the Trackio run after "
                f"{OPEN_TIMEOUT_SECONDS:.0f} s; spans are spooled meanwhile ({self.path})",
            )
            return
        self._closed = True
        self.producer.close()
        remove_spool(self.path, self.root)
        raise RuntimeError(f"otel-trackio: Trackio could not open the run: {opened}")

    def _opened(self) -> OpenedReport | str | None:
        """The writer's report; a writer that exited without one reports that it did."""
        report = read_opened(self.path)
        if report is None and self._process is not None and self._process.poll() == OPEN_FAILED:
            report = read_opened(self.path) or f"the writer exited ({OPEN_FAILED})"
        return report

    # -- the writer process ----------------------------------------------------------------------

    def _start_writer(self, *, finishing: bool = False) -> None:
        """Start the writer process; ``finishing``: at this process's priority (shutdown)."""
        log = open(self.path / "writer.log", "ab", opener=private)
        command = [sys.executable, "-m", "otel_trackio._offload", str(self.path)]
        if finishing:
            command.append(FINISH_FLAG)
        self._finishing = finishing
        try:
            self._process = subprocess.Popen(
                command,
                stdin=subprocess.DEVNULL,
                stdout=log,  # Trackio's banners; warnings go to stderr, shared with this process
                start_new_session=True,  # Ctrl-C reaches the rollout, which then shuts us down
                env=writer_environment(),
            )
        finally:
            log.close()
        self.writer_starts += 1

    def _ensure_writer(self) -> None:
        """Start the writer again when it died (it continues from the spool). A writer that
        exited 0 drained everything after a close: nothing to restart."""
        process = self._process
        if process is None or process.poll() in (None, 0, OPEN_FAILED) or self._closing:
            return
        with self._lock:
            if self._process is process and process.poll() not in (None, 0) and not self._closing:
                self._warn(
                    "restart",
                    f"the otel-trackio writer process exited ({process.returncode}); started "
                    "again, it continues from the spool",
                )
                self._start_writer(finishing=self._closed)

    @property
    def writer_pid(self) -> int | None:
        """The writer process's pid (for tests and diagnostics)."""
        return self._process.pid if self._process is not None else None

    # -- exporter calls --------------------------------------------------------------------------

    def export(self, spans: Sequence[ReadableSpan]) -> bool:
        """Append the spans to the spool; False when refused (warned and counted)."""
        if self._closed:
            return False
        roots = sum(1 for s in spans if s.parent is None or s.parent.is_remote)
        return self.spool_spans([codec.encode_sdk_spans(spans)], len(spans), roots)

    def spool_spans(self, payloads: Sequence[bytes], spans: int, roots: int = 0) -> bool:
        """Append :data:`~otel_trackio._codec.spool.SPANS` payloads holding ``spans`` spans in
        all (``roots`` of them sample roots), as one unit (one write); False when refused
        (warned and counted)."""
        if self._closed:
            return False
        refused = self.try_spool_spans(payloads, spans)
        if refused is not None:
            self.refuse_spans(spans, *refused, samples=roots)
            return False
        return True

    def said(self, kind: str, why: str) -> None:
        """Warn ``why`` (once per ``kind``, as refusals are)."""
        self._warn(kind, why)

    def try_spool_spans(self, payloads: Sequence[bytes], spans: int) -> tuple[str, str] | None:
        """Append the payloads as :meth:`spool_spans` does; None when appended, else why not as
        ``(kind, message)``, nothing counted (the caller may keep them and try again)."""
        if self._closed:
            return ("closed", "the exporter is shut down")
        now = time.monotonic()
        if now >= self._next_writer_check:
            self._next_writer_check = now + WRITER_CHECK_SECONDS
            self._ensure_writer()
        if self._open_span_reporter is not None:
            self._open_span_reporter.start()
        entries = [(codec.SPANS, payload) for payload in payloads]
        step = latest_step()
        if step != self._step_sent:  # set_step() reaches the writer before these spans
            entries.insert(0, (codec.STEP, codec.encode_step(step)))
        try:
            self.producer.append_all(entries)
        except SpoolFull as exc:
            return (NEVER_FITS if exc.never_fits else "full", f"spool full ({exc})")
        except (OSError, RuntimeError) as exc:
            if no_space(exc):
                return ("spool", no_space_on(self.path))
            return ("spool", f"could not write the spool ({exc!r})")
        self._step_sent = step
        with self._count_lock:
            self.spans_spooled += spans
        return None

    def refuse_spans(
        self, spans: int, kind: str, why: str, *, refusals: int = 1, samples: int = 0
    ) -> None:
        """Count ``spans`` spans refused (in ``refusals`` failed exports; ``samples`` of them
        sample roots, whose samples are lost) and warn ``why`` (once per ``kind``)."""
        with self._count_lock:
            self.spans_refused += spans
            self.samples_refused += samples
            self.exports_refused += refusals
            self.refused_why = why.split(";", 1)[0]
        self._warn(kind, why)

    def export_metrics(self, data: MetricsData) -> bool:
        """Append one metrics export to the spool, with this process's latest step (the
        writer logs it to the run); False when refused (warned)."""
        if self._closed:
            return False
        self._ensure_writer()
        try:
            payload = encode_sdk_metrics(data, latest_step())
            self.producer.append(codec.METRICS, codec.encode_metrics(NO_ROUTE, payload))
        except (SpoolFull, OSError, RuntimeError, UnpackableValue) as exc:
            self._warn("metrics", f"could not spool a metrics export: {exc!r}")
            return False
        return True

    def report_open_spans(self, records: Sequence[SpanRecord]) -> bool:
        """Append a report of the spans open long (see :mod:`.open_span_report`); False when
        the spool refused it."""
        if self._closed:
            return False
        try:
            self.producer.append(codec.OPEN_SPANS, codec.encode_open_spans(records))
        except (SpoolFull, OSError, RuntimeError, UnpackableValue) as exc:
            self._warn("open-spans", f"could not spool the open spans: {exc!r}")
            return False
        return True

    @property
    def closed(self) -> bool:
        """True once :meth:`shutdown` began: nothing more is taken."""
        return self._closed

    def add_events(self, events: Iterable[LogEventRecord], timeout_seconds: float = 30.0) -> bool:
        """Append GenAI log events to the spool (the writer joins them to their samples)."""
        batch = list(events)
        if self._closed or not batch:
            return not self._closed
        self._ensure_writer()
        try:
            self.producer.append(codec.EVENTS, codec.encode_events(batch))
        except (SpoolFull, OSError, RuntimeError) as exc:
            self._warn("events", f"could not spool {len(batch)} GenAI log events: {exc!r}")
            return False
        return True

    def expect_log_events(self) -> None:
        """Tell the writer a log exporter feeds this spool: samples wait for their events."""
        if self._expects_logs or self._closed:
            return
        self._expects_logs = True
        with contextlib.suppress(SpoolFull, OSError, RuntimeError):
            self.producer.append(codec.EXPECT_LOGS, b"")

    def force_flush(self, timeout_seconds: float, open_spans: Sequence[SpanRecord] = ()) -> bool:
        """True once the writer has made everything spooled before this call durable (the
        ``open_spans`` logged, unfinished, in their samples)."""
        if self._closed:
            return False
        with self._lock:
            self._flushes += 1
            number = self._flushes
        try:
            self.producer.append(
                codec.FLUSH, codec.encode_flush(number, OPEN_SAMPLES.snapshot(), open_spans)
            )
        except (SpoolFull, OSError, RuntimeError) as exc:
            self._warn("flush", f"could not ask the writer to flush: {exc!r}")
            return False
        return self._wait(lambda: self._flushed() >= number, timeout_seconds)

    def shutdown(
        self, timeout_seconds: float | None = None, open_spans: Sequence[SpanRecord] = ()
    ) -> None:
        """Ask the writer to drain everything (``open_spans`` logged, unfinished, in their
        samples) and stop; return once everything spooled is in Trackio's storage.

        Meanwhile a writer that is starved of CPU, stuck or dead hands the rest to one running at
        this process's own priority (the rollout is over: storing what is left comes first), and
        a long wait shows its progress on stderr. ``timeout_seconds`` (None: no limit while the
        drain moves on) ends the wait early; then, or when the drain stops moving for
        :data:`GIVE_UP_SECONDS`, a warning says what is left, where, and what stores it.
        """
        if self._closed:
            return
        self._closed = True
        if self._open_span_reporter is not None:
            self._open_span_reporter.stop()
        with self._lock:
            self._flushes += 1
            number = self._flushes
        close = [
            (codec.FLUSH, codec.encode_flush(number, OPEN_SAMPLES.snapshot(), open_spans)),
            (codec.CLOSE, b""),
        ]
        started = time.monotonic()
        drained = self._finish(number, timeout_seconds, close)
        self._closing = True
        if drained:  # the writer's last counters, before the spool (all in Trackio) goes
            self._final = load_checkpoint(self.path)
        split = self.path / SPLIT_FILE
        if split.exists():  # the writer found its run is not the only one of its name
            with contextlib.suppress(OSError):
                self.split = split.read_text(errors="replace")
        process = self._process
        if not drained:
            self._say_what_is_left(time.monotonic() - started)
        if not drained and process is not None and process.poll() is None:
            _stop_process(process)
        self.producer.close()
        if drained:  # all in Trackio: no spool (nor empty run folders) left behind
            remove_spool(self.path, self.root)

    def give_writer_normal_share(self) -> bool:
        """The rollout is over: the writer, at the lowest priority so far, takes a normal CPU
        share until it has stored everything (a busy machine would leave it a sliver). True
        when it has one: a writer started now would get no more."""
        with contextlib.suppress(OSError):
            write_atomically(self.path / FINISHING_FILE, b"")
        pid = self.writer_pid
        return pid is not None and (self._finishing or set_autogroup_nice(CATCHING_UP, pid))

    def _finish(
        self, flush_number: int, timeout_seconds: float | None, close: list[tuple[int, bytes]]
    ) -> bool:
        """Append ``close`` (the shutdown's flush, then the close: while the spool is full, again
        as the writer makes room), wait until the writer served it and exited; replace a writer
        that does not keep up. False when the wait ended first, or the spool cannot be written
        (see :meth:`shutdown`)."""
        closing: list[tuple[int, bytes]] | None = close
        # A writer with a normal share that is slow only because the machine is busy is kept:
        # one started in its place would share the CPU no better, and start from scratch.
        normal_share = self.give_writer_normal_share()
        started = time.monotonic()
        deadline = None if timeout_seconds is None else started + max(0.0, timeout_seconds)
        watch = WriterWatch(self.writer_pid, self._progress())
        report = Progress(self, started)
        finishers = 0
        pause = 0.002
        while closing is not None or not self._writer_done():
            if closing is not None:
                try:
                    self.producer.append_all(closing)
                    closing = None
                except SpoolFull:
                    pass  # the writer makes room: appended once it has
                except (OSError, RuntimeError) as exc:
                    self._warn("close", f"could not ask the writer to finish: {exc!r}")
                    return False
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                return False
            progress = self._progress()
            if deadline is None and self.stalled_seconds() >= GIVE_UP_SECONDS:
                return False  # the spans' own wait for room counts: one bound for both
            process = self._process
            why: str | None = None
            if process is None or process.poll() == OPEN_FAILED:
                return False
            if process.poll() is not None:
                why = f"it exited ({process.returncode})"
            elif not self._finishing:
                served = progress[1] if progress else 0  # the last flush the writer served
                why = watch.look(progress, served < flush_number)
                if why is not None and watch.only_slow:
                    if normal_share or self.backlog() < HANDOVER_BYTES:
                        why = None  # it finishes sooner than a new one would
            if why is not None:
                if finishers >= MAX_FINISHERS:
                    return False
                finishers += 1
                self._hand_over(why)
                watch = WriterWatch(self.writer_pid, progress)
                self._moved_at = time.monotonic()
            report.show()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        report.done()
        return True

    def _hand_over(self, why: str) -> None:
        """Stop the writer (when still running) and start one at this process's priority."""
        process = self._process
        say(
            f"otel-trackio: the writer process is not keeping up ({why}); storing the rest "
            "at this process's priority"
        )
        self._start_writer(finishing=True)  # it opens the run while the other one stops
        if process is not None and process.poll() is None:
            _stop_process(process)

    def stalled_seconds(self) -> float:
        """Seconds since the writer last moved on (what it processed, flushed or stored), as
        seen by the calls of this method (0 at the first call)."""
        progress, now = self._progress(), time.monotonic()
        if progress != self._last_progress:
            self._last_progress, self._moved_at = progress, now
        return now - self._moved_at

    def _progress(self) -> tuple[Any, ...]:
        """Where the writer is: what it processed, the flushes it served, what it stored."""
        checkpoint = load_checkpoint(self.path)
        if checkpoint is None:
            return ()
        stats = checkpoint.stats
        return (
            checkpoint.processed,
            checkpoint.flushed,
            stats.get("samples_logged"),
            stats.get("already_stored"),
        )

    def _say_what_is_left(self, waited: float) -> None:
        left = self.backlog()
        checkpoint = load_checkpoint(self.path)  # from the oldest entry not stored: all of it
        unstored = bytes_from(self.path, checkpoint.oldest if checkpoint else Position(0, 0))
        self.left_behind = f"{unstored / 1e6:.1f} MB waiting in {self.path}" if unstored else None
        run = self.sink.run_name if self.sink.opened else self.sink.requested_name
        self._warn(
            "shutdown",
            f"shutdown stopped after {waited:.0f} s with {left} bytes not yet stored in Trackio; "
            f"they stay in {self.path}, and the next start for project {self.sink.project!r} "
            f"(an exporter, configure(), `otel-trackio serve`, or `otel-trackio drain`) stores "
            f"them in run {run!r}",
        )

    def _writer_done(self) -> bool:
        process = self._process
        return process is not None and process.poll() == 0

    def _wait(self, done: Any, timeout_seconds: float) -> bool:
        deadline = time.monotonic() + max(0.0, timeout_seconds)
        pause = 0.002
        while not done():
            if time.monotonic() >= deadline:
                return False
            self._ensure_writer()
            time.sleep(pause)
            pause = min(pause * 2, 0.05)
        return True

    # -- what the writer says --------------------------------------------------------------------

    def _flushed(self) -> int:
        checkpoint = load_checkpoint(self.path)
        return checkpoint.flushed if checkpoint is not None else 0

    def stats(self) -> ExportStats:
        """The writer's counters (as of its last checkpoint) with this process's own: the spans
        handed to ``export()``, and the exports refused here besides the writer's failures."""
        checkpoint = self._final or load_checkpoint(self.path)
        stats = ExportStats.from_dict(checkpoint.stats if checkpoint is not None else {})
        stats.spans_received = self.spans_spooled + self.spans_refused
        stats.spans_refused = self.spans_refused
        stats.samples_refused = self.samples_refused
        stats.failed_exports += self.exports_refused
        return stats

    def backlog(self) -> int:
        """Bytes appended but not handed to the writer's pipeline yet."""
        checkpoint = load_checkpoint(self.path)
        return bytes_from(self.path, checkpoint.processed if checkpoint else Position(0, 0))
