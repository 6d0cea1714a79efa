"""What the installed Trackio offers, detected once: its module (imported on first use), the run
active in the calling thread, ``trackio.init``'s keywords, reserved metric keys, its folder, a run's
id and whether it is remote. Each private member missing is said once, with what is lost."""

from __future__ import annotations

import functools
import os
import sys
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

from otel_trackio._engine.warn import Warnings

#: Trackio 0.43's ``utils.RESERVED_KEYS``, used only when the installed Trackio lacks the list.
FALLBACK_RESERVED_KEYS: frozenset[str] = frozenset(
    {"project", "run", "timestamp", "step", "time", "metrics"}
)


@runtime_checkable
class RunLike(Protocol):
    """What otel-trackio needs of a ``trackio.Run``: its public ``log`` and ``finish``."""

    project: str
    name: str

    def log(self, metrics: dict[str, Any], step: int | None = None) -> None:
        """Queue one entry of values at ``step``."""

    def finish(self) -> None:
        """Write what is queued and close the run."""


_missing = Warnings()  # once per process and missing piece


def module() -> ModuleType:
    """The ``trackio`` module, imported on first use: a rollout process that offloads never
    loads it (its objects would make every full garbage collection on the rollout's event loop
    slower)."""
    import trackio

    return trackio


def lost(what: str, message: str) -> None:
    """Say once per process what guarantee is lost because Trackio lacks ``what``."""
    version = getattr(module(), "__version__", "?")
    _missing(what, f"the installed Trackio {version} lacks {what}: {message}")


@functools.cache
def _current_run_var() -> Any:
    try:
        from trackio import context_vars
    except ImportError:
        return None
    return getattr(context_vars, "current_run", None)


def active_run() -> RunLike | None:
    """The Trackio run active in the calling thread (``trackio.init`` sets it), if any. A process
    that never imported ``trackio`` has none, and this does not import it."""
    if "trackio" not in sys.modules:
        return None
    variable = _current_run_var()
    if variable is None:
        lost(
            "trackio.context_vars.current_run",
            "an active run cannot be reused; pass project=... or run=...",
        )
        return None
    run: RunLike | None = variable.get()
    return run


def forget_active_run(run: RunLike) -> None:
    variable = _current_run_var()
    if variable is not None and variable.get() is run:
        variable.set(None)


def init_accepts(keyword: str) -> bool:
    """Whether the installed ``trackio.init`` takes ``keyword`` (False when Trackio is not
    installed or its signature cannot be read)."""
    try:
        import inspect

        return keyword in inspect.signature(module().init).parameters
    except (ImportError, TypeError, ValueError):
        return False


def reserved_keys() -> frozenset[str]:
    """Metric keys ``Run.log`` renames to ``__<key>`` (keys starting with ``__`` are too)."""
    keys = getattr(getattr(module(), "utils", None), "RESERVED_KEYS", None)
    if keys is None:
        lost("trackio.utils.RESERVED_KEYS", "using the reserved metric names of Trackio 0.43")
        return FALLBACK_RESERVED_KEYS
    return frozenset(keys)


def trackio_dir() -> Path:
    """Trackio's folder: ``trackio.utils.TRACKIO_DIR`` once Trackio is imported; before, the same
    rule without importing it (``TRACKIO_DIR``, else ``$HF_HOME/trackio``)."""
    if "trackio" not in sys.modules:
        return default_trackio_dir()
    folder = getattr(getattr(module(), "utils", None), "TRACKIO_DIR", None)
    if folder is None:
        lost("trackio.utils.TRACKIO_DIR", "spools default to $HF_HOME/trackio")
        return default_trackio_dir()
    return Path(folder)


def default_trackio_dir() -> Path:
    """The folder Trackio 0.43 picks at import: ``TRACKIO_DIR``, else ``trackio`` in the Hugging
    Face home (``huggingface_hub``'s ``HF_HOME``, a light import)."""
    folder = os.environ.get("TRACKIO_DIR")
    if folder:
        return Path(folder)
    try:
        from huggingface_hub.constants import HF_HOME
    except ImportError:  # pragma: no cover - trackio depends on huggingface_hub
        HF_HOME = os.path.expanduser("~/.cache/huggingface")
    return Path(HF_HOME) / "trackio"


def is_remote(run: RunLike) -> bool:
    """True when ``run`` logs to a Trackio server or Space rather than local storage."""
    return getattr(run, "_is_local", True) is False


def run_id(run: RunLike) -> str | None:
    """Trackio's id of ``run`` (its name can be shared by several runs), if it has one."""
    value = getattr(run, "id", None)
    return str(value) if value is not None else None


def join_run(run: RunLike, parent_run_id: str | None) -> None:
    """Make ``run`` (just opened by ``trackio.init`` in a writer process) log into the run of id
    ``parent_run_id`` opened by the rollout process.

    ``trackio.init(resume="allow")`` finds a run by name only once it was written to storage;
    before that it starts a second run of the same name, and the two processes' data would be
    split between them. Trackio has no public way to open a run by id, so the writer's ``Run``
    takes the rollout process's id before it logs anything.
    """
    if parent_run_id is None or run_id(run) == parent_run_id:
        return
    if not hasattr(run, "id"):
        lost(
            "Run.id",
            "an offload writer may log into a second run of the same name until the first "
            "one is written",
        )
        return
    run.id = parent_run_id
