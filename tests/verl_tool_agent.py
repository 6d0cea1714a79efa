"""verl's real ``ToolAgentLoop`` with its hermes tool parser, server client and a traced tool,
on a scripted policy (run by tests/frameworks/test_verl.py in ``.venv/verl-env``).

    python tests/verl_tool_agent.py PROJECT EXPERIMENT TEMPLATE [FIRST_INDEX [BACKEND [SAMPLES]]]

``import verl`` loads otel-trackio through verl's own plugin entry points (nothing here names
it); ``RolloutTraceConfig.init(..., "otel", token2text=True)`` as verl's ``AgentLoopWorker``
calls it; each sample runs ``ToolAgentLoop.run`` under ``rollout_trace_attr`` as the worker's
``_run_agent_loop`` does, a step's samples concurrently, as its ``generate_sequences`` runs
them. The tokenizer is a byte-level BPE trained here on a few sentences,
wrapped as a transformers ``PreTrainedTokenizerFast`` with a chat template that renders tools:
TEMPLATE ``chatml`` (Qwen-style) or ``plain`` (``### role`` headers, a template no markup reader
knows); the policy behind verl's ``LLMServerClient`` (only its server lookup is replaced)
answers with token ids: samples FIRST_INDEX (default 0) and FIRST_INDEX + 1 of each step,
the first calling ``calculator`` once, the second twice in parallel, then each answers. With
``OTEL_EXPORTER_OTLP_ENDPOINT`` the spans go to a receiver there. Prints one line per sample,
``HELD`` and JSON: the messages the agent loop held at the end, then ``ROLLOUT_SECONDS`` and the
time the samples took. BACKEND (default ``otel``) is verl's trace backend (``trackio``: verl's own
Trackio tracing, for ``bench/bench_verl.py``); SAMPLES (default 2) the samples per step.
"""

from __future__ import annotations

import asyncio
import contextvars
import json
import os
import sys
import time
from typing import Any

import verl  # noqa: F401 - loads the plugins, as verl's trainer and workers do
from omegaconf import OmegaConf
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast
from verl.experimental.agent_loop.agent_loop import DictConfigWrap, ToolListWrap
from verl.experimental.agent_loop.tool_agent_loop import AgentData, ToolAgentLoop
from verl.tools.base_tool import BaseTool
from verl.tools.schemas import OpenAIFunctionToolSchema, ToolResponse
from verl.utils.rollout_trace import RolloutTraceConfig, rollout_trace_attr, rollout_trace_op
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.replica import TokenOutput

STEPS = (1, 2)
SAMPLES = 2
SYSTEM = "You are a calculator agent."
QUESTION = "What is 2+2?"
RESULTS = {"2+2": "4", "3+3": "6"}
ANSWER = "The answer is 4."
#: the calls the policy makes, per sample_index
CALLS = [["2+2"], ["2+2", "3+3"]]
SPECIAL = ["<|im_start|>", "<|im_end|>", "<|endoftext|>"]
CHAT_TEMPLATE = (
    "{%- if tools %}<|im_start|>system\n"
    "{% if messages[0].role == 'system' %}{{ messages[0].content }}\n\n{% endif -%}"
    "# Tools\n\n<tools>{% for tool in tools %}\n{{ tool | tojson }}{% endfor %}"
    "\n</tools><|im_end|>\n"
    "{%- elif messages[0].role == 'system' %}<|im_start|>system\n{{ messages[0].content }}"
    "<|im_end|>\n"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'user' %}<|im_start|>user\n{{ message.content }}<|im_end|>\n"
    "{%- elif message.role == 'assistant' %}<|im_start|>assistant"
    "{%- if message.content %}\n{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls or [] %}"
    '\n<tool_call>\n{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments | tojson }}}\n</tool_call>"
    "{%- endfor %}<|im_end|>\n"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}<|im_start|>user{% endif %}"
    "\n<tool_response>\n{{ message.content }}\n</tool_response>"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}<|im_end|>\n{% endif %}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
)


PLAIN_TEMPLATE = (
    "{%- for message in messages %}### {{ message.role }}\n"
    "{%- if message.content %}{{ message.content }}{% endif %}"
    "{%- for call in message.tool_calls or [] %}"
    '\n<tool_call>\n{"name": "{{ call.function.name }}", "arguments": '
    "{{ call.function.arguments | tojson }}}\n</tool_call>"
    "{%- endfor %}\n{% endfor %}"
    "{%- if add_generation_prompt %}### assistant\n{% endif %}"
)
TEMPLATES = {"chatml": CHAT_TEMPLATE, "plain": PLAIN_TEMPLATE}


