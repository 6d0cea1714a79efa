"""What a run tells its user: one summary at the end, and the command that opens the Traces.

Every path ends a run with the same two lines — the in-process exporter (offloading or not) at
``shutdown()``, the OTLP receiver when it stops::

    otel-trackio: 24 samples logged to 'demo' run 'run-3', steps 0 to 5 (6 steps); 2 partial,
    0 lost; 8 not traced (max_samples_per_step=4)
    otel-trackio: open them with: TRACKIO_DIR=/tmp/x /venv/bin/trackio show --project demo
    → Traces page, Sort "Oldest first" (partial ones: search "partial")

:func:`say` prints to stderr (the user's stdout stays theirs); the ``summary`` setting
(``OTEL_EXPORTER_TRACKIO_SUMMARY=false``) turns the summary off.
"""

from __future__ import annotations

import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

from otel_trackio._engine.stats import ExportStats

WHERE_ON_THE_PAGE = 'Traces page, Sort "Oldest first"'
"""Where the Traces are on Trackio's dashboard: its Traces page, oldest first reads the steps in
order and each step in sample order (one log call per step, listed in sample order)."""


def show_command(project: str, trackio_dir: str | Path | None = None) -> str:
    """The ``trackio show --project ...`` command that opens ``project`` from any folder: this
    Python's ``trackio`` program, with the ``TRACKIO_DIR`` the data went to (``trackio_dir``,
    else the variable when it is set)."""
    beside = Path(os.path.abspath(sys.executable)).parent / "trackio"
    program = str(beside) if beside.exists() else shutil.which("trackio") or "trackio"
    command = f"{shlex.quote(program)} show --project {shlex.quote(project)}"
    folder = trackio_dir if trackio_dir is not None else os.environ.get("TRACKIO_DIR")
    if folder:
        command = f"TRACKIO_DIR={shlex.quote(os.path.abspath(folder))} {command}"
    return command


def open_line(
    project: str, trackio_dir: str | Path | None = None, *, server: str | None = None
) -> str:
    """The summary's second line: the command (or, for a run on a Trackio server, the server's
    address), and where on the page to look."""
    if server is not None:
        return (
            f"otel-trackio: open them on the Trackio server {server_address(server)}, project "
            f'{project!r} → {WHERE_ON_THE_PAGE} (partial ones: search "partial")'
        )
    return (
        f"otel-trackio: open them with: {show_command(project, trackio_dir)} → "
        f'{WHERE_ON_THE_PAGE} (partial ones: search "partial")'
    )


def server_address(server: str) -> str:
    """A Trackio server's URL (or Space id) as it may be printed: without its write token, query
    or user part."""
    parts = urlsplit(server)
    if not parts.scheme or not parts.netloc:
        return server.split("?", 1)[0]
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, host, parts.path.rstrip("/"), "", ""))


@dataclass(frozen=True, slots=True)
class RunSummary:
    """What one run's span path did, as the end-of-run summary says it."""

    project: str
    run: str | None
    stats: ExportStats
    not_traced: int | None = None
    """Samples a ``StepSampler`` left out (None: no sampler)."""
    max_samples_per_step: int | None = None
    server: str | None = None
    """The Trackio server (URL or Space id) the run logs to; None: local storage."""
    split: str | None = None
    """What to say when the run is one of several of its name (see ``split_from``)."""
    refused_why: str | None = None
    """Why spans were given up before the spool (``no space left on <spool>``), if they were."""
    left_behind: str | None = None
    """What a shutdown that ended early left in the spool (``1.2 MB waiting in <spool>``)."""

    def lines(self, trackio_dir: str | Path | None = None) -> list[str]:
        """The two lines: what was logged, then how to open it; a third when no sample carried
        a step (all of them then sit at one guessed step)."""
        stats = self.stats
        where = f"{self.project!r}" + (f" run {self.run!r}" if self.run else "")
        if stats.steps_logged == 0:
            steps = ""
        elif stats.steps_logged == 1:
            steps = f", step {stats.first_step}"
        else:
            steps = f", steps {stats.first_step} to {stats.last_step} ({stats.steps_logged} steps)"
        first = (
            f"otel-trackio: {stats.samples_logged} samples logged to {where}{steps}; "
            f"{stats.partial_samples} partial, {stats.samples_lost + stats.samples_refused} lost"
        )
        if stats.already_stored:
            first += f"; {stats.already_stored} found stored already (kept once)"
        if stats.unusable_steps:
            first += f"; {stats.unusable_steps} not stored (no usable step)"
        if stats.spans_refused:
            why = self.refused_why or "said above"
            first += (
                f" ({stats.samples_refused} of them before the spool: {why}; "
                f"{stats.spans_refused} spans in all, a sample missing some of them is partial)"
            )
        if self.left_behind:
            first += f"; not stored yet: {self.left_behind} (`otel-trackio drain` stores it)"
        if self.not_traced is not None:
            first += f"; {self.not_traced} not traced"
            if self.max_samples_per_step is not None:
                first += f" (max_samples_per_step={self.max_samples_per_step})"
        lines = [first, open_line(self.project, trackio_dir, server=self.server)]
        if self.split:
            lines.append(f"otel-trackio: {self.split}")
        if stats.samples_logged and stats.samples_without_step == stats.samples_logged:
            lines.append(
                f"otel-trackio: none of the {stats.samples_logged} samples carried a step, so they "
                "are all at one step: put step and sample_index on each sample's root span "
                "(rollout(step, i) does; under zero code, one span with them around each run, "
                "see docs/wiring.md#zero-code)"
            )
        return lines


def say(line: str) -> None:
    """Tell the user ``line`` (stderr; never raises: a closed stream must not fail a run)."""
    try:
        print(line, file=sys.stderr, flush=True)
    except (OSError, ValueError):
        pass
