"""The plan (``otel_trackio/_plan.py``): every decision of a run's wiring, one row each, from the
settings and what the process already has — a pure function, so no run, no process, no Trackio."""

from __future__ import annotations

import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from otel_trackio._plan import (
    HeldRun,
    MetricRoute,
    Role,
    RunOpener,
    RunPlan,
    RunSeen,
    Situation,
    SpanRoute,
    TraceWrites,
    plan_run,
)
from otel_trackio.settings import TrackioConfigError, TrackioSettings

TRACKIO = Path("/trackio")
ROOT = TRACKIO / "otel-trackio-spool"
P, N = "proj", "run-1"
USER_RUN = RunSeen(P, N)
REMOTE_RUN = RunSeen(P, N, remote=True)
SERVER = "http://127.0.0.1:9/?write_token=t"


@dataclass(frozen=True)
class Row:
    """One decision: the settings and the situation in, what the plan must say out."""

    why: str
    settings: dict = field(default_factory=dict)
    situation: dict = field(default_factory=dict)
    spans: SpanRoute = SpanRoute.OFFLOADED
    opener: RunOpener = RunOpener.WRITER
    metrics: MetricRoute = MetricRoute.SPOOL
    writes: TraceWrites = TraceWrites.WRITER
    why_in_process: str | None = None
    remote: bool = False
    continue_by_name: bool = False


HERE = {
    "spans": SpanRoute.IN_PROCESS,
    "opener": RunOpener.HERE,
    "metrics": MetricRoute.RUN,
    "writes": TraceWrites.STORE_PROCESS,
}
"""Spans, run, metrics and Trackio's writes all in this process."""

ROWS = [
    # -- offload: asked, the default, the variable, impossible -------------------------------
    Row("offload by default: the writer opens the run; metrics follow it through the spool"),
    Row(
        "offload=False: spans, run and metrics here; Trackio's writes in a store process",
        settings={"offload": False},
        **HERE,
        continue_by_name=True,
    ),
    Row(
        "the variable turns it off when the setting says nothing",
        situation={"offload_variable": "false"},
        **HERE,
        continue_by_name=True,
    ),
    Row(
        "the argument wins over the variable",
        settings={"offload": True},
        situation={"offload_variable": "false"},
    ),
    Row(
        "settings that cannot cross to a writer: in process, and said why",
        situation={"settings_stay": "token_decoder f is defined in __main__"},
        **HERE,
        continue_by_name=True,
        why_in_process="token_decoder f is defined in __main__",
    ),
    Row(
        "a writer process never offloads again",
        situation={"in_writer_process": True},
        **HERE,
        continue_by_name=True,
        why_in_process="this is an offload writer process",
    ),
    Row(
        "offload=False and settings that cannot cross: nothing to warn about",
        settings={"offload": False},
        situation={"settings_stay": "not plain data"},
        **HERE,
        continue_by_name=True,
    ),
    # -- a run already active in this process ---------------------------------------------------
    Row(
        "the user's run of the same name is active: borrowed; the writer joins it",
        situation={"active": USER_RUN},
        opener=RunOpener.ACTIVE,
        metrics=MetricRoute.RUN,
    ),
    Row(
        "no name asked: the active run of the project is borrowed",
        settings={"name": None},
        situation={"active": USER_RUN},
        opener=RunOpener.ACTIVE,
        metrics=MetricRoute.RUN,
    ),
    Row(
        "an active run of another name is left alone: the writer opens ours",
        situation={"active": RunSeen(P, "other")},
    ),
    Row(
        "an active run of another project is left alone",
        situation={"active": RunSeen("elsewhere", N)},
    ),
    Row(
        "the active run is one this package holds: shared, not borrowed",
        situation={"active": RunSeen(P, N, ours=True)},
        opener=RunOpener.SHARED,
        metrics=MetricRoute.RUN,
    ),
    Row(
        "another exporter here holds the run, open here: shared; metrics straight to it",
        situation={"held": HeldRun(opened_here=True)},
        opener=RunOpener.SHARED,
        metrics=MetricRoute.RUN,
    ),
    Row(
        "another exporter's run is open only in its writer: shared; metrics through the spool",
        situation={"held": HeldRun(opened_here=False)},
        opener=RunOpener.SHARED,
    ),
    Row(
        "in process beside a run only its writer has open: shared (joined here)",
        settings={"offload": False},
        situation={"held": HeldRun(opened_here=False)},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.SHARED,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.STORE_PROCESS,
    ),
    Row(
        "run= given: logged into, never opened",
        situation={"given": USER_RUN},
        opener=RunOpener.GIVEN,
        metrics=MetricRoute.RUN,
    ),
    Row(
        "run= given wins over an active run",
        situation={"given": USER_RUN, "active": RunSeen(P, N, ours=True)},
        opener=RunOpener.GIVEN,
        metrics=MetricRoute.RUN,
    ),
    # -- a Trackio server -------------------------------------------------------------------
    Row(
        "a run on a server the settings do not name cannot be reached by a writer",
        situation={"given": REMOTE_RUN},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.GIVEN,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.LOGGING_THREAD,
        why_in_process="the run logs to a Trackio server that the settings do not name",
        remote=True,
    ),
    Row(
        "the active run is on a server the settings name: the writer joins it there",
        settings={"server_url": SERVER},
        situation={"active": REMOTE_RUN},
        opener=RunOpener.ACTIVE,
        metrics=MetricRoute.RUN,
        remote=True,
    ),
    Row(
        "a server in the settings: offloaded, the writer opens it there",
        settings={"server_url": SERVER},
        remote=True,
    ),
    Row(
        "a server in the settings, in process: Trackio's client sends, no store process",
        settings={"server_url": SERVER, "offload": False},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.HERE,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.LOGGING_THREAD,
        remote=True,
    ),
    Row(
        "Trackio's own server variable counts as a server",
        settings={"offload": False},
        situation={"trackio_server": True},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.HERE,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.LOGGING_THREAD,
        remote=True,
    ),
    # -- the writer and the receiver ------------------------------------------------------------
    Row(
        "the writer process opens the run and writes through its store process",
        situation={"role": Role.WRITER},
        **HERE,
        continue_by_name=True,
    ),
    Row(
        "the writer joining the run its rollout process opened: by its id, not by name",
        situation={"role": Role.WRITER, "given": USER_RUN},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.GIVEN,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.STORE_PROCESS,
    ),
    # -- one name, one run ---------------------------------------------------------------------
    Row(
        "resume='never' asks for a new run of the name: not continued",
        settings={"resume": "never", "offload": False},
        **HERE,
    ),
    Row(
        "no name: Trackio names a new run",
        settings={"name": None, "offload": False},
        **HERE,
    ),
    Row(
        "a receiver route continuing a named run makes it exist first",
        settings={"resume": "allow"},
        situation={"role": Role.RECEIVER, "offload_variable": "not a boolean"},
        **HERE,
        continue_by_name=True,
    ),
    Row(
        "a receiver route of a named run continues it when resume is unset",
        situation={"role": Role.RECEIVER},
        **HERE,
        continue_by_name=True,
    ),
    Row(
        "a receiver route of a fresh run does not",
        settings={"resume": "never"},
        situation={"role": Role.RECEIVER},
        **HERE,
    ),
    Row(
        "a receiver route on a server: no store process, nothing made to exist locally",
        settings={"resume": "allow", "server_url": SERVER},
        situation={"role": Role.RECEIVER},
        spans=SpanRoute.IN_PROCESS,
        opener=RunOpener.HERE,
        metrics=MetricRoute.RUN,
        writes=TraceWrites.LOGGING_THREAD,
        remote=True,
    ),
]


