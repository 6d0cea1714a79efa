"""Figure 14: time until everything is stored at shutdown, with offload (the default).

A span storm (``--samples`` samples of the shared workload, as fast as the SDK takes them) into
``TrackioSpanProcessor(TrackioSpanExporter(offload=True))``; then ``provider.shutdown()``. Measured:
the seconds ``shutdown()`` takes, and how many of the samples are in Trackio's storage when it
returns (target: all). Once as the machine is, once with ``--burners`` busy loops (2 per core by
default) running through the storm and the shutdown: the writer, at the lowest priority, gets a
sliver of the CPU there, and the exiting process finishes the drain at its own priority.
The last lines printed are the figures.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported

PROJECT = "bench-shutdown"


def storm(samples: int, burners: int) -> tuple[float, float, int]:
    """(storm seconds, shutdown seconds, samples stored when shutdown returned)."""
    from opentelemetry.sdk.trace import TracerProvider

    from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor

    name = uuid.uuid4().hex[:8]
    loops = [subprocess.Popen([sys.executable, "-c", "while 1: pass"]) for _ in range(burners)]
    try:
        with w.quiet_stdout():
            exporter = TrackioSpanExporter(PROJECT, name, offload=True, summary=False)
            provider = TracerProvider()
            provider.add_span_processor(TrackioSpanProcessor(exporter, max_queue_size=65536))
        t0 = time.perf_counter()
        w.emit_workload(provider.get_tracer("bench"), samples)
        t1 = time.perf_counter()
        provider.shutdown()
        t2 = time.perf_counter()
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()
    return t1 - t0, t2 - t1, w.count_traces(PROJECT, name)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=3000)
    parser.add_argument(
        "--burners", type=int, default=2 * (os.cpu_count() or 2), help="busy loops, busy arm"
    )
    args = parser.parse_args()
    for where, burners in (("quiet", 0), ("busy", args.burners)):
        rollout, shutdown, stored = storm(args.samples, burners)
        print(
            f"{where}: storm {rollout:.1f} s, shutdown {shutdown:.1f} s, "
            f"{stored}/{args.samples} samples stored when it returned",
            file=sys.stderr,
        )
        w.write_result(
            f"14. span storm of {args.samples:,} samples, offload, {where}"
            + (f" ({burners} busy loops)" if burners else "")
            + ": shutdown() until everything is stored",
            f"{shutdown:.1f} s, {stored:,}/{args.samples:,} stored",
            "all stored",
            stored == args.samples,
        )
    w.cleanup()


if __name__ == "__main__":
    main()
