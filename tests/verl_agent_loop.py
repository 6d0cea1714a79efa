"""A verl rollout worker shaped like verl's ``ToolAgentLoop`` (run by
tests/frameworks/test_verl.py).

The process imports ``verl`` the way verl's trainer and Ray workers do
(``VERL_USE_EXTERNAL_MODULES`` names ``otel_trackio.verl``), then defines its agent loop, tool
and server client with verl's real ``rollout_trace_op`` (``verl/utils/rollout_trace.py`` from
the verl wheel, under stub parent packages: the real ``verl`` imports torch, tensordict,
transformers, hydra ... at the top), calls ``RolloutTraceConfig.init(..., backend, token2text,
max_samples_per_step_per_worker)`` like verl's ``AgentLoopWorker`` and runs each sample under
``rollout_trace_attr`` like its ``_run_agent_loop``. Nothing here knows about otel-trackio.

The agent: the policy (token ids in, token ids out) asks the ``calculator`` tool for ``a+b``,
reads the result and answers; token ids only, a word-level tokenizer.

    python tests/verl_agent_loop.py BACKEND PROJECT EXPERIMENT FIRST_INDEX COUNT MAX_SAMPLES
"""

from __future__ import annotations

import asyncio
import json
import re
import sys
from typing import Any

import verl  # noqa: F401 - imports VERL_USE_EXTERNAL_MODULES first, as verl does
from pydantic import BaseModel
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op
from verl_style_agent_loop import ToyTokenizer  # examples/: words to ids and back

STEPS = (1, 2)
ROLLOUT_N = 2
SYSTEM = "You are a calculator agent ."


def question(index: int) -> str:
    return f"What is {index} + 3 ?"


class WordTokenizer(ToyTokenizer):
    """The example's word-level tokenizer, with a chat template."""

    def chat(self, messages: list[dict[str, Any]]) -> list[int]:
        """A chat template: ``<role> content`` per message, then the assistant's turn."""
        text = " ".join(f"<{m['role']}> {m['content']}" for m in messages)
        return self.encode(text + " <assistant>")


class TokenOutput(BaseModel):
    token_ids: list[int]
    log_probs: list[float] | None = None
    stop_reason: str | None = None


class ToolResponse(BaseModel):
    text: str | None = None
    image: list[Any] | None = None


class AgentLoopOutput(BaseModel):
    prompt_ids: list[int]
    response_ids: list[int]
    response_mask: list[int]
    num_turns: int = 0
    reward_score: float | None = None


class LLMServerClient:
    """Stands in for verl's server client: the policy behind a vLLM server."""

    def __init__(self, tokenizer: WordTokenizer) -> None:
        self.tokenizer = tokenizer  # verl sets it when trace.token2text is on

    @rollout_trace_op
    async def generate(
        self,
        request_id: str,
        *,
        prompt_ids: list[int],
        sampling_params: dict[str, Any],
        image_data: Any = None,
        **kwargs: Any,
    ) -> TokenOutput:
        await asyncio.sleep(0.001)
        text = self.tokenizer.decode(prompt_ids)
        if "<tool_response>" not in text:
            a, b = re.findall(r"\d+", text)[-2:]
            call = {"name": "calculator", "arguments": {"expr": f"{a}+{b}"}}
            reply = f"<tool_call> {json.dumps(call)} </tool_call>"
        else:
            result = re.findall(r"<tool_response> (\d+)", text)[-1]
            reply = f"The answer is {result} ."
        return TokenOutput(token_ids=self.tokenizer.encode(reply), stop_reason="completed")


class CalculatorTool:
    """Shaped like verl's ``BaseTool``: ``execute`` gives (response, reward, metrics)."""

    name = "calculator"

    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict[str, Any]]:
        a, b = (int(x) for x in parameters["expr"].split("+"))
        return ToolResponse(text=str(a + b)), 0.5, {"calls": 1}


class ToolAgentLoop:
    """Shaped like verl's ``ToolAgentLoop.run``: generate, run the tool calls, generate again."""

    def __init__(self, tokenizer: WordTokenizer, server: LLMServerClient) -> None:
        self.tokenizer = tokenizer
        self.server_manager = server
        self.tools = {"calculator": CalculatorTool()}

    @rollout_trace_op
    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        messages = list(kwargs["raw_prompt"])
        prompt_ids = self.tokenizer.chat(messages)
        start = len(prompt_ids)
        turns = 0
        for _ in range(3):
            output = await self.server_manager.generate(
                "req", prompt_ids=prompt_ids, sampling_params=sampling_params
            )
            prompt_ids = prompt_ids + output.token_ids
            turns += 1
            text = self.tokenizer.decode(output.token_ids)
            found = re.search(r"<tool_call> (.*) </tool_call>", text)
            if found is None:
                break
            call = json.loads(found.group(1).replace(" ", ""))
            response, _, _ = await self.tools[call["name"]].execute(
                "instance-1", call["arguments"], agent_data=object()
            )
            prompt_ids = prompt_ids + self.tokenizer.encode(
                f"<tool_response> {response.text} </tool_response> <assistant>"
            )
        response_ids = prompt_ids[start:]
        return AgentLoopOutput(
            prompt_ids=prompt_ids[:start],
            response_ids=response_ids,
            response_mask=[1] * len(response_ids),
            num_turns=turns,
        )


async def run_agent_loop(loop: ToolAgentLoop, step: int, index: int, n: int) -> None:
    """What verl's ``AgentLoopWorker._run_agent_loop`` does around each sample."""
    with rollout_trace_attr(step=step, sample_index=index, rollout_n=n, name="agent_loop"):
        raw_prompt = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": question(index)},
        ]
        await loop.run({"temperature": 1.0, "top_p": 1.0}, raw_prompt=raw_prompt, index=index)


async def main(
    backend: str, project: str, experiment: str, first: int, count: int, cap: int
) -> None:
    RolloutTraceConfig.init(project, experiment, backend, True, cap if cap >= 0 else None)
    tokenizer = WordTokenizer()
    loop = ToolAgentLoop(tokenizer, LLMServerClient(tokenizer))
    for step in STEPS:
        await asyncio.gather(
            *(
                run_agent_loop(loop, step, index, n)
                for index in range(first, first + count)
                for n in range(ROLLOUT_N)
            )
        )
    print("done", flush=True)


if __name__ == "__main__":
    backend, project, experiment, first, count, cap = sys.argv[1:7]
    asyncio.run(main(backend, project, experiment, int(first), int(count), int(cap)))
