"""Many rollout processes, one Trackio run: an OTLP receiver and 4 workers using plain OTLP.

The main process starts ``otel_trackio.receiver.OTLPReceiver`` (what ``otel-trackio serve`` runs).
Each worker process knows nothing about Trackio: it sets up the *official* OpenTelemetry OTLP/HTTP
exporters (``opentelemetry-exporter-otlp-proto-http``) pointed at the receiver, and traces its
rollouts with ``step`` and ``sample_index`` on the rollout span. Every sample of every worker ends
up as one Trace in the same run, and the workers' reward histograms as scalars next to them.

Needs the ``receiver`` extra (the receiver, and the official OTLP/HTTP exporter the workers use):
``pip install '.[receiver]'`` from a clone.

    python examples/multiprocess_rollouts.py [--project NAME] [--name RUN] [--workers 4]

The same workers could run on other machines: start ``otel-trackio serve --project NAME --host
0.0.0.0 --token SECRET`` on one host and point each worker at it (``OTEL_EXPORTER_OTLP_ENDPOINT``
and ``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer SECRET"`` do it without code changes).
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import random
import sys

from otel_trackio.receiver import missing_extra

STEPS = 3


def worker(url: str, worker_id: int, samples_per_step: int) -> None:
    """One rollout worker: plain OTel SDK + official OTLP exporters, no otel-trackio import."""
    from opentelemetry.exporter.otlp.proto.http import Compression
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    resource = Resource.create({"service.name": f"rollout-worker-{worker_id}"})
    tracer_provider = TracerProvider(resource=resource)
    tracer_provider.add_span_processor(
        BatchSpanProcessor(
            OTLPSpanExporter(endpoint=f"{url}/v1/traces", compression=Compression.Gzip)
        )
    )
    reader = PeriodicExportingMetricReader(
        OTLPMetricExporter(endpoint=f"{url}/v1/metrics", compression=Compression.Gzip),
        export_interval_millis=1000,
    )
    meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
    tracer = tracer_provider.get_tracer("rollout")
    rewards = meter_provider.get_meter("rollout").create_histogram("rollout.reward")
    rng = random.Random(worker_id)

    for step in range(STEPS):
        for i in range(samples_per_step):
            index = worker_id * samples_per_step + i
            a, b = rng.randint(1, 50), rng.randint(1, 50)
            question = f"What is {a} + {b}?"
            answer = a + b + (1 if rng.random() < 0.3 else 0)
            with tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": index, "worker": worker_id}
            ) as rollout:
                with tracer.start_as_current_span("chat toy-policy") as chat:
                    chat.set_attribute("gen_ai.operation.name", "chat")
                    chat.set_attribute("gen_ai.request.model", "toy-policy")
                    chat.set_attribute("gen_ai.usage.input_tokens", 12)
                    chat.set_attribute("gen_ai.usage.output_tokens", 6)
                    chat.set_attribute(
                        "gen_ai.input.messages",
                        json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": question}]}]
                        ),
                    )
                    chat.set_attribute(
                        "gen_ai.output.messages",
                        json.dumps(
                            [
                                {
                                    "role": "assistant",
                                    "parts": [
                                        {"type": "text", "content": f"The answer is {answer}."}
                                    ],
                                }
                            ]
                        ),
                    )
                reward = 1.0 if answer == a + b else 0.0
                rollout.set_attribute("reward", reward)
                rewards.record(reward, {"step": step, "worker": worker_id})
    tracer_provider.shutdown()  # sends what is still batched
    meter_provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="otel-trackio-multiprocess")
    parser.add_argument("--name", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--samples-per-step", type=int, default=8)
    parser.add_argument("--port", type=int, default=0, help="OTLP/HTTP port (0: any free port)")
    parser.add_argument("--grpc-port", type=int, default=0, help="OTLP/gRPC port (0: any free)")
    args = parser.parse_args()

    try:
        import opentelemetry.exporter.otlp.proto.http  # noqa: F401  (the workers' exporter)

        from otel_trackio.receiver import OTLPReceiver
    except ModuleNotFoundError as exc:
        sys.exit(f"examples/multiprocess_rollouts.py {missing_extra(exc)}")

    receiver = OTLPReceiver(
        args.project,
        args.name,
        port=args.port,
        grpc_port=args.grpc_port,
        report=print,
        summary_interval=2,
    ).start()
    context = multiprocessing.get_context("spawn")  # fresh interpreters, as on other nodes
    processes = [
        context.Process(target=worker, args=(receiver.url, k, args.samples_per_step))
        for k in range(args.workers)
    ]
    for process in processes:
        process.start()
    for process in processes:
        process.join()
    failed = [p.exitcode for p in processes if p.exitcode != 0]
    receiver.stop()  # logs anything still open as partial and finishes the run
    expected = args.workers * STEPS * args.samples_per_step
    print(f"{args.workers} workers sent {expected} samples into run {receiver.run_name!r}.")
    if failed:
        raise SystemExit(f"{len(failed)} workers failed (exit codes {failed})")


if __name__ == "__main__":
    main()
