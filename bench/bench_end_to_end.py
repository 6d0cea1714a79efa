"""Figures 3 and 4: end-to-end cost of getting rollout samples durably into Trackio storage.

Figure 3 — spans in → Traces durable, each path against its limit, Trackio alone:
  * Trackio alone: the same samples as pre-built ``trackio.Trace`` objects (built untimed, by our
    converter, so the payload is identical) logged with one ``run.log({key: [...]}, step=s)`` per
    step, then ``run.finish()``;
  * in process: the workload's finished SDK spans (built untimed) through
    ``TrackioSpanExporter(offload=False).export()`` in batches of 512, then ``shutdown()``;
  * offload (the default): the same through ``TrackioSpanExporter()``; ``shutdown()`` returns once
    the writer process has stored everything;
  * receiver: the same spans sent by the official OTLP/gRPC exporter to ``otel-trackio serve``,
    which is then stopped: timed until it says it stopped (everything stored, the run finished),
    as Trackio alone is timed until ``run.finish()`` returns, not until its interpreter exits.
  Each ratio = Trackio-alone seconds / the path's seconds (target >= 0.90 for each); CPU per
  stored span counts every process (this one and its children: the writer, the receiver).

Figure 4 — the whole rollout (emit + log + finish), the way verl's Trackio rollout-trace backend
does it vs ours. verl's backend (``rollout_trace_op`` with ``backend="trackio"``) logs, for every
traced operation, one flat ``trackio.Trace(messages, metadata)`` with ``trackio.log(...,
step=...)`` inline on the rollout thread: metadata holds op name, inputs and the
``rollout_trace_attr`` attributes (step, sample_index, rollout_n, validate, experiment_name);
messages are the op's input messages (else a system line plus the JSON inputs) plus the output as
an assistant message. Per sample that is 4 log calls (2 model calls, a tool call, the reward); the
sample context itself logs nothing. Ours: the same loop emitting OTel spans into
``BatchSpanProcessor(TrackioSpanExporter)`` (queue large enough that no span is dropped), then
``provider.shutdown()``.
  Speed-up = verl seconds / ours seconds (target >= 2).

Both figures check that every Trace is in storage afterwards. The last lines printed are the
figures.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import sys
import time
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import _workload as w  # sets a temp TRACKIO_DIR before trackio is imported
import trackio
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio import TrackioSpanExporter
from otel_trackio._codec.sdk import record_from_readable_span
from otel_trackio._core.assembly import SampleAssembler
from otel_trackio._core.convert import sample_to_trace
from otel_trackio._offload.watch import cpu_times

PROJECT = "bench-e2e"
KEY = "rollout/traces"


PATHS = ("in process", "offload", "receiver")


def cpu_seconds() -> float:
    """CPU seconds of this process and of its children that ended (the writer, the receiver)."""
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


def process_cpu_seconds(pid: int) -> float:
    """CPU seconds a running process has used so far (every thread; Linux)."""
    times = cpu_times(pid)
    return times.running / 1e9 if times is not None else 0.0


def settled_cpu_seconds(pid: int) -> float:
    """Wait until a starting process is idle (its start-up done); its CPU seconds by then."""
    used = process_cpu_seconds(pid)
    while True:
        time.sleep(0.3)
        now = process_cpu_seconds(pid)
        if now - used < 0.01:
            return now
        used = now


def ours(spans: list[Any], path: str) -> tuple[float, float, str]:
    """(wall seconds, CPU seconds of every process, run name) of one path. The receiver and the
    offload writer are started, and their start-up left out, before the clock starts: each runs
    all along a run (the exporter starts its writer when it is made)."""
    run = uuid.uuid4().hex[:8]
    receiver = w.Receiver(PROJECT, name=run) if path == "receiver" else None
    exporter = None
    with w.quiet_stdout():
        if receiver is None:
            exporter = TrackioSpanExporter(project=PROJECT, name=run, offload=path == "offload")
    helper = receiver.process.pid if receiver is not None else None
    if exporter is not None and exporter.offloaded:
        helper = exporter._offload.writer_pid  # type: ignore[union-attr]
    # The receiver's and the writer's store processes: their start-up is left out too, and they
    # are reaped once done (they may end after their parent: this process is their subreaper).
    stores = w.children(helper) if helper is not None else []
    started = sum(settled_cpu_seconds(pid) for pid in [*([helper] if helper else []), *stores])
    # In process, Trackio's writes run in the process's store, which outlives the exporter.
    store = exporter._engine.sink._store if exporter is not None and exporter._engine else None
    store_pid = store._process.pid if store is not None and store._process else None
    store_started = settled_cpu_seconds(store_pid) if store_pid is not None else 0.0
    cpu = cpu_seconds()

    def go() -> None:
        if exporter is not None:
            with w.quiet_stdout():
                for batch in w.chunks(spans):
                    exporter.export(batch)
                exporter.shutdown()
            return
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter

        assert receiver is not None
        sender = OTLPSpanExporter(endpoint=receiver.grpc_url, insecure=True, timeout=120)
        for batch in w.chunks(spans):
            assert sender.export(batch).name == "SUCCESS", "the receiver refused a batch"
        sender.shutdown()
        receiver.stop_until_stored()  # it has stored everything (its process still ending)

    seconds = w.timed(go)
    if receiver is not None:
        receiver.stop()  # ended: its CPU time counts below
    w.reap(stores)  # ended too: their CPU time counts below
    in_store = process_cpu_seconds(store_pid) - store_started if store_pid is not None else 0.0
    return seconds, cpu_seconds() - cpu - started + in_store, run


def prebuilt_traces(spans: list[Any]) -> dict[int, list[trackio.Trace]]:
    """The workload's samples as trackio.Trace objects grouped by step (our converter's output)."""
    assembler = SampleAssembler()
    samples = assembler.add(record_from_readable_span(s) for s in spans)
    by_step: dict[int, list[trackio.Trace]] = {}
    for sample in samples:
        step = sample.identity.step
        t = sample_to_trace(sample)
        trace = trackio.Trace(messages=t["messages"], metadata=t["metadata"], spans=t["spans"])
        by_step.setdefault(step, []).append(trace)
    return by_step


def trackio_alone(by_step: dict[int, list[trackio.Trace]]) -> tuple[float, float, str]:
    name = uuid.uuid4().hex[:8]
    cpu = cpu_seconds()
    with w.quiet_stdout():
        run = trackio.init(project=PROJECT, name=name)

        def go() -> None:
            for step, traces in by_step.items():
                run.log({KEY: traces}, step=step)
            run.finish()

        seconds = w.timed(go)
    return seconds, cpu_seconds() - cpu, name


# -- verl-style: one flat Trace per traced operation, trackio.log inline -----------------------


def _verl_log(op: str, inputs: dict[str, Any], output: Any, attributes: dict[str, Any]) -> None:
    """Mirror of verl's trackio rollout-trace backend: one Trace per op, one log call each."""
    metadata = {
        "op": op,
        "backend": "trackio",
        "experiment_name": "bench",
        "inputs": {k: v for k, v in inputs.items() if k != "messages"},
        **attributes,
        "status": "success",
        "output": output if isinstance(output, dict) else {"value": output},
    }
    messages = [dict(m) for m in inputs.get("messages") or [] if isinstance(m, dict)]
    if not messages:
        messages = [
            {"role": "system", "content": f"rollout trace operation: {op}"},
            {"role": "user", "content": json.dumps({"inputs": inputs}, default=str)},
        ]
    text = output.get("text") if isinstance(output, dict) else None
    messages.append(
        {"role": "assistant", "content": text or json.dumps({"output": output}, default=str)}
    )
    key = "rollout_trace/" + "".join(c if c.isalnum() or c in "._-" else "_" for c in op)
    trackio.log({key: trackio.Trace(messages=messages, metadata=metadata)}, step=attributes["step"])


