"""One agent framework in one telemetry mode, run as a user would
(tests/frameworks/test_frameworks.py).

    python tests/framework_agents.py FRAMEWORK MODE PROJECT BASE_URL

``otel_trackio.configure(PROJECT, "run")`` installs the global providers, then 2 steps x 3 samples
each run the framework's agent once under ``otel_trackio.rollout(step, i)`` against the scripted
OpenAI-compatible server at BASE_URL (the parent's loopback ``FakeOpenAIServer``): the model calls
the ``calculator`` tool, the tool answers "4", the model answers. Each framework runs in its own
process because each installs process-wide state (global tracer provider, callbacks, patched
classes, threading instrumentation), as it would in a user's program.

Offline by construction: every connection or name lookup to anything but the loopback is refused
and reported on stderr as ``BLOCKED <address>`` (the parent fails the test on it).
"""

from __future__ import annotations

import asyncio
import collections
import os
import socket
import sys
import threading
import time
from collections.abc import Callable
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan, SpanProcessor

STEPS = 2
SAMPLES = 3
MODEL = "gpt-test"
SYSTEM = "be brief"
QUESTION = "what is 2+2?"
_LOOPBACK = ("127.0.0.1", "::1", "localhost")


def loopback_only() -> None:
    """Refuse (and report) every connection and name lookup that is not the loopback."""

    def allowed(address: Any) -> bool:
        host = address[0] if isinstance(address, tuple) else address
        return not isinstance(host, str) or host in _LOOPBACK or host.startswith("127.")

    def guard(method: Callable[..., Any]) -> Callable[..., Any]:
        def guarded(self: socket.socket, address: Any, *args: Any) -> Any:
            if self.family in (socket.AF_INET, socket.AF_INET6) and not allowed(address):
                print(f"BLOCKED {address!r}", file=sys.stderr, flush=True)
                raise OSError(f"test is offline: no connection to {address!r}")
            return method(self, address, *args)

        return guarded

    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(host, (str, bytes)) and not allowed(
            host.decode() if isinstance(host, bytes) else host
        ):
            print(f"BLOCKED {host!r}", file=sys.stderr, flush=True)
            raise socket.gaierror(f"test is offline: no lookup of {host!r}")
        return real_getaddrinfo(host, *args, **kwargs)

    socket.socket.connect = guard(socket.socket.connect)  # type: ignore[method-assign]
    socket.socket.connect_ex = guard(socket.socket.connect_ex)  # type: ignore[method-assign]
    socket.getaddrinfo = getaddrinfo


def calculator(expr: str) -> str:
    """Evaluate an arithmetic expression.

    Args:
        expr: the expression
    """
    return "4"


TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression.",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]


# -- one agent run per framework: each returns the final answer ----------------------------------


def litellm_agent(base_url: str, mode: str) -> Callable[[], Any]:
    import litellm

    litellm.callbacks = ["otel"]
    kwargs = {"model": f"openai/{MODEL}", "api_base": base_url, "api_key": "k", "tools": TOOLS}

    async def call(messages: list[dict[str, Any]]) -> Any:
        if mode == "async":
            return await litellm.acompletion(messages=messages, **kwargs)
        return litellm.completion(messages=messages, **kwargs)

    async def run() -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        first = (await call(messages)).choices[0].message
        messages.append(
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [c.model_dump() for c in first.tool_calls],
            }
        )
        call_id = first.tool_calls[0].id
        messages.append({"role": "tool", "tool_call_id": call_id, "content": calculator("2+2")})
        return str((await call(messages)).choices[0].message.content)

    return lambda: asyncio.run(run())


def strands_agent(base_url: str, mode: str) -> Callable[[], Any]:
    from strands import Agent, tool
    from strands.models.openai import OpenAIModel

    model = OpenAIModel(client_args={"base_url": base_url, "api_key": "k"}, model_id=MODEL)
    tools = [tool(calculator)]

    def run() -> str:
        agent = Agent(model=model, tools=tools, system_prompt=SYSTEM, callback_handler=None)
        return str(agent(QUESTION)).strip()

    return run


