"""Figure 16: verl's real agent loop traced by otel-trackio against verl's own Trackio tracing.

``tests/verl_tool_agent.py`` runs verl 0.9.1's ``ToolAgentLoop`` (hermes tool parser, its
``LLMServerClient``, a traced tool; the policy scripted, a locally trained tokenizer) in the
real verl environment (``.venv/verl-env``, made by ``make test-packages``), once per arm in a
fresh process, arms alternated:

- ``trackio``: ``trace.backend=trackio``, verl's own tracing: one flat Trace per traced call,
  logged from the rollout;
- ``otel``: ``trace.backend=otel``, otel-trackio's default route: one Trace per sample (the
  conversation the loop held), stored by the offload writer.

Measured per arm: the rollout's time per sample (the agent loops, inside the process), the whole
process until everything is stored, and the Traces stored per sample. Without the verl
environment the figure is skipped with a note.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import _workload as w

ROOT = Path(__file__).resolve().parent.parent
VERL_PYTHON = ROOT / ".venv" / "verl-env" / "bin" / "python"
AGENT = ROOT / "tests" / "verl_tool_agent.py"


def run(backend: str, samples: int) -> tuple[float, float, int]:
    """(rollout seconds, process seconds, Traces stored) of one arm in a fresh process."""
    folder = tempfile.mkdtemp(prefix="otel-trackio-bench-verl-")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "VERL_"))}
    env["TRACKIO_DIR"] = folder
    args = [str(VERL_PYTHON), str(AGENT), "verl-bench", backend, "chatml", "0", backend]
    started = time.perf_counter()
    done = subprocess.run(
        [*args, str(samples)], env=env, capture_output=True, text=True, check=True
    )
    process = time.perf_counter() - started
    match = re.search(r"ROLLOUT_SECONDS ([\d.]+)", done.stdout)
    assert match, done.stdout[-2000:] + done.stderr[-2000:]
    with sqlite3.connect(Path(folder) / "verl-bench.db") as db:
        (stored,) = db.execute("SELECT COUNT(*) FROM traces").fetchone()
    return float(match.group(1)), process, int(stored)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=250, help="samples per step (2 steps)")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    if not VERL_PYTHON.exists():
        print(f"skipped: {VERL_PYTHON} is missing (`make test-packages` makes it)", file=sys.stderr)
        return
    total = 2 * args.samples
    results: dict[str, list[tuple[float, float, int]]] = {"trackio": [], "otel": []}
    for _ in range(args.rounds):
        for backend in results:
            results[backend].append(run(backend, args.samples))
    per_sample = {
        b: statistics.median(r[0] for r in rs) / total * 1000 for b, rs in results.items()
    }
    whole = {b: statistics.median(r[1] for r in rs) for b, rs in results.items()}
    stored = {b: rs[-1][2] / total for b, rs in results.items()}
    for backend in results:
        print(
            f"{backend}: rollout {per_sample[backend]:.2f} ms per sample, process "
            f"{whole[backend]:.1f} s, {stored[backend]:.1f} Traces per sample",
            file=sys.stderr,
        )
    ratio = per_sample["otel"] / per_sample["trackio"]
    w.write_result(
        f"16. verl's ToolAgentLoop ({total:,} samples): rollout time, otel-trackio / verl's"
        " own Trackio tracing",
        f"{ratio:.2f}x ({per_sample['otel']:.2f} vs {per_sample['trackio']:.2f} ms per sample);"
        f" Traces per sample {stored['otel']:.1f} vs {stored['trackio']:.1f}",
        "<= 1.00x, one Trace per sample",
        ratio <= 1.0 and stored["otel"] == 1.0,
    )


if __name__ == "__main__":
    main()
