"""Hostile and careless OTLP/HTTP clients, and a receiver process to aim them at: shared by
``tests/faults/test_hostile_receiver.py`` and ``bench/bench_hostile.py``.

Requests are built as protobuf wire bytes where the protobuf API cannot build them (nesting past
its depth limit) or takes minutes (a million repeated fields).
"""

from __future__ import annotations

import gzip
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import requests
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.resource.v1 import resource_pb2
from opentelemetry.proto.trace.v1 import trace_pb2

REPO = Path(__file__).resolve().parent.parent
PROTOBUF = {"Content-Type": "application/x-protobuf"}
EMPTY_GZIP_MEMBER = gzip.compress(b"")  # 20 bytes


def varint(n: int) -> bytes:
    out = bytearray()
    while True:
        low, n = n & 0x7F, n >> 7
        out.append(low | (0x80 if n else 0))
        if not n:
            return bytes(out)


def field(tag: int, payload: bytes) -> bytes:
    return bytes([tag]) + varint(len(payload)) + payload


def kv(key: str, value: object) -> common_pb2.KeyValue:
    if isinstance(value, int):
        return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(int_value=value))
    return common_pb2.KeyValue(key=key, value=common_pb2.AnyValue(string_value=str(value)))


def sample(
    step: int, index: int, run: str | None = None, pad: int = 0
) -> trace_service_pb2.ExportTraceServiceRequest:
    """One two-span sample (root + child), routed to ``run`` when given; ``pad`` characters of
    filler make the body as large as wanted."""
    trace_id = uuid.uuid4().bytes
    root = trace_pb2.Span(
        trace_id=trace_id,
        span_id=b"\x00" * 7 + b"\x01",
        name="sample",
        start_time_unix_nano=1,
        end_time_unix_nano=10,
        attributes=[kv("step", step), kv("sample_index", index)]
        + ([kv("pad", "p" * pad)] if pad else []),
    )
    child = trace_pb2.Span(
        trace_id=trace_id,
        span_id=b"\x00" * 7 + b"\x02",
        parent_span_id=root.span_id,
        name="generate",
        start_time_unix_nano=2,
        end_time_unix_nano=9,
    )
    resource = resource_pb2.Resource(attributes=[kv("trackio.run", run)] if run else [])
    return trace_service_pb2.ExportTraceServiceRequest(
        resource_spans=[
            trace_pb2.ResourceSpans(
                resource=resource, scope_spans=[trace_pb2.ScopeSpans(spans=[child, root])]
            )
        ]
    )


class Served:
    """``otel-trackio serve`` in its own process: its URL, its RSS and CPU, its output.

    ``source``: the checkout whose ``otel_trackio`` runs (default this one; the bench compares).
    """

    def __init__(
        self,
        project: str,
        *options: str,
        env: dict[str, str] | None = None,
        source: Path = REPO,
    ) -> None:
        defaults = {
            "--project": project,
            "--name": "r",
            "--port": "0",
            "--grpc-port": "0",
            "--summary-seconds": "0",
            "--sample-grace-seconds": "0",
        }
        arguments = [part for option in defaults.items() for part in option]
        self.process = subprocess.Popen(
            [sys.executable, "-m", "otel_trackio", "serve", *arguments, *options],
            cwd=source,
            env={**os.environ, **(env or {})},
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.project = project
        self.output: list[str] = []
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)
            found = re.search(r"listening on (http://127\.0\.0\.1:\d+) ", line)
            if found:
                self.url = found.group(1)
                self.port = int(self.url.rsplit(":", 1)[1])
                break
        else:
            raise AssertionError("".join(self.output))
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        assert self.process.stdout is not None
        for line in self.process.stdout:
            self.output.append(line)

    def rss_mib(self, field: str) -> float:
        """``VmRSS`` (now) or ``VmHWM`` (peak) of the receiver process, in MiB."""
        status = Path(f"/proc/{self.process.pid}/status").read_text()
        (kib,) = re.findall(rf"^{field}:\s+(\d+) kB", status, re.MULTILINE)
        return int(kib) / 1024

    def cpu_seconds(self) -> float:
        """User + system CPU the receiver process used so far."""
        fields = Path(f"/proc/{self.process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")

    def stop(self) -> str:
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=120)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait()
        self._reader.join(10)
        return "".join(self.output)


