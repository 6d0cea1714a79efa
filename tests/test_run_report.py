"""What a run says at its end, and what it leaves behind: one summary with the command that opens
the Traces (in process, offloaded, the receiver), warnings true for what the user did, a receiver
start without ``--name`` that is a fresh run, and no spool files after a clean stop."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import requests
from conftest import SERVE, read_traces, run_python, storage_lock_held
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from test_spool import _finished_spans
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio._engine.report import show_command

ROOT = Path(__file__).resolve().parent.parent
PROTOBUF = {"Content-Type": "application/x-protobuf"}
INSTRUMENT = Path(sys.executable).parent / "opentelemetry-instrument"

RUN = textwrap.dedent(
    """
    import otel_trackio
    from opentelemetry import trace
    handle = otel_trackio.configure({project!r}, "summed", max_samples_per_step=2, **{extra})
    tracer = trace.get_tracer("t")
    for step in range(2):
        for index in range(4):
            sample = {{"step": step, "sample_index": index}}
            with tracer.start_as_current_span("rollout", attributes=sample):
                pass
    handle.shutdown()
    """
)


def _summary_lines(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("otel-trackio: ")]


def test_every_run_ends_with_one_summary_and_the_command_that_opens_it(project, trackio_dir):
    for offload in (True, False):
        run = f"summed-{offload}"
        script = RUN.format(project=project, extra={"offload": offload}).replace("summed", run)
        result = run_python(script, trackio_dir)
        assert result.returncode == 0, result.stderr
        lines = _summary_lines(result.stderr)
        # The sampler says once, as it starts, that it leaves samples out.
        notes = [line for line in lines if "max_samples_per_step=2: keeping at most 2" in line]
        assert len(notes) == 1, result.stderr
        [summary] = [line for line in lines if "samples logged to" in line]
        assert summary == (
            f"otel-trackio: 4 samples logged to {project!r} run {run!r}, steps 0 to 1 (2 steps); "
            "0 partial, 0 lost; 4 not traced (max_samples_per_step=2)"
        )
        [where] = [line for line in lines if "open them with" in line]
        assert f"TRACKIO_DIR={trackio_dir} " in where
        assert where.endswith(
            f'show --project {project} → Traces page, Sort "Oldest first" '
            '(partial ones: search "partial")'
        )
        # Trackio's own lines once each: offloaded, the writer opens and finishes the run, and
        # what it printed opening it is shown here.
        assert result.stdout.count("* Trackio project initialized") == 1, result.stdout
        assert result.stdout.count("* Run finished.") == (0 if offload else 1), result.stdout
        assert len(read_traces(project, run)) == 4


def test_a_negative_step_range_reads_as_a_range(project, trackio_dir):
    """Steps are the user's integers: -4 and 10**15 read as "steps -4 to 1000000000000000"."""
    script = textwrap.dedent(
        f"""
        import otel_trackio
        from opentelemetry import trace
        handle = otel_trackio.configure({project!r}, "negative")
        tracer = trace.get_tracer("t")
        for step in (-4, 10**15):
            sample = {{"step": step, "sample_index": 0}}
            with tracer.start_as_current_span("rollout", attributes=sample):
                pass
        handle.shutdown()
        """
    )
    result = run_python(script, trackio_dir)
    assert result.returncode == 0, result.stderr
    [summary] = [line for line in _summary_lines(result.stderr) if "samples logged to" in line]
    assert ", steps -4 to 1000000000000000 (2 steps); " in summary, summary
    assert [t["step"] for t in read_traces(project, "negative")] == [-4, 10**15]


