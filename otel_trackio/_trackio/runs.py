"""Which Trackio run: one found active or started here, shared by every holder in this process
asking for the same project and name (and finished by the last); opened by name so that processes
starting together continue one run.

Run rules (shared by the span and the metric exporter):

* an explicit ``run`` wins;
* else the run active in the thread that builds the exporter, when it matches the requested
  project (and name, if one was given) or when no project was requested;
* else a run this package already started in this process for the same project and name
  (so a span exporter and a metric exporter share one run);
* else a new run through ``trackio.init``. When a *different* user run is active in this thread,
  ``trackio.init`` is called on a helper thread, because calling it here would finish that run.
"""

from __future__ import annotations

import contextlib
import io
import threading
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from otel_trackio._core.names import folder_name
from otel_trackio._plan import HeldRun, RunSeen
from otel_trackio._trackio.installed import (
    RunLike,
    active_run,
    forget_active_run,
    is_remote,
    join_run,
    module,
    run_id,
    trackio_dir,
)

REGISTRY_LOCK = threading.Lock()
"""Guards :data:`OWNED` and every lease's holder count."""


@dataclass(frozen=True)
class OpenedElsewhere:
    """A run another process opened for this one (the offload writer): its name and Trackio id."""

    name: str
    id: str | None = None


class OwnedRun:
    """A run this package started (or left to a writer process to open: ``run`` None until
    something here needs it), with the number of exporters holding it."""

    def __init__(
        self,
        run: RunLike | None,
        key: tuple[str, str | None],
        init_kwargs: Mapping[str, Any] | None = None,
    ) -> None:
        self.run = run
        self.key = key
        self.init_kwargs = dict(init_kwargs or {})
        self.elsewhere: OpenedElsewhere | None = None
        self.holders = 0
        self.finished = False
        self._opening = threading.Lock()

    def ensure_run(self) -> RunLike:
        """The run in this process, opened now when so far only a writer process had it open
        (then resumed by the name it reported, and joined by its id)."""
        with self._opening:
            if self.run is None:
                project, name = self.key
                kwargs = dict(self.init_kwargs)
                elsewhere = self.elsewhere
                if elsewhere is not None:
                    name = elsewhere.name
                    kwargs["resume"] = "allow"
                run = start_run(project, name, kwargs, active_run())
                if elsewhere is not None:
                    join_run(run, elsewhere.id)
                self.run = run
            return self.run


# (project, requested name) -> lease shared by every exporter of this process asking for it.
OWNED: dict[tuple[str, str | None], OwnedRun] = {}


def seen(run: RunLike | None) -> RunSeen | None:
    """``run`` as the plan sees it (:class:`~otel_trackio._plan.RunSeen`): its project and name,
    whether it logs to a server, and whether this package holds it."""
    if run is None:
        return None
    with REGISTRY_LOCK:
        ours = any(o.run is run and not o.finished for o in OWNED.values())
    return RunSeen(str(run.project), str(run.name), is_remote(run), ours)


def held_run(project: str | None, name: str | None) -> HeldRun | None:
    """The run this package holds in this process for ``project``/``name``, as the plan sees
    it (None when it holds none)."""
    if project is None:
        return None
    with REGISTRY_LOCK:
        owned = OWNED.get((project, name))
        if owned is None or owned.finished:
            return None
        run = owned.run
    return HeldRun(opened_here=run is not None, remote=run is not None and is_remote(run))


def finished(run: RunLike) -> bool:
    """True once ``run.finish()`` ran (Trackio 0.43 sets the run's private ``_stop_flag``)."""
    flag = getattr(run, "_stop_flag", None)
    return isinstance(flag, threading.Event) and flag.is_set()


def claim_project_file(project: str) -> None:
    """Refuse ``project`` when Trackio would store it in the file of another project name.
    Trackio leaves some characters out of a project's file name (``a/b``, ``a.b`` and ``ab``
    are all ``ab.db``): two such projects would share their runs. The first name to use a file
    claims it (a small file beside it in Trackio's folder); another name raises
    :class:`~otel_trackio._settings.TrackioConfigError` saying which."""
    from trackio.sqlite_storage import SQLiteStorage

    from otel_trackio._settings import TrackioConfigError

    filename = SQLiteStorage.get_project_db_filename(project)
    claim = trackio_dir() / f"{filename}.otel-trackio-project"
    try:
        claim.parent.mkdir(parents=True, exist_ok=True)
        with open(claim, "x", encoding="utf-8") as handle:
            handle.write(project)
        return
    except FileExistsError:
        pass
    except OSError:
        return  # a read-only folder: Trackio itself will say what is wrong
    try:
        owner = claim.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return
    if owner and owner != project:
        raise TrackioConfigError(
            f"project {project!r} would be stored in Trackio's file {filename}, which holds "
            f"project {owner!r} (Trackio leaves some characters out of file names), and the two "
            "would share their runs: choose a project name that differs in letters or digits"
        )