def post_samples(url: str, step: int, indexes: range) -> list[int]:
    with requests.Session() as session:
        return [
            session.post(
                url + "/v1/traces",
                data=sample(step, i).SerializeToString(),
                headers=PROTOBUF,
                timeout=60,
            ).status_code
            for i in indexes
        ]


def deep_kvlist_json(depth: int) -> bytes:
    """An OTLP JSON request whose one attribute is a key-value list nested ``depth`` deep (as
    text: ``json.dumps`` itself cannot write it)."""
    value = '{"stringValue": "bottom"}'
    for _ in range(depth):
        value = '{"kvlistValue": {"values": [{"key": "k", "value": ' + value + "}]}}"
    span = f'{{"traceId": "{"1" * 32}", "spanId": "{"2" * 16}", "name": "deep", '
    span += f'"attributes": [{{"key": "k", "value": {value}}}]}}'
    return f'{{"resourceSpans": [{{"scopeSpans": [{{"spans": [{span}]}}]}}]}}'.encode()


def deep_protobuf(depth: int) -> bytes:
    """A span attribute of arrays nested ``depth`` deep, as wire bytes (the protobuf API itself
    refuses to build one past its depth limit)."""
    value = field(0x0A, b"bottom")  # AnyValue.string_value
    for _ in range(depth):
        value = field(0x2A, field(0x0A, value))  # AnyValue.array_value -> ArrayValue.values
    attribute = field(0x0A, b"deep") + field(0x12, value)  # KeyValue key, value
    span = field(0x0A, b"\x01" * 16) + field(0x12, b"\x02" * 8) + field(0x4A, attribute)
    return field(0x0A, field(0x12, field(0x12, span)))


def raw_headers(length: int | None, port: int) -> bytes:
    size = f"Content-Length: {length}\r\n" if length is not None else ""
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/x-protobuf\r\n{size}\r\n"
    ).encode()


def answer(sock: socket.socket, timeout: float = 60.0) -> bytes:
    """What the receiver sent before closing (b"" when it closed without a word)."""
    sock.settimeout(timeout)
    chunks = []
    try:
        while chunk := sock.recv(65536):
            chunks.append(chunk)
    except OSError:  # reset, timed out, or closed meanwhile
        pass
    return b"".join(chunks)


def huge_span_request(attributes: int) -> bytes:
    """A request of one sample root with ``attributes`` int attributes (built as wire bytes:
    the protobuf API takes minutes for a million repeated fields)."""
    head = trace_pb2.Span(
        trace_id=uuid.uuid4().bytes,
        span_id=b"\x00" * 7 + b"\x07",
        name="huge",
        start_time_unix_nano=1,
        end_time_unix_nano=2,
        attributes=[kv("step", 4), kv("sample_index", 99)],
    ).SerializeToString()

    # Span.attributes (field 9): KeyValue(key=f"a{i:07d}", value=AnyValue(int_value=1)), 16 bytes
    # each, filled in by %-formatting (a million in well under a second)
    assert attributes < 10**7
    pairs = b"".join([b"\x4a\x0e\x0a\x08a%07d\x12\x02\x18\x01" % i for i in range(attributes)])
    return field(0x0A, field(0x12, field(0x12, head + pairs)))


def huge_json_span_request(attributes: int) -> bytes:
    """The OTLP JSON request of one sample root (step 4, sample_index 98) with ``attributes``
    int attributes (~48 bytes each: 400,000 fill a 20 MB body)."""
    pairs = b",".join([b'{"key":"a%07d","value":{"intValue":"1"}}' % i for i in range(attributes)])
    root = (
        b'{"traceId":"%s","spanId":"00000000000000f8","name":"huge","startTimeUnixNano":"1",'
        b'"endTimeUnixNano":"2","attributes":[{"key":"step","value":{"intValue":"4"}},'
        b'{"key":"sample_index","value":{"intValue":"98"}},%s]}'
    ) % (uuid.uuid4().hex.encode(), pairs)
    return b'{"resourceSpans":[{"scopeSpans":[{"spans":[%s]}]}]}' % root
