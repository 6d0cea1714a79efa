"""A loopback OpenAI-compatible chat server for the instrumentation and framework tests.

It answers ``POST /v1/chat/completions`` without a model. By default (:func:`reply_for`): when
the last message is a tool result it replies ``"answer to: <result>"``, otherwise it calls the
``calculator`` tool with ``{"expr": "2+2"}``. A test may pass its own ``reply`` (request body →
assistant message). Usage is always 11 input / 7 output tokens. ``stream: true`` requests get the
same reply as server-sent chunks (with a usage chunk when ``stream_options.include_usage``).
Every request body is kept in ``requests``, so a test can compare what a framework stored with
what it actually sent. Port 0, 127.0.0.1 only.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

MODEL = "gpt-test"
INPUT_TOKENS = 11
OUTPUT_TOKENS = 7

Reply = Callable[[dict[str, Any]], dict[str, Any]]


def tool_call_message(name: str, arguments: str, call_id: str) -> dict[str, Any]:
    """An assistant message calling one tool (OpenAI shape)."""
    return {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
        ],
    }


def reply_for(request: dict[str, Any]) -> dict[str, Any]:
    """The default script: call ``calculator`` until the last message is a tool result."""
    messages = request.get("messages") or []
    last = messages[-1] if messages else {}
    if last.get("role") == "tool":
        return {"role": "assistant", "content": f"answer to: {last['content']}"}
    return tool_call_message("calculator", '{"expr": "2+2"}', "call_1")


def completion(request: dict[str, Any], message: dict[str, Any]) -> dict[str, Any]:
    """A whole chat completion carrying ``message``."""
    finish = "tool_calls" if message.get("tool_calls") else "stop"
    return {
        "id": f"chatcmpl-{len(request.get('messages') or [])}",
        "object": "chat.completion",
        "created": 1_700_000_000,
        "model": request.get("model") or MODEL,
        "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
        "usage": {
            "prompt_tokens": INPUT_TOKENS,
            "completion_tokens": OUTPUT_TOKENS,
            "total_tokens": INPUT_TOKENS + OUTPUT_TOKENS,
        },
    }


def chunks(request: dict[str, Any], message: dict[str, Any]) -> list[dict[str, Any]]:
    """The same completion as streamed chunks: role and content, tool calls, finish, usage."""
    whole = completion(request, message)
    head = {k: whole[k] for k in ("id", "created", "model")} | {"object": "chat.completion.chunk"}
    delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
    if message.get("tool_calls"):
        delta["tool_calls"] = [{"index": i, **c} for i, c in enumerate(message["tool_calls"])]
    finish = whole["choices"][0]["finish_reason"]
    out = [
        {**head, "choices": [{"index": 0, "delta": delta, "finish_reason": None}]},
        {**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]},
    ]
    if (request.get("stream_options") or {}).get("include_usage"):
        out.append({**head, "choices": [], "usage": whole["usage"]})
    return out


def text_completion(request: dict[str, Any]) -> dict[str, Any]:
    """A text completion (``/v1/completions``) answering the prompt."""
    return {
        "id": "cmpl-1",
        "object": "text_completion",
        "model": request.get("model") or MODEL,
        "choices": [
            {"index": 0, "text": f" completes: {request.get('prompt')}", "finish_reason": "stop"}
        ],
        "usage": {"prompt_tokens": INPUT_TOKENS, "completion_tokens": OUTPUT_TOKENS},
    }


class _Handler(BaseHTTPRequestHandler):
    server: _Server

    def do_POST(self) -> None:
        self.server.headers.append({k.lower(): v for k, v in self.headers.items()})
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            body = {}
        if self.path.rstrip("/").endswith("/v1/completions"):  # a text completion
            self.server.requests.append(body)
            self._send(200, text_completion(body))
            return
        if not self.path.rstrip("/").endswith("/chat/completions"):
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        self.server.requests.append(body)
        failure = self.server.fail(body)
        if failure is not None:
            self._send(failure, {"error": {"message": f"scripted failure {failure}"}})
            return
        message = self.server.reply(body)
        if body.get("stream"):
            self._stream(chunks(body, message))
        else:
            self._send(200, completion(body, message))

    def _send(self, code: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _stream(self, events: list[dict[str, Any]]) -> None:
        parts = [f"data: {json.dumps(e)}\n\n".encode() for e in events]
        parts.append(b"data: [DONE]\n\n")
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        if not self.server.chunk_delay:
            data = b"".join(parts)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)
            return
        self.end_headers()  # HTTP/1.0 without a length: the stream ends when the answer does
        for part in parts:  # one event at a time, as a model produces them
            self.wfile.write(part)
            self.wfile.flush()
            time.sleep(self.server.chunk_delay)

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: tests read results, not access logs."""


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 256  # many concurrent callers: none refused at the door

    def __init__(
        self, reply: Reply, chunk_delay: float, fail: Callable[[dict[str, Any]], int | None]
    ) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.reply = reply
        self.chunk_delay = chunk_delay
        self.fail = fail
        self.requests: list[dict[str, Any]] = []
        self.headers: list[dict[str, str]] = []


class FakeOpenAIServer:
    """Context manager running the fake server on a free loopback port; ``base_url`` for clients,
    ``requests`` for the bodies received."""

    def __init__(
        self,
        reply: Reply = reply_for,
        *,
        chunk_delay: float = 0.0,
        fail: Callable[[dict[str, Any]], int | None] = lambda request: None,
    ) -> None:
        """``chunk_delay``: seconds between a stream's events (0: all at once); ``fail``: the
        status to answer a chat request with instead of a reply (None: reply)."""
        self._server = _Server(reply, chunk_delay, fail)
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def headers(self) -> list[dict[str, str]]:
        """The headers of every request received so far (names in lower case), in order."""
        return self._server.headers

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Every chat request body received so far, in order."""
        return self._server.requests

    def __enter__(self) -> FakeOpenAIServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
