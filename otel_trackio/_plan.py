"""A run's wiring, planned: one pure decision from the settings and what is already active.

Every way of setting otel-trackio up — ``configure()``, a hand-built
:class:`~otel_trackio.TrackioSpanExporter`, the zero-code exporters, a lone log or metric
exporter, ``otel_trackio.verl``, the offload writer process, ``otel-trackio serve`` and
``drain`` — first describes its process as a :class:`Situation`, then asks :func:`plan_run` for a
:class:`RunPlan`, then hands the plan to the builder (:mod:`otel_trackio._wiring`), which makes
the parts in one pass. The plan says:

- where spans go (offloaded to a writer process, or in this process) and why not offloaded when
  offload was asked for;
- who opens the run and how it is found (given, the user's active ``trackio.init``, one this
  package already holds here, the writer process, or opened here — by name when processes
  starting together must continue one run);
- where metrics go (the spans' spool when the writer holds the run, else the run held here);
- where Trackio's writes run (a store process beside this one, the writer's, or the logging
  thread for a run on a Trackio server);
- where the spool lives, and the warnings the plan implies (said once, by the builder).

Nothing here does I/O, starts a process or imports Trackio: what the process holds is read
beforehand (:func:`otel_trackio._wiring.observe`) and handed in.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from enum import Enum
from pathlib import Path

from otel_trackio._environment_variables import (
    OTEL_EXPORTER_TRACKIO_OFFLOAD,
    OTEL_EXPORTER_TRACKIO_PROJECT,
)
from otel_trackio._settings import TrackioConfigError, TrackioSettings


class Role(Enum):
    """What kind of process is being wired."""

    ROLLOUT = "rollout"
    """A process whose own OTel data goes to Trackio (``configure()``, the exporters)."""
    WRITER = "writer"
    """An offload writer process: it drains a rollout process's spool into the run."""
    RECEIVER = "receiver"
    """``otel-trackio serve`` or ``drain``: other processes' data, one run per route."""


class SpanRoute(Enum):
    """Where spans are turned into Traces."""

    OFFLOADED = "offloaded"
    """Appended to a spool; a writer process converts and writes them."""
    IN_PROCESS = "in process"
    """Converted in this process (the exporter's export thread, or the receiver's drain)."""


class RunOpener(Enum):
    """Who opens the Trackio run, and how this process finds it."""

    GIVEN = "given"
    """``run=`` was passed: logged into, never finished by otel-trackio."""
    ACTIVE = "active"
    """The user's own ``trackio.init`` run, active in this thread and matching: borrowed."""
    SHARED = "shared"
    """A run this package already holds in this process for the same project and name (another
    exporter's): shared, finished by its last holder."""
    WRITER = "writer"
    """The offload writer process opens it; this process does not import Trackio for it."""
    HERE = "here"
    """Opened here with ``trackio.init``."""


class MetricRoute(Enum):
    """Where OTel metrics of this run go."""

    SPOOL = "spool"
    """Through the spans' spool, to the writer process that holds the run: metrics and spans
    then land in one run with one latest step."""
    RUN = "run"
    """Straight into the run held in this process."""


class TraceWrites(Enum):
    """Where Trackio's storage writes of the Traces run."""

    STORE_PROCESS = "store process"
    """A store process beside this one (started afresh, shared by this process's engines)."""
    WRITER = "writer"
    """The offload writer process (which has a store process of its own)."""
    LOGGING_THREAD = "logging thread"
    """The thread that logs: a run on a Trackio server, whose client sends what is logged."""


@dataclass(frozen=True)
class RunSeen:
    """A Trackio run this process already has, as the plan sees it."""

    project: str
    """Its project."""
    name: str
    """Its name."""
    remote: bool = False
    """True when it logs to a Trackio server or Space, not to local storage."""
    ours: bool = False
    """True when this package started it and still holds it (it is shared, not borrowed)."""


@dataclass(frozen=True)
class HeldRun:
    """A run this package holds in this process for the requested project and name."""

    opened_here: bool
    """False while only its writer process has it open."""
    remote: bool = False
    """True when it logs to a Trackio server or Space."""


