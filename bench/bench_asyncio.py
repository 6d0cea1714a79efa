"""Figure 13: an asyncio agent loop with hundreds of samples in flight, and what export costs it.

The shape of verl's agent loop (and most agent RL): one event loop per worker runs a step's
samples concurrently. Here 8 steps x 256 concurrent samples; each sample is a root span
(``step``, ``sample_index``) with three model calls that each await 2 ms and carry about 2 KB of
GenAI messages, and a tool span. A ticker task sleeps 1 ms at a time and records how late it
wakes: the event-loop lag, i.e. how long something else (the span processor, the export thread
holding the GIL) kept the loop from running.

Arms:

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
* ``hand-built``    — ``TrackioSpanProcessor(TrackioSpanExporter(project, name))``, the README's
  "By hand" path with the exporter's and processor's own defaults.

Each arm runs in a process of its own (fresh: no warm caches or threads carried over), set up
once and warmed up with one step; the processes stay alive and take turns: a round runs one
``STEPS``-step rollout (a *repeat*) in ``noop``'s process, then one in the next arm's, and so
on, the order reversed every other round. After each repeat, untimed, the arm's work is settled
(its processor's queue exported and, offloaded, the writer's backlog durable), so none of it runs
while another arm is measured. Each repeat's loop-lag p99 and wall time are divided by those of
the ``noop`` repeat next to it (about a second apart); the figures are the medians of those
ratios. Pairing neighbouring repeats is what makes the figures hold on a shared VM, whose speed
drifts by a factor of up to 2 within minutes (a fixed pure-Python loop measured 0.20-0.29 s,
then 0.48-0.67 s, half an hour apart): ratios of whole processes run several seconds apart
moved by +-0.2-0.3. CPU per span is the rollout process's own CPU time (``time.process_time()``:
every thread of this process, never the writer process's) from the repeat's first span to the
processor's queue exported — in process, to every sample logged (``force_flush``) — minus the
``noop`` repeat's, over the spans; the exporter's own counters play no part. Every arm's samples
are counted in Trackio's storage after its shutdown. The last line printed is the summary.
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


def _runqueue_wait() -> float:
    """Seconds this thread has spent runnable but waiting for a CPU (Linux schedstat; 0
    elsewhere): the loop thread's time off the CPU split into preempted and sleeping (on the
    GIL, or idle in ``select``)."""
    try:
        with open("/proc/thread-self/schedstat") as f:
            return int(f.read().split()[1]) / 1e9
    except (OSError, IndexError, ValueError):
        return 0.0


def _p99(values: list[float]) -> float:
    return statistics.quantiles(values, n=100)[98] if len(values) > 1 else 0.0


class _Arm:
    """One arm set up in this (fresh) process, warmed up: one step exported and (offloaded)
    durable, so the writer process is up."""

    def __init__(self, arm: str) -> None:
        import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
        from opentelemetry import trace
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        self.arm = arm
        self.name = uuid.uuid4().hex[:8]
        self.spans = STEPS * CONCURRENCY * SPANS_PER_SAMPLE  # per repeat
        queue = 4 * self.spans  # nothing dropped: every arm does the same work
        self.handle: Any = None
        self.exporter: Any = None
        self.repeats = 0
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
                self.handle = otel_trackio.configure(PROJECT, self.name, **options)
                provider = trace.get_tracer_provider()
            elif arm == "hand-built":
                from otel_trackio import TrackioSpanExporter, TrackioSpanProcessor

                self.exporter = TrackioSpanExporter(PROJECT, self.name)
                provider = TracerProvider()
                provider.add_span_processor(
                    TrackioSpanProcessor(self.exporter, max_queue_size=queue)
                )
            else:
                raise SystemExit(f"unknown arm {arm!r}")
        self.provider = provider
        self.tracer = provider.get_tracer("bench")
        self.warm_step = 10_000  # its own step, far from the measured ones
        asyncio.run(
            _rollout(self.tracer, 1, _all_messages(1, self.warm_step), first_step=self.warm_step)
        )
        self._settle()

    @property
    def span_exporter(self) -> Any:
        return self.handle.span_exporter if self.handle is not None else self.exporter

    def _settle(self) -> None:
        """Everything exported and (offloaded: by the writer) durable: nothing of this arm's
        work is left to run while another arm is measured."""
        import _workload as w

        with w.quiet_stdout():
            self.provider.force_flush(600_000)
            if self.span_exporter is not None:
                self.span_exporter.force_flush(600_000)

    def repeat(self) -> dict[str, Any]:
        """One ``STEPS``-step rollout, measured; then settled, untimed."""
        import _workload as w

        first = self.repeats * STEPS
        self.repeats += 1
        messages = _all_messages(STEPS, first)  # the model's text: not timed
        cpu0 = time.process_time()
        loop0 = time.thread_time()  # the event loop runs on this thread
        queued0 = _runqueue_wait()
        wall0 = time.perf_counter()
        lags = asyncio.run(_rollout(self.tracer, STEPS, messages, first_step=first))
        wall = time.perf_counter() - wall0
        loop_cpu = time.thread_time() - loop0
        queued = _runqueue_wait() - queued0
        with w.quiet_stdout():
            self.provider.force_flush(600_000)  # the processor's queue exported
        cpu = time.process_time() - cpu0
        span_exporter = self.span_exporter
        if span_exporter is not None and span_exporter.offloaded is None:
            # In process the rest of the work (held samples converted and logged) is this
            # process's too; offloaded it is the writer's (this process only waits for it).
            with w.quiet_stdout():
                span_exporter.force_flush(600_000)
            cpu = time.process_time() - cpu0
        self._settle()
        return {
            "lag_p99_ms": _p99(lags) * 1000,
            "wall_s": wall,
            "cpu_s": cpu,
            "loop_cpu_s": loop_cpu,
            "loop_queued_s": queued,
            "spans": self.spans,
        }

    def finish(self) -> dict[str, Any]:
        """Shut down; the samples of the measured repeats found in Trackio's storage."""
        import _workload as w

        with w.quiet_stdout():
            if self.handle is not None:
                self.handle.shutdown()
            else:
                self.provider.shutdown()
        stored = -1
        if not self.arm.startswith("noop"):
            stored = w.count_traces(PROJECT, self.name) - CONCURRENCY  # minus the warm-up step
        w.cleanup()
        return {"stored": stored, "expected": self.repeats * STEPS * CONCURRENCY}


