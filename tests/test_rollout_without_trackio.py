"""With ``offload=True`` (the default) the rollout process never imports Trackio: its writer
process opens the run, reports it, and logs spans and metrics; the rollout process opens the run
itself only when asked for it (``handle.run``), joined to the same run. Each test runs a real
rollout process and counts what Trackio's storage holds, by (step, sample_index) and by run."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time

import pytest
from conftest import read_logs, read_traces, run_python
from trackio.sqlite_storage import SQLiteStorage

# The default: offload on (the test session turns it off for this process only).
OFFLOAD_DEFAULT = {"OTEL_EXPORTER_TRACKIO_OFFLOAD": ""}

ROLLOUT = textwrap.dedent(
    """
    import sys
    import otel_trackio
    from opentelemetry import metrics, trace
    name = {name!r}
    handle = otel_trackio.configure({project!r}, name, metric_export_interval_millis=600_000)
    print("after configure:", "trackio" in sys.modules, handle.span_exporter.offloaded is not None)
    tracer = trace.get_tracer("t")
    reward = metrics.get_meter("m").create_counter("reward")
    for step in range(3):
        for index in range(4):
            with tracer.start_as_current_span("rollout", attributes={{"step": step,
                                                                     "sample_index": index}}):
                with tracer.start_as_current_span("chat", attributes={{
                        "gen_ai.operation.name": "chat",
                        "gen_ai.usage.input_tokens": 10}}):
                    pass
            reward.add(index, {{"step": step}})
    handle.shutdown()
    print("after shutdown:", "trackio" in sys.modules)
    print("run:", handle.span_exporter.summary().run)
    """
)


def _keys(traces: list[dict]) -> list[tuple[int, int]]:
    return sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)


def _scalars(project: str, run: str, key: str) -> dict[int, float]:
    return {row["step"]: row[key] for row in read_logs(project, run) if key in row}


def _said(stdout: str, prefix: str) -> str:
    [line] = [line for line in stdout.splitlines() if line.startswith(prefix)]
    return line[len(prefix) :].strip()


def test_configure_offloads_spans_and_metrics_without_importing_trackio(project, trackio_dir):
    result = run_python(
        ROLLOUT.format(project=project, name="lean"), trackio_dir, **OFFLOAD_DEFAULT
    )
    assert result.returncode == 0, result.stderr
    assert _said(result.stdout, "after configure:") == "False True"
    assert _said(result.stdout, "after shutdown:") == "False"
    # Trackio's banner is shown here, as if trackio.init had run in this process.
    assert result.stdout.count("* Trackio project initialized") == 1
    assert SQLiteStorage.get_runs(project) == ["lean"]
    traces = read_traces(project, "lean")
    assert _keys(traces) == [(s, i) for s in range(3) for i in range(4)]  # each once
    # The counter's increments per step, logged by the writer at each step.
    assert _scalars(project, "lean", "reward") == {0: 6, 1: 6, 2: 6}


def test_an_unnamed_run_gets_trackios_name_and_the_summary_says_it(project, trackio_dir):
    result = run_python(ROLLOUT.format(project=project, name=None), trackio_dir, **OFFLOAD_DEFAULT)
    assert result.returncode == 0, result.stderr
    assert _said(result.stdout, "after configure:") == "False True"
    [run] = SQLiteStorage.get_runs(project)
    assert _said(result.stdout, "run:") == run  # the name Trackio picked in the writer
    assert f"run {run!r}" in result.stderr  # the end-of-run summary names it
    assert _keys(read_traces(project, run)) == [(s, i) for s in range(3) for i in range(4)]


def test_asking_for_the_run_opens_it_here_joined_to_the_writers(project, trackio_dir):
    script = textwrap.dedent(
        f"""
        import sys
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from otel_trackio import TrackioSpanExporter
        exporter = TrackioSpanExporter({project!r}, "joined")
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("t")
        with tracer.start_as_current_span("rollout", attributes={{"step": 3, "sample_index": 0}}):
            pass
        print("before:", "trackio" in sys.modules)
        exporter.run.log({{"loss": 0.5}}, step=3)  # the user's own values, into the same run
        print("after:", "trackio" in sys.modules)
        provider.shutdown()
        """
    )
    result = run_python(script, trackio_dir, **OFFLOAD_DEFAULT)
    assert result.returncode == 0, result.stderr
    assert (_said(result.stdout, "before:"), _said(result.stdout, "after:")) == ("False", "True")
    assert SQLiteStorage.get_runs(project) == ["joined"]  # one run, not one per process
    assert _keys(read_traces(project, "joined")) == [(3, 0)]
    assert _scalars(project, "joined", "loss") == {3: 0.5}


def test_a_run_trackio_cannot_open_raises_where_it_was_asked_for(project, trackio_dir):
    script = textwrap.dedent(
        f"""
        import otel_trackio
        try:
            otel_trackio.configure({project!r}, "absent", resume="must")
        except RuntimeError as exc:
            print("raised:", exc)
        """
    )
    result = run_python(script, trackio_dir, **OFFLOAD_DEFAULT)
    assert result.returncode == 0, result.stderr
    said = _said(result.stdout, "raised:")
    assert "could not open the run" in said and "does not exist" in said, said
    spools = os.path.join(trackio_dir, "otel-trackio-spool", project)
    assert not os.path.exists(spools) or not any(
        files for _, _, files in os.walk(spools)
    )  # nothing left behind


def test_a_restarted_writer_joins_the_run_its_predecessor_opened(project, trackio_dir):
    """The writer of an unnamed run is killed after opening it: its restart logs into the same
    run (the name and id it wrote back), not into a new one."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor
        from otel_trackio import TrackioSpanExporter
        exporter = TrackioSpanExporter({project!r})
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        tracer = provider.get_tracer("t")
        def step(s):
            for i in range(5):
                with tracer.start_as_current_span("rollout",
                                                  attributes={{"step": s, "sample_index": i}}):
                    pass
        step(0)
        assert exporter.force_flush(60_000)
        first = exporter.offloaded.writer_pid
        os.kill(first, signal.SIGKILL)
        exporter.offloaded._process.wait(60)  # gone (reaped by its parent, as it would be)
        step(1)  # the next export starts a writer again
        provider.shutdown()
        print("starts:", exporter.offloaded.writer_starts)
        """
    )
    result = run_python(script, trackio_dir, **OFFLOAD_DEFAULT)
    assert result.returncode == 0, result.stderr
    assert _said(result.stdout, "starts:") == "2", result.stdout + result.stderr
    [run] = SQLiteStorage.get_runs(project)  # one run: the restart joined it
    assert _keys(read_traces(project, run)) == [(s, i) for s in (0, 1) for i in range(5)]


def test_trackio_dir_without_trackio_is_trackios_own(tmp_path):
    """Where spools and the writer go before Trackio is imported is where Trackio then looks."""
    script = textwrap.dedent(
        """
        import sys
        from otel_trackio._trackio.installed import trackio_dir
        before = trackio_dir()
        assert "trackio" not in sys.modules
        import trackio.utils
        print(before == trackio.utils.TRACKIO_DIR == trackio_dir(), before)
        """
    )
    home = tmp_path / "hf-home"
    for env in ({"HF_HOME": str(home)}, {"TRACKIO_DIR": str(tmp_path / "explicit")}):
        clean = {k: v for k, v in os.environ.items() if k not in ("TRACKIO_DIR", "HF_HOME")}
        result = subprocess.run(
            [sys.executable, "-c", script],
            env={**clean, **env},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        same, where = result.stdout.split()
        assert same == "True", result.stdout
        expected = env.get("TRACKIO_DIR") or os.path.join(env["HF_HOME"], "trackio")
        assert where == expected


def test_no_writer_is_left_running(project, trackio_dir):
    script = ROLLOUT.format(project=project, name="tidy")
    script += "print('pid:', handle.span_exporter.offloaded.writer_pid)\n"
    result = run_python(script, trackio_dir, **OFFLOAD_DEFAULT)
    assert result.returncode == 0, result.stderr
    pid = int(_said(result.stdout, "pid:"))
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    raise AssertionError("the writer process outlived its rollout process")


def test_zero_code_spans_and_metrics_go_through_the_writer_too(project, trackio_dir, tmp_path):
    from test_autoconfigure import APP, _instrument

    app = APP + 'import sys\nprint("trackio imported:", "trackio" in sys.modules)\n'
    env = {"OTEL_EXPORTER_TRACKIO_PROJECT": project, "OTEL_EXPORTER_TRACKIO_RUN": "zero"}
    result = _instrument(tmp_path, trackio_dir, env, app_text=app)
    assert result.returncode == 0, result.stderr
    assert _said(result.stdout, "trackio imported:") == "False"
    assert SQLiteStorage.get_runs(project) == ["zero"]
    assert _keys(read_traces(project, "zero")) == [(s, i) for s in range(2) for i in range(4)]
    assert _scalars(project, "zero", "rollout.reward/mean") == {0: 0.375, 1: 0.375}


@pytest.mark.parametrize("how", ["configure", "by-hand"])
def test_gc_freeze_is_on_by_default_and_shutdown_thaws_what_it_froze(project, trackio_dir, how):
    # A reference cycle alive at configure() (at building the exporter by hand: the same cost
    # to the rollout otherwise) waits, frozen, until shutdown() to be collected; an
    # application's own gc.freeze() before it is never undone.
    script = textwrap.dedent(
        f"""
        import gc, sys, weakref
        import otel_trackio
        from opentelemetry import trace
        class Node: pass
        cycle = Node(); cycle.me = cycle; alive = weakref.ref(cycle)
        if sys.argv[2] == "app-froze":
            gc.freeze()
        options = {{}} if sys.argv[1] == "default" else {{"gc_freeze": sys.argv[1] == "on"}}
        name = sys.argv[1] + "-" + sys.argv[2]
        if sys.argv[3] == "configure":
            handle = otel_trackio.configure({project!r}, name, **options)
        else:
            from opentelemetry.sdk.trace import TracerProvider
            handle = TracerProvider()
            handle.add_span_processor(otel_trackio.TrackioSpanProcessor(
                otel_trackio.TrackioSpanExporter({project!r}, name, **options)))
            trace.set_tracer_provider(handle)
        print("frozen:", gc.get_freeze_count() > 0)
        del cycle
        gc.collect()
        print("collected while configured:", alive() is None)
        tracer = trace.get_tracer("t")
        for index in range(3):
            with tracer.start_as_current_span("rollout", attributes={{"step": 1,
                                                                     "sample_index": index}}):
                pass
        handle.shutdown()
        gc.collect()
        print("frozen after shutdown:", gc.get_freeze_count() > 0)
        print("collected after shutdown:", alive() is None)
        """
    )
    cases = {
        ("default", "alone"): ["True", "False", "False", "True"],
        ("off", "alone"): ["False", "True", "False", "True"],
        ("default", "app-froze"): ["True", "False", "True", "False"],
    }
    for (flag, app), expected in cases.items():
        result = subprocess.run(
            [sys.executable, "-c", script, flag, app, how],
            env={**os.environ, "TRACKIO_DIR": trackio_dir, **OFFLOAD_DEFAULT},
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stderr
        said = [
            _said(result.stdout, prefix)
            for prefix in (
                "frozen:",
                "collected while configured:",
                "frozen after shutdown:",
                "collected after shutdown:",
            )
        ]
        assert said == expected, (flag, app, result.stdout)
        assert _keys(read_traces(project, f"{flag}-{app}")) == [(1, 0), (1, 1), (1, 2)]
