"""An RL-style rollout loop traced with plain OpenTelemetry and shown in Trackio.

3 training steps x 8 samples. Each sample is a small agent: the (fake, deterministic) policy is
asked a sum, calls a ``calculator`` tool, reads the result and answers; a reward function scores
the answer. Model calls carry the OTel GenAI attributes an instrumentation would set
(``gen_ai.input.messages`` etc.); nothing here imports otel-trackio except the exporter setup.

    python examples/rollout_demo.py [--project NAME] [--name RUN]

Then open the dashboard with ``trackio show --project NAME`` and go to the Traces tab.
"""

from __future__ import annotations

import argparse
import json
import random
import time

import trackio
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from otel_trackio import TrackioSpanExporter

STEPS = 3
SAMPLES_PER_STEP = 8
MODEL = "toy-policy-0.5b"
SYSTEM = "You are a careful math agent. Use the calculator tool, then answer briefly."


def text_part(text: str) -> dict:
    return {"type": "text", "content": text}


def fake_policy(messages: list[dict], rng: random.Random) -> dict:
    """A deterministic stand-in for a model: first asks the tool, then answers with its result."""
    last = messages[-1]
    if last["role"] == "user":
        a, b = (int(x) for x in last["parts"][0]["content"].split("What is ")[1][:-1].split(" + "))
        call = {"type": "tool_call", "id": f"call_{a}_{b}", "name": "calculator",
                "arguments": {"expression": f"{a}+{b}"}}
        return {"role": "assistant", "parts": [call], "finish_reason": "tool_calls"}
    result = int(last["parts"][0]["response"])
    wrong = rng.random() < 0.25  # the policy is still learning
    answer = result + 1 if wrong else result
    return {"role": "assistant", "parts": [text_part(f"The answer is {answer}.")],
            "finish_reason": "stop"}


def tokens(messages: list[dict]) -> int:
    return sum(len(json.dumps(m)) // 4 for m in messages)


def chat(tracer, messages: list[dict], rng: random.Random) -> dict:
    """One model call, with the attributes the OTel GenAI instrumentations record."""
    with tracer.start_as_current_span(f"chat {MODEL}") as span:
        span.set_attribute("gen_ai.operation.name", "chat")
        span.set_attribute("gen_ai.provider.name", "toy")
        span.set_attribute("gen_ai.request.model", MODEL)
        span.set_attribute("gen_ai.system_instructions", json.dumps([text_part(SYSTEM)]))
        span.set_attribute("gen_ai.input.messages", json.dumps(messages))
        time.sleep(0.002)
        reply = fake_policy(messages, rng)
        span.set_attribute("gen_ai.output.messages", json.dumps([reply]))
        span.set_attribute("gen_ai.response.model", MODEL)
        span.set_attribute("gen_ai.response.finish_reasons", [reply["finish_reason"]])
        span.set_attribute("gen_ai.usage.input_tokens", tokens(messages) + len(SYSTEM) // 4)
        span.set_attribute("gen_ai.usage.output_tokens", tokens([reply]))
        return reply


def calculator(tracer, call: dict) -> str:
    with tracer.start_as_current_span("execute_tool calculator") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "calculator")
        span.set_attribute("gen_ai.tool.call.id", call["id"])
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(call["arguments"]))
        a, b = call["arguments"]["expression"].split("+")
        result = str(int(a) + int(b))
        span.set_attribute("gen_ai.tool.call.result", result)
        return result


def reward(tracer, answer: str, expected: int) -> float:
    with tracer.start_as_current_span("reward") as span:
        score = 1.0 if answer.endswith(f" {expected}.") else 0.0
        span.set_attribute("reward", score)
        span.set_attribute("expected", expected)
        return score


def rollout(tracer, step: int, index: int) -> float:
    rng = random.Random(step * 1000 + index)
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    attributes = {"step": step, "sample_index": index, "rollout_n": index % 2}
    with tracer.start_as_current_span("rollout", attributes=attributes) as root:
        messages = [{"role": "user", "parts": [text_part(f"What is {a} + {b}?")]}]
        first = chat(tracer, messages, rng)
        call = first["parts"][0]
        result = calculator(tracer, call)
        messages += [first, {"role": "tool",
                             "parts": [{"type": "tool_call_response", "id": call["id"],
                                        "response": result}]}]
        final = chat(tracer, messages, rng)
        answer = final["parts"][0]["content"]
        score = reward(tracer, answer, a + b)
        root.set_attribute("reward", score)
        return score


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="otel-trackio-demo")
    parser.add_argument("--name", default=f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()

    run = trackio.init(project=args.project, name=args.name, config={"policy": MODEL})
    provider = TracerProvider(resource=Resource.create({"service.name": "rollout-demo"}))
    provider.add_span_processor(BatchSpanProcessor(TrackioSpanExporter(run=run)))
    tracer = provider.get_tracer("rollout-demo")

    for step in range(STEPS):
        rewards = [rollout(tracer, step, i) for i in range(SAMPLES_PER_STEP)]
        loss = 1.0 / (step + 1)
        run.log({"train/loss": loss, "train/reward_mean": sum(rewards) / len(rewards)}, step=step)
        print(f"step {step}: reward_mean={sum(rewards) / len(rewards):.2f}")

    provider.shutdown()  # flushes the batch processor: every sample is logged
    run.finish()
    total = STEPS * SAMPLES_PER_STEP
    print(f"\nLogged {total} rollout samples to Trackio project '{args.project}'", end="")
    print(f", run '{args.name}'.")
    print("Look at them with:")
    print(f"    .venv/bin/trackio show --project {args.project}")
    print("then open the printed URL and choose the 'Traces' tab (key rollout/traces).")


if __name__ == "__main__":
    main()
