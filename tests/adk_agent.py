"""Google ADK's calculator agent, run as a user would (tests/frameworks/test_adk.py).

    python tests/adk_agent.py MODE PROJECT [ENDPOINT]

Runs in the environment of the agent stacks (``.venv/genai-stacks``: google-adk 2.13 pins
``opentelemetry-sdk<=1.44``). ``otel_trackio.configure(PROJECT, "run")`` installs the global
providers (or, with ENDPOINT, the official OTLP/gRPC exporters send to a receiver there), then
2 steps x 2 samples each run ADK's ``LlmAgent`` once under ``otel_trackio.rollout(step, i)`` and
print one JSON line (step, sample_index, the system instruction ADK sent, the answer). The
model is a ``BaseLlm`` that scripts Gemini's side: sample 0 asks for ``calculator(expr="2+2")``,
sample 1 for two calls in parallel (``2+2`` and ``3+3``); once the tool results are in, it answers.
MODE ``openinference`` adds ``openinference-instrumentation-google-adk``. ADK's own span format and
content capture are chosen by the parent through ADK's variables, as a user would set them.

Offline by construction: the model never leaves the process and ADK's telemetry goes only to
the providers installed here.
"""

from __future__ import annotations

import asyncio
import json
import sys
from collections.abc import AsyncGenerator
from typing import Any

STEPS = 2
SAMPLES = 2
MODEL = "gemini-test"
SYSTEM = "be brief"
QUESTION = "what is 2+2?"
INPUT_TOKENS = 11
OUTPUT_TOKENS = 7
#: the calls the model asks for, per sample_index (the second sample calls two tools at once)
CALLS: list[list[tuple[str, str]]] = [
    [("call_1", "2+2")],
    [("call_1", "2+2"), ("call_2", "3+3")],
]
RESULTS = {"2+2": "4", "3+3": "6"}
ANSWER = "the answer is 4"


def calculator(expr: str) -> str:
    """Evaluate an arithmetic expression."""
    return RESULTS[expr]


def build_agent(state: dict[str, Any]) -> Any:
    """ADK's ``LlmAgent`` with the scripted model; ``state["sample_index"]`` picks the script and
    ``state["system"]`` receives the system instruction ADK sent the model."""
    from google.adk.agents import LlmAgent
    from google.adk.models.base_llm import BaseLlm
    from google.adk.models.llm_request import LlmRequest
    from google.adk.models.llm_response import LlmResponse
    from google.genai import types

    class ScriptedGemini(BaseLlm):
        """Gemini's side of the conversation, scripted: tool calls first, then the answer."""

        async def generate_content_async(
            self, llm_request: LlmRequest, stream: bool = False
        ) -> AsyncGenerator[LlmResponse, None]:
            usage = types.GenerateContentResponseUsageMetadata(
                prompt_token_count=INPUT_TOKENS,
                candidates_token_count=OUTPUT_TOKENS,
                total_token_count=INPUT_TOKENS + OUTPUT_TOKENS,
            )
            config = llm_request.config
            state["system"] = config.system_instruction if config is not None else None
            last = llm_request.contents[-1]
            if any(part.function_response for part in last.parts or []):
                parts = [types.Part(text=ANSWER)]
            else:
                parts = [
                    types.Part(
                        function_call=types.FunctionCall(
                            id=call_id, name="calculator", args={"expr": expr}
                        )
                    )
                    for call_id, expr in CALLS[state["sample_index"]]
                ]
            content = types.Content(role="model", parts=parts)
            yield LlmResponse(content=content, usage_metadata=usage)

    return LlmAgent(
        name="calc", model=ScriptedGemini(model=MODEL), instruction=SYSTEM, tools=[calculator]
    )


def main(mode: str, project: str, endpoint: str | None = None) -> None:
    import otel_trackio
    from otel_trackio import rollout

    telemetry = None
    if endpoint is None:
        telemetry = otel_trackio.configure(project, "run", metrics=False)
        tracer_provider: Any = telemetry.tracer_provider
    else:
        from opentelemetry import _logs, trace
        from opentelemetry.exporter.otlp.proto.grpc._log_exporter import OTLPLogExporter
        from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import BatchLogRecordProcessor
        from opentelemetry.sdk.resources import Resource
        from opentelemetry.sdk.trace import TracerProvider
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        resource = Resource.create({"trackio.project": project, "trackio.run": "run"})
        tracer_provider = TracerProvider(resource=resource)
        tracer_provider.add_span_processor(
            BatchSpanProcessor(OTLPSpanExporter(endpoint=endpoint, insecure=True))
        )
        trace.set_tracer_provider(tracer_provider)
        logger_provider = LoggerProvider(resource=resource)
        logger_provider.add_log_record_processor(
            BatchLogRecordProcessor(OTLPLogExporter(endpoint=endpoint, insecure=True))
        )
        _logs.set_logger_provider(logger_provider)
    if mode == "openinference":
        from openinference.instrumentation.google_adk import GoogleADKInstrumentor

        GoogleADKInstrumentor().instrument(tracer_provider=tracer_provider)

    from google.adk.runners import InMemoryRunner
    from google.genai import types

    state: dict[str, Any] = {"sample_index": 0, "system": None}
    runner = InMemoryRunner(agent=build_agent(state), app_name="calc")

    async def run_once() -> str:
        session = await runner.session_service.create_session(app_name="calc", user_id="u")
        question = types.Content(role="user", parts=[types.Part(text=QUESTION)])
        answer = ""
        async for event in runner.run_async(
            user_id="u", session_id=session.id, new_message=question
        ):
            for part in (event.content.parts or []) if event.content else []:
                answer = part.text or answer
        return answer

    for step in range(STEPS):
        for index in range(SAMPLES):
            state["sample_index"] = index
            with rollout(step, index):
                answer = asyncio.run(run_once())
            sample = {"step": step, "sample_index": index, "system": state["system"]}
            print(json.dumps({**sample, "answer": answer}), flush=True)
    if telemetry is not None:
        telemetry.shutdown()
    else:
        tracer_provider.shutdown()
        logger_provider.shutdown()


if __name__ == "__main__":
    main(*sys.argv[1:4])