def test_spans_the_spool_refused_are_in_the_summary_and_storage_agrees(project, trackio_dir):
    """A spool too small for what a rollout sends: the spans it refuses are said, once in a
    warning and in the summary's count, which storage agrees with (never "0 lost" alone)."""
    script = textwrap.dedent(
        f"""
        import otel_trackio
        from opentelemetry import trace
        handle = otel_trackio.configure({project!r}, "full", spool_max_mb=0.5)
        tracer = trace.get_tracer("t")
        words = "y" * 20000
        for i in range(200):
            sample = {{"step": 0, "sample_index": i}}
            with tracer.start_as_current_span("rollout", attributes=sample):
                with tracer.start_as_current_span("chat", attributes={{"text": words}}):
                    pass
        handle.shutdown()
        """
    )
    result = run_python(script, trackio_dir)
    assert result.returncode == 0, result.stderr
    lines = _summary_lines(result.stderr)
    assert sum("spool full" in line and "samples lost" in line for line in lines) == 1, lines
    [summary] = [line for line in lines if "samples logged to" in line]
    found = re.search(
        r"(\d+) samples logged .*; (\d+) partial, (\d+) lost \((\d+) of them before the spool: "
        r"spool full .*; (\d+) spans in all",
        summary,
    )
    assert found is not None, summary
    logged, partial, lost, refused_samples, refused_spans = map(int, found.groups())
    traces = read_traces(project, "full")
    assert refused_spans > 0 and lost == refused_samples and logged == len(traces)
    whole = {t["metadata"]["sample_index"] for t in traces if not t["metadata"].get("partial")}
    assert partial == len(traces) - len(whole)
    # every sample is stored whole, or lost with its root (a root refused after its child was
    # spooled leaves that child stored, partial)
    assert len(whole) + lost == 200, (len(whole), lost, partial)


def test_a_run_that_is_one_of_several_of_its_name_is_said_in_the_summary(project, trackio_dir):
    """Two runs of one name already (``resume="never"``, as some trainers force): whichever one
    ``configure()`` continues, its summary says so, naming the runs, offloaded or not."""
    script = textwrap.dedent(
        f"""
        import trackio
        for _ in range(2):
            trackio.init(project={project!r}, name="twice", resume="never")
            trackio.log({{"loss": 1.0}})
            trackio.finish()
        import otel_trackio
        from opentelemetry import trace
        handle = otel_trackio.configure({project!r}, "twice", offload=OFFLOAD)
        with trace.get_tracer("t").start_as_current_span(
            "rollout", attributes={{"step": 0, "sample_index": 0}}
        ):
            pass
        handle.shutdown()
        """
    )
    for offload in (True, False):
        result = run_python(script.replace("OFFLOAD", str(offload)), trackio_dir)
        assert result.returncode == 0, result.stderr
        lines = _summary_lines(result.stderr)
        said = [line for line in lines if "runs named 'twice'" in line]
        # Once as a warning when the run is opened, once more in the summary's last lines.
        assert len(said) == 2, lines
        summary = next(i for i, line in enumerate(lines) if "samples logged to" in line)
        assert any("runs named 'twice'" in line for line in lines[summary:]), lines


def test_the_summary_can_be_turned_off(project, trackio_dir):
    script = RUN.format(project=project, extra={"offload": False, "summary": False})
    result = run_python(script, trackio_dir)
    assert result.returncode == 0, result.stderr
    assert _summary_lines(result.stderr) == []


def test_the_offload_fallback_says_what_happened_not_what_the_user_did_not_set(
    project, trackio_dir
):
    script = textwrap.dedent(
        f"""
        import otel_trackio
        def decode(ids):
            return " ".join(map(str, ids))
        otel_trackio.configure({project!r}, "fallback", token_decoder=decode).shutdown()
        """
    )
    # The default (offload on), not the tests' process-wide OTEL_EXPORTER_TRACKIO_OFFLOAD=false.
    result = run_python(script, trackio_dir, OTEL_EXPORTER_TRACKIO_OFFLOAD="")
    assert result.returncode == 0, result.stderr
    assert "offload=True" not in result.stderr
    assert (
        "otel-trackio: exporting spans in this process, not through an offload writer process: "
        "token_decoder 'decode' is defined in __main__"
    ) in result.stderr


def _instrument(tmp_path: Path, app: str, **env: str) -> subprocess.CompletedProcess[str]:
    """``opentelemetry-instrument python app.py`` with only ``OTEL_TRACES_EXPORTER=trackio`` (and
    ``env``) set: nothing else of the caller's ``OTEL_*``."""
    (tmp_path / "app.py").write_text(app)
    clean = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    return subprocess.run(
        [str(INSTRUMENT), sys.executable, str(tmp_path / "app.py")],
        env={**clean, "OTEL_TRACES_EXPORTER": "trackio", **env},
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )


def _without_the_grpc_exporter(folder: Path) -> str:
    """A folder that, first on ``PYTHONPATH``, hides the installed OTLP/gRPC exporter's entry
    points (``importlib.metadata`` takes the first distribution of a name): what a user without
    ``opentelemetry-exporter-otlp-proto-grpc`` has."""
    info = folder / "opentelemetry_exporter_otlp_proto_grpc-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: opentelemetry-exporter-otlp-proto-grpc\nVersion: 0.0\n"
    )
    return str(folder)


