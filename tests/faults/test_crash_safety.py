"""Crash safety: a process SIGKILLed mid-run leaves a Trackio project holding what was exported.

"Exported" means: the span exporter's ``export()`` returned SUCCESS — e.g. after
``provider.force_flush()`` with a ``BatchSpanProcessor``. ``run.log`` alone only queues (Trackio's
sender thread writes every 0.5 s); the exporter writes the queue to SQLite before ``export()``
returns, so that promise holds even when the process dies right after.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import uuid
from pathlib import Path

from conftest import read_logs, read_traces, wait_until
from fault_tally import tally
from trackio.sqlite_storage import SQLiteStorage

REPO = Path(__file__).resolve().parents[2]

CHILD = textwrap.dedent(
    """
    import sys
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor
    from otel_trackio import TrackioSpanExporter

    exporter = TrackioSpanExporter(sys.argv[1], name="killed")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=60_000))
    tracer = provider.get_tracer("rollout")
    step = 0
    while True:  # runs until killed
        for i in range(4):
            with tracer.start_as_current_span(
                "sample", attributes={"step": step, "sample_index": i}
            ):
                with tracer.start_as_current_span("generate"):
                    pass
        provider.force_flush()  # every sample of this step is exported now
        print(f"exported {step}", flush=True)
        # An unflushed sample in flight at the kill: it may be lost, nothing else may.
        with tracer.start_as_current_span("sample", attributes={"step": step, "sample_index": 99}):
            pass
        step += 1
    """
)


def test_sigkill_mid_run_keeps_every_exported_sample():
    project = f"crash-{uuid.uuid4().hex[:12]}"
    child = subprocess.Popen(
        [sys.executable, "-c", CHILD, project],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
        cwd=REPO,
        env={**os.environ, "TRACKIO_DISABLE_TELEMETRY": "1"},
    )
    exported_steps = []
    try:
        assert child.stdout is not None
        for line in child.stdout:
            if not line.startswith("exported "):
                continue  # Trackio's own messages
            exported_steps.append(int(line.split()[1]))
            if len(exported_steps) >= 12:
                break
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait(60)
    assert child.returncode == -signal.SIGKILL
    assert exported_steps == list(range(12))
    tally.tried("crash", 4 * len(exported_steps))
    expected = {(s, i) for s in exported_steps for i in range(4)}

    def stored_now() -> set[tuple[int, int]]:
        if project not in SQLiteStorage.get_projects() or "killed" not in SQLiteStorage.get_runs(
            project
        ):
            return set()
        return {
            (t["step"], t["metadata"].get("sample_index")) for t in read_traces(project, "killed")
        }

    # Offloaded (the default), the writer outlives the rollout: it stores what was exported, then
    # exits.
    wait_until(lambda: expected <= stored_now(), timeout=60, what="the exported samples")
    traces = read_traces(project, "killed")  # the project opens after the kill
    read_logs(project, "killed")
    stored = {(t["step"], t["metadata"].get("sample_index")) for t in traces}
    missing = expected - stored
    tally.lost("crash", len(missing))
    assert not missing, f"{len(missing)} exported samples missing after SIGKILL: {sorted(missing)}"
    assert all(len(t["spans"]) == 2 for t in traces if t["metadata"].get("sample_index") != 99)