def smolagents_agent(base_url: str, mode: str) -> Callable[[], Any]:
    from openinference.instrumentation.smolagents import SmolagentsInstrumentor
    from smolagents import OpenAIServerModel, ToolCallingAgent, tool

    SmolagentsInstrumentor().instrument()
    model = OpenAIServerModel(model_id=MODEL, api_base=base_url, api_key="k")
    tools = [tool(calculator)]

    def run() -> str:
        agent = ToolCallingAgent(tools=tools, model=model, max_steps=3, verbosity_level=0)
        return str(agent.run(QUESTION))

    return run


def llama_index_agent(base_url: str, mode: str) -> Callable[[], Any]:
    from llama_index.core.agent.workflow import FunctionAgent
    from llama_index.core.tools import FunctionTool
    from llama_index.llms.openai_like import OpenAILike
    from openinference.instrumentation.llama_index import LlamaIndexInstrumentor

    LlamaIndexInstrumentor().instrument()
    streaming = mode == "stream"
    llm = OpenAILike(
        model=MODEL,
        api_base=base_url,
        api_key="k",
        is_chat_model=True,
        is_function_calling_model=True,
        context_window=8000,
        # Streamed replies carry usage only when asked for, as with OpenAI itself.
        additional_kwargs={"stream_options": {"include_usage": True}} if streaming else {},
    )
    tools = [FunctionTool.from_defaults(calculator)]

    async def run() -> str:
        agent = FunctionAgent(tools=tools, llm=llm, system_prompt=SYSTEM, streaming=streaming)
        return str(await agent.run(QUESTION))

    return lambda: asyncio.run(run())


def agent_framework_agent(base_url: str, mode: str) -> Callable[[], Any]:
    from agent_framework import Agent, tool
    from agent_framework.observability import enable_instrumentation
    from agent_framework.openai import OpenAIChatCompletionClient

    enable_instrumentation(enable_sensitive_data=True, enable_message_events=mode == "events")
    client = OpenAIChatCompletionClient(model=MODEL, base_url=base_url, api_key="k")
    agent = Agent(client=client, instructions=SYSTEM, tools=[tool(calculator)])

    async def run() -> str:
        return str(await agent.run(QUESTION))

    return lambda: asyncio.run(run())


def util_genai_agent(base_url: str, mode: str) -> Callable[[], Any]:
    """The calculator loop on the ``openai`` client, each call and the tool recorded with
    ``opentelemetry-util-genai``'s ``TelemetryHandler`` (what GenAI instrumentations build on);
    MODE is the content capture mode."""
    import openai
    from opentelemetry.util.genai.handler import get_telemetry_handler
    from opentelemetry.util.genai.types import (
        InputMessage,
        OutputMessage,
        TextPart,
        ToolCallRequestPart,
        ToolCallResponsePart,
    )

    client = openai.OpenAI(base_url=base_url, api_key="k")
    handler = get_telemetry_handler()

    def parts_of(message: dict[str, Any]) -> list[Any]:
        parts: list[Any] = [TextPart(content=message["content"])] if message.get("content") else []
        for call in message.get("tool_calls") or []:
            function = call["function"]
            parts.append(
                ToolCallRequestPart(
                    id=call["id"], name=function["name"], arguments=function["arguments"]
                )
            )
        if message["role"] == "tool":
            parts = [ToolCallResponsePart(id=message["tool_call_id"], response=message["content"])]
        return parts

    def call(messages: list[dict[str, Any]]) -> Any:
        with handler.inference("openai", request_model=MODEL) as invocation:
            invocation.system_instruction = [TextPart(content=SYSTEM)]
            invocation.input_messages = [
                InputMessage(role=m["role"], parts=parts_of(m)) for m in messages[1:]
            ]
            response = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            choice = response.choices[0]
            reply = choice.message.model_dump(exclude_none=True)
            invocation.output_messages = [
                OutputMessage(
                    role="assistant", parts=parts_of(reply), finish_reason=choice.finish_reason
                )
            ]
            invocation.response_model_name = response.model
            invocation.input_tokens = response.usage.prompt_tokens
            invocation.output_tokens = response.usage.completion_tokens
        return reply

    def run() -> str:
        messages: list[dict[str, Any]] = [
            {"role": "system", "content": SYSTEM},
            {"role": "user", "content": QUESTION},
        ]
        first = call(messages)
        messages.append(first)
        for tool_call in first["tool_calls"]:
            with handler.tool("calculator") as tool:
                tool.tool_call_id = tool_call["id"]
                tool.arguments = tool_call["function"]["arguments"]
                result = calculator("2+2")
                tool.tool_result = result
            messages.append({"role": "tool", "tool_call_id": tool_call["id"], "content": result})
        return str(call(messages)["content"])

    return run


