"""Figure 13: an asyncio agent loop with hundreds of samples in flight, and what export costs it.

The shape of verl's agent loop (and most agent RL): one event loop per worker runs a step's
samples concurrently. Here 8 steps x 256 concurrent samples; each sample is a root span
(``step``, ``sample_index``) with three model calls that each await 2 ms and carry about 2 KB of
GenAI messages, and a tool span. A ticker task sleeps 1 ms at a time and records how late it
wakes: the event-loop lag, i.e. how long something else (the span processor, the export thread
holding the GIL) kept the loop from running.

Arms, each in a fresh process (no warm caches or threads carried over), alternated and repeated:

* ``noop``          — the OTel SDK + ``BatchSpanProcessor`` + an exporter that drops everything
  (the floor: tracing on, export free);
* ``noop-trackio``  — the same in a process that imported ``trackio``: its ~55k import-time
  objects make each full garbage collection, on the loop's thread, cost more. What a process
  pays that imports Trackio itself; with offload (the default) otel-trackio never imports it in
  the rollout process — the writer process opens the run;
* ``configure``     — ``otel_trackio.configure()`` (defaults: offload to a writer process, the
  objects alive after setup frozen out of the garbage collector's view);
* ``configure-no-gc-freeze`` — ``configure(gc_freeze=False)``: the collector's full collections
  on the loop's thread walk the setup's objects too (the default before #24);
* ``configure-inproc`` — ``configure(offload=False)`` (conversion and Trackio writes here);
* ``hand-built``    — ``BatchSpanProcessor(TrackioSpanExporter(project, name))``, the README's
  "By hand" path with the exporter's own defaults.

Each child process runs the ``STEPS``-step rollout ``REPEATS`` times (a rollout process runs
many steps: the figures pool them — loop lags of all repeats, their summed wall time). Per round
each arm's loop-lag p99 and wall time are divided by the same round's ``noop``; the figures are
the medians of those ratios (robust to a busy machine: a neighbour's burst hits one
round, not the median). CPU per span is the rollout process's own CPU time
(``time.process_time()``: every thread of this process, never the writer process's) from the first
span to the processor's queue exported — in process, to every sample logged (``force_flush``) —
minus the ``noop`` arm's, over the spans; the
exporter's own counters play no part. Every arm's samples are counted in Trackio's storage after
its shutdown. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import subprocess
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

ARMS = (
    "noop",
    "noop-trackio",
    "configure",
    "configure-no-gc-freeze",
    "configure-inproc",
    "hand-built",
)
STEPS = 8
CONCURRENCY = 256
MODEL_CALLS = 3
SPANS_PER_SAMPLE = 2 + MODEL_CALLS  # root, model calls, one tool span
REPEATS = 3
LATENCY = 0.002
TICK = 0.001
PROJECT = "bench-asyncio"
LAG_TARGET = 1.10
WALL_TARGET = 1.05

# About 2 KB of messages per model call: a system prompt, the question, the turns so far.
_SYSTEM = (
    "You are a careful agent solving multi-step tasks with tools. Think step by step, call the "
    "calculator for any arithmetic, and give the final answer in one sentence. "
) * 10


def _messages(i: int, turn: int) -> tuple[str, str]:
    question = f"Task {i}: a tank holds {100 + i % 97} litres and leaks {1 + i % 7} per hour."
    history: list[dict[str, Any]] = [
        {"role": "system", "parts": [{"type": "text", "content": _SYSTEM}]},
        {"role": "user", "parts": [{"type": "text", "content": question}]},
    ]
    for past in range(1, turn):
        history.append(
            {
                "role": "assistant",
                "parts": [{"type": "text", "content": f"Step {past}: computing part {past}."}],
            }
        )
    output = [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": f"After turn {turn} the answer is {i * turn}."}],
            "finish_reason": "stop",
        }
    ]
    return json.dumps(history), json.dumps(output)


async def _sample(tracer: Any, step: int, i: int, messages: list[tuple[str, str]]) -> None:
    with tracer.start_as_current_span("agent", attributes={"step": step, "sample_index": i}):
        for turn in range(1, MODEL_CALLS + 1):
            inputs, outputs = messages[turn - 1]
            with tracer.start_as_current_span(
                "chat qwen",
                attributes={
                    "gen_ai.operation.name": "chat",
                    "gen_ai.request.model": "qwen",
                    "gen_ai.usage.input_tokens": 400 + turn * 20,
                    "gen_ai.usage.output_tokens": 20 + i % 13,
                    "gen_ai.input.messages": inputs,
                    "gen_ai.output.messages": outputs,
                },
            ):
                await asyncio.sleep(LATENCY)
            if turn == 1:
                with tracer.start_as_current_span(
                    "execute_tool calculator",
                    attributes={
                        "gen_ai.operation.name": "execute_tool",
                        "gen_ai.tool.name": "calculator",
                        "gen_ai.tool.call.arguments": json.dumps({"expr": f"{i}*{turn}"}),
                        "gen_ai.tool.call.result": str(i * turn),
                    },
                ):
                    pass


def _all_messages(steps: int, first_step: int) -> dict[int, list[tuple[str, str]]]:
    """Each sample's model-call messages, made before the rollout is timed (the model's text,
    not tracing work)."""
    ids = range(first_step * CONCURRENCY, (first_step + steps) * CONCURRENCY)
    return {i: [_messages(i, turn) for turn in range(1, MODEL_CALLS + 1)] for i in ids}


async def _rollout(
    tracer: Any, steps: int, messages: dict[int, list[tuple[str, str]]], first_step: int = 0
) -> list[float]:
    """``steps`` steps of ``CONCURRENCY`` concurrent samples; the ticker's lags (seconds)."""
    lags: list[float] = []
    done = asyncio.Event()

    async def ticker() -> None:
        while not done.is_set():
            t0 = time.perf_counter()
            await asyncio.sleep(TICK)
            lags.append(time.perf_counter() - t0 - TICK)

    tick = asyncio.create_task(ticker())
    await asyncio.sleep(0)
    for step in range(first_step, first_step + steps):
        ids = range(step * CONCURRENCY, (step + 1) * CONCURRENCY)
        await asyncio.gather(*(_sample(tracer, step, i, messages[i]) for i in ids))
    done.set()
    await tick
    return lags


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else 0.0


