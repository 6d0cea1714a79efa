"""Ray actors as rollout workers (the verl shape), all logging into one Trackio run over OTLP.

The driver starts the OTLP receiver (what ``otel-trackio serve`` runs); each Ray actor sets up the
official OTLP/HTTP exporters pointed at it and traces its rollouts with ``step`` and
``sample_index``. Needs the ``ray`` extra (Ray, the receiver and the official OTLP/HTTP
exporter): ``pip install '.[ray]'`` from a clone.

    python examples/ray_rollouts.py [--project NAME] [--workers 4] [--num-cpus 4]

Without ``RAY_ADDRESS`` it starts a local Ray (``ray.init(num_cpus=...)``, no dashboard, on
127.0.0.1); with it, it joins that cluster.

Multi-node clusters: actors on other nodes cannot reach 127.0.0.1 of the driver. Either

* let the receiver listen on the cluster network, with a token (it refuses a non-loopback address
  without one): ``python examples/ray_rollouts.py --host 0.0.0.0 --token SECRET``; actors then
  send to ``http://<driver node IP>:<port>`` with ``Authorization: Bearer SECRET`` (this script
  does that), or with ``otel-trackio serve --host 0.0.0.0 --token SECRET`` running on any host
  and ``OTEL_EXPORTER_OTLP_ENDPOINT=http://that-host:4318`` plus
  ``OTEL_EXPORTER_OTLP_HEADERS="Authorization=Bearer SECRET"`` in the actors' ``runtime_env``;
* or run an OpenTelemetry Collector on every node (workers keep sending to ``localhost:4318``)
  whose ``otlphttp`` exporter targets the receiver::

      exporters:
        otlphttp:
          endpoint: http://trackio-host:4318
          headers: {Authorization: "Bearer SECRET"}
          compression: gzip
      service:
        pipelines:
          traces: {receivers: [otlp], processors: [batch], exporters: [otlphttp]}
          metrics: {receivers: [otlp], processors: [batch], exporters: [otlphttp]}

  Resource attributes ``trackio.project`` / ``trackio.run`` (``OTEL_RESOURCE_ATTRIBUTES``) send a
  job's data to another project/run of the same receiver.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import sys

from otel_trackio.receiver import missing_extra

try:
    import opentelemetry.exporter.otlp.proto.http  # noqa: F401  (the actors' exporter)
    import ray

    from otel_trackio.receiver import OTLPReceiver, is_loopback
except ModuleNotFoundError as exc:  # without Ray, examples/multiprocess_rollouts.py shows the same
    sys.exit(f"examples/ray_rollouts.py {missing_extra(exc, 'ray')}")

STEPS = 3


@ray.remote
class RolloutWorker:
    """A rollout actor: plain OTel SDK with the official OTLP exporters; no otel-trackio here."""

    def __init__(self, url: str, worker_id: int, token: str | None) -> None:
        from opentelemetry.exporter.otlp.proto.http import Compression
        from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.metrics import MeterProvider
        from opentelemetry.sdk.metrics.export import PeriodicExportingMetricReader
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        headers = {"Authorization": f"Bearer {token}"} if token else None
        resource = Resource.create({"service.name": f"ray-rollout-{worker_id}"})
        self.tracer_provider = TracerProvider(resource=resource)
        self.tracer_provider.add_span_processor(
            BatchSpanProcessor(
                OTLPSpanExporter(
                    endpoint=f"{url}/v1/traces", headers=headers, compression=Compression.Gzip
                )
            )
        )
        reader = PeriodicExportingMetricReader(
            OTLPMetricExporter(
                endpoint=f"{url}/v1/metrics", headers=headers, compression=Compression.Gzip
            ),
            export_interval_millis=1000,
        )
        self.meter_provider = MeterProvider(resource=resource, metric_readers=[reader])
        self.tracer = self.tracer_provider.get_tracer("rollout")
        self.rewards = self.meter_provider.get_meter("rollout").create_histogram("rollout.reward")
        self.worker_id = worker_id
        self.rng = random.Random(worker_id)

    def rollout(self, step: int, samples: int) -> float:
        """Run ``samples`` toy rollouts of one training step; return their mean reward."""
        total = 0.0
        for i in range(samples):
            index = self.worker_id * samples + i
            a, b = self.rng.randint(1, 50), self.rng.randint(1, 50)
            answer = a + b + (1 if self.rng.random() < 0.3 else 0)
            with self.tracer.start_as_current_span(
                "rollout", attributes={"step": step, "sample_index": index}
            ) as span:
                with self.tracer.start_as_current_span("chat toy-policy") as chat:
                    chat.set_attribute("gen_ai.operation.name", "chat")
                    chat.set_attribute("gen_ai.request.model", "toy-policy")
                    chat.set_attribute(
                        "gen_ai.input.messages",
                        json.dumps(
                            [{"role": "user", "parts": [{"type": "text", "content": f"{a}+{b}?"}]}]
                        ),
                    )
                    chat.set_attribute(
                        "gen_ai.output.messages",
                        json.dumps(
                            [
                                {
                                    "role": "assistant",
                                    "parts": [{"type": "text", "content": str(answer)}],
                                }
                            ]
                        ),
                    )
                reward = 1.0 if answer == a + b else 0.0
                span.set_attribute("reward", reward)
                self.rewards.record(reward, {"step": step, "worker": self.worker_id})
                total += reward
        return total / max(samples, 1)

    def close(self) -> None:
        """Send what is still batched."""
        self.tracer_provider.shutdown()
        self.meter_provider.shutdown()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="otel-trackio-ray")
    parser.add_argument("--name", default=None)
    parser.add_argument("--workers", type=int, default=4)
    parser.add_argument("--samples-per-step", type=int, default=8)
    parser.add_argument("--host", default="127.0.0.1", help="0.0.0.0 for a multi-node cluster")
    parser.add_argument("--port", type=int, default=0)
    # No OTLP/gRPC listener in this process: Ray's node does not start beside a gRPC server of the
    # process that calls ray.init() (the workers here send OTLP/HTTP).
    parser.add_argument("--grpc-port", type=int, default=None)
    parser.add_argument("--token", default=None, help="required with a non-loopback --host")
    parser.add_argument("--num-cpus", type=int, default=None, help="CPUs of a local Ray")
    args = parser.parse_args()

    receiver = OTLPReceiver(
        args.project,
        args.name,
        host=args.host,
        port=args.port,
        grpc_port=args.grpc_port,
        token=args.token,
        report=print,
    ).start()
    if os.environ.get("RAY_ADDRESS"):
        ray.init()  # join the cluster RAY_ADDRESS names
    else:
        local = {"_node_ip_address": "127.0.0.1"} if is_loopback(args.host) else {}
        ray.init(num_cpus=args.num_cpus or args.workers, include_dashboard=False, **local)
    host = args.host if is_loopback(args.host) else ray.util.get_node_ip_address()
    url = f"http://{host}:{receiver.port}"
    workers = [RolloutWorker.remote(url, k, args.token) for k in range(args.workers)]
    try:
        for step in range(STEPS):
            means = ray.get([w.rollout.remote(step, args.samples_per_step) for w in workers])
            print(f"step {step}: mean reward {sum(means) / len(means):.2f}")
        ray.get([w.close.remote() for w in workers])
    finally:
        ray.shutdown()
        receiver.stop()


if __name__ == "__main__":
    main()