@dataclass(frozen=True)
class Situation:
    """What is already there when a run is wired: read from the process, never decided."""

    role: Role = Role.ROLLOUT
    """The kind of process."""
    given: RunSeen | None = None
    """The ``run=`` passed, if any."""
    active: RunSeen | None = None
    """The Trackio run active in the calling thread, if any."""
    held: HeldRun | None = None
    """The run this package already holds here for the requested project and name."""
    offload_variable: str = ""
    """The raw text of ``OTEL_EXPORTER_TRACKIO_OFFLOAD`` (empty when unset)."""
    settings_stay: str | None = None
    """Why the settings cannot cross to a writer process (a token decoder it cannot import,
    values that are not plain data); None when they can."""
    in_writer_process: bool = False
    """True in an offload writer process: what runs there never offloads again."""
    trackio_server: bool = False
    """Trackio's own variables (``TRACKIO_SERVER_URL``, ``TRACKIO_SPACE_ID``) send a run opened
    in this process to a server."""
    trackio_dir: Path | None = None
    """Trackio's folder in this process (``TRACKIO_DIR``, else Hugging Face's cache)."""


@dataclass(frozen=True)
class RunPlan:
    """How one run is wired in this process: what :func:`plan_run` decided, what the builder
    (:mod:`otel_trackio._wiring`) makes."""

    settings: TrackioSettings
    """The settings, ``offload`` resolved to what was asked for."""
    role: Role
    """The kind of process wired."""
    spans: SpanRoute
    """Where spans are turned into Traces."""
    why_in_process: str | None
    """Why offload was asked for (or the default) and not taken; None otherwise."""
    opener: RunOpener
    """Who opens the run and how it is found."""
    remote: bool
    """The run logs to a Trackio server or Space (the settings name one, or the run held here
    does)."""
    continue_by_name: bool
    """The named local run is made to exist (findable by its name) before it is opened here, so
    every process that opens the name — this one, other ranks, a trainer's own
    ``trackio.init(resume="allow")`` — continues that one run."""
    metrics: MetricRoute
    """Where this run's OTel metrics go."""
    writes: TraceWrites
    """Where Trackio's writes of the Traces run."""
    spool_root: Path | None
    """Where this process's spool goes (offloaded; None otherwise)."""
    warnings: tuple[str, ...] = ()
    """What the builder says once about this plan (a fallback it costs the rollout)."""

    @property
    def offloaded(self) -> bool:
        """Spans go through a spool to a writer process."""
        return self.spans is SpanRoute.OFFLOADED


def resolve_offload(settings: TrackioSettings, variable: str) -> TrackioSettings:
    """``settings`` with ``offload`` set to what was asked for: the setting; when None, the
    ``OTEL_EXPORTER_TRACKIO_OFFLOAD`` variable's text ``variable``; else on.

    On by default because that is what keeps the rollout cheap: in process, the conversion and
    Trackio's writes run on the export thread of the rollout process. A malformed variable
    raises :class:`~otel_trackio.TrackioConfigError`, as every other malformed setting does.
    """
    if settings.offload is not None:
        return settings
    raw = variable.strip()
    offload = True
    if raw:
        offload = bool(TrackioSettings.from_env({OTEL_EXPORTER_TRACKIO_OFFLOAD: raw}).offload)
    return dataclasses.replace(settings, offload=offload)


def spool_root(settings: TrackioSettings, trackio_dir: Path) -> Path:
    """The folder holding every spool: ``spool_dir``, else ``otel-trackio-spool`` in Trackio's
    folder ``trackio_dir``."""
    return Path(settings.spool_dir) if settings.spool_dir else trackio_dir / "otel-trackio-spool"


def resolve_resume(settings: TrackioSettings) -> TrackioSettings:
    """``settings`` with ``resume`` set to ``"allow"`` when unset for a named run: one project
    and name is one Trackio run, whoever opens it first (otel-trackio in any process, a trainer's
    own ``trackio.init(resume="allow")``). ``resume="never"`` asks for a new run of the name."""
    if settings.resume is None and settings.name:
        return dataclasses.replace(settings, resume="allow")
    return settings


def continues_by_name(settings: TrackioSettings) -> bool:
    """Whether ``settings`` name a local run that processes starting together must all continue
    (made to exist by name first: Trackio finds a run by name only once something is stored in
    it): a project and a name, and no Trackio server."""
    return bool(settings.project and settings.name) and not (
        settings.server_url or settings.space_id
    )