def start_run(
    project: str, name: str | None, init_kwargs: dict[str, Any], active: RunLike | None
) -> RunLike:
    if not init_kwargs.get("server_url") and not init_kwargs.get("space_id"):
        claim_project_file(project)
    if active is None:
        # No user run to disturb: start it here, so the user's own trackio.log() lands in it too.
        started: RunLike = module().init(project=project, name=name, **init_kwargs)
        return started
    # trackio.init() finishes the run active in the calling thread: start ours on a thread that
    # has none, and leave the user's run untouched.
    result: list[RunLike] = []
    errors: list[BaseException] = []

    def start() -> None:
        try:
            result.append(module().init(project=project, name=name, **init_kwargs))
        except BaseException as exc:  # noqa: BLE001 - re-raised on the caller's thread
            errors.append(exc)

    thread = threading.Thread(target=start, name="otel-trackio-init", daemon=True)
    thread.start()
    thread.join()
    if errors:
        raise errors[0]
    return result[0]


def open_run_by_name(project: str, name: str) -> str | None:
    """Make sure the run ``project``/``name`` exists in local storage, found by its name, so
    that processes starting together each resume it (``resume="allow"``) instead of each
    creating a run of that name: Trackio finds a run by name only once something was written to
    it. One process of this machine at a time (a file lock in Trackio's folder); the first writes
    an empty log entry at step 0, the others find the run. The calling thread's active run, if
    any, stays active.

    Returns what Trackio printed making the run (its "Created new run" banner, without the
    "Run finished" of the short-lived run that made it) when this call made it; None when the run
    existed. :func:`opening_banner` puts it before what opening the run then prints."""
    import fcntl

    from trackio.sqlite_storage import SQLiteStorage

    folder = trackio_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"{folder_name(project)}.otel-trackio-open.lock", "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released when the file closes
        if name in SQLiteStorage.get_runs(project):
            return None
        previous = active_run()
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            run = start_run(project, name, {"resume": "allow"}, previous)
            run.log({}, step=0)
            run.finish()
        forget_active_run(run)
    return "".join(
        line for line in printed.getvalue().splitlines(keepends=True) if "Run finished" not in line
    )


def opening_banner(made: str | None, printed: str) -> str:
    """What the user is shown of opening a run: what opening it printed, after what making it
    printed (:func:`open_run_by_name`) when it was made just now — then without Trackio's
    "Resumed existing run", which would read as if the run were an old one."""
    if made is None:
        return printed
    kept = (
        line
        for line in printed.splitlines(keepends=True)
        if not line.startswith("* Resumed existing run")
    )
    return made + "".join(kept)


def make_findable(run: RunLike) -> bool:
    """Give ``run`` (local, opened by another process and joined here by its id) an empty entry
    at step 0 when nothing of it is stored yet, so that a ``trackio.init(name, resume="allow")``
    anywhere (a trainer's own, another rank's) continues it instead of making a second run of
    its name. True when the entry was logged (queued: the caller flushes it)."""
    from trackio.sqlite_storage import SQLiteStorage

    if is_remote(run):
        return False
    project, name = str(run.project), str(run.name)
    stored = SQLiteStorage.get_max_step_for_run(project, name, run_id=run_id(run))
    if stored is not None:
        return False
    run.log({}, step=0)
    return True


def runs_named(project: str, name: str) -> list[str]:
    """The ids of the local runs of ``project`` named ``name`` that have something stored,
    oldest first (Trackio's by-name readers show one of them)."""
    from trackio.sqlite_storage import SQLiteStorage

    return [
        str(record.get("id"))
        for record in SQLiteStorage.get_run_records(project)
        if isinstance(record, dict) and record.get("name") == name and record.get("id")
    ]


def split_from(run: RunLike) -> str | None:
    """What to say when ``run`` (local) is not the only run of its name in its project: Trackio's
    pages and by-name readers then show one of them, so its Traces and another's curves look
    apart. None when it is the only one."""
    if is_remote(run):
        return None
    ours = run_id(run)
    others = [i for i in runs_named(str(run.project), str(run.name)) if i != ours]
    if not others:
        return None
    return (
        f"project {run.project!r} has {len(others) + 1} runs named {run.name!r} (this one: "
        f"{ours}; also {', '.join(others)}): Trackio shows one of them by that name, so spans and "
        "curves may look apart. Give every process the same name without resume='never' (a "
        "name is then one run), or a new name for a new run"
    )


def continue_run_by_name(project: str, name: str, config: Any = None) -> None:
    """Make the run ``project``/``name`` the calling thread's active Trackio run, continuing the
    run of that name (made to exist first, :func:`open_run_by_name`) rather than starting a second
    one: a logger that writes into the active run (verl's ``Tracking``) then writes into the run
    the Traces go to. An active run already there stays."""
    if active_run() is not None:
        return
    open_run_by_name(project, name)
    start_run(project, name, {"config": config, "resume": "allow"}, None)