def run_arm(arm: str) -> dict[str, Any]:
    """One arm in this (fresh) process: warm up one step, then measure ``STEPS`` steps."""
    import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
    from opentelemetry import trace
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    name = uuid.uuid4().hex[:8]
    spans = REPEATS * STEPS * CONCURRENCY * SPANS_PER_SAMPLE
    queue = 2 * spans  # nothing dropped: every arm does the same work
    handle: Any = None
    exporter: Any = None
    with w.quiet_stdout():
        if arm in ("noop", "noop-trackio"):
            if arm == "noop-trackio":
                import trackio  # noqa: F401
            provider: Any = TracerProvider()
            provider.add_span_processor(
                BatchSpanProcessor(w.NoOpSpanExporter(), max_queue_size=queue)
            )
        elif arm.startswith("configure"):
            import otel_trackio

            options: dict[str, Any] = {
                "configure": {},
                "configure-no-gc-freeze": {"gc_freeze": False},
                "configure-inproc": {"offload": False},
            }[arm]
            handle = otel_trackio.configure(PROJECT, name, **options)
            provider = trace.get_tracer_provider()
        elif arm == "hand-built":
            from otel_trackio import TrackioSpanExporter

            exporter = TrackioSpanExporter(PROJECT, name)
            provider = TracerProvider()
            provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=queue))
        else:
            raise SystemExit(f"unknown arm {arm!r}")
    tracer = provider.get_tracer("bench")
    # Warm up: one step, exported and (with offload) durable, so the writer process is up.
    warm = REPEATS * STEPS
    asyncio.run(_rollout(tracer, 1, _all_messages(1, warm), first_step=warm))
    with w.quiet_stdout():
        provider.force_flush(600_000)
        if handle is not None:
            handle.force_flush(600_000)
        elif exporter is not None:
            exporter.force_flush(600_000)
    lags: list[float] = []
    wall = 0.0
    cpu0 = time.process_time()
    for repeat in range(REPEATS):
        first = repeat * STEPS
        messages = _all_messages(STEPS, first)  # the model's text: not timed
        wall0 = time.perf_counter()
        lags += asyncio.run(_rollout(tracer, STEPS, messages, first_step=first))
        wall += time.perf_counter() - wall0
    with w.quiet_stdout():
        provider.force_flush(600_000)  # the processor's queue exported
        cpu = time.process_time() - cpu0
        # In process the rest of the work (held samples converted and logged) is this
        # process's too; offloaded it is the writer's (this process only waits for it).
        span_exporter = handle.span_exporter if handle is not None else exporter
        if span_exporter is not None:
            span_exporter.force_flush(600_000)
            if span_exporter.offloaded is None:
                cpu = time.process_time() - cpu0
    with w.quiet_stdout():
        if handle is not None:
            handle.shutdown()
        else:
            provider.shutdown()
    stored = -1
    if not arm.startswith("noop"):
        stored = w.count_traces(PROJECT, name) - CONCURRENCY  # minus the warm-up step
    w.cleanup()
    return {
        "arm": arm,
        "lag_p99_ms": _p99(lags) * 1000,
        "wall_s": wall,
        "cpu_s": cpu,
        "spans": spans,
        "stored": stored,
    }


