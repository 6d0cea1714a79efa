"""The store process (``otel_trackio/_trackio/store.py``): Trackio's storage write beside the
conversion, forked from a writer before its threads start.

What a pipeline does with it (writes behind, settled, a killed store): ``test_pipeline.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import read_traces, trackio_dir_path, wait_until

from otel_trackio._spool.segments import is_locked

WAIT = 30.0  # seconds: the most a state may take to show with the CPU busy

# A writer in miniature: it holds a spool's drain lock, forks its store with no other thread
# running, has one Trace written there, says what it knows, then waits to be killed.
WRITER = textwrap.dedent(
    """
    import sys, threading, time, uuid
    from pathlib import Path
    from otel_trackio._spool.segments import Lock
    from otel_trackio._trackio.store import TraceStore

    lock_path, trackio_dir, project = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
    lock = Lock(lock_path)
    assert lock.acquire()
    store = TraceStore(trackio_dir)
    store.start()
    assert threading.active_count() == 2  # this thread and the store's answer reader
    ready_at_once = store.ready(0.5)
    entry = {
        "project": project, "run": "forked", "run_id": None, "step": 3,
        "log_id": uuid.uuid4().hex,
        "metrics": {"rollout/traces": [{"_type": "trackio.trace", "messages": [],
                    "metadata": {"sample_index": 7}, "spans": []}]},
    }
    request = store.submit([entry])
    print("ready", ready_at_once, "answer", store.wait(request, 30.0), flush=True)
    print("store", store._process.pid, flush=True)
    time.sleep(120)
    """
)


def test_a_store_forked_from_a_writer_is_ready_at_once_and_lets_the_spool_go_when_it_is_killed(
    project: str, tmp_path: Path
) -> None:
    lock_path = tmp_path / "drain.lock"
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, str(lock_path), str(trackio_dir_path()), project],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None
        said = writer.stdout.readline().split()
        assert said == ["ready", "True", "answer", "None"], said  # no start-up, stored
        store_pid = int(writer.stdout.readline().split()[1])
        # A fork, not a fresh interpreter; it kept none of the writer's files open.
        cmdline = Path(f"/proc/{store_pid}/cmdline").read_bytes()
        assert cmdline == Path(f"/proc/{writer.pid}/cmdline").read_bytes()
        held = {
            os.readlink(f"/proc/{store_pid}/fd/{fd}") for fd in os.listdir(f"/proc/{store_pid}/fd")
        }
        assert str(lock_path) not in held
        [trace] = read_traces(project, "forked")
        assert trace["metadata"]["sample_index"] == 7
        assert is_locked(lock_path)
        writer.kill()  # as a launcher kills a writer: the store sees its pipe close and ends
        writer.wait(WAIT)
        wait_until(
            lambda: not Path(f"/proc/{store_pid}").exists() or _zombie(store_pid),
            "the store to end with its writer",
            WAIT,
        )
        assert not is_locked(lock_path)
    finally:
        if writer.poll() is None:
            writer.kill()
            writer.wait(WAIT)


def _zombie(pid: int) -> bool:
    """True when process ``pid`` has ended and waits to be reaped (its parent was killed)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ")[1].startswith("Z")
    except (OSError, IndexError):
        return True


def test_the_writers_nice_reaches_its_forked_store(tmp_path: Path) -> None:
    script = textwrap.dedent(
        """
        import os, sys
        from pathlib import Path
        from otel_trackio._trackio.store import TraceStore
        store = TraceStore(Path(sys.argv[1]))
        store.start()
        assert store.ready(10.0)
        store.lower_priority(19)
        print(os.getpriority(os.PRIO_PROCESS, store._process.pid), flush=True)
        store.close()
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", script, str(trackio_dir_path())],
        capture_output=True,
        text=True,
        timeout=WAIT,
    )
    assert done.stdout.split() == ["19"], done.stderr
