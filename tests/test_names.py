"""Names a client chooses (project, run) become folders that cannot collide or escape; the spool
keeps to its own files and folders, and holds them for its owner alone."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import textwrap
import time
from pathlib import Path

import pytest
from conftest import SERVE, read_traces, run_python
from hypothesis import given, settings
from hypothesis import strategies as st

from otel_trackio._core.names import MAX_FOLDER_CHARS, folder_name
from otel_trackio._spool.paths import is_spool_file

HOSTILE = ["", ".", "..", "...", "a/b", "ab", "a.b", "a_b", "x y", "x/y", "x_y", "/", "\\",
           "\0", "%", "%2E", "~", "café", "cafe\u0301", "A", "a" * 10_000, "a" * 10_001,
           "\udcff", "../../etc"]  # fmt: skip


def _safe(folder: str) -> bool:
    return (
        0 < len(folder) <= MAX_FOLDER_CHARS
        and folder not in (".", "..")
        and not folder.startswith(".")
        and "/" not in folder
        and "\0" not in folder
        and folder.isascii()
    )


def test_hostile_names_get_distinct_folders_that_stay_where_they_are_put():
    folders = [folder_name(name) for name in HOSTILE]
    assert len(set(folders)) == len(HOSTILE)  # none shares a folder with another
    assert all(_safe(folder) for folder in folders), folders
    assert folder_name("run-7_b") == "run-7_b"  # the names people use stay readable


@settings(max_examples=400, deadline=None)
@given(st.text(max_size=300), st.text(max_size=300))
def test_distinct_names_never_share_a_folder(first: str, second: str):
    assert _safe(folder_name(first))
    if first != second:
        assert folder_name(first) != folder_name(second)


def test_a_clean_stop_deletes_only_the_files_a_spool_makes(trackio_dir, tmp_path):
    assert is_spool_file("000000000001.seg") and is_spool_file("checkpoint.json.42.tmp")
    assert not any(map(is_spool_file, ["ab.db", "x.lock", "a.tmp", "x.memory", "checkpoint"]))
    # The spool is the user's folder, holding files that are not the spool's.
    spool = tmp_path / "spool"
    spool.mkdir()
    theirs = ["trackio.lock", "notes.tmp", "model.memory", "000000000001.seg.bak"]
    for name in theirs:
        (spool / name).write_text("keep me")
    server = subprocess.Popen(
        [*SERVE, "--project", "..", "--name", "..", "--spool", str(spool)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    _wait_for_line(server, "listening on")
    server.send_signal(signal.SIGINT)
    out, _ = server.communicate(timeout=60)
    assert server.returncode == 0, out
    assert sorted(p.name for p in spool.iterdir()) == sorted(theirs)


def test_a_second_receiver_on_a_held_spool_says_so_in_one_line(tmp_path, project):
    spool = tmp_path / "spool"
    first = subprocess.Popen(
        [*SERVE, "--project", project, "--name", "r", "--spool", str(spool)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    try:
        _wait_for_line(first, "listening on")
        second = subprocess.run(
            [*SERVE, "--project", project, "--name", "r", "--spool", str(spool)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)
    assert second.returncode == 2
    lines = second.stderr.strip().splitlines()
    assert len(lines) == 1 and "another process is appending to the spool" in lines[0], lines


def test_offload_with_names_that_try_to_escape_writes_only_under_trackio_dir(tmp_path):
    """Project and run ``..``: the spool stays inside Trackio's folder, its folders and files
    the owner's alone, and the Traces reach the run."""
    trackio_dir = tmp_path / "trackio"
    trackio_dir.mkdir()
    script = textwrap.dedent(
        """
        import json, os, stat
        from pathlib import Path
        from opentelemetry.sdk.trace import TracerProvider
        from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor

        exporter = TrackioSpanExporter("..", "..", offload=True)
        provider = TracerProvider()
        provider.add_span_processor(TrackioSpanProcessor(exporter))
        with provider.get_tracer("t").start_as_current_span(
            "rollout", attributes={"step": 0, "sample_index": 0}
        ):
            pass
        provider.force_flush()
        spool = exporter.offloaded.path
        root = Path(os.environ["TRACKIO_DIR"]).resolve()
        assert root in spool.resolve().parents, spool
        modes = {str(p.relative_to(root)): stat.S_IMODE(p.stat().st_mode)
                 for p in root.rglob("*") if root / "otel-trackio-spool" in p.parents}
        print("MODES", json.dumps(modes))
        provider.shutdown()
        """
    )
    done = run_python(script, str(trackio_dir))
    assert done.returncode == 0, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["trackio"]  # nothing beside it
    modes = json.loads(done.stdout.split("MODES", 1)[1].strip().splitlines()[0])
    folders = {path: mode for path, mode in modes.items() if not Path(path).suffix}
    files = {path: mode for path, mode in modes.items() if Path(path).suffix}
    assert folders and set(folders.values()) == {0o700}, folders
    assert files and set(files.values()) == {0o600}, files
    assert "1 samples logged to '..' run '..'" in done.stderr


def _wait_for_line(process: subprocess.Popen[str], text: str, timeout: float = 60.0) -> None:
    assert process.stdout is not None
    deadline = time.monotonic() + timeout
    os.set_blocking(process.stdout.fileno(), True)
    while time.monotonic() < deadline:
        line = process.stdout.readline()
        if not line:
            break
        if text in line:
            return
    raise AssertionError(f"no line with {text!r}")


def test_two_projects_trackio_would_store_in_one_file_are_refused_not_merged(project):
    """Trackio leaves ``.`` and ``/`` out of a project's file name: ``<p>.x`` and ``<p>/x``
    would share one database, and their runs. The second is refused, saying why."""
    from otel_trackio import TrackioSpanExporter

    first = TrackioSpanExporter(f"{project}.x", "r")  # the default: offload
    first.shutdown()
    # Raised as trackio.init's own failure would be: the writer process opens the run.
    with pytest.raises(RuntimeError, match=r"could not open the run: project .* would be stored"):
        TrackioSpanExporter(f"{project}/x", "r")
    again = TrackioSpanExporter(f"{project}.x", "r2")  # the name that claimed the file: fine
    again.shutdown()


def test_the_receiver_rejects_spans_of_a_project_trackio_would_merge(project, start_receiver):
    from conftest import sample_spans, send_over_http
    from opentelemetry.sdk.resources import Resource

    receiver = start_receiver(sample_grace_seconds=0)
    claimed = sample_spans(
        0, range(2), resource=Resource.create({"trackio.project": f"{project}.q"})
    )
    merged = sample_spans(
        0, range(2), resource=Resource.create({"trackio.project": f"{project}/q"})
    )
    assert send_over_http(receiver.url, claimed)
    assert send_over_http(receiver.url, merged)  # answered, its spans rejected in partial_success
    totals = receiver.router.totals()
    receiver.stop()
    assert totals.rejected == 4  # the second project's 2 samples of 2 spans
    traces = read_traces(f"{project}.q")
    assert sorted(t["metadata"]["sample_index"] for t in traces) == [0, 1]  # only the first's
