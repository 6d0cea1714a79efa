"""Figure 15: what each spool fsync policy costs (``OTEL_EXPORTER_TRACKIO_SPOOL_FSYNC``).

Measured in one run, on the disk of the Trackio folder (where spools live by default):

* an acknowledged append — one request of 20 two-span samples (about 3 KB), what the receiver
  and an offloading exporter do per export — with ``never``/``cycle`` (no fsync on the append
  path) and with ``request`` (an fsync before the append returns);
* a drain cycle's checkpoint with ``cycle`` (the covered segment bytes, then the checkpoint and
  its folder forced to disk) against ``never`` (written, not forced).

``cycle`` costs nothing per request and one checkpoint fsync per drain cycle (a cycle hands over
up to 1 MB, so at most a few per second under load and about two per second when idle with
something held); ``request`` multiplies the producer's cost of an acknowledged request by the
ratio printed. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

from otel_trackio._codec import spool as codec
from otel_trackio._core.records import SpanRecord
from otel_trackio._spool.drain import Drainer
from otel_trackio._spool.segments import Producer


def _request_entry() -> bytes:
    """One request's spool entry: 20 two-span samples (a root and a model call each)."""
    records = []
    for i in range(20):
        trace_id = 1000 + i
        attributes = {"step": 0, "sample_index": i}
        chat = {"output.value": "y" * 60}
        records.append(SpanRecord(trace_id, 2, "chat", 1, 9, parent_id=1, attributes=chat))
        records.append(SpanRecord(trace_id, 1, "rollout", 0, 10, attributes=attributes))
    return codec.encode_records(records, ("bench", "r"))


def _appends(folder: Path, policy: str, payload: bytes, count: int) -> float:
    """Seconds per acknowledged append under ``policy`` (median of 3 rounds)."""
    rounds = []
    for k in range(3):
        spool = folder / f"{policy}-{k}"
        producer = Producer(spool, 1 << 34, fsync=policy)
        started = time.perf_counter()
        for _ in range(count):
            producer.append_all([(codec.SPANS, payload)])
        rounds.append((time.perf_counter() - started) / count)
        producer.close()
        shutil.rmtree(spool)
    return statistics.median(rounds)


def _checkpoints(folder: Path, policy: str, payload: bytes, count: int) -> float:
    """Seconds per drain-cycle checkpoint under ``policy`` (an entry appended before each)."""
    spool = folder / f"checkpoint-{policy}"
    producer = Producer(spool, 1 << 34, fsync="never")
    drainer = Drainer(spool, lambda route: None, fsync=policy)
    spent = 0.0
    for _ in range(count):
        producer.append_all([(codec.SPANS, payload)])
        drainer.position = drainer.reader.read(drainer.position, 1 << 20)[-1].end
        started = time.perf_counter()
        drainer.checkpoint_if_due(0.0)
        spent += time.perf_counter() - started
    drainer.close()
    producer.close()
    shutil.rmtree(spool)
    return spent / count


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--appends", type=int, default=500)
    parser.add_argument("--checkpoints", type=int, default=200)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="fsync-", dir=w.TRACKIO_DIR))
    try:
        payload = _request_entry()
        never = _appends(folder, "never", payload, args.appends)
        request = _appends(folder, "request", payload, args.appends)
        cycle_off = _checkpoints(folder, "never", payload, args.checkpoints)
        cycle_on = _checkpoints(folder, "cycle", payload, args.checkpoints)
    finally:
        shutil.rmtree(folder, ignore_errors=True)
    ratio = request / never
    print(
        f"one acknowledged append of {len(payload)} B: never/cycle {never * 1e6:.0f} us, "
        f"request {request * 1e6:.0f} us ({ratio:.0f}x)"
    )
    print(
        f"one drain-cycle checkpoint: never {cycle_off * 1e3:.2f} ms, cycle {cycle_on * 1e3:.2f} ms"
    )
    w.write_result(
        "13. spool fsync=request: an acknowledged append vs cycle (default)",
        f"{request * 1e6:.0f} us vs {never * 1e6:.0f} us ({ratio:.0f}x)",
        "(recorded)",
        None,
    )
    w.write_result(
        "13. spool fsync=cycle: one drain-cycle checkpoint vs never",
        f"{cycle_on * 1e3:.2f} ms vs {cycle_off * 1e3:.2f} ms",
        "(recorded)",
        None,
    )
    print(
        f"spool fsync: request {ratio:.0f}x the cost of an acknowledged append "
        f"({request * 1e6:.0f} us vs {never * 1e6:.0f} us); cycle: "
        f"{cycle_on * 1e3:.2f} ms per drain-cycle checkpoint (never: {cycle_off * 1e3:.2f} ms)"
    )


if __name__ == "__main__":
    main()
