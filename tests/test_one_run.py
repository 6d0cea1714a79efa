"""One (project, name), one Trackio run, whoever opens it first — under the shipped default
(offload on): processes that configure one name at the same moment, a trainer's own
``trackio.init(name, resume="allow")`` after ``configure()`` (what TRL's ``TrackioCallback``
does), a user's ``trackio.init`` before it, the same script run twice. Counted by run id in raw
SQLite: runs can share a name, and Trackio's by-name readers show one of them."""

from __future__ import annotations

import json
import sqlite3
import textwrap
from pathlib import Path

from conftest import run_python, start_python


def _db(trackio_dir: str, project: str) -> sqlite3.Connection:
    return sqlite3.connect(Path(trackio_dir) / f"{project}.db")


def traces_by_run(trackio_dir: str, project: str) -> dict[str, list[tuple[int, int]]]:
    """{run id: sorted (step, sample_index) of its Traces}."""
    with _db(trackio_dir, project) as db:
        rows = db.execute("SELECT run_id, step, metadata FROM traces").fetchall()
    out: dict[str, list[tuple[int, int]]] = {}
    for run, step, metadata in rows:
        out.setdefault(run, []).append((step, json.loads(metadata)["sample_index"]))
    return {run: sorted(samples) for run, samples in out.items()}


def metric_runs(trackio_dir: str, project: str, key: str) -> dict[str, int]:
    """{run id: how many metrics rows carry ``key``}."""
    with _db(trackio_dir, project) as db:
        rows = db.execute("SELECT run_id, metrics FROM metrics").fetchall()
    out: dict[str, int] = {}
    for run, metrics in rows:
        if key in json.loads(metrics):
            out[run] = out.get(run, 0) + 1
    return out


RANK = textwrap.dedent(
    """
    import sys
    import otel_trackio
    from opentelemetry import metrics, trace
    rank = int(sys.argv[1])
    handle = otel_trackio.configure({project!r}, "shared-run")
    tracer = trace.get_tracer("rank")
    reward = metrics.get_meter("rank").create_histogram("reward")
    for index in range(50):
        step, sample = index // 10, rank * 100 + index % 10
        with tracer.start_as_current_span(
            "rollout", attributes={{"step": step, "sample_index": sample}}
        ):
            pass
        reward.record(1.0, {{"step": step, "rank": rank}})
    handle.shutdown()
    """
)


def test_four_processes_configuring_one_name_at_once_log_into_one_run(project, trackio_dir):
    script = RANK.format(project=project)
    ranks = [start_python(script, trackio_dir, str(rank)) for rank in range(4)]
    for rank in ranks:
        _, err = rank.communicate(timeout=240)
        assert rank.returncode == 0, err
        assert "runs named" not in err, err  # no split to warn about
    by_run = traces_by_run(trackio_dir, project)
    assert len(by_run) == 1, by_run.keys()  # one run
    [samples] = by_run.values()
    expected = sorted((i // 10, r * 100 + i % 10) for r in range(4) for i in range(50))
    assert samples == expected  # each sample once
    rewards = metric_runs(trackio_dir, project, "reward/rank=0/mean")
    assert set(rewards) == set(by_run)  # the metrics in the same run


TRAINER = textwrap.dedent(
    """
    import otel_trackio, trackio
    from otel_trackio import rollout
    {first}
    handle = otel_trackio.configure({project!r}, "trl-probe")
    run = trackio.init(project={project!r}, name="trl-probe", resume="allow")  # TRL's callback
    for step in range(3):
        for index in range(4):
            with rollout(step, index):
                pass
        trackio.log({{"train/loss": 1.0 / (step + 1), "train/global_step": step + 1}})
    trackio.finish()   # TRL finishes its run at on_train_end, before the exporter's shutdown
    handle.shutdown()
    """
)
ORDERS = {
    "after": "",  # configure() first: the order a user writes
    "before": 'trackio.init(project={project!r}, name="trl-probe")  # the user\'s own, first',
}


def test_a_trainers_own_trackio_run_and_the_traces_are_one_run_in_either_order(
    project, trackio_dir
):
    for order, first in ORDERS.items():
        name = f"{project}-{order}"
        script = TRAINER.format(project=name, first=first.format(project=name))
        result = run_python(script, trackio_dir)
        assert result.returncode == 0, (order, result.stderr)
        by_run = traces_by_run(trackio_dir, name)
        assert len(by_run) == 1, (order, by_run.keys())
        [(run_id, samples)] = by_run.items()
        assert samples == [(s, i) for s in range(3) for i in range(4)], order
        assert metric_runs(trackio_dir, name, "train/loss") == {run_id: 3}, order


ONCE = textwrap.dedent(
    """
    import otel_trackio
    from otel_trackio import rollout
    handle = otel_trackio.configure({project!r}, "run-1", **{extra})
    with rollout({step}, 0):
        pass
    handle.shutdown()
    """
)


def test_a_name_run_again_continues_its_run_and_resume_never_says_it_splits(
    project, trackio_dir
):
    first = run_python(ONCE.format(project=project, extra={}, step=0), trackio_dir)
    again = run_python(ONCE.format(project=project, extra={}, step=1), trackio_dir)
    assert first.returncode == 0 and again.returncode == 0, again.stderr
    assert "Resumed existing run: run-1" in again.stdout, again.stdout  # said, by Trackio
    [(run_id, samples)] = traces_by_run(trackio_dir, project).items()
    assert samples == [(0, 0), (1, 0)]

    fresh = run_python(
        ONCE.format(project=project, extra={"resume": "never"}, step=2), trackio_dir
    )
    assert fresh.returncode == 0, fresh.stderr
    by_run = traces_by_run(trackio_dir, project)
    assert len(by_run) == 2 and by_run[run_id] == [(0, 0), (1, 0)]
    [other] = set(by_run) - {run_id}
    # Said when the run is opened, and again under the summary.
    warning, summary = [line for line in fresh.stderr.splitlines() if "runs named 'run-1'" in line]
    assert run_id in warning and other in warning and "resume='never'" in warning
    assert summary == warning
