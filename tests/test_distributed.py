"""The distributed examples, run for real: worker processes and a local Ray (2 actors) sending
over the official OTLP exporters to one receiver, one Trackio run for all of them."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from conftest import read_logs, read_traces, wait_until

pytestmark = pytest.mark.real_packages  # `make test-packages` (CI runs it too)

REPO = Path(__file__).resolve().parent.parent


def _run_example(script: str, trackio_dir: str, *args: str) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAY_ADDRESS"))}
    env.update(
        TRACKIO_DIR=trackio_dir,
        TRACKIO_DISABLE_TELEMETRY="1",
        RAY_USAGE_STATS_ENABLED="0",  # no usage report: nothing leaves this machine
        RAY_AUTH_MODE="disabled",
    )
    return subprocess.run(
        [sys.executable, str(REPO / "examples" / script), *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )


def _check_one_run(project: str, run: str, workers: int, per_step: int, steps: int = 3) -> None:
    traces = read_traces(project, run)
    assert len(traces) == workers * per_step * steps
    assert not any(t["metadata"].get("partial") for t in traces)
    keys = sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert keys == [(s, i) for s in range(steps) for i in range(workers * per_step)]
    assert len({t["metadata"]["service_name"] for t in traces}) == workers
    for trace in traces:
        assert [m["role"] for m in trace["messages"]] == ["user", "assistant"]
        assert "reward" in str(trace["spans"])
    rewards = {
        row["step"] for row in read_logs(project, run) if any("rollout.reward" in k for k in row)
    }
    assert rewards == set(range(steps))


def test_multiprocess_example_gives_one_run_for_all_workers(project, trackio_dir):
    result = _run_example(
        "multiprocess_rollouts.py",
        trackio_dir,
        "--project",
        project,
        "--name",
        "mp",
        "--workers",
        "3",
        "--samples-per-step",
        "4",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"TRACKIO_DIR={trackio_dir} " in result.stdout  # the show command names the folder
    _check_one_run(project, "mp", workers=3, per_step=4)


def test_ray_example_with_a_real_local_ray(project, trackio_dir):
    pytest.importorskip("ray", reason="Ray is in the test extra; `make test` installs it")
    result = _run_example(
        "ray_rollouts.py",
        trackio_dir,
        "--project",
        project,
        "--name",
        "ray",
        "--workers",
        "2",
        "--samples-per-step",
        "4",
        "--num-cpus",
        "2",
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert f"TRACKIO_DIR={trackio_dir} " in result.stdout  # the show command names the folder
    _check_one_run(project, "ray", workers=2, per_step=4)


ACTORS = textwrap.dedent(
    """
    # Ray actors that each call otel_trackio.configure() (offload on by default): every actor's
    # writer process logs into the one run the driver opened.
    import os
    import signal
    import sys
    import ray
    import trackio

    project, run_name = sys.argv[1], sys.argv[2]
    driver = trackio.init(project=project, name=run_name, auto_log_cpu=False)
    driver.log({"actors": 2}, step=0)  # written at finish: only then does the run exist by name
    driver.finish()  # the actors resume it (resume="allow" finds a run by its name)

    @ray.remote
    class Actor:
        def rollouts(self, worker, ending):
            import otel_trackio
            from otel_trackio import rollout

            telemetry = otel_trackio.configure(project, run_name, resume="allow", metrics=False)
            offloaded = telemetry.span_exporter.offloaded
            assert offloaded is not None
            if ending == "killed":  # a writer far behind: nothing it was handed is stored yet
                os.kill(offloaded.writer_pid, signal.SIGSTOP)
            for step in range(2):
                for i in range(5):
                    with rollout(step, worker * 5 + i) as span:
                        span.set_attribute("reward", float(i % 2))
            if ending == "shutdown":
                telemetry.shutdown()  # everything stored before the result goes back
            else:  # acknowledged (in the spool), not stored: ray.shutdown() kills actor and writer
                telemetry.tracer_provider.force_flush()
            return offloaded.writer_pid

    ray.init(num_cpus=2, include_dashboard=False, _node_ip_address="127.0.0.1")
    actors = [Actor.remote() for _ in range(2)]
    pids = ray.get([a.rollouts.remote(k, sys.argv[3]) for k, a in enumerate(actors)])
    ray.shutdown()
    print("writer pids:", " ".join(str(p) for p in pids), flush=True)
    """
)


@pytest.mark.parametrize("ending", ["shutdown", "killed"])
def test_offload_inside_ray_actors_logs_into_one_run(project, trackio_dir, ending):
    """``handle.shutdown()`` in the actor stores everything before its last result; an actor
    that skips it is killed with its writer by ``ray.shutdown()``, and the next start for the
    project (here an exporter of another run) stores its spool in the actors' run."""
    pytest.importorskip("ray", reason="Ray is in the test extra; `make test` installs it")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "RAY_ADDRESS"))}
    env.update(
        TRACKIO_DIR=trackio_dir,
        TRACKIO_DISABLE_TELEMETRY="1",
        RAY_USAGE_STATS_ENABLED="0",
        RAY_AUTH_MODE="disabled",
    )
    result = subprocess.run(
        [sys.executable, "-c", ACTORS, project, "actors", ending],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        cwd=REPO,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    (line,) = [x for x in result.stdout.splitlines() if x.startswith("writer pids:")]
    writers = [int(p) for p in line.split(":", 1)[1].split()]
    if ending == "killed":  # the next start of anything for the project, once Ray is done
        from otel_trackio import TrackioSpanExporter
        from otel_trackio._offload.writer import abandoned

        left = Path(trackio_dir) / "otel-trackio-spool" / project
        wait_until(lambda: len(abandoned(left)) == 2, what="both actors' spools let go")
        TrackioSpanExporter(project, "next", offload=True).shutdown()
        wait_until(lambda: len(read_traces(project, "actors")) >= 20, what="the actors' samples")
    wait_until(lambda: all(not Path(f"/proc/{pid}").exists() for pid in writers))  # none left
    traces = read_traces(project, "actors")
    keys = sorted((t["step"], t["metadata"]["sample_index"]) for t in traces)
    assert keys == [(s, i) for s in range(2) for i in range(10)]
    assert {t["metadata"]["reward"] for t in traces} == {0.0, 1.0}