def test_zero_code_with_metrics_left_on_a_missing_otlp_exporter_says_so(
    project, trackio_dir, tmp_path
):
    result = _instrument(
        tmp_path,
        "print('app finished')\n",
        TRACKIO_DIR=trackio_dir,
        OTEL_EXPORTER_TRACKIO_PROJECT=project,
        PYTHONPATH=_without_the_grpc_exporter(tmp_path / "hide"),
    )
    assert "app finished" in result.stdout
    said = [line for line in _summary_lines(result.stderr) if "not installed" in line]
    assert len(said) == 1, result.stderr
    line = said[0]
    assert line.startswith(
        "otel-trackio: OTEL_METRICS_EXPORTER=otlp (otlp_proto_grpc), "
        "OTEL_LOGS_EXPORTER=otlp (otlp_proto_grpc) names an exporter that is not installed"
    )
    assert "set OTEL_METRICS_EXPORTER=trackio (or none) and OTEL_LOGS_EXPORTER=trackio" in line


def test_zero_code_finishes_the_run_once_and_ends_with_the_summary(project, trackio_dir, tmp_path):
    app = textwrap.dedent(
        """
        from opentelemetry import trace
        tracer = trace.get_tracer("t")
        for i in range(3):
            with tracer.start_as_current_span("rollout", attributes={"sample_index": i}):
                pass
        """
    )
    result = _instrument(
        tmp_path,
        app,
        TRACKIO_DIR=trackio_dir,
        OTEL_EXPORTER_TRACKIO_PROJECT=project,
        OTEL_METRICS_EXPORTER="trackio",
        OTEL_LOGS_EXPORTER="trackio",
        OTEL_EXPORTER_TRACKIO_RUN="zero",
    )
    assert result.returncode == 0, result.stderr
    # Offloaded (the default): the writer opens and finishes the run, metrics included; what
    # Trackio printed opening it is shown here, its "Run finished" goes to the writer's log.
    assert result.stdout.count("* Trackio project initialized") == 1, result.stdout
    assert result.stdout.count("* Run finished.") == 0, result.stdout
    assert f"otel-trackio: 3 samples logged to {project!r} run 'zero'" in result.stderr
    assert len(read_traces(project, "zero")) == 3


def test_zero_code_says_when_no_sample_carried_a_step(project, trackio_dir, tmp_path):
    """An agent run traced with zero code and no span carrying ``step``: every sample lands at
    step 0, and the summary says so with the fix; one sample with a step is enough to be quiet."""
    app = textwrap.dedent(
        """
        from opentelemetry import trace
        tracer = trace.get_tracer("agent")
        for i in range(3):
            attributes = {ATTRIBUTES} if i == 0 else {{}}
            with tracer.start_as_current_span("agent run", attributes=attributes):
                with tracer.start_as_current_span("chat"):
                    pass
        """
    )
    env = {"TRACKIO_DIR": trackio_dir, "OTEL_EXPORTER_TRACKIO_PROJECT": project}
    for run, attributes in (("no-step", "{}"), ("one-step", '{"step": 4}')):
        folder = tmp_path / run
        folder.mkdir()
        script = app.replace("{ATTRIBUTES}", attributes).replace("{{}}", "{}")
        result = _instrument(folder, script, **env, OTEL_EXPORTER_TRACKIO_RUN=run)
        assert result.returncode == 0, result.stderr
        said = [line for line in _summary_lines(result.stderr) if "carried a step" in line]
        if run == "one-step":
            assert said == []
            continue
        assert len(said) == 1 and said[0].startswith(
            "otel-trackio: none of the 3 samples carried a step"
        )
        assert "rollout(step, i)" in said[0] and "docs/wiring.md#zero-code" in said[0]
        assert {t["step"] for t in read_traces(project, run)} == {0}


def test_show_command_names_the_folder_written_to(tmp_path):
    command = show_command("my project", tmp_path)
    assert command.startswith(f"TRACKIO_DIR={tmp_path} ")
    assert command.endswith("show --project 'my project'")


# -- the receiver: fresh runs, resumed only to finish a spool, nothing left behind -------------


def _serve(project: str, trackio_dir: str, spool: Path, *args: str):
    server = subprocess.Popen(
        [*SERVE, "--project", project, "--spool", str(spool), *args],
        env={**os.environ, "TRACKIO_DIR": trackio_dir},
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=ROOT,
    )
    assert server.stdout is not None
    for line in server.stdout:
        if "listening on" in line:
            return server, line.split("listening on ")[1].split()[0], line
    raise AssertionError(server.communicate()[0])


