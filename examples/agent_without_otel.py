"""An agent with no OpenTelemetry, traced at the model endpoint: ``otel-trackio serve --upstream``.

The agent below knows nothing of otel-trackio or OpenTelemetry: it is a plain loop on the
``openai`` client that asks a model, runs the calculator tool the model calls, and answers. Each
sample only gets its own base URL, ``http://127.0.0.1:PORT/rollouts/{step}/{sample_index}/v1``;
after the sample, the rollout posts its reward and ends it. Every model call becomes a span of the
sample's Trace in Trackio, the conversation as the agent sent it.

The upstream here is a tiny scripted OpenAI-compatible server on loopback (so the example runs
offline); point ``--upstream`` at vLLM, SGLang or OpenAI instead.

    python examples/agent_without_otel.py [--project NAME] [--name RUN] [--steps 2] [--samples 4]

Needs the ``receiver`` extra and the ``openai`` package (``pip install '.[receiver]' openai``).
"""

from __future__ import annotations

import argparse
import json
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import requests

try:
    import openai
except ImportError:
    sys.exit("examples/agent_without_otel.py needs the openai package: pip install openai")

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


# -- the agent: no OpenTelemetry, no otel-trackio ----------------------------------------------


def run_agent(base_url: str, question: str) -> str:
    """Ask, run the tool the model calls, send its result back, return the answer."""
    client = openai.OpenAI(base_url=base_url, api_key="not-needed-here")
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "Use the calculator, then answer in one line."},
        {"role": "user", "content": question},
    ]
    while True:
        reply = client.chat.completions.create(model="scripted", messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return str(message.content)
        for call in message.tool_calls:
            expr = json.loads(call.function.arguments)["expr"]
            result = str(sum(int(term) for term in expr.split("+")))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": result})


# -- a scripted model on loopback (stands in for vLLM / OpenAI) ---------------------------------


class ScriptedModel(BaseHTTPRequestHandler):
    """Calls the calculator on the question's sum, then answers with the tool's result."""

    def do_POST(self) -> None:
        request = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        last = request["messages"][-1]
        if last["role"] == "tool":
            message: dict[str, Any] = {"role": "assistant", "content": f"It is {last['content']}."}
        else:
            expr = last["content"].split("is ")[-1].rstrip("?")
            arguments = json.dumps({"expr": expr})
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "calculator", "arguments": arguments},
                    }
                ],
            }
        finish = "tool_calls" if message.get("tool_calls") else "stop"
        body = json.dumps(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "scripted",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": {"prompt_tokens": 20, "completion_tokens": 8, "total_tokens": 28},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, format: str, *args: Any) -> None:
        pass


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--project", default="agent-without-otel")
    parser.add_argument("--name", default="proxy-demo")
    parser.add_argument("--steps", type=int, default=2)
    parser.add_argument("--samples", type=int, default=4)
    args = parser.parse_args()

    model = ThreadingHTTPServer(("127.0.0.1", 0), ScriptedModel)
    threading.Thread(target=model.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{model.server_address[1]}/v1"

    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "otel_trackio", "serve", "--project", args.project,
         "--name", args.name, "--port", str(port), "--grpc-port", "off", "--upstream", upstream],
    )  # fmt: skip
    proxy = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 60
    while True:  # until it listens
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            break
        except OSError:
            if time.monotonic() > deadline or serve.poll() is not None:
                sys.exit("otel-trackio serve did not start")
            time.sleep(0.2)
    try:
        for step in range(args.steps):
            for index in range(args.samples):
                sample = f"{proxy}/rollouts/{step}/{index}"
                question = f"what is {step + 1}+{index}?"
                answer = run_agent(f"{sample}/v1", question)
                correct = answer == f"It is {step + 1 + index}."
                requests.post(f"{sample}/reward", json={"value": float(correct)}, timeout=30)
                requests.post(f"{sample}/end", timeout=30)
                print(f"step {step} sample {index}: {question} -> {answer}")
    finally:
        serve.terminate()  # stores what it took, then prints the run's summary
        serve.wait(timeout=120)
        model.shutdown()


if __name__ == "__main__":
    main()
