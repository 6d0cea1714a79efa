"""A self-hosted Trackio server (``trackio show`` on loopback) as the run's home: chosen by the
``OTEL_EXPORTER_TRACKIO_SERVER_URL`` variable alone, under the shipped default (offload on); a
server killed and started again mid-run loses nothing; the summary names the server, never a
local folder nor the write token."""

from __future__ import annotations

import os
import socket
import sqlite3
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from conftest import start_python, wait_for_file

TOKEN = "otel-trackio-test-token"
SERVER = textwrap.dedent(
    """
    import sys, time
    import trackio
    app, url, share, full = trackio.show(
        open_browser=False, block_thread=False, server_port=int(sys.argv[1])
    )
    print("WRITE URL", full, flush=True)
    while True:
        time.sleep(1)
    """
)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class TrackioServer:
    """``trackio show`` in a process of its own, with its own storage; stopped and started
    again on the same port with the same write token."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder
        self.port = _free_port()
        self.process: subprocess.Popen[str] | None = None
        self.write_url = ""

    def start(self) -> None:
        env = {
            **os.environ,
            "TRACKIO_DIR": str(self.folder),
            "TRACKIO_WRITE_TOKEN": TOKEN,
            "TRACKIO_DISABLE_TELEMETRY": "1",
        }
        self.process = subprocess.Popen(
            [sys.executable, "-c", SERVER, str(self.port)],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith("WRITE URL "):
                self.write_url = line.split(" ", 2)[2].strip()
                return
        raise RuntimeError(f"trackio show exited ({self.process.wait()})")

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(30)

    def traces(self, project: str) -> list[tuple[str, int, int]]:
        """(run id, step, sample_index) of every Trace the server stored, from its raw SQLite."""
        import json

        with sqlite3.connect(self.folder / f"{project}.db") as db:
            rows = db.execute("SELECT run_id, step, metadata FROM traces").fetchall()
        return sorted(
            (run, step, json.loads(metadata)["sample_index"]) for run, step, metadata in rows
        )


@pytest.fixture
def trackio_server(tmp_path):
    server = TrackioServer(tmp_path / "server")
    server.start()
    yield server
    server.stop()


ROLLOUT = textwrap.dedent(
    """
    import sys, time
    from pathlib import Path
    import otel_trackio
    from opentelemetry import trace
    handle = otel_trackio.configure("RP", "r")  # no server in the code: the variable names it
    tracer = trace.get_tracer("t")

    def step(number):
        for index in range(12):
            with tracer.start_as_current_span(
                "rollout", attributes={"step": number, "sample_index": index}
            ):
                pass

    step(0)
    assert handle.force_flush()
    Path(sys.argv[1], "step-0").touch()
    while not Path(sys.argv[1], "go").exists():
        time.sleep(0.05)
    step(1)  # while the server is down
    handle.shutdown()
    """
)


def test_the_server_variable_alone_sends_the_run_to_a_server_that_may_restart(
    trackio_server, tmp_path
):
    local = tmp_path / "local"
    signals = tmp_path / "signals"
    signals.mkdir()
    rollout = start_python(
        ROLLOUT,
        str(local),
        str(signals),
        OTEL_EXPORTER_TRACKIO_SERVER_URL=trackio_server.write_url,
    )
    wait_for_file(signals / "step-0", rollout)
    trackio_server.stop()  # killed mid-run
    (signals / "go").touch()
    time.sleep(3)
    trackio_server.start()  # the same port and write token
    _, err = rollout.communicate(timeout=180)
    assert rollout.returncode == 0, err

    stored = trackio_server.traces("RP")
    assert [(step, index) for _, step, index in stored] == [
        (step, index) for step in (0, 1) for index in range(12)
    ]  # each sample once
    assert len({run for run, _, _ in stored}) == 1  # in one run
    summary = [line for line in err.splitlines() if line.startswith("otel-trackio: ")]
    assert any("24 samples logged to 'RP' run 'r'" in line for line in summary), err
    [where] = [line for line in summary if "open them" in line]
    assert f"Trackio server http://127.0.0.1:{trackio_server.port}, project 'RP'" in where
    assert TOKEN not in err and str(local) not in where