def choose_opener(
    project: str | None,
    name: str | None,
    *,
    given: RunSeen | None,
    active: RunSeen | None,
    held: HeldRun | None,
    deferred: bool,
) -> RunOpener:
    """Who opens the run asked for as ``project``/``name``: the run given; else the active run
    when it matches (the project, and the name if one is asked; any when no project is asked);
    else one this package holds here for that key; else the writer process (``deferred``) or
    this one. Raises :class:`~otel_trackio.TrackioConfigError` (a ``ValueError``) naming
    ``OTEL_EXPORTER_TRACKIO_PROJECT`` when nothing names a project."""
    if given is not None:
        return RunOpener.GIVEN
    if active is not None and _matches(active, project, name):
        return RunOpener.SHARED if active.ours else RunOpener.ACTIVE
    if project is None:
        raise TrackioConfigError(
            "otel-trackio needs a Trackio project: pass project=..., set "
            f"{OTEL_EXPORTER_TRACKIO_PROJECT}, pass run=..., or call trackio.init() first"
        )
    if held is not None:
        return RunOpener.SHARED
    return RunOpener.WRITER if deferred else RunOpener.HERE


def _matches(run: RunSeen, project: str | None, name: str | None) -> bool:
    if project is None:
        return name is None or run.name == name
    return run.project == project and (name is None or run.name == name)


def plan_run(settings: TrackioSettings, situation: Situation) -> RunPlan:
    """The plan of one run in this process: a pure function of ``settings`` and
    ``situation``. Raises :class:`~otel_trackio.TrackioConfigError` for a malformed
    ``OTEL_EXPORTER_TRACKIO_OFFLOAD``, or when nothing names a project."""
    settings = resolve_resume(settings)
    named_server = bool(settings.server_url or settings.space_id) or situation.trackio_server
    by_name = (
        settings.resume == "allow" and continues_by_name(settings) and not situation.trackio_server
    )
    if situation.role is not Role.ROLLOUT:
        # The writer and the receiver convert here and open the run here (the writer joins the
        # rollout's run when it is given); their Traces are written by their own store process
        # unless the run is on a Trackio server.
        return RunPlan(
            settings,
            situation.role,
            SpanRoute.IN_PROCESS,
            None,
            RunOpener.GIVEN if situation.given is not None else RunOpener.HERE,
            named_server,
            continue_by_name=by_name and situation.given is None,
            metrics=MetricRoute.RUN,
            writes=TraceWrites.LOGGING_THREAD if named_server else TraceWrites.STORE_PROCESS,
            spool_root=None,
        )

    settings = resolve_offload(settings, situation.offload_variable)
    asked = bool(settings.offload)
    why_not: str | None = None
    if asked:
        if situation.in_writer_process:
            why_not = "this is an offload writer process"
        elif situation.settings_stay is not None:
            why_not = situation.settings_stay
    opener = choose_opener(
        settings.project,
        settings.name,
        given=situation.given,
        active=situation.active,
        held=situation.held,
        deferred=asked and why_not is None,
    )
    held_here = _run_held_here(opener, situation)
    remote = named_server or bool(held_here)
    if asked and why_not is None and held_here and not named_server:
        # (the run is open here already: who opens it does not change)
        why_not = "the run logs to a Trackio server that the settings do not name"
    offloaded = asked and why_not is None
    warnings: tuple[str, ...] = ()
    if why_not is not None:  # said whether asked for or the default: in process costs more
        warnings = (
            "otel-trackio: exporting spans in this process, not through an offload writer "
            f"process: {why_not} (offload=False says so and silences this)",
        )
    writer_holds_run = offloaded and (
        opener is RunOpener.WRITER
        or (
            opener is RunOpener.SHARED
            and situation.held is not None
            and not situation.held.opened_here
        )
    )
    if offloaded:
        writes = TraceWrites.WRITER
    elif remote:
        writes = TraceWrites.LOGGING_THREAD
    else:
        writes = TraceWrites.STORE_PROCESS
    return RunPlan(
        settings,
        Role.ROLLOUT,
        SpanRoute.OFFLOADED if offloaded else SpanRoute.IN_PROCESS,
        why_not,
        opener,
        remote,
        continue_by_name=by_name and opener is RunOpener.HERE,
        metrics=MetricRoute.SPOOL if writer_holds_run else MetricRoute.RUN,
        writes=writes,
        spool_root=(
            spool_root(settings, situation.trackio_dir)
            if offloaded and situation.trackio_dir is not None
            else None
        ),
        warnings=warnings,
    )


def _run_held_here(opener: RunOpener, situation: Situation) -> bool | None:
    """Whether the run this process already has open for ``opener`` logs to a server (None
    when the run is not open here yet)."""
    if opener is RunOpener.GIVEN and situation.given is not None:
        return situation.given.remote
    if opener is RunOpener.ACTIVE and situation.active is not None:
        return situation.active.remote
    if opener is RunOpener.SHARED:
        if situation.held is not None and situation.held.opened_here:
            return situation.held.remote
        if situation.active is not None and situation.active.ours:
            return situation.active.remote
    return None