def openai_agents_agent(base_url: str, mode: str) -> Callable[[], Any]:
    """The OpenAI Agents SDK on the Chat Completions API, traced by OpenInference's instrumentor
    as the only trace processor (the SDK's own exporter would send to OpenAI)."""
    from agents import Agent, OpenAIChatCompletionsModel, Runner, function_tool
    from openai import AsyncOpenAI
    from openinference.instrumentation.openai_agents import OpenAIAgentsInstrumentor

    OpenAIAgentsInstrumentor().instrument(exclusive_processor=True)
    model = OpenAIChatCompletionsModel(
        model=MODEL, openai_client=AsyncOpenAI(base_url=base_url, api_key="k")
    )
    agent = Agent(name="calc", instructions=SYSTEM, model=model, tools=[function_tool(calculator)])

    async def run() -> str:
        return str((await Runner.run(agent, QUESTION)).final_output)

    return lambda: asyncio.run(run())


def langgraph_agent(base_url: str, mode: str) -> Callable[[], Any]:
    """LangGraph's prebuilt ReAct agent on LangChain's ``ChatOpenAI``, traced by OpenInference's
    LangChain instrumentor."""
    from langchain_core.tools import tool
    from langchain_openai import ChatOpenAI
    from langgraph.prebuilt import create_react_agent
    from openinference.instrumentation.langchain import LangChainInstrumentor

    LangChainInstrumentor().instrument()
    llm = ChatOpenAI(model=MODEL, base_url=base_url, api_key="k")
    graph = create_react_agent(llm, [tool(calculator)], prompt=SYSTEM)

    def run() -> str:
        return str(graph.invoke({"messages": [("user", QUESTION)]})["messages"][-1].content)

    return run


AGENTS: dict[str, Callable[[str, str], Callable[[], Any]]] = {
    "litellm": litellm_agent,
    "strands": strands_agent,
    "smolagents": smolagents_agent,
    "llama_index": llama_index_agent,
    "agent_framework": agent_framework_agent,
    "util_genai": util_genai_agent,
    "openai_agents": openai_agents_agent,
    "langgraph": langgraph_agent,
}


class EndedSpans(SpanProcessor):
    """Counts the ended model-call spans (``gen_ai.operation.name``) of one instrumentation
    scope per trace, to wait for them."""

    def __init__(self, scope: str) -> None:
        self.scope = scope
        self.ended: collections.Counter[int] = collections.Counter()
        self.changed = threading.Condition()

    def on_end(self, span: ReadableSpan) -> None:
        scope = span.instrumentation_scope
        attrs = span.attributes or {}
        if (
            scope is not None
            and scope.name == self.scope
            and span.context is not None
            and "gen_ai.operation.name" in attrs
        ):
            with self.changed:
                self.ended[span.context.trace_id] += 1
                self.changed.notify_all()

    def wait(self, trace_id: int, count: int, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        with self.changed:
            while self.ended[trace_id] < count and time.monotonic() < deadline:
                self.changed.wait(deadline - time.monotonic())


def main(framework: str, mode: str, project: str, base_url: str) -> None:
    loopback_only()
    os.environ["LITELLM_LOCAL_MODEL_COST_MAP"] = "True"  # else LiteLLM fetches it at import
    import otel_trackio
    from otel_trackio import rollout

    telemetry = otel_trackio.configure(project, "run", metrics=False)
    # LiteLLM records each call from a background worker after the call returned: with one span
    # per call, the sample stays open until both calls' spans have ended (README: LiteLLM).
    litellm_spans = None
    if framework == "litellm" and mode != "default":
        litellm_spans = EndedSpans("litellm")
        telemetry.tracer_provider.add_span_processor(litellm_spans)
    agent = AGENTS[framework](base_url, mode)
    for step in range(STEPS):
        for index in range(SAMPLES):
            with rollout(step, index) as root:
                print(agent(), flush=True)
                if litellm_spans is not None:
                    litellm_spans.wait(root.get_span_context().trace_id, 2)
    telemetry.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:5])