_RESULT = "RESULT "


def _serve(arm: str) -> None:
    """A child: set the arm up, then run one repeat per ``run`` line on stdin; ``stop`` ends.
    Each answer is one ``RESULT {json}`` line on stdout."""
    state = _Arm(arm)
    print(_RESULT + json.dumps({"ready": True}), flush=True)
    for line in sys.stdin:
        command = line.strip()
        if command == "run":
            print(_RESULT + json.dumps(state.repeat()), flush=True)
        elif command == "stop":
            print(_RESULT + json.dumps(state.finish()), flush=True)
            return


class _Child:
    """An arm's process, alive for the whole bench; ``arm@DIR`` runs it with the otel_trackio
    of checkout ``DIR`` (before/after comparisons in one run)."""

    def __init__(self, spec: str) -> None:
        arm, _, checkout = spec.partition("@")
        env = dict(os.environ, TRACKIO_DISABLE_TELEMETRY="1")
        if checkout:
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [checkout, env.get("PYTHONPATH")]))
        self.spec = spec
        self.process = subprocess.Popen(
            [sys.executable, os.path.abspath(__file__), "--arm", arm],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self._answer()  # ready

    def _answer(self) -> dict[str, Any]:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            if line.startswith(_RESULT):
                result: dict[str, Any] = json.loads(line[len(_RESULT) :])
                return result
        raise RuntimeError(f"arm {self.spec} failed (exit {self.process.wait()})")

    def ask(self, command: str) -> dict[str, Any]:
        assert self.process.stdin is not None
        self.process.stdin.write(command + "\n")
        self.process.stdin.flush()
        return self._answer()

    def stop(self) -> dict[str, Any]:
        result = self.ask("stop")
        self.process.wait(600)
        return result


def _load() -> str:
    one, five, _ = os.getloadavg()
    return f"load average {one:.1f} (1 min) / {five:.1f} (5 min) on {os.cpu_count()} CPUs"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument(
        "--rounds", type=int, default=12, help="repeats per arm, alternating; medians count"
    )
    parser.add_argument(
        "--arms",
        default=",".join(ARMS),
        help="comma-separated; ARM@DIR runs ARM with the otel_trackio of the checkout DIR",
    )
    parser.add_argument("--arm", help=argparse.SUPPRESS)  # one arm, in this process
    args = parser.parse_args()
    if args.arm:
        _serve(args.arm)
        return
    import _workload as w

    arms = [a for a in args.arms.split(",") if a]
    if arms[0] != "noop":
        arms.insert(0, "noop")
    others = arms[1:]
    ratios: dict[str, dict[str, list[float]]] = {
        a: {"lag": [], "wall": [], "cpu": [], "loop": [], "off": [], "queued": []} for a in arms
    }
    raw: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
    print(f"asyncio bench start: {_load()}", file=sys.stderr)
    children = {a: _Child(a) for a in arms}  # one process per arm, alive throughout
    for r in range(args.rounds):
        # noop beside every arm, order reversed every other round (no arm always goes first).
        order = [a for other in others for a in ("noop", other)]
        if r % 2:
            order.reverse()
        results: dict[str, list[dict[str, Any]]] = {a: [] for a in arms}
        for arm in order:
            result = children[arm].ask("run")
            results[arm].append(result)
            raw[arm].append(result)
            print(
                f"round {r + 1} {arm:16s}: loop lag p99 {result['lag_p99_ms']:5.1f} ms, wall "
                f"{result['wall_s']:.3f} s, CPU {result['cpu_s']:.3f} s (loop thread "
                f"{result['loop_cpu_s']:.3f} s)",
                file=sys.stderr,
            )
        # Each arm against the no-op repeat next to it.
        for k, other in enumerate(others):
            base, mine = results["noop"][k], results[other][0]
            ratios[other]["lag"].append(mine["lag_p99_ms"] / base["lag_p99_ms"])
            ratios[other]["wall"].append(mine["wall_s"] / base["wall_s"])
            ratios[other]["cpu"].append((mine["cpu_s"] - base["cpu_s"]) / mine["spans"] * 1e6)
            # The wall's extra split: the loop thread's own CPU, and its time off the CPU
            # (waiting for the GIL, preempted) beyond the no-op's.
            ratios[other]["loop"].append(
                (mine["loop_cpu_s"] - base["loop_cpu_s"]) / mine["spans"] * 1e6
            )
            ratios[other]["queued"].append(
                (mine["loop_queued_s"] - base["loop_queued_s"]) / mine["spans"] * 1e6
            )
            ratios[other]["off"].append(
                ((mine["wall_s"] - mine["loop_cpu_s"]) - (base["wall_s"] - base["loop_cpu_s"]))
                / mine["spans"]
                * 1e6
            )
    finals = {arm: child.stop() for arm, child in children.items()}
    expected = args.rounds * STEPS * CONCURRENCY
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
        lag, wall, cpu, loop, off, queued = (
            med(ratios[arm][k]) for k in ("lag", "wall", "cpu", "loop", "off", "queued")
        )
        stored = finals[arm]["stored"]
        stored_all = stored == expected
        print(
            f"{arm:16s}: loop lag p99 {lag:.2f}x, wall {wall:.2f}x, {cpu:+.1f} us CPU/span in "
            f"the rollout process (loop lag {med(x['lag_p99_ms'] for x in raw[arm]):.1f} ms, "
            f"wall {med(x['wall_s'] for x in raw[arm]):.3f} s; medians), stored "
            f"{stored}/{expected}; the wall's extra per span: loop thread CPU {loop:+.1f} us, "
            f"loop thread off the CPU {off:+.1f} us (of which waiting for a CPU "
            f"{queued:+.1f} us)",
            file=sys.stderr,
        )
        summary.append(f"{arm} lag {lag:.2f}x wall {wall:.2f}x {cpu:+.0f} us/span")
        target = arm == "configure"
        w.write_result(
            f"13. asyncio {STEPS} steps x {CONCURRENCY} concurrent samples, {arm}: "
            "loop-lag p99 / wall vs no-op (medians); rollout-process CPU per span over no-op",
            f"{lag:.2f}x / {wall:.2f}x; {cpu:+.1f} µs; stored {stored}/{expected}",
            f"<= {LAG_TARGET:.2f}x / <= {WALL_TARGET:.2f}x, all stored" if target else "(recorded)",
            (lag <= LAG_TARGET and wall <= WALL_TARGET and stored_all) if target else None,
        )
    print(f"asyncio bench end: {_load()}", file=sys.stderr)
    print(f"asyncio {STEPS}x{CONCURRENCY}, medians of {args.rounds} rounds: " + "; ".join(summary))


if __name__ == "__main__":
    main()
