"""``otel-trackio serve --upstream URL``: agents with no OpenTelemetry, traced at the model.

The receiver's HTTP port also answers OpenAI-compatible calls under a base URL per sample,
``http://HOST:PORT/rollouts/{step}/{sample_index}/v1``: each call is forwarded to the upstream
(body, query and headers as sent; the caller's ``Authorization``, or the configured key when the
receiver has a token of its own) and its answer returned as it comes — a stream chunk by chunk,
never buffered. ``chat/completions`` and ``completions`` are recorded as OTel GenAI spans
(``chat`` / ``text_completion``: the messages, the tool definitions, model, usage, finish
reasons, latency, time to the first chunk, errors); other paths are forwarded unrecorded.

Each ``(step, sample_index)`` has a root span, opened by its first call and sent when the
sample ends: ``POST .../rollouts/{step}/{sample_index}/end``, or idle for the sample TTL, or the
stop of ``serve`` (those two logged as partial). ``POST .../reward`` with ``{"value": v}``
(optional ``"name"``; several names allowed) sets the root's ``reward`` (or that name), as
``rollout()``'s reward does. The spans go through the router, as spans received over OTLP do.
A call carrying a W3C ``traceparent`` joins that trace instead (an agent with some OTel of its
own).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import re
import threading
import time
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass, field
from typing import Any

import httpx
from starlette.background import BackgroundTask
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from otel_trackio._codec.otlp import DecodedSpans
from otel_trackio._core.assembly.identity import ENDED_EARLY_ATTRIBUTE
from otel_trackio._core.conventions.otel_genai import from_chat_message
from otel_trackio._core.records import SpanRecord
from otel_trackio._core.samples import PartialReason
from otel_trackio.receiver._auth import BearerCheck
from otel_trackio.receiver._errors import ReceiverUnavailable
from otel_trackio.receiver._routing import Router

_logger = logging.getLogger("otel_trackio.receiver")

PREFIX = "/rollouts/{step:int}/{sample_index:int}"
"""A sample's base URL is this under the receiver, then ``/v1``."""
RECORDED = {"chat/completions": "chat", "completions": "text_completion"}
"""The OpenAI paths recorded, and their GenAI operation names."""
HOP_BY_HOP = frozenset(
    {"host", "content-length", "connection", "keep-alive", "transfer-encoding", "upgrade",
     "proxy-authorization", "proxy-connection", "te", "trailer", "accept-encoding"}
)  # fmt: skip
"""Headers of one connection, not of the request: never forwarded."""
RESOURCE = {"service.name": "otel-trackio-proxy"}
BATCH_SECONDS = 0.02
"""The calls' spans are sent together at most this long after a call (one export for many: a
span each would cost the receiver a request's work each)."""
_TRACEPARENT = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-[0-9a-f]{2}$")


@dataclass
class OpenSample:
    """A sample whose calls came and whose end did not yet: its root span, to be sent."""

    step: int
    sample_index: int
    trace_id: int
    root_id: int
    start_ns: int
    last_active: float
    """``time.monotonic()`` of its last call or reward (the TTL counts from it)."""
    outcomes: dict[str, float] = field(default_factory=dict)
    calls: int = 0


@dataclass
class Call:
    """One model call as it is recorded: what was asked, what came back, when."""

    operation: str
    request: Mapping[str, Any] | None
    raw: bytes
    start_ns: int
    status: int = 0
    answer: Mapping[str, Any] | None = None
    first_chunk_ns: int | None = None
    error: str | None = None
    answer_body: bytes | None = None
    """A whole answer's body, read into ``answer`` when the span is built."""


@dataclass(frozen=True)
class PendingSpan:
    """A call recorded and not sent yet: its span is built when it is sent."""

    call: Call
    trace_id: int
    parent: int
    remote_parent: bool
    end_ns: int

    def span(self) -> SpanRecord:
        """The call's OTel GenAI span."""
        return call_span(
            self.call, self.trace_id, self.parent, self.end_ns, remote_parent=self.remote_parent
        )