def build_tokenizer(template: str) -> PreTrainedTokenizerFast:
    """A byte-level BPE (lossless: any text decodes back as it was) with ChatML's tokens."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    corpus = [SYSTEM, "What is 2+2? And 3+3?", "The answer is 4.", '{"name": "calculator"}'] * 20
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    bpe.train_from_iterator(corpus, trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, eos_token="<|im_end|>", pad_token="<|endoftext|>"
    )
    tokenizer.chat_template = TEMPLATES[template]
    return tokenizer


class Calculator(BaseTool):
    @rollout_trace_op
    async def execute(
        self, instance_id: str, parameters: dict[str, Any], **kwargs: Any
    ) -> tuple[ToolResponse, float, dict]:
        return ToolResponse(text=RESULTS[parameters["expr"]]), 0.5, {}


CALCULATOR_SCHEMA = OpenAIFunctionToolSchema.model_validate(
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {
                "type": "object",
                "properties": {"expr": {"type": "string", "description": "the expression"}},
                "required": ["expr"],
            },
        },
    }
)


class ScriptedServer:
    """The policy: tool calls first, then the answer, as token ids."""

    def __init__(self, tokenizer: PreTrainedTokenizerFast, sample: list[int]) -> None:
        self.tokenizer, self.sample = tokenizer, sample
        self.generate = self  # verl calls server.generate.remote(...)

    async def remote(self, *, prompt_ids: list[int], **kwargs: Any) -> TokenOutput:
        prompt = self.tokenizer.decode(prompt_ids)
        if "</tool_call>" in prompt:  # it called the tool before: the result is in
            reply = ANSWER
        else:
            exprs = CALLS[self.sample[0]]
            calls = [{"name": "calculator", "arguments": {"expr": expr}} for expr in exprs]
            reply = "\n".join(f"<tool_call>\n{json.dumps(call)}\n</tool_call>" for call in calls)
        ids = self.tokenizer.encode(reply, add_special_tokens=False)
        return TokenOutput(token_ids=[*ids, self.tokenizer.eos_token_id], stop_reason="completed")


class ScriptedClient(LLMServerClient):
    """verl's server client, its ``generate`` (traced) as it is; only the server is local."""

    def __init__(self, config: Any, server: ScriptedServer) -> None:
        super().__init__(config)
        self.server = server

    async def _acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        return "scripted", self.server

    def _release_server(self, server_id: str, request_id: str | None = None) -> None:
        pass


def config() -> Any:
    return OmegaConf.create(
        {
            "actor_rollout_ref": {
                "rollout": {
                    "name": "vllm",
                    "prompt_length": 2048,
                    "response_length": 2048,
                    "full_determinism": False,
                    "multi_turn": {
                        "max_user_turns": 3,
                        "max_assistant_turns": 3,
                        "max_parallel_calls": 2,
                        "max_tool_response_length": 256,
                        "tool_response_truncate_side": "middle",
                        "format": "hermes",
                    },
                    "trace": {"backend": "otel", "token2text": True},
                }
            },
            "data": {"apply_chat_template_kwargs": {}},
        }
    )


async def main(
    project: str,
    experiment: str,
    template: str,
    first: str = "0",
    backend: str = "otel",
    samples: str = str(SAMPLES),
) -> None:
    RolloutTraceConfig.init(project, experiment, backend, token2text=True)
    tokenizer = build_tokenizer(template)
    cfg = config()
    tool = Calculator({}, CALCULATOR_SCHEMA)
    holder: contextvars.ContextVar[list[Any]] = contextvars.ContextVar("held")
    original = AgentData.__init__

    def keep(self: Any, *args: Any, **kwargs: Any) -> None:  # what the loop held, to compare
        original(self, *args, **kwargs)
        holder.get().append(self.messages)

    AgentData.__init__ = keep  # type: ignore[method-assign]

    async def one_sample(step: int, index: int) -> list[Any]:
        """verl's ``_run_agent_loop``: one sample under ``rollout_trace_attr``."""
        held: list[Any] = []
        holder.set(held)  # this sample's task only
        server = ScriptedServer(tokenizer, [index % SAMPLES])
        loop = ToolAgentLoop(
            trainer_config=DictConfigWrap(config=cfg),
            server_manager=ScriptedClient(cfg, server),
            tokenizer=tokenizer,
            processor=None,
            dataset_cls=None,
            data_config=DictConfigWrap(cfg.data),
            tools=ToolListWrap([tool]),
        )
        prompt = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": QUESTION}]
        with rollout_trace_attr(step=step, sample_index=index, rollout_n=0, name="agent_loop"):
            await loop.run({"temperature": 1.0}, raw_prompt=prompt)
        return held[-1]

    started = time.perf_counter()
    for step in STEPS:  # a batch: its samples concurrently, as verl's AgentLoopWorker runs them
        indexes = range(int(first), int(first) + int(samples))
        batch = await asyncio.gather(*(one_sample(step, index) for index in indexes))
        for index, messages in zip(indexes, batch, strict=True):
            sent = {"step": step, "sample_index": index, "messages": messages}
            print("HELD", json.dumps(sent, default=str), flush=True)
    print("ROLLOUT_SECONDS", time.perf_counter() - started, flush=True)
    if backend == "trackio":  # verl's trainer finishes the run (Tracking.finish) at its end
        RolloutTraceConfig.get_client().finish()


if __name__ == "__main__":
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    asyncio.run(main(*sys.argv[1:7]))
