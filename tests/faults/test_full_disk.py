"""A real full disk: the spool on a 24 MB tmpfs that a rollout of ~50 KB samples fills, another
file taking the rest of the room, then room again. Every sample acknowledged is stored once by the
time ``shutdown()`` returns, and the summary agrees with storage, counted by (step,
sample_index). Mounting a tmpfs needs root (and the right to mount): elsewhere this test is
skipped, saying so; the same path runs without root in ``tests/test_span_spooler.py`` with the
disk's ENOSPC made by the test.
"""

from __future__ import annotations

import json
import subprocess
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
    assert "No space left on device" in said and "wait in memory" in said, said
    assert "the spool takes spans again" in said, said
    rows = project_db_rows(project, "SELECT step, metadata FROM traces")
    stored = Counter((step, json.loads(meta)["sample_index"]) for step, meta in rows)
    assert stored == Counter({(i // 100, i % 100): 1 for i in range(samples)})
    summary = next(line for line in said.splitlines() if "samples logged to" in line)
    assert summary.startswith(f"otel-trackio: {samples} samples logged") and "0 lost" in summary
    assert "refused" not in summary
