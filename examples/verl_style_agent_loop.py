"""A verl-style asyncio agent loop traced with otel-trackio's rollout instrumentation.

What verl's ``rollout_trace_attr`` / ``rollout_trace_op`` / ``max_samples_per_step_per_worker`` /
``token2text`` / validation generations do, on plain OpenTelemetry:

* ``otel_trackio.configure()`` sends the process's OTel spans and metrics to the trainer's
  Trackio run;
* 3 training steps x 8 prompts x ``rollout_n=2`` repeats, all samples of a step run concurrently
  (``asyncio.gather``); each is one ``otel_trackio.rollout(step, index, rollout_n=n)``;
* the fake policy works on token ids only (``prompt_ids`` / ``response_ids`` span attributes);
  the exporter decodes them with a toy tokenizer (``configure(token_decoder=...)``), on its
  own thread, like verl's ``token2text``;
* the policy calls a ``calculator`` tool (``@traced(kind="tool")``), then answers; a reward span
  scores the answer (``@traced``);
* ``configure(max_samples_per_step=3)`` keeps 3 prompts per step (with both their repeats), like
  verl's ``max_samples_per_step_per_worker=3`` but chosen by a seeded hash;
* OTel metrics: the reward per step, the response length and the tokens used (Metrics page);
* validation generations at the end (``log_generations``), like verl's ``log_val_generations``.

Needs only the plain install (``pip install .`` from a clone).

    python examples/verl_style_agent_loop.py [--project NAME] [--name RUN] [--temp]

``--temp`` writes into a fresh temporary Trackio folder instead of your usual one (unless
``TRACKIO_DIR`` says where Trackio writes: then there).
"""

from __future__ import annotations

import argparse
import asyncio
import os
import random
import re
import tempfile
import time

STEPS = 3
PROMPTS_PER_STEP = 8
ROLLOUT_N = 2
TRACED_PROMPTS_PER_STEP = 3
MODEL = "toy-policy-0.5b"


