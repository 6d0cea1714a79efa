"""A preempted job keeps its samples: SIGTERM (what Slurm and Kubernetes send) to a real rollout
process mid-step, under the shipped default (offload on) — alone, together with its writer (as a
job's cgroup is signalled), after a handler of the user's own (chained, never swallowed) — and
Ctrl-C. Counted in Trackio's storage by (step, sample_index)."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import textwrap
import time
from pathlib import Path

import pytest
from conftest import start_python, wait_for_file

ROLLOUT = textwrap.dedent(
    """
    import signal, sys, time
    from pathlib import Path
    import otel_trackio
    from otel_trackio import rollout
    signals = Path(sys.argv[1])
    if sys.argv[2] == "user-handler":
        def mine(signum, frame):
            (signals / "user-handler-ran").touch()
            sys.exit(0)
        signal.signal(signal.SIGTERM, mine)
    handle = otel_trackio.configure({project!r}, "preempted")
    (signals / "writer").write_text(str(handle.span_exporter.offloaded.writer_pid))
    for index in range(8):
        with rollout(0, index):
            pass
    (signals / "step-0").touch()
    with rollout(1, 0):
        time.sleep(600)  # preempted here, mid-step
    """
)


def stored(trackio_dir: str, project: str) -> dict[tuple[int, int], list[str | None]]:
    """{(step, sample_index): the partial reason of each stored Trace of it}."""
    with sqlite3.connect(Path(trackio_dir) / f"{project}.db") as db:
        rows = db.execute("SELECT step, metadata FROM traces").fetchall()
    out: dict[tuple[int, int], list[str | None]] = {}
    for step, metadata in rows:
        meta = json.loads(metadata)
        out.setdefault((step, meta["sample_index"]), []).append(meta.get("partial_reason"))
    return out


@pytest.mark.parametrize(
    "how", ["SIGTERM", "SIGTERM to the rollout and its writer", "user-handler", "SIGINT"]
)
def test_a_rollout_stopped_mid_step_keeps_what_it_recorded(project, trackio_dir, tmp_path, how):
    signals = tmp_path / "signals"
    signals.mkdir()
    rollout = start_python(ROLLOUT.format(project=project), trackio_dir, str(signals), how)
    wait_for_file(signals / "step-0", rollout)
    time.sleep(1.6)  # as in the report: 1.6 s after step 0 finished
    writer = int((signals / "writer").read_text())
    sent = signal.SIGINT if how == "SIGINT" else signal.SIGTERM
    started = time.monotonic()
    rollout.send_signal(sent)
    if how == "SIGTERM to the rollout and its writer":
        os.kill(writer, signal.SIGTERM)
    _, err = rollout.communicate(timeout=60)
    took = time.monotonic() - started

    if how == "user-handler":
        assert rollout.returncode == 0, err  # the user's handler ran after ours, and exited 0
        assert (signals / "user-handler-ran").exists()
    elif how == "SIGINT":
        assert "KeyboardInterrupt" in err
    else:
        assert rollout.returncode == -signal.SIGTERM, err  # the default ran: ended by SIGTERM
    if sent == signal.SIGTERM:
        assert "otel-trackio: SIGTERM: storing what was recorded" in err
    assert took < 30, took  # inside the grace period Slurm and Kubernetes give

    samples = stored(trackio_dir, project)
    assert {key: len(reasons) for key, reasons in samples.items()} == {
        **{(0, index): 1 for index in range(8)},
        (1, 0): 1,
    }  # every sample once, the one cut short too
    assert all(samples[(0, index)] == [None] for index in range(8))  # whole
    if sent == signal.SIGTERM:
        assert samples[(1, 0)][0] is not None  # logged as partial: it was still open
    # (Ctrl-C unwinds the sample's code: its spans end, with the KeyboardInterrupt, whole.)
