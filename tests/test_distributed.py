"""The distributed examples, run for real: worker processes and a local Ray (2 actors) sending
over the official OTLP exporters to one receiver, one Trackio run for all of them."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import read_logs, read_traces

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
    _check_one_run(project, "ray", workers=2, per_step=4)