def _child(spec: str) -> dict[str, Any]:
    """Run one arm in a fresh process; ``arm@DIR`` runs it with the otel_trackio of checkout
    ``DIR`` (before/after comparisons in one run)."""
    arm, _, checkout = spec.partition("@")
    env = dict(os.environ, TRACKIO_DISABLE_TELEMETRY="1")
    if checkout:
        env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
    proc = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--arm", arm],
        capture_output=True,
        text=True,
        env=env,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"arm {arm} failed:\n{proc.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=5, help="arms alternate; medians count")
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        help="comma-separated; ARM@DIR runs ARM with the otel_trackio of the checkout DIR",
    )
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in this process
    args = parser.parse_args()
    if args.arm:
        print(json.dumps(run_arm(args.arm)))
        return
    import _workload as w

    arms = [a for a in args.arms.split(",") if a]
    if arms[0] != "noop":
        arms.insert(0, "noop")
    others = arms[1:]
    ratios: dict[str, dict[str, list[float]]] = {
        a: {"lag": [], "wall": [], "cpu": []} for a in arms
    }
    raw: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    print(f"asyncio bench start: {_load()}", file=sys.stderr)
    for r in range(args.rounds):
        # noop beside every arm, order reversed every other round (no arm always goes first).
        order = [a for other in others for a in ("noop", other)]
        if r % 2:
            order.reverse()
        results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for arm in order:
            result = _child(arm)
            results[arm].append(result)
            raw[arm].append(result)
            print(
                f"round {r + 1} {arm:16s}: loop lag p99 {result['lag_p99_ms']:5.1f} ms, wall "
                f"{result['wall_s']:.3f} s, CPU {result['cpu_s']:.3f} s, stored {result['stored']}",
                file=sys.stderr,
            )
        # Each arm against the no-op run next to it.
        for k, other in enumerate(others):
            base, mine = results["noop"][k], results[other][0]
            ratios[other]["lag"].append(mine["lag_p99_ms"] / base["lag_p99_ms"])
            ratios[other]["wall"].append(mine["wall_s"] / base["wall_s"])
            ratios[other]["cpu"].append((mine["cpu_s"] - base["cpu_s"]) / mine["spans"] * 1e6)
    expected = REPEATS * STEPS * CONCURRENCY
    med = statistics.median
    noop = raw["noop"]
    print(
        f"{'noop':16s}: loop lag p99 {med(x['lag_p99_ms'] for x in noop):.1f} ms, wall "
        f"{med(x['wall_s'] for x in noop):.3f} s, CPU "
        f"{med(x['cpu_s'] for x in noop) / noop[0]['spans'] * 1e6:.1f} us/span (medians)",
        file=sys.stderr,
    )
    summary = []
    for arm in others:
        lag, wall, cpu = (med(ratios[arm][k]) for k in ("lag", "wall", "cpu"))
        stored_all = all(x["stored"] == expected for x in raw[arm])
        stored = min(x["stored"] for x in raw[arm])
        print(
            f"{arm:16s}: loop lag p99 {lag:.2f}x, wall {wall:.2f}x, +{cpu:.1f} us CPU/span in "
            f"the rollout process (loop lag {med(x['lag_p99_ms'] for x in raw[arm]):.1f} ms, "
            f"wall {med(x['wall_s'] for x in raw[arm]):.3f} s; medians), stored "
            f"{stored}/{expected} (least of {len(raw[arm])})",
            file=sys.stderr,
        )
        summary.append(f"{arm} lag {lag:.2f}x wall {wall:.2f}x +{cpu:.0f} us/span")
        target = arm == "configure"
        w.write_result(
            f"13. asyncio {REPEATS}x{STEPS} steps x {CONCURRENCY} concurrent samples, {arm}: "
            "loop-lag p99 / wall vs no-op (medians); rollout-process CPU per span over no-op",
            f"{lag:.2f}x / {wall:.2f}x; +{cpu:.1f} µs; stored {stored}/{expected}",
            f"<= {LAG_TARGET:.2f}x / <= {WALL_TARGET:.2f}x, all stored" if target else "(recorded)",
            (lag <= LAG_TARGET and wall <= WALL_TARGET and stored_all) if target else None,
        )
    print(f"asyncio bench end: {_load()}", file=sys.stderr)
    print(f"asyncio {STEPS}x{CONCURRENCY}, medians of {args.rounds} rounds: " + "; ".join(summary))


if __name__ == "__main__":
    main()
