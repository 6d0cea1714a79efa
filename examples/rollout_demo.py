"""An RL-style rollout loop traced with OpenTelemetry and shown in Trackio.

3 training steps x 8 samples. Each sample is a small agent: the (fake, deterministic) policy is
asked a sum, calls a ``calculator`` tool, reads the result and answers; a reward function scores
the answer. ``otel_trackio.configure()`` sends the process's OTel spans and metrics to the
trainer's Trackio run, and each sample is an ``otel_trackio.rollout()``; model and tool calls
carry the OTel GenAI attributes an instrumentation would set (``gen_ai.input.messages`` etc.),
on the plain OTel API. OTel metrics (the reward, the response length, the tokens used) become
the Metrics page's plots.

In the last step the calculator hangs for one sample (a stuck sandbox): the trainer does not
wait for it, and the end-of-step flush logs what that sample did so far as a *partial* Trace.

Needs only the plain install (``pip install .`` from a clone; ``make demo`` sets it up and runs
this script).

    python examples/rollout_demo.py [--project NAME] [--name RUN]

It ends by printing the ``trackio show`` command; open the Traces page (and Metrics).
"""

from __future__ import annotations

import argparse
import json
import random
import threading
import time
from dataclasses import dataclass

import trackio
from opentelemetry import metrics, trace
from opentelemetry.sdk.resources import Resource

import otel_trackio

STEPS = 3
SAMPLES_PER_STEP = 8
MODEL = "toy-policy-0.5b"
SYSTEM = "You are a careful math agent. Use the calculator tool, then answer briefly."
# How long the trainer waits for a sample before moving on (only the stuck one hits it).
SAMPLE_TIME_BUDGET_SECONDS = 0.5
STUCK_SANDBOX = threading.Event()  # never set: a tool call that never returns


@dataclass
class Meters:
    """The OTel instruments the demo records (plots on Trackio's Metrics page)."""

    reward: metrics.Histogram
    response_length: metrics.Histogram
    tokens: metrics.Counter

    @classmethod
    def create(cls) -> Meters:
        meter = metrics.get_meter("rollout-demo")
        return cls(
            reward=meter.create_histogram("reward", description="reward per sample"),
            response_length=meter.create_histogram("response_length", unit="{token}"),
            tokens=meter.create_counter("tokens", unit="{token}", description="tokens used"),
        )


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
    text = rng.choice([f"The answer is {answer}.",
                       f"The calculator says {result}, so the answer is {answer}.",
                       f"Adding the two numbers gives {answer}. The answer is {answer}."])
    return {"role": "assistant", "parts": [text_part(text)], "finish_reason": "stop"}


def tokens(messages: list[dict]) -> int:
    return sum(len(json.dumps(m)) // 4 for m in messages)


def chat(tracer, meters: Meters, messages: list[dict], rng: random.Random) -> dict:
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
        input_tokens, output_tokens = tokens(messages) + len(SYSTEM) // 4, tokens([reply])
        span.set_attribute("gen_ai.usage.input_tokens", input_tokens)
        span.set_attribute("gen_ai.usage.output_tokens", output_tokens)
        meters.tokens.add(input_tokens, {"type": "input"})
        meters.tokens.add(output_tokens, {"type": "output"})
        return reply


def calculator(tracer, call: dict, stuck: bool = False) -> str:
    with tracer.start_as_current_span("execute_tool calculator") as span:
        span.set_attribute("gen_ai.operation.name", "execute_tool")
        span.set_attribute("gen_ai.tool.name", "calculator")
        span.set_attribute("gen_ai.tool.call.id", call["id"])
        span.set_attribute("gen_ai.tool.call.arguments", json.dumps(call["arguments"]))
        if stuck:
            STUCK_SANDBOX.wait()
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


def run_sample(tracer, meters: Meters, step: int, index: int, stuck: bool = False) -> float:
    """One rollout sample: a Trackio Trace at ``step`` (its reward lands in the Trace header)."""
    rng = random.Random(step * 1000 + index)
    a, b = rng.randint(1, 50), rng.randint(1, 50)
    with otel_trackio.rollout(step, index, rollout_n=index % 2) as root:
        messages = [{"role": "user", "parts": [text_part(f"What is {a} + {b}?")]}]
        first = chat(tracer, meters, messages, rng)
        call = first["parts"][0]
        result = calculator(tracer, call, stuck)
        messages += [first, {"role": "tool",
                             "parts": [{"type": "tool_call_response", "id": call["id"],
                                        "response": result}]}]
        final = chat(tracer, meters, messages, rng)
        answer = final["parts"][0]["content"]
        score = reward(tracer, answer, a + b)
        root.set_attribute("reward", score)
        meters.reward.record(score, {"step": step})
        meters.response_length.record(tokens([final]), {"step": step})
        return score


def run_step(tracer, meters: Meters, step: int) -> list[float]:
    """The step's samples; in the last step the last sample's tool call hangs and the trainer
    moves on without it after its time budget."""
    rewards = [run_sample(tracer, meters, step, i) for i in range(SAMPLES_PER_STEP - 1)]
    last = SAMPLES_PER_STEP - 1
    if step < STEPS - 1:
        return [*rewards, run_sample(tracer, meters, step, last)]
    straggler = threading.Thread(
        target=run_sample, args=(tracer, meters, step, last, True), daemon=True
    )
    straggler.start()
    straggler.join(SAMPLE_TIME_BUDGET_SECONDS)
    print(f"step {step}: sample {last} is stuck in its tool call; the step goes on without it")
    return rewards


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="otel-trackio-demo")
    parser.add_argument("--name", default=f"demo-{time.strftime('%Y%m%d-%H%M%S')}")
    args = parser.parse_args()

    # The trainer's own Trackio run; configure() sends OTel spans and metrics into it too.
    run = trackio.init(project=args.project, name=args.name, config={"policy": MODEL})
    telemetry = otel_trackio.configure(
        run=run, resource=Resource.create({"service.name": "rollout-demo"})
    )
    tracer = trace.get_tracer("rollout-demo")
    meters = Meters.create()

    for step in range(STEPS):
        rewards = run_step(tracer, meters, step)
        run.log({"train/loss": 1.0 / (step + 1)}, step=step)
        # The step's Traces and metrics now; a sample still open is logged as partial.
        telemetry.force_flush()
        print(f"step {step}: reward_mean={sum(rewards) / len(rewards):.2f}")

    telemetry.shutdown()  # flushes spans and metrics (the run is ours: it stays open)
    trackio.finish()
    # shutdown() printed the summary: samples logged, partial, lost, and the command to open them.


if __name__ == "__main__":
    main()
