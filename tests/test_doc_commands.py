"""The receiver's commands as the README and docs/multi-process.md write them, run as they are
(read from the files, not copied here): ``otel-trackio serve``, then each worker command with the
README's ``worker.py``, in a shell whose PATH is this environment's, as an activated venv's is.
What each worker sent is counted in Trackio's storage by (step, sample_index), in one run."""

from __future__ import annotations

import json
import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
MULTI_PROCESS = ROOT / "docs" / "multi-process.md"


def _blocks(page: Path, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", page.read_text(), flags=re.S)


def _commands(page: Path) -> tuple[str, list[str]]:
    """The ``otel-trackio serve`` line and the worker lines of the page's receiver block."""
    [block] = [b for b in _blocks(page, "bash") if "otel-trackio serve" in b and "worker.py" in b]
    lines = [line.split("  #", 1)[0].strip() for line in block.splitlines()]
    [serve] = [line for line in lines if line.startswith("otel-trackio serve")]
    workers = [line for line in lines if line.endswith("python worker.py")]
    return serve, workers


def _worker_file() -> str:
    [worker] = [b for b in _blocks(README, "python") if b.startswith("# worker.py")]
    return worker


def _stored(trackio_dir: Path, project: str) -> list[tuple[str, int, int]]:
    with sqlite3.connect(trackio_dir / f"{project}.db") as db:
        rows = db.execute("SELECT run_id, step, metadata FROM traces").fetchall()
    return sorted((run, step, json.loads(meta)["sample_index"]) for run, step, meta in rows)


def test_the_worker_extra_holds_what_the_worker_commands_run():
    pyproject = (ROOT / "pyproject.toml").read_text()
    [extra] = re.findall(r"^worker = \[(.*?)^\]", pyproject, flags=re.S | re.M)
    names = set(re.findall(r'"([a-z0-9-]+)', extra))
    assert {
        "opentelemetry-distro",  # opentelemetry-instrument
        "opentelemetry-exporter-otlp-proto-grpc",  # OTEL_TRACES_EXPORTER=otlp's default
        "opentelemetry-exporter-otlp-proto-http",  # OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf
    } <= names


@pytest.mark.parametrize("page", [README, MULTI_PROCESS], ids=lambda p: p.name)
def test_the_receiver_commands_run_as_written(page, tmp_path):
    serve, workers = _commands(page)
    assert len(workers) == 2  # gRPC, then HTTP
    project = re.search(r"--project (\S+)", serve).group(1)
    (tmp_path / "worker.py").write_text(_worker_file())
    trackio_dir = tmp_path / "trackio"
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "TRACKIO_DIR"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    env["TRACKIO_DIR"] = str(trackio_dir)
    said = tmp_path / "serve.out"
    with open(said, "w") as out:
        receiver = subprocess.Popen(
            f"exec {serve}",  # the shell becomes the receiver: Ctrl-C reaches it
            shell=True,
            cwd=tmp_path,
            env=env,
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        deadline = time.monotonic() + 120
        while "otel-trackio serve: listening on" not in said.read_text():  # its start-up line
            assert receiver.poll() is None, said.read_text()
            assert time.monotonic() < deadline, said.read_text()
            time.sleep(0.1)
        for number, worker in enumerate(workers, start=1):
            done = subprocess.run(
                worker,
                shell=True,
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=120,
            )
            assert done.returncode == 0, (worker, done.stderr)
            assert "Traceback" not in done.stderr, (worker, done.stderr)
            deadline = time.monotonic() + 60  # each worker's 8 samples, stored once
            expected = sorted((s, i) for s in range(2) for i in range(4)) * number
            while sorted((s, i) for _, s, i in _stored(trackio_dir, project)) != sorted(expected):
                assert time.monotonic() < deadline, (worker, _stored(trackio_dir, project))
                time.sleep(0.2)
    finally:
        receiver.send_signal(signal.SIGINT)
        receiver.wait(timeout=120)
    assert len({run for run, _, _ in _stored(trackio_dir, project)}) == 1  # one run