def _send(url: str, samples: int, offset: int = 0) -> None:
    spans = _finished_spans(samples, offset)
    for k in range(0, len(spans), 400):
        body = encode_spans(spans[k : k + 400]).SerializeToString()
        assert requests.post(url + "/v1/traces", data=body, headers=PROTOBUF).status_code == 200


def _stop(server: subprocess.Popen) -> str:
    server.send_signal(signal.SIGTERM)
    output, _ = server.communicate(timeout=120)
    assert server.returncode == 0, output
    return output


def test_two_receiver_starts_without_a_name_make_two_runs_and_leave_no_spool_data(
    project, trackio_dir, tmp_path
):
    spool = tmp_path / "spool"
    for start in range(2):
        server, url, _ = _serve(project, trackio_dir, spool)
        _send(url, 3, offset=10 * start)
        output = _stop(server)
        assert "open them with: " in output and f"show --project {project}" in output
        assert "samples logged to" in output
        # A clean stop: every segment drained, no lock or runs.json left; only the names of
        # the runs it finished, for the next start's lookup of requests sent again.
        assert sorted(p.name for p in spool.iterdir()) == ["earlier-runs.json"]
    runs = SQLiteStorage.get_runs(project)
    assert len(runs) == 2
    per_run = [sorted(t["metadata"]["sample_index"] for t in read_traces(project, r)) for r in runs]
    assert sorted(per_run) == [[0, 1, 2], [10, 11, 12]]


def test_receivers_started_together_with_one_name_log_into_one_run(project, trackio_dir, tmp_path):
    """A fail-over pair on one TRACKIO_DIR: both continue the one run of that name, never two
    runs of one name (which the Traces page would show only one of)."""
    servers = [
        subprocess.Popen(
            [*SERVE, "--project", project, "--name", "shared", "--spool", str(tmp_path / str(i))],
            env={**os.environ, "TRACKIO_DIR": trackio_dir},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
            cwd=ROOT,
        )
        for i in range(2)
    ]  # started together: neither finds the run the other is making
    for i, server in enumerate(servers):
        assert server.stdout is not None
        line = next(line for line in server.stdout if "listening on" in line)
        _send(line.split("listening on ")[1].split()[0], 3, offset=10 * i)
    for server in servers:
        _stop(server)
    with sqlite3.connect(Path(trackio_dir) / f"{project}.db") as db:
        query = "SELECT run_id, metadata FROM traces WHERE run_name = 'shared'"
        rows = db.execute(query).fetchall()
    assert len({run_id for run_id, _ in rows}) == 1  # one run
    indexes = sorted(json.loads(metadata)["sample_index"] for _, metadata in rows)
    assert indexes == [0, 1, 2, 10, 11, 12]  # each sample once


def test_a_restart_after_an_unclean_stop_finishes_the_spool_in_its_run(
    project, trackio_dir, tmp_path
):
    spool = tmp_path / "spool"
    server, url, listening = _serve(project, trackio_dir, spool)
    first_run = listening.split(", run ")[1].split("'")[1]
    with storage_lock_held(project):  # whatever the machine's speed, nothing is stored yet
        _send(url, 500)  # answered: spooled
        server.kill()  # no clean stop: the spool keeps what is not logged yet
        server.communicate(timeout=60)
    assert spool.exists()

    server, url, listening = _serve(project, trackio_dir, spool)
    assert "resumed: it finishes what an earlier start left in the spool" in listening
    assert repr(first_run) in listening
    _stop(server)
    assert SQLiteStorage.get_runs(project) == [first_run]
    indexes = sorted(t["metadata"]["sample_index"] for t in read_traces(project, first_run))
    assert indexes == list(range(500))  # all of them, once each, in the run they belong to
    assert sorted(p.name for p in spool.iterdir()) == ["earlier-runs.json"]


def test_offload_leaves_no_empty_spool_folders(project, trackio_dir, tmp_path):
    spools = tmp_path / "spools"
    script = RUN.format(project=project, extra={"offload": True})
    result = run_python(script, trackio_dir, OTEL_EXPORTER_TRACKIO_SPOOL_DIR=str(spools))
    assert result.returncode == 0, result.stderr
    assert len(read_traces(project, "summed")) == 4
    assert not spools.exists() or list(spools.iterdir()) == []