def verl_style(samples: int) -> tuple[float, str]:
    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        trackio.init(project=PROJECT, name=name)

        def go() -> None:
            for i in range(samples):
                p = w.sample_payload(i)
                attrs = {
                    "sample_index": i,
                    "step": i // w.SAMPLES_PER_STEP,
                    "rollout_n": i % 4,
                    "validate": False,
                    "experiment_name": "bench",
                }
                msgs1 = [
                    {"role": "system", "content": w.SYSTEM},
                    {"role": "user", "content": p["question"]},
                ]
                call = {"name": "calculator", "arguments": {"expr": p["expr"]}}
                _verl_log(
                    "AgentLoop.generate",
                    {"messages": msgs1, "sampling_params": {"temperature": 1.0}},
                    {"text": "", "tool_calls": [call], "prompt_tokens": 60, "response_tokens": 20},
                    attrs,
                )
                _verl_log(
                    "CalculatorTool.execute", {"parameters": call["arguments"]}, p["result"], attrs
                )
                msgs2 = [*msgs1, {"role": "tool", "content": p["result"]}]
                _verl_log(
                    "AgentLoop.generate",
                    {"messages": msgs2, "sampling_params": {"temperature": 1.0}},
                    {"text": p["answer"], "prompt_tokens": 100, "response_tokens": 20},
                    attrs,
                )
                _verl_log(
                    "RewardManager.compute_score", {"response": p["answer"]}, float(i % 2), attrs
                )
            trackio.finish()

        return w.timed(go), name


