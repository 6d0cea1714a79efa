"""A real full disk: the spool on a 24 MB tmpfs that a rollout of ~50 KB samples fills, another
file taking the rest of the room, then room again. Every sample acknowledged is stored once by the
time ``shutdown()`` returns, and the summary agrees with storage, counted by (step,
sample_index). Mounting a tmpfs needs root (and the right to mount): elsewhere this test is
skipped, saying so; the same path runs without root in ``tests/test_span_spooler.py`` with the
disk's ENOSPC made by the test.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import textwrap
from collections import Counter
from pathlib import Path

import pytest
from conftest import project_db_rows, run_python

SCRIPT = textwrap.dedent(
    """
    import os, time
    import otel_trackio
    from opentelemetry import trace
    ballast = {ballast!r}
    handle = otel_trackio.configure({project!r}, "full-disk")
    tracer = trace.get_tracer("rollout")
    text = "z" * 50_000
    for i in range({samples}):
        if i == {samples} // 4:  # another file takes the room left
            with open(ballast, "wb") as f:
                try:
                    while True:
                        f.write(bytes(1 << 20))
                except OSError:
                    pass
        if i == {samples} // 2:  # room again
            time.sleep(1)
            os.remove(ballast)
        sample = {{"step": i // 100, "sample_index": i % 100}}
        with tracer.start_as_current_span("rollout", attributes=sample):
            with tracer.start_as_current_span("chat", attributes={{"text": text}}):
                pass
        time.sleep({pause})
    handle.shutdown()
    """
)


@pytest.fixture
def small_disk(tmp_path: Path):
    """A 24 MB tmpfs, unmounted after the test (skipped where it cannot be mounted)."""
    mount = tmp_path / "small-disk"
    mount.mkdir()
    made = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", "size=24m", "tmpfs", str(mount)],
        capture_output=True,
        text=True,
        check=False,
    )
    if made.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs (it takes root and the right to mount): {made.stderr}")
    try:
        yield mount
    finally:
        subprocess.run(["umount", "-l", str(mount)], check=False)


@pytest.mark.parametrize("pause", [0.0, 0.01], ids=["fast", "slow"])
def test_a_full_disk_loses_nothing_acknowledged_and_the_summary_agrees(
    project, trackio_dir, small_disk, pause
):
    samples = 614
    script = SCRIPT.format(
        project=project, samples=samples, pause=pause, ballast=str(small_disk / "ballast")
    )
    result = run_python(script, trackio_dir, OTEL_EXPORTER_TRACKIO_SPOOL_DIR=str(small_disk))
    assert result.returncode == 0, result.stderr
    said = result.stderr
    assert "no space left on" in said and "wait in memory" in said, said
    assert "the spool takes spans again" in said, said
    rows = project_db_rows(project, "SELECT step, metadata FROM traces")
    stored = Counter((step, json.loads(meta)["sample_index"]) for step, meta in rows)
    assert stored == Counter({(i // 100, i % 100): 1 for i in range(samples)})
    summary = next(line for line in said.splitlines() if "samples logged to" in line)
    assert summary.startswith(f"otel-trackio: {samples} samples logged") and "0 lost" in summary
    assert "refused" not in summary


STAYS_FULL = textwrap.dedent(
    """
    import os, sys, time
    import otel_trackio
    from opentelemetry import trace
    handle = otel_trackio.configure({project!r}, "stays-full")
    tracer = trace.get_tracer("rollout")
    text = "z" * 50_000
    for i in range({samples}):
        if i == {fill_at}:  # another file takes the room, all but 2 MB, and keeps it
            with open({ballast!r}, "wb") as f:
                try:
                    while True:
                        f.write(bytes(1 << 20))
                except OSError:
                    pass
            os.truncate({ballast!r}, os.path.getsize({ballast!r}) - (2 << 20))
        sample = {{"step": 0, "sample_index": i}}
        with tracer.start_as_current_span("rollout", attributes=sample):
            with tracer.start_as_current_span("chat", attributes={{"text": text}}):
                pass
        time.sleep(0.01)
    started = time.monotonic()
    handle.shutdown()
    print(f"shutdown took {{time.monotonic() - started:.0f}} s", file=sys.stderr)
    """
)


def test_storage_on_a_disk_that_stays_full_says_what_is_lost_and_drain_stores_the_rest(
    project, small_disk
):
    """Trackio's folder and the spool on the full disk to the end: shutdown returns in bounded
    time; its summary says what was lost and why, and what waits; ``otel-trackio drain
    --timeout`` on the still-full disk stops, non-zero, naming the full disk; with room again
    ``otel-trackio drain`` stores what waited, once, and removes the spool. Stored plus lost is
    every sample."""
    samples, trackio_dir = 300, str(small_disk)
    ballast = small_disk / "ballast"
    script = STAYS_FULL.format(project=project, samples=samples, fill_at=50, ballast=str(ballast))
    result = run_python(script, trackio_dir)
    assert result.returncode == 0, result.stderr
    said = result.stderr
    assert f"no space left on {small_disk}" in said, said
    took = int(re.search(r"shutdown took (\d+) s", said).group(1))
    assert took <= 90, said  # waiting for room, then for storing: each a bounded time
    summary = next(line for line in said.splitlines() if "samples logged to" in line)
    found = re.search(
        r"(\d+) samples logged .*; \d+ partial, (\d+) lost \(\d+ of them", summary
    )
    assert found is not None, summary
    logged, lost = map(int, found.groups())
    assert "no space left on" in summary and "not stored yet:" in summary, summary
    database = small_disk / f"{project}.db"
    assert logged == sum(_stored(database).values())

    drain = [sys.executable, "-m", "otel_trackio", "drain"]
    env = {**os.environ, "TRACKIO_DIR": trackio_dir}
    stuck = subprocess.run(
        [*drain, "--timeout", "5"], env=env, capture_output=True, text=True, timeout=120
    )
    assert stuck.returncode != 0, stuck.stderr
    assert "otel-trackio drain: stopped after 5 s" in stuck.stderr, stuck.stderr
    assert f"no space left on {small_disk}" in stuck.stderr, stuck.stderr

    ballast.unlink()  # room again
    drained = subprocess.run(drain, env=env, capture_output=True, text=True, timeout=120)
    assert drained.returncode == 0, drained.stderr
    stored = _stored(database)
    assert max(stored.values()) == 1, stored  # once each
    assert sum(stored.values()) + lost == samples, (sum(stored.values()), lost)
    assert not list((small_disk / "otel-trackio-spool").rglob("*.seg"))  # the spool is gone
    again = subprocess.run(drain, env=env, capture_output=True, text=True, timeout=120)
    assert "0 of 0 abandoned spools" in again.stdout + again.stderr
    assert _stored(database) == stored


def _stored(database: Path) -> Counter[tuple[int, int]]:
    """(step, sample_index) of every Trace in a project's database, read raw."""
    with sqlite3.connect(database) as db:
        rows = db.execute("SELECT step, metadata FROM traces").fetchall()
    return Counter((step, json.loads(meta)["sample_index"]) for step, meta in rows)