class ToyTokenizer:
    """Words (and punctuation) to ids and back; the vocabulary grows as text is seen."""

    def __init__(self) -> None:
        self.vocab: dict[str, int] = {}
        self.words: list[str] = []

    def encode(self, text: str) -> list[int]:
        ids = []
        for word in re.findall(r"<[^>]+>|\w+|[^\w\s]", text):
            if word not in self.vocab:
                self.vocab[word] = len(self.words)
                self.words.append(word)
            ids.append(self.vocab[word])
        return ids

    def decode(self, ids) -> str:
        return " ".join(self.words[i] for i in ids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="otel-trackio-verl-demo")
    parser.add_argument("--name", default=f"verl-style-{time.strftime('%Y%m%d-%H%M%S')}")
    parser.add_argument("--temp", action="store_true", help="log into a temporary Trackio folder")
    args = parser.parse_args()
    if args.temp and not os.environ.get("TRACKIO_DIR"):
        os.environ["TRACKIO_DIR"] = tempfile.mkdtemp(prefix="otel-trackio-verl-")

    # Imported after TRACKIO_DIR is settled (Trackio reads it at import).
    import trackio
    from opentelemetry import metrics, trace
    from opentelemetry.sdk.resources import Resource

    from otel_trackio import configure, log_generations, rollout, traced

    tokenizer = ToyTokenizer()
    meter = metrics.get_meter("verl-style-agent-loop")
    reward_metric = meter.create_histogram("reward", description="reward per sample")
    length_metric = meter.create_histogram("response_length", unit="{token}")
    token_metric = meter.create_counter("tokens", unit="{token}", description="tokens used")

    class FakePolicy:
        """Stands in for a vLLM/SGLang server: token ids in, token ids out."""

        def __init__(self, seed: int) -> None:
            self.rng = random.Random(seed)

        # Token ids are recorded as span attributes (decoded by the exporter), so the call's
        # arguments and result are not recorded a second time as JSON.
        @traced("generate", kind="generation", record_inputs=False, record_outputs=False)
        async def generate(self, prompt_ids: list[int]) -> list[int]:
            span = trace.get_current_span()
            span.set_attribute("gen_ai.request.model", MODEL)
            span.set_attribute("prompt_ids", prompt_ids)
            await asyncio.sleep(self.rng.random() / 200)  # the server is busy
            text = tokenizer.decode(prompt_ids)
            if "<tool_result>" not in text:
                a, b = re.findall(r"\d+", text)[-2:]
                reply = f"<tool_call> calculator ( {a} + {b} ) </tool_call>"
            else:
                result = int(re.findall(r"<tool_result> (\d+)", text)[-1])
                result += 1 if self.rng.random() < 0.25 else 0  # still learning
                reply = f"The answer is {result} ."
            response_ids = tokenizer.encode(reply)
            span.set_attribute("response_ids", response_ids)
            span.set_attribute("gen_ai.usage.input_tokens", len(prompt_ids))
            span.set_attribute("gen_ai.usage.output_tokens", len(response_ids))
            token_metric.add(len(prompt_ids), {"type": "input"})
            token_metric.add(len(response_ids), {"type": "output"})
            return response_ids

    @traced("calculator", kind="tool")
    async def calculator(expression: str) -> str:
        await asyncio.sleep(0.001)
        a, b = (int(x) for x in expression.split("+"))
        return str(a + b)

    @traced("compute_score")
    def compute_score(response: str, ground_truth: int) -> float:
        return 1.0 if f"answer is {ground_truth} " in response + " " else 0.0

    async def agent_loop(policy: FakePolicy, a: int, b: int) -> tuple[str, str, float]:
        """Two turns: the policy calls the tool, reads its result, answers; then the reward."""
        prompt = f"What is {a} + {b} ?"
        ids = tokenizer.encode(prompt)
        response = ""
        out: list[int] = []
        for _ in range(2):
            out = await policy.generate(ids)
            ids = ids + out
            response = tokenizer.decode(out)
            call = re.search(r"calculator \( (\d+) \+ (\d+) \)", response)
            if call is None:
                break
            result = await calculator(f"{call.group(1)}+{call.group(2)}")
            ids = ids + tokenizer.encode(f"<tool_result> {result} </tool_result>")
        length_metric.record(len(out))
        return prompt, response, compute_score(response, a + b)

    async def rollout_sample(policy, step: int, index: int, n: int, a: int, b: int) -> float:
        with rollout(step, index, rollout_n=n, prompt_uid=f"p{step}-{index}") as root:
            _, _, reward = await agent_loop(policy, a, b)
            root.set_attribute("reward", reward)
            reward_metric.record(reward, {"step": step})
            return reward

    # The trainer's own Trackio run; configure() sends OTel spans and metrics into it too.
    run = trackio.init(project=args.project, name=args.name)
    telemetry = configure(
        run=run,
        token_decoder=tokenizer.decode,
        # The toy tokenizer lives in this script, which a writer process cannot import: export
        # in this process (with a tokenizer from a module, leave offload on, its default).
        offload=False,
        max_samples_per_step=TRACED_PROMPTS_PER_STEP,
        sampling_seed=0,
        resource=Resource.create({"service.name": "verl-style-agent-loop"}),
    )

    policy = FakePolicy(seed=0)
    problems = random.Random(1)

    async def train() -> None:
        for step in range(STEPS):
            prompts = [(problems.randint(1, 50), problems.randint(1, 50)) for _ in range(8)]
            rewards = await asyncio.gather(
                *(
                    rollout_sample(policy, step, i, n, a, b)
                    for i, (a, b) in enumerate(prompts)
                    for n in range(ROLLOUT_N)
                )
            )
            telemetry.force_flush()  # the step's Traces and metrics, now
            mean = sum(rewards) / len(rewards)
            print(f"step {step}: {len(rewards)} samples, reward_mean={mean:.2f}")

    async def validate() -> list[tuple[str, str, float]]:
        val_policy = FakePolicy(seed=99)

        async def one(index: int, a: int) -> tuple[str, str, float]:
            # validate=True marks these Traces; the sampler caps them like any step.
            with rollout(STEPS, index, validate=True, name="validation") as root:
                generation = await agent_loop(val_policy, a, a + 1)
                root.set_attribute("reward", generation[2])
                return generation

        return list(await asyncio.gather(*(one(i, a) for i, a in enumerate(range(1, 6)))))

    asyncio.run(train())
    generations = asyncio.run(validate())
    logged = log_generations(generations, step=STEPS, run=telemetry.run)
    telemetry.shutdown()  # logs the last samples and metrics (the run is ours: it stays open)
    trackio.finish()

    # shutdown() printed the summary (samples logged, what the step sampler left out, the
    # command to open them); the validation generations are in the same run.
    print(f"{logged} validation generations logged at step {STEPS} (Media & Tables page)")


if __name__ == "__main__":
    main()
