"""One agent, traced two ways, exporting over OTLP/HTTP protobuf (run by
tests/frameworks/test_mlflow.py).

The agent (system "be brief", user "what is 2+2?", the model calls ``calculator``, the tool
answers "4", the model answers) runs against the loopback fake OpenAI server, 2 steps x 2
samples, each sample under a root span with ``step``, ``sample_index``, ``rollout_n``:

- ``mlflow-attributes``: MLflow (``mlflow-tracing``) with its OpenAI autologger, the tool as
  ``@mlflow.trace(span_type="TOOL")``, the root ``mlflow.start_span(attributes=...)``;
- ``mlflow-tags``: the same, the identity set as trace tags (``mlflow.set_trace_tag``, what
  verl's ``trace.backend=mlflow`` does);
- ``twins``: ``mlflow-attributes``, then (autologger off) its OTel GenAI equivalent in the same
  process (the OTel SDK, opentelemetry-instrumentation-openai-v2 with message content on spans,
  ``otel_trackio.rollout``, ``@traced(kind="tool")``), sent to the receiver's run ``otel`` (the
  ``trackio.run`` resource attribute): one process, so openai and mlflow are imported once.

    python tests/mlflow_agent.py MODE OPENAI_BASE_URL

MLflow reads ``OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`` / ``..._PROTOCOL`` from the environment the
test gives this process, and installs its own tracer provider: hence a process of its own.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from typing import Any

from framework_agents import QUESTION, SYSTEM, TOOLS, loopback_only

STEPS = 2
SAMPLES = 2
ROLLOUT_N = 3


def agent(client: Any, calculator: Callable[..., str]) -> str:
    """Ask, run the tool the model calls, ask again; the final answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": QUESTION},
    ]
    reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
    message = reply.choices[0].message
    messages.append(message.model_dump(exclude_none=True))
    for call in message.tool_calls or ():
        result = calculator(**json.loads(call.function.arguments))
        messages.append({"role": "tool", "tool_call_id": call.id, "content": result})
    reply = client.chat.completions.create(model="gpt-test", messages=messages, tools=TOOLS)
    return str(reply.choices[0].message.content)


def run_mlflow(base_url: str, tags: bool) -> None:
    import mlflow
    import openai

    mlflow.openai.autolog()
    client = openai.OpenAI(base_url=base_url, api_key="test")

    @mlflow.trace(name="calculator", span_type="TOOL")
    def calculator(expr: str) -> str:
        return str(eval(expr, {"__builtins__": {}}))  # the scripted "2+2"

    for step in range(STEPS):
        for index in range(SAMPLES):
            identity = {"step": step, "sample_index": index, "rollout_n": ROLLOUT_N}
            attributes = {} if tags else identity
            with mlflow.start_span("rollout", span_type="AGENT", attributes=attributes) as root:
                if tags:
                    for key, value in identity.items():
                        mlflow.set_trace_tag(root.trace_id, key, str(value))
                root.set_inputs({"question": QUESTION})
                answer = agent(client, calculator)
                root.set_outputs(answer)
                root.set_attribute("reward", 1.0)
            print(answer, flush=True)
    mlflow.openai.autolog(disable=True)


def run_otel_genai(base_url: str) -> None:
    import openai
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_trackio import rollout, traced

    provider = TracerProvider(resource=Resource.create({"trackio.run": "otel"}))
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    OpenAIInstrumentor().instrument(tracer_provider=provider)
    client = openai.OpenAI(base_url=base_url, api_key="test")

    @traced("calculator", kind="tool")
    def calculator(expr: str) -> str:
        return str(eval(expr, {"__builtins__": {}}))

    for step in range(STEPS):
        for index in range(SAMPLES):
            with rollout(step, index, rollout_n=ROLLOUT_N) as root:
                answer = agent(client, calculator)
                root.set_attribute("reward", 1.0)
            print(answer, flush=True)
    provider.shutdown()


def main(mode: str, base_url: str) -> None:
    loopback_only()
    run_mlflow(base_url, tags=mode == "mlflow-tags")
    if mode == "twins":
        run_otel_genai(base_url)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
