"""``otel-trackio serve --upstream``: agents with no OpenTelemetry, recorded at the model endpoint.

The receiver runs with the loopback fake OpenAI server as its upstream; the official ``openai``
Python client (sync, async, streaming, tool calls, errors) and an un-instrumented multi-turn
tool-calling agent call it at ``/rollouts/{step}/{sample_index}/v1``. Each sample's Trace is read
back from Trackio storage: the conversation as sent, one generation span per call, the reward in
the header, the step in its place; every (step, sample_index) once.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
from collections import Counter
from typing import Any

import openai
import pytest
import requests
from conftest import read_traces, stored
from fake_openai_server import INPUT_TOKENS, MODEL, OUTPUT_TOKENS, FakeOpenAIServer

from otel_trackio.receiver import OTLPReceiver

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "parameters": {"type": "object", "properties": {"expr": {"type": "string"}}},
        },
    }
]


def base_url(receiver: OTLPReceiver, step: int, index: int) -> str:
    return f"{receiver.url}/rollouts/{step}/{index}/v1"


def agent(client: openai.OpenAI, *, stream: bool = False) -> str:
    """An agent loop with no OpenTelemetry: ask, run the tool the model calls, answer."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "be brief"},
        {"role": "user", "content": "what is 2+2?"},
    ]
    while True:
        if stream:
            reply = _streamed(client, messages)
        else:
            answer = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
            reply = answer.choices[0].message.model_dump(exclude_none=True)
        messages.append(reply)
        if not reply.get("tool_calls"):
            return str(reply["content"])
        for call in reply["tool_calls"]:
            messages.append({"role": "tool", "tool_call_id": call["id"], "content": "4"})


def _streamed(client: openai.OpenAI, messages: list[dict[str, Any]]) -> dict[str, Any]:
    text, calls = "", {}
    for chunk in client.chat.completions.create(
        model=MODEL,
        messages=messages,
        tools=TOOLS,
        stream=True,
        stream_options={"include_usage": True},
    ):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            for part in choice.delta.tool_calls or []:
                call = calls.setdefault(part.index, {"id": "", "name": "", "arguments": ""})
                call["id"] = part.id or call["id"]
                call["name"] += part.function.name or ""
                call["arguments"] += part.function.arguments or ""
    reply: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        reply["tool_calls"] = [
            {
                "id": c["id"],
                "type": "function",
                "function": {"name": c["name"], "arguments": c["arguments"]},
            }
            for _, c in sorted(calls.items())
        ]
    return reply


EXPECTED = [
    {"role": "system", "content": "be brief"},
    {"role": "user", "content": "what is 2+2?"},
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "calculator", "arguments": '{"expr": "2+2"}'},
            }
        ],
    },
    {"role": "tool", "tool_call_id": "call_1", "content": "4"},
    {"role": "assistant", "content": "answer to: 4"},
]


def end(receiver: OTLPReceiver, step: int, index: int, reward: float | None = None) -> None:
    url = f"{receiver.url}/rollouts/{step}/{index}"
    if reward is not None:
        assert requests.post(f"{url}/reward", json={"value": reward}).status_code == 200
    assert requests.post(f"{url}/end").status_code == 200


def check_sample(trace: dict, reward: float | None = None) -> None:
    """The conversation the agent sent, two generation spans (model, usage), the reward."""
    assert stored(trace) == EXPECTED, json.dumps(trace["messages"], indent=1)
    calls = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert len(calls) == 2, [s["name"] for s in trace["spans"]]
    for call in calls:
        assert call["name"] == f"chat {MODEL}" and call["model"] == MODEL
        assert call["usage"]["input_tokens"] == INPUT_TOKENS
        assert call["usage"]["output_tokens"] == OUTPUT_TOKENS
    assert not trace["metadata"].get("partial"), trace["metadata"]
    if reward is not None:
        assert trace["metadata"]["reward"] == reward


@pytest.fixture
def upstream():
    with FakeOpenAIServer() as server:
        yield server


@pytest.fixture
def proxy(project, upstream):
    receiver = OTLPReceiver(
        project, "proxied", port=0, grpc_port=None, summary_interval=0, upstream=upstream.base_url
    ).start()
    yield receiver
    receiver.stop()


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_an_agent_without_otel_is_a_trace_per_sample(project, proxy, stream):
    for step in range(2):
        for index in range(3):
            client = openai.OpenAI(base_url=base_url(proxy, step, index), api_key="k")
            assert agent(client, stream=stream) == "answer to: 4"
            end(proxy, step, index, reward=float(index))
    proxy.stop()
    traces = read_traces(project, "proxied")
    keys = [(t["step"], t["metadata"]["sample_index"]) for t in traces]
    assert sorted(keys) == [(s, i) for s in range(2) for i in range(3)]
    for trace in traces:
        check_sample(trace, reward=float(trace["metadata"]["sample_index"]))
        if stream:
            for call in (s for s in trace["spans"] if s["kind"] == "generation"):
                assert call["metadata"]["gen_ai.response.time_to_first_chunk"] >= 0