class ModelProxy:
    """The OpenAI-compatible routes of ``serve --upstream``.

    Args:
        upstream: the OpenAI-compatible base URL calls go to (``http://vllm:8000/v1``).
        router: where the calls' spans go (the receiver's, as for spans received over OTLP).
        upstream_key: sent as ``Authorization: Bearer`` to the upstream; by default the caller's
            own ``Authorization`` is forwarded (unless ``token`` takes it).
        token: the receiver's bearer token: calls must carry it (then the caller's
            ``Authorization`` is the receiver's, and is not forwarded).
        max_body_bytes: the largest request body taken (413 past it).
        ttl_seconds: a sample with no call or reward for this long is ended, as partial.
        timeout_seconds: the longest the upstream may take to answer (504 past it; a stream
            may go on as long as chunks keep coming within it).
    """

    def __init__(
        self,
        upstream: str,
        router: Router,
        *,
        upstream_key: str | None = None,
        token: str | None = None,
        max_body_bytes: int = 20 * 1024 * 1024,
        ttl_seconds: float = 300.0,
        timeout_seconds: float = 600.0,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.router = router
        self._key = upstream_key
        self._auth = BearerCheck(token)
        self._takes_authorization = token is not None
        self._max_body = max_body_bytes
        self._ttl = ttl_seconds
        self._timeout = httpx.Timeout(timeout_seconds, connect=min(10.0, timeout_seconds))
        self._client: httpx.AsyncClient | None = None
        self._samples: dict[tuple[int, int], OpenSample] = {}
        # The calls' spans not sent yet: sent together every BATCH_SECONDS, and with any root
        # (a sample's end takes them all first, so a root never precedes its calls).
        self._outbox: list[PendingSpan] = []
        self._flush_due = False
        self._flushing: set[asyncio.Future[None]] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._expiry = threading.Thread(target=self._expire, name="otel-trackio-proxy-ttl")
        self._expiry.daemon = True
        self._expiry.start()

    def routes(self) -> list[Route]:
        """The proxy's routes, for the receiver's app."""
        return [
            Route(f"{PREFIX}/v1/{{path:path}}", self.forward, methods=["GET", "POST"]),
            Route(f"{PREFIX}/reward", self.reward, methods=["POST"]),
            Route(f"{PREFIX}/end", self.end, methods=["POST"]),
        ]

    # -- the calls -------------------------------------------------------------------------------

    async def forward(self, request: Request) -> Response:
        """Forward one OpenAI-compatible call to the upstream; record it when it is a model
        call."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        step, index = request.path_params["step"], request.path_params["sample_index"]
        path = request.path_params["path"]
        body = await self._read_capped(request)
        if body is None:
            self.router.count_refused(413)
            return _openai_error(413, f"body over the limit of {self._max_body} bytes")
        operation = RECORDED.get(path) if request.method == "POST" else None
        parsed = _json_object(body) if operation else None
        if operation and "traceparent" not in request.headers:
            sample = self._sample(step, index)  # open from its first call: can be ended meanwhile
            with self._lock:
                sample.last_active = time.monotonic()  # a call under way is no idleness
        call = Call(operation or "", parsed, body, time.time_ns())
        outgoing = self._client_for().build_request(
            request.method,
            f"{self.upstream}/{path}",
            params=request.url.query,
            headers=self._headers(request),
            content=body,
        )
        streaming = bool(parsed and parsed.get("stream"))
        try:
            answer = await self._client_for().send(outgoing, stream=streaming)
        except httpx.TimeoutException as exc:
            return await self._failed(call, step, index, request, 504, f"upstream timed out: {exc}")
        except httpx.HTTPError as exc:
            return await self._failed(call, step, index, request, 502, f"upstream failed: {exc!r}")
        call.status = answer.status_code
        headers = {k: v for k, v in answer.headers.items() if k.lower() not in HOP_BY_HOP}
        headers.pop("content-encoding", None)
        if not streaming:
            content = answer.content
            if operation:
                call.answer_body = content  # read when the span is built, off this path
                if answer.status_code >= 400:
                    call.error = _error_text(_json_object(content), content)
                if self._record(call, step, index, request):
                    await run_in_threadpool(self._flush)
            return Response(content, status_code=answer.status_code, headers=headers)
        return StreamingResponse(
            self._relay(answer, call, step, index, request),
            status_code=answer.status_code,
            headers=headers,
            background=BackgroundTask(answer.aclose),
        )

    async def _relay(
        self, answer: httpx.Response, call: Call, step: int, index: int, request: Request
    ) -> AsyncIterator[bytes]:
        """The upstream's stream, chunk by chunk as it comes; the call recorded from it."""
        stream = StreamReader()
        recorded = False
        try:
            async for chunk in answer.aiter_raw():
                if call.first_chunk_ns is None:
                    call.first_chunk_ns = time.time_ns()
                stream.feed(chunk)
                if stream.done and call.operation and not recorded:
                    # The caller's client stops reading at [DONE], then may end the sample:
                    # the call is recorded (the end sends it first) before it sees it.
                    recorded = True
                    call.answer = stream.answer()
                    if self._record(call, step, index, request):
                        await run_in_threadpool(self._flush)
                yield chunk
        except (asyncio.CancelledError, GeneratorExit):
            call.error = "cancelled: the caller disconnected"
            raise
        except httpx.HTTPError as exc:
            call.error = f"upstream failed mid-stream: {exc!r}"
        finally:
            cancelled = call.error is not None and call.error.startswith("cancelled")
            if call.operation and not recorded:
                call.answer = stream.answer()
                if call.status >= 400 and call.error is None:
                    call.error = _error_text(call.answer, stream.text())
                self._record(call, step, index, request)
            if cancelled:
                await asyncio.shield(answer.aclose())  # the upstream request is closed

    async def _failed(
        self, call: Call, step: int, index: int, request: Request, status: int, why: str
    ) -> Response:
        call.status, call.error = status, why
        if call.operation:
            self._record(call, step, index, request)
        return _openai_error(status, why)

    # -- rewards and ends ------------------------------------------------------------------------

    async def reward(self, request: Request) -> Response:
        """``{"value": float, "name": optional}``: an outcome on the sample's header."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        given = _json_object(await request.body())
        value = given.get("value") if given else None
        name = given.get("name", "reward") if given else None
        if isinstance(value, bool) or not isinstance(value, (int, float)):
            return _openai_error(400, 'a reward is {"value": <number>} (and "name", optional)')
        if not isinstance(name, str) or not name:
            return _openai_error(400, 'a reward\'s "name" is a non-empty string')
        sample = self._sample(request.path_params["step"], request.path_params["sample_index"])
        with self._lock:
            sample.outcomes[name] = float(value)
            sample.last_active = time.monotonic()
        return JSONResponse({"ok": True})

    async def end(self, request: Request) -> Response:
        """End the sample: its root span goes, and the sample is logged once whole."""
        refusal = self._refusal(request)
        if refusal is not None:
            return refusal
        key = (request.path_params["step"], request.path_params["sample_index"])
        with self._lock:
            sample = self._samples.pop(key, None)
        if sample is None:
            return _openai_error(404, f"no call was made for step {key[0]} sample {key[1]}")
        try:
            await run_in_threadpool(self._send_with_outbox, [_root(sample)])
        except ReceiverUnavailable as exc:
            with self._lock:
                self._samples.setdefault(key, sample)  # ended again when the client retries
            return _openai_error(503, str(exc))
        return JSONResponse({"ok": True, "calls": sample.calls})

    def close(self) -> None:
        """End every open sample, as partial (the receiver is stopping); idempotent."""
        self._stop.set()
        with self._lock:
            left, self._samples = list(self._samples.values()), {}
        try:
            self._send_with_outbox([_root(sample, "flush") for sample in left])
        except ReceiverUnavailable as exc:
            _logger.warning(
                "otel-trackio proxy: calls and %d open samples not kept: %s", len(left), exc
            )

    async def aclose(self) -> None:
        """Close the connections to the upstream (in the server's event loop)."""
        client, self._client = self._client, None
        if client is not None:
            await client.aclose()

    # -- inside ----------------------------------------------------------------------------------

    async def _read_capped(self, request: Request) -> bytes | None:
        """The request's body, or None as soon as it is known to be over the limit (a declared
        length first; nothing past the limit is kept)."""
        declared = request.headers.get("content-length", "")
        if declared.isdigit() and int(declared) > self._max_body:
            return None
        chunks: list[bytes] = []
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
            if size > self._max_body:
                return None
            chunks.append(chunk)
        return b"".join(chunks)

    def _refusal(self, request: Request) -> Response | None:
        if self._auth.allows(request.headers.get("authorization")):
            return None
        self.router.count_refused(401)
        return _openai_error(401, "missing or wrong bearer token (the receiver's --token)")

    def _client_for(self) -> httpx.AsyncClient:
        if self._client is None:
            self._client = httpx.AsyncClient(timeout=self._timeout, follow_redirects=False)
        return self._client

    def _headers(self, request: Request) -> dict[str, str]:
        headers = {k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP}
        headers["accept-encoding"] = "identity"  # relayed as it comes: nothing to decode
        if self._takes_authorization:
            headers.pop("authorization", None)
        if self._key is not None:
            headers["authorization"] = f"Bearer {self._key}"
        return headers

    def _sample(self, step: int, index: int) -> OpenSample:
        with self._lock:
            sample = self._samples.get((step, index))
            if sample is None:
                sample = OpenSample(
                    step, index, _new_id(128), _new_id(64), time.time_ns(), time.monotonic()
                )
                self._samples[(step, index)] = sample
            return sample

    def _record(self, call: Call, step: int, index: int, request: Request) -> bool:
        """Put the call's span (see :meth:`_span`) in the outbox, sent within
        :data:`BATCH_SECONDS` (or with its sample's end, before the root). True when it joined
        the caller's trace: the caller ends that, so it must be sent before the answer."""
        span = self._span(call, step, index, request)
        joined = span.remote_parent
        with self._lock:
            self._outbox.append(span)
            if self._flush_due:
                return joined
            self._flush_due = True
        asyncio.get_running_loop().call_later(BATCH_SECONDS, self._flush_soon)
        return joined

    def _flush_soon(self) -> None:
        task = asyncio.ensure_future(run_in_threadpool(self._flush))
        self._flushing.add(task)
        task.add_done_callback(self._flushing.discard)

    def _flush(self) -> None:
        try:
            self._send_with_outbox([])
        except ReceiverUnavailable as exc:
            _logger.warning("otel-trackio proxy: calls' spans were not kept: %s", exc)

    def _send_with_outbox(self, spans: list[SpanRecord]) -> None:
        """Send the outbox's spans, then ``spans`` (roots), in one export."""
        with self._lock:
            waiting, self._outbox, self._flush_due = self._outbox, [], False
        if waiting or spans:  # built here, off the answer's path
            self._send([*(pending.span() for pending in waiting), *spans])

    def _span(self, call: Call, step: int, index: int, request: Request) -> PendingSpan:
        """The call's span to be (built and) sent, under its sample's root (or the caller's
        ``traceparent``)."""
        joined = _TRACEPARENT.match(request.headers.get("traceparent", "").strip().lower())
        if joined is not None:
            trace_id, parent = int(joined.group(1), 16), int(joined.group(2), 16)
        else:
            sample = self._sample(step, index)
            with self._lock:
                sample.calls += 1
                sample.last_active = time.monotonic()
            trace_id, parent = sample.trace_id, sample.root_id
        return PendingSpan(call, trace_id, parent, joined is not None, time.time_ns())

    def _send(self, spans: list[SpanRecord]) -> None:
        self.router.export_spans(DecodedSpans({(None, None): spans}, accepted=len(spans)))

    def _expire(self) -> None:
        while not self._stop.wait(min(1.0, self._ttl / 4)):
            now = time.monotonic()
            with self._lock:
                idle = [s for s in self._samples.values() if now - s.last_active >= self._ttl]
                for sample in idle:
                    del self._samples[(sample.step, sample.sample_index)]
            if idle:
                try:
                    self._send_with_outbox([_root(sample, "ttl") for sample in idle])
                except ReceiverUnavailable as exc:
                    _logger.warning("otel-trackio proxy: %d idle samples lost: %s", len(idle), exc)


class StreamReader:
    """An OpenAI server-sent event stream read as it passes: the answer it adds up to."""

    def __init__(self) -> None:
        self._buffer = b""
        self._text: list[str] = []
        self._calls: dict[int, dict[str, Any]] = {}
        self._last: dict[str, Any] = {}
        self._finish: str | None = None
        self._usage: Any = None
        self._raw: list[bytes] = []
        self._raw_bytes = 0
        self.done = False
        """The stream said ``[DONE]``: the answer is whole."""

    def feed(self, chunk: bytes) -> None:
        """Take the next bytes of the stream."""
        if self._raw_bytes < 65536:  # the start is enough to say what an error body says
            self._raw.append(chunk)
            self._raw_bytes += len(chunk)
        self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            line = line.strip()
            if not line.startswith(b"data:"):
                continue
            data = line[5:].strip()
            if data == b"[DONE]":
                self.done = True
                continue
            event = _json_object(data)
            if event is not None:
                self._event(event)

    def _event(self, event: Mapping[str, Any]) -> None:
        self._last = {k: event[k] for k in ("id", "model") if k in event} or self._last
        if event.get("usage"):
            self._usage = event["usage"]
        for choice in event.get("choices") or []:
            if not isinstance(choice, Mapping) or choice.get("index", 0) != 0:
                continue
            self._finish = choice.get("finish_reason") or self._finish
            delta = choice.get("delta")
            if isinstance(delta, Mapping):
                if isinstance(delta.get("content"), str):
                    self._text.append(delta["content"])
                for part in delta.get("tool_calls") or []:
                    if isinstance(part, Mapping):
                        self._tool_delta(part)
            elif isinstance(choice.get("text"), str):  # a text completion's stream
                self._text.append(choice["text"])

    def _tool_delta(self, part: Mapping[str, Any]) -> None:
        call = self._calls.setdefault(
            int(part.get("index", 0)),
            {"id": "", "type": "function", "function": {"name": "", "arguments": ""}},
        )
        call["id"] = part.get("id") or call["id"]
        function = part.get("function") or {}
        call["function"]["name"] += function.get("name") or ""
        call["function"]["arguments"] += function.get("arguments") or ""

    def answer(self) -> dict[str, Any]:
        """The answer as a non-streamed one would have been."""
        message: dict[str, Any] = {"role": "assistant", "content": "".join(self._text) or None}
        if self._calls:
            message["tool_calls"] = [self._calls[i] for i in sorted(self._calls)]
        choice = {"index": 0, "message": message, "finish_reason": self._finish}
        return {**self._last, "choices": [choice], "usage": self._usage}

    def text(self) -> bytes:
        """The stream's first bytes (an error body)."""
        return b"".join(self._raw)


def call_span(
    call: Call, trace_id: int, parent: int, end_ns: int, *, remote_parent: bool
) -> SpanRecord:
    """One model call as an OTel GenAI span."""
    request = call.request or {}
    model = request.get("model")
    if call.answer is None and call.answer_body is not None:
        call.answer = _json_object(call.answer_body)
    answer = call.answer or {}
    attributes: dict[str, Any] = {"gen_ai.operation.name": call.operation}
    if isinstance(model, str):
        attributes["gen_ai.request.model"] = model
    if isinstance(answer.get("model"), str):
        attributes["gen_ai.response.model"] = answer["model"]
    if isinstance(answer.get("id"), str):
        attributes["gen_ai.response.id"] = answer["id"]
    system, inputs = _inputs(call)
    if system:
        attributes["gen_ai.system_instructions"] = json.dumps(system)
    attributes["gen_ai.input.messages"] = json.dumps(inputs)
    if isinstance(request.get("tools"), list):
        attributes["gen_ai.tool.definitions"] = json.dumps(request["tools"])
    outputs, reasons = _outputs(call.operation, answer)
    if outputs:
        attributes["gen_ai.output.messages"] = json.dumps(outputs)
    if reasons:
        attributes["gen_ai.response.finish_reasons"] = reasons
    usage = answer.get("usage")
    if isinstance(usage, Mapping):
        for key, name in (("prompt_tokens", "input"), ("completion_tokens", "output")):
            if isinstance(usage.get(key), int):
                attributes[f"gen_ai.usage.{name}_tokens"] = usage[key]
    if call.first_chunk_ns is not None:
        attributes["gen_ai.response.time_to_first_chunk"] = (
            call.first_chunk_ns - call.start_ns
        ) / 1e9
    if call.status:
        attributes["http.response.status_code"] = call.status
    if call.error is not None:
        attributes["error.type"] = (
            "cancelled" if call.error.startswith("cancelled") else str(call.status or "upstream")
        )
    return SpanRecord(
        trace_id=trace_id,
        span_id=_new_id(64),
        name=f"{call.operation} {model}" if isinstance(model, str) else call.operation,
        start_ns=call.start_ns,
        end_ns=end_ns,
        parent_id=parent,
        parent_is_remote=remote_parent,
        attributes=attributes,
        status="error" if call.error is not None else "unset",
        status_description=call.error,
        kind="CLIENT",
        resource=RESOURCE,
        scope="otel_trackio.proxy",
    )


def _inputs(call: Call) -> tuple[list[Any], list[Any]]:
    """(system instruction parts, input messages) of a call, as OTel GenAI JSON."""
    request = call.request
    if request is None:  # not JSON: forwarded, and recorded as the text it was
        text = call.raw.decode("utf-8", errors="replace")
        return [], [{"role": "user", "parts": [{"type": "text", "content": text}]}]
    if call.operation == "text_completion":
        prompt = request.get("prompt")
        text = prompt if isinstance(prompt, str) else json.dumps(prompt)
        return [], [{"role": "user", "parts": [{"type": "text", "content": text}]}]
    system: list[Any] = []
    inputs: list[Any] = []
    for message in request.get("messages") or []:
        if not isinstance(message, Mapping):
            continue
        converted = from_chat_message(message)
        if message.get("role") in ("system", "developer") and not inputs:
            system.extend(converted["parts"])
        else:
            inputs.append(converted)
    return system, inputs


def _outputs(operation: str, answer: Mapping[str, Any]) -> tuple[list[Any], list[str]]:
    outputs: list[Any] = []
    reasons: list[str] = []
    for choice in answer.get("choices") or []:
        if not isinstance(choice, Mapping):
            continue
        reason = choice.get("finish_reason")
        if isinstance(reason, str):
            reasons.append(reason)
        if operation == "text_completion":
            message: Mapping[str, Any] = {"role": "assistant", "content": choice.get("text")}
        else:
            message = choice.get("message") or {}
        if isinstance(message, Mapping):
            out = from_chat_message({**message, "role": message.get("role") or "assistant"})
            outputs.append({**out, "finish_reason": reason or "stop"})
    return outputs, reasons


def _root(sample: OpenSample, why: PartialReason | None = None) -> SpanRecord:
    """A sample's root span: its step, index and outcomes; ended early (``why``: ``ttl``, or
    ``flush`` at the stop of ``serve``), the sample is logged as partial."""
    return SpanRecord(
        trace_id=sample.trace_id,
        span_id=sample.root_id,
        name="rollout",
        start_ns=sample.start_ns,
        end_ns=time.time_ns(),
        attributes={
            "step": sample.step,
            "sample_index": sample.sample_index,
            **sample.outcomes,
            **({} if why is None else {ENDED_EARLY_ATTRIBUTE: why}),
        },
        kind="INTERNAL",
        resource=RESOURCE,
        scope="otel_trackio.proxy",
    )


def _new_id(bits: int) -> int:
    return int.from_bytes(os.urandom(bits // 8), "big") or 1


def _json_object(data: bytes) -> dict[str, Any] | None:
    try:
        value = json.loads(data)
    except (ValueError, UnicodeDecodeError):
        return None
    return value if isinstance(value, dict) else None


def _error_text(answer: Mapping[str, Any] | None, raw: bytes) -> str:
    error = (answer or {}).get("error")
    if isinstance(error, Mapping) and isinstance(error.get("message"), str):
        return str(error["message"])
    return raw[:500].decode("utf-8", errors="replace") or "upstream error"


def _openai_error(status: int, message: str) -> JSONResponse:
    """An error as OpenAI's API answers one, which every OpenAI client reads."""
    kind = {401: "authentication_error", 404: "not_found_error", 413: "invalid_request_error"}
    error = {"message": message, "type": kind.get(status, "upstream_error"), "code": status}
    return JSONResponse({"error": error}, status_code=status)