def planned(row: Row) -> RunPlan:
    settings = TrackioSettings(**{"project": P, "name": N, **row.settings})
    return plan_run(settings, Situation(**{"trackio_dir": TRACKIO, **row.situation}))


@pytest.mark.parametrize("row", ROWS, ids=[row.why for row in ROWS])
def test_each_decision_of_the_plan(row: Row):
    plan = planned(row)
    said = (
        plan.spans,
        plan.opener,
        plan.metrics,
        plan.writes,
        plan.why_in_process,
        plan.remote,
        plan.continue_by_name,
    )
    assert said == (
        row.spans,
        row.opener,
        row.metrics,
        row.writes,
        row.why_in_process,
        row.remote,
        row.continue_by_name,
    )
    # A fallback is warned about once, from the plan; a plan with none says nothing.
    if row.why_in_process is None:
        assert plan.warnings == ()
    else:
        assert len(plan.warnings) == 1 and row.why_in_process in plan.warnings[0]
    # The spool is where offloaded spans go, and only then.
    assert plan.spool_root == (ROOT if plan.offloaded else None)
    # offload resolved: what the writer and the next configure() compare
    assert plan.settings.offload is not None or plan.role is not Role.ROLLOUT
    # a named run is continued unless resume says otherwise; an unnamed one is Trackio's to name
    asked = row.settings.get("resume")
    named = row.settings.get("name", N)
    assert plan.settings.resume == (asked or ("allow" if named else None))
    assert planned(row) == plan  # pure: the same inputs, the same plan


def test_a_malformed_offload_variable_is_refused_by_name():
    with pytest.raises(TrackioConfigError, match="OTEL_EXPORTER_TRACKIO_OFFLOAD"):
        plan_run(TrackioSettings(project=P), Situation(offload_variable="sometimes"))


def test_no_project_and_no_run_is_refused():
    with pytest.raises(TrackioConfigError, match="set OTEL_EXPORTER_TRACKIO_PROJECT"):
        plan_run(TrackioSettings(), Situation())


def test_planning_imports_no_trackio_and_starts_no_process(tmp_path):
    """Planning in a fresh interpreter: no Trackio module, no child process, no file."""
    code = (
        "import sys, os\n"
        "from otel_trackio.settings import TrackioSettings\n"
        "from otel_trackio._plan import plan_run, Situation\n"
        "from otel_trackio._wiring import observe\n"
        "s = TrackioSettings(project='p', name='n')\n"
        "plan = plan_run(s, observe(s))\n"
        "assert plan.offloaded, plan\n"
        "assert 'trackio' not in sys.modules, 'trackio imported while planning'\n"
        "assert os.listdir('.') == [], os.listdir('.')\n"
        "import multiprocessing\n"
        "assert multiprocessing.active_children() == []\n"
    )
    env = {"PATH": "/usr/bin:/bin", "TRACKIO_DIR": str(tmp_path / "trackio")}
    work = tmp_path / "work"
    work.mkdir()
    done = subprocess.run(
        [sys.executable, "-c", code], cwd=work, env=env, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert not (tmp_path / "trackio").exists()