def test_the_async_client_and_a_text_completion(project, proxy, upstream):
    async def run() -> None:
        client = openai.AsyncOpenAI(base_url=base_url(proxy, 4, 0), api_key="k")
        answer = await client.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}]
        )
        assert answer.choices[0].message.tool_calls[0].function.name == "calculator"
        completion = await client.completions.create(model=MODEL, prompt="2+2=")
        assert completion.choices[0].text == " completes: 2+2="
        await client.close()

    asyncio.run(run())
    end(proxy, 4, 0)
    proxy.stop()
    (trace,) = read_traces(project, "proxied")
    names = sorted(s["name"] for s in trace["spans"] if s["kind"] == "generation")
    assert names == [f"chat {MODEL}", f"text_completion {MODEL}"]
    assert upstream.requests[-1] == {"model": MODEL, "prompt": "2+2="}  # forwarded as sent


def test_the_upstream_failing_reaches_the_caller_and_the_span(project, upstream):
    with FakeOpenAIServer(fail=lambda request: 429) as failing:
        receiver = OTLPReceiver(
            project, "failing", port=0, summary_interval=0, upstream=failing.base_url
        ).start()
        client = openai.OpenAI(base_url=base_url(receiver, 0, 0), api_key="k", max_retries=0)
        with pytest.raises(openai.RateLimitError, match="scripted failure 429"):
            client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        end(receiver, 0, 0)
        receiver.stop()
    (trace,) = read_traces(project, "failing")
    (call,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert call["status"] == "error" and "scripted failure 429" in call["error"]

    down = OTLPReceiver(
        project, "down", port=0, summary_interval=0, upstream="http://127.0.0.1:9/v1"
    ).start()
    client = openai.OpenAI(base_url=base_url(down, 0, 0), api_key="k", max_retries=0)
    with pytest.raises(openai.APIStatusError) as caught:
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    assert caught.value.status_code == 502 and "upstream failed" in str(caught.value)
    down.stop()
    (trace,) = read_traces(project, "down")
    assert trace["metadata"].get("partial"), trace  # never ended: the stop logged it as partial
    (call,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert call["status"] == "error"


def test_a_stream_passes_chunk_by_chunk(project):
    """A stream whose events come 0.2 s apart reaches the caller as they come, not at the end."""
    with FakeOpenAIServer(chunk_delay=0.2) as slow:
        receiver = OTLPReceiver(
            project, "slow", port=0, summary_interval=0, upstream=slow.base_url
        ).start()
        client = openai.OpenAI(base_url=base_url(receiver, 0, 0), api_key="k")
        started = time.monotonic()
        arrivals = []
        stream = client.chat.completions.create(
            model=MODEL,
            messages=[{"role": "user", "content": "x"}],
            stream=True,
            stream_options={"include_usage": True},  # three events: the call, its end, usage
        )
        for _ in stream:
            arrivals.append(time.monotonic() - started)
        assert len(arrivals) >= 3 and arrivals[0] < arrivals[-1] - 0.3, arrivals
        end(receiver, 0, 0)
        receiver.stop()
    (trace,) = read_traces(project, "slow")
    (call,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    first_chunk = call["metadata"]["gen_ai.response.time_to_first_chunk"]
    assert first_chunk < arrivals[-1] - 0.3  # the first chunk, not the whole stream


def test_a_caller_leaving_mid_stream_is_a_cancelled_call(project):
    with FakeOpenAIServer(chunk_delay=0.3) as slow:
        receiver = OTLPReceiver(
            project, "left", port=0, summary_interval=0, upstream=slow.base_url
        ).start()
        body = {"model": MODEL, "messages": [{"role": "user", "content": "x"}], "stream": True}
        with requests.post(
            f"{base_url(receiver, 0, 0)}/chat/completions", json=body, stream=True
        ) as response:
            next(response.iter_content(64))  # the first bytes, then the caller goes
        time.sleep(1.0)
        end(receiver, 0, 0)
        receiver.stop()
    (trace,) = read_traces(project, "left")
    (call,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert call["status"] == "error" and call["error"].startswith("cancelled"), call


def test_64_concurrent_streaming_samples_each_once(project, proxy):
    def sample(index: int) -> None:
        client = openai.OpenAI(base_url=base_url(proxy, 7, index), api_key="k")
        assert agent(client, stream=True) == "answer to: 4"
        end(proxy, 7, index, reward=1.0)

    threads = [threading.Thread(target=sample, args=(i,)) for i in range(64)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    proxy.stop()
    traces = read_traces(project, "proxied")
    assert Counter(t["metadata"]["sample_index"] for t in traces) == Counter(range(64))
    for trace in traces:
        check_sample(trace, reward=1.0)


def test_bad_rewards_and_ends_are_told(proxy):
    url = f"{proxy.url}/rollouts/0/0"
    assert requests.post(f"{url}/reward", json={"value": "high"}).status_code == 400
    assert requests.post(f"{url}/reward", data=b"not json").status_code == 400
    assert requests.post(f"{url}/end").status_code == 404  # no call was made
    assert requests.post(f"{proxy.url}/rollouts/x/0/end").status_code == 404


def test_a_receiver_token_guards_the_proxy_and_the_upstream_key_is_sent(project, upstream):
    receiver = OTLPReceiver(
        project,
        "keyed",
        port=0,
        summary_interval=0,
        token="s3cret",
        upstream=upstream.base_url,
        upstream_key="upstream-key",
    ).start()
    try:
        denied = openai.OpenAI(base_url=base_url(receiver, 0, 0), api_key="nope", max_retries=0)
        with pytest.raises(openai.AuthenticationError):
            denied.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
        client = openai.OpenAI(base_url=base_url(receiver, 0, 0), api_key="s3cret")
        assert agent(client) == "answer to: 4"
    finally:
        receiver.stop()
    assert upstream.headers[-1]["authorization"] == "Bearer upstream-key"


def test_a_body_that_is_no_json_is_forwarded_and_recorded_as_text(project, proxy, upstream):
    url = f"{base_url(proxy, 0, 0)}/chat/completions"
    response = requests.post(url, data=b"not json {", headers={"Content-Type": "application/json"})
    assert response.status_code == 200  # the fake answers a body it cannot read with a reply
    end(proxy, 0, 0)
    proxy.stop()
    (trace,) = read_traces(project, "proxied")
    (call,) = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert call["input"] == [{"role": "user", "content": "not json {"}]


def test_a_call_carrying_a_traceparent_joins_that_trace(project, proxy):
    """An agent with some OTel of its own: its span (sent over OTLP) and the model call it made
    through the proxy are one sample."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.propagate import inject
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(OTLPSpanExporter(f"{proxy.url}/v1/traces")))
    tracer = provider.get_tracer("agent")
    with tracer.start_as_current_span("run", attributes={"step": 3, "sample_index": 1}):
        headers: dict[str, str] = {}
        inject(headers)
        client = openai.OpenAI(base_url=base_url(proxy, 3, 1), api_key="k", default_headers=headers)
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "x"}])
    provider.shutdown()
    proxy.stop()
    (trace,) = read_traces(project, "proxied")
    assert (trace["step"], trace["metadata"]["sample_index"]) == (3, 1)
    assert sorted(s["name"] for s in trace["spans"]) == [f"chat {MODEL}", "run"]


def test_the_example_runs(project, trackio_dir):
    """examples/agent_without_otel.py as a user runs it: its agent has no OTel; every sample is
    a Trace with the conversation and its reward."""
    import subprocess
    import sys
    from pathlib import Path

    example = Path(__file__).resolve().parents[1] / "examples" / "agent_without_otel.py"
    result = subprocess.run(
        [sys.executable, str(example), "--project", project, "--name", "demo"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    said = result.stdout + result.stderr
    assert f"8 samples logged to {project!r} run 'demo', steps 0 to 1" in said, said
    traces = read_traces(project, "demo")
    assert len(traces) == 8 and all(t["metadata"]["reward"] == 1.0 for t in traces)
    assert all(t["messages"][-1]["content"].startswith("It is ") for t in traces)


def test_serve_stopped_mid_call_stores_what_it_answered(project):
    """A sample with one call answered and a slow stream under way when the receiver stops: the
    answered call is stored in the sample (partial: never ended), once; nothing in another
    sample."""
    with FakeOpenAIServer(chunk_delay=1.0) as slow:
        receiver = OTLPReceiver(
            project, "stopped", port=0, summary_interval=0, upstream=slow.base_url
        ).start()
        client = openai.OpenAI(base_url=base_url(receiver, 2, 5), api_key="k", max_retries=0)
        client.chat.completions.create(model=MODEL, messages=[{"role": "user", "content": "a"}])
        body = {"model": MODEL, "messages": [{"role": "user", "content": "b"}], "stream": True}
        url = f"{base_url(receiver, 2, 5)}/chat/completions"
        with requests.post(url, json=body, stream=True) as response:
            next(response.iter_content(64))  # under way
            receiver.stop()
    traces = read_traces(project, "stopped")
    assert [(t["step"], t["metadata"]["sample_index"]) for t in traces] == [(2, 5)]
    (trace,) = traces
    assert trace["metadata"]["partial"]
    calls = [s for s in trace["spans"] if s["kind"] == "generation"]
    assert calls and calls[0]["input"] == [{"role": "user", "content": "a"}]
    assert len({s["id"] for s in trace["spans"]}) == len(trace["spans"])  # each once


def test_a_body_over_the_receivers_limit_is_refused_readably(project, upstream):
    receiver = OTLPReceiver(
        project,
        "small",
        port=0,
        summary_interval=0,
        max_body_bytes=1024,
        upstream=upstream.base_url,
    ).start()
    try:
        client = openai.OpenAI(base_url=base_url(receiver, 0, 0), api_key="k", max_retries=0)
        with pytest.raises(openai.APIStatusError) as caught:
            client.chat.completions.create(
                model=MODEL, messages=[{"role": "user", "content": "x" * 2048}]
            )
        assert caught.value.status_code == 413 and "over the limit" in str(caught.value)
        assert upstream.requests == []  # not forwarded
    finally:
        receiver.stop()