def ours_rollout(samples: int) -> tuple[float, str, int]:
    name = uuid.uuid4().hex[:8]
    with w.quiet_stdout():
        exporter = TrackioSpanExporter(project=PROJECT, name=name)
        provider = TracerProvider()
        # A queue that holds the whole workload: no span is dropped, so both arms store the same.
        provider.add_span_processor(BatchSpanProcessor(exporter, max_queue_size=1 << 20))
        tracer = provider.get_tracer("bench")

        def go() -> None:
            w.emit_workload(tracer, samples)
            provider.force_flush(600_000)  # drain fully (shutdown alone gives up after 30 s)
            provider.shutdown()

        seconds = w.timed(go)
    return seconds, name, exporter.stats.spans_received


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=4000)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    w.become_subreaper()  # store processes that end after their parent are reaped here
    n = args.samples
    spans_in = n * w.SPANS_PER_SAMPLE

    spans = w.collect_spans(n)
    by_step = prebuilt_traces(spans)
    ours(w.collect_spans(50), "in process")  # warm-up
    best = {name: float("inf") for name in ("alone", *PATHS, "verl", "rollout")}
    cpu = {name: float("inf") for name in ("alone", *PATHS)}
    dropped = 0
    for r in range(args.rounds):
        seconds, used, run = trackio_alone(by_step)
        assert w.count_traces(PROJECT, run) == n, "trackio alone: Traces missing in storage"
        best["alone"], cpu["alone"] = min(best["alone"], seconds), min(cpu["alone"], used)
        line = [f"round {r + 1}: Trackio alone {seconds:.2f} s"]
        for path in PATHS if r % 2 == 0 else PATHS[::-1]:
            seconds, used, run = ours(spans, path)
            assert w.count_traces(PROJECT, run) == n, f"{path}: Traces missing in storage"
            best[path], cpu[path] = min(best[path], seconds), min(cpu[path], used)
            line.append(f"{path} {seconds:.2f} s ({used / spans_in * 1e6:.0f} us CPU per span)")
        seconds, run = verl_style(n)
        assert w.count_traces(PROJECT, run) == 4 * n, "verl-style: Traces missing in storage"
        best["verl"] = min(best["verl"], seconds)
        seconds, run, received = ours_rollout(n)
        dropped = max(dropped, spans_in - received)
        best["rollout"] = min(best["rollout"], seconds)
        line.append(f"verl-style rollout {best['verl']:.2f} s, ours {seconds:.2f} s")
        print("; ".join(line), file=sys.stderr)
    ratios = {path: best["alone"] / best[path] for path in PATHS}
    per_span = {name: cpu[name] / spans_in * 1e6 for name in cpu}
    speedup = best["verl"] / best["rollout"]
    for path in PATHS:
        w.write_result(
            f"3. spans in -> Traces durable, {path} / Trackio alone, {n:,} samples "
            f"(CPU per stored span {per_span[path]:.0f} vs {per_span['alone']:.0f} us)",
            f"{ratios[path]:.2f}x",
            ">= 0.90x",
            ratios[path] >= 0.90,
        )
    w.write_result(
        f"4. verl-style (flat Trace per op, 1 log each) time / ours, {n:,} samples",
        f"{speedup:.2f}x",
        ">= 2x",
        speedup >= 2.0 and dropped == 0,
    )
    w.cleanup()
    paths = ", ".join(
        f"{path} {ratios[path]:.2f}x ({per_span[path]:.0f} us CPU per span)" for path in PATHS
    )
    print(
        f"spans in -> Traces durable / Trackio alone ({best['alone']:.2f} s, "
        f"{per_span['alone']:.0f} us CPU per span), {n:,} samples: {paths}; target >= 0.90x"
    )
    note = f", {dropped} spans dropped by the BSP" if dropped else ""
    print(
        f"verl-style / ours rollout time, {n:,} samples: {speedup:.2f}x (verl-style "
        f"{best['verl']:.2f} s vs ours {best['rollout']:.2f} s{note}; target >= 2x)"
    )


if __name__ == "__main__":
    main()
