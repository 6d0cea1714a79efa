"""Run every benchmark under bench/ and print a summary table (``make bench``).

Each script runs in its own process (fresh interpreter, its own temp ``TRACKIO_DIR``) and prints
its figures last; this runner collects them and prints one table: figure, measured, target, met.
Workload sizes are scaled to finish in under 10 minutes on a 2-core machine; pass ``--full`` for
the full-size runs (20k-sample workloads, 1,000,000 spans for the memory figure), which take
longer. Exit status is 0 even when a target is missed: the table says which.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def plan(full: bool) -> list[tuple[str, list[str]]]:
    samples = "20000" if full else "2000"
    return [
        ("bench_sampler.py", ["--samples", "20000", "--rounds", "3"]),
        ("bench_rollout_overhead.py", ["--samples", samples, "--rounds", "3"]),
        ("bench_asyncio.py", ["--rounds", "20" if full else "12"]),
        ("bench_processor.py", []),
        ("bench_end_to_end.py", ["--samples", samples, "--rounds", "2"]),
        ("bench_stragglers.py", ["--per-step", "4096", "--rounds", "2"]),
        ("bench_receiver.py", ["--samples", samples if full else "1000"]),
        ("bench_memory.py", ["--spans", "1000000" if full else "100000"]),
        ("bench_metrics.py", ["--exports", "50" if full else "20"]),
        ("bench_offload.py", ["--samples", samples, "--async-samples", "2000", "--rounds", "3"]),
        ("bench_shutdown.py", ["--samples", "3000"]),
        ("bench_soak.py", ["--workers", "4", "--seconds", "180" if full else "60"]),
        ("bench_soak.py", ["--workers", "4", "--seconds", "60", "--protocol", "grpc"]),
        ("bench_spool_fsync.py", ["--appends", "2000" if full else "500"]),
        ("bench_hostile.py", []),
        ("bench_images.py", ["--samples", "1000" if full else "300"]),
        ("bench_ingest.py", ["--mb", "100" if full else "20"]),
        ("bench_verl.py", ["--samples", "1000" if full else "250", "--rounds", "3"]),
    ]


def metrics_row(last_line: str) -> dict[str, object] | None:
    """bench_metrics.py prints 'metrics export, N series (...): X ms per export' last."""
    match = re.search(r"([\d,]+) series.*?: ([\d.]+) ms per export", last_line)
    if not match:
        return None
    return {
        "figure": f"7. metric exporter, one export of {match.group(1)} series",
        "measured": f"{match.group(2)} ms",
        "target": "(recorded)",
        "met": None,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--full", action="store_true", help="full-size workloads (slower)")
    args = parser.parse_args()

    fd, results_path = tempfile.mkstemp(prefix="otel-trackio-bench-", suffix=".jsonl")
    os.close(fd)
    env = dict(os.environ, BENCH_RESULTS=results_path)
    env.setdefault("TRACKIO_DISABLE_TELEMETRY", "1")
    rows: list[dict[str, object]] = []
    started = time.perf_counter()
    for script, script_args in plan(args.full):
        path = os.path.join(HERE, script)
        if not os.path.exists(path):
            rows.append({"figure": script, "measured": "missing", "target": "", "met": None})
            continue
        print(f"== {script} {' '.join(script_args)}", flush=True)
        t0 = time.perf_counter()
        proc = subprocess.run(
            [sys.executable, path, *script_args], env=env, capture_output=True, text=True
        )
        sys.stdout.write(proc.stderr + proc.stdout)
        print(f"   ({time.perf_counter() - t0:.0f} s)", flush=True)
        if proc.returncode != 0:
            rows.append(
                {
                    "figure": script,
                    "measured": f"failed ({proc.returncode})",
                    "target": "",
                    "met": False,
                }
            )
            continue
        if script == "bench_metrics.py":
            lines = proc.stdout.strip().splitlines()
            row = metrics_row(lines[-1]) if lines else None
            if row is not None:
                rows.append(row)
    with open(results_path, encoding="utf-8") as fh:
        rows = [json.loads(line) for line in fh if line.strip()] + rows
    os.unlink(results_path)
    rows.sort(key=lambda r: str(r["figure"]))

    def met(value: object) -> str:
        return "-" if value is None else ("yes" if value else "NO")

    table = [("figure", "measured", "target", "met?")]
    table += [(str(r["figure"]), str(r["measured"]), str(r["target"]), met(r["met"])) for r in rows]
    widths = [max(len(row[i]) for row in table) for i in range(4)]
    print(f"\nsummary ({time.perf_counter() - started:.0f} s, {os.cpu_count()} CPUs):")
    for k, row in enumerate(table):
        print("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if k == 0:
            print("  ".join("-" * w for w in widths))


if __name__ == "__main__":
    main()
