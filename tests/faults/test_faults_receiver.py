"""Receiver faults: hostile and broken clients against a real OTLP/HTTP receiver.

Random bytes, truncated protobuf, mismatched encodings and gzip bombs interleaved with good
requests; 10k tiny requests; a slow client; a client vanishing mid-body; concurrent clients at
the body limit. Always: a 2xx/4xx status (never 5xx, never a hang), bounded memory, and every good
client's samples in Trackio afterwards.
"""

from __future__ import annotations

import gzip
import random
import resource
import socket
import time
from concurrent.futures import ThreadPoolExecutor

import pytest
import requests
from conftest import read_traces
from fault_tally import tally
from hostile_clients import sample
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2

from otel_trackio.receiver import OTLPReceiver

PROTOBUF = {"Content-Type": "application/x-protobuf"}
LIMIT = 64 * 1024


def _body_of_size(step: int, index: int, size: int) -> bytes:
    pad = max(0, size - 200)
    for _ in range(10):
        body = sample(step, index, pad=pad).SerializeToString()
        if len(body) == size:
            return body
        pad += size - len(body)
    raise AssertionError("could not hit the size")


@pytest.fixture
def receiver(project):
    started = OTLPReceiver(
        project, "r", port=0, grpc_port=0, summary_interval=0, max_body_bytes=LIMIT
    ).start()
    yield started
    started.stop()


def _stored(project: str) -> set[tuple[int, int]]:
    return {(t["step"], t["metadata"]["sample_index"]) for t in read_traces(project, "r")}


def test_garbage_gets_4xx_and_good_clients_keep_their_data(project, receiver):
    url = receiver.url + "/v1/traces"
    rng = random.Random(9)
    good = sample(0, 0).SerializeToString()
    bomb = gzip.compress(bytes(LIMIT * 64), compresslevel=9)
    statuses: dict[int, int] = {}
    sent_good: set[tuple[int, int]] = set()
    session = requests.Session()
    for i in range(300):
        kind = i % 6
        headers = dict(PROTOBUF)
        if kind == 0:
            body = rng.randbytes(rng.randrange(1, 2000))
        elif kind == 1:
            body = good[: rng.randrange(1, len(good))]  # truncated protobuf
        elif kind == 2:
            body, headers = good, {"Content-Type": "application/json"}  # wrong encoding
        elif kind == 3:
            body, headers = b'{"resourceSpans": [{"scopeSpans": [{"spans": [{"traceId": 7', PROTOBUF
        elif kind == 4:
            body, headers = bomb, {**PROTOBUF, "Content-Encoding": "gzip"}
        else:
            body = sample(1, i).SerializeToString()
            sent_good.add((1, i))
        response = session.post(url, data=body, headers=headers, timeout=30)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        tally.tried("receiver")
        if response.status_code >= 500:
            tally.crashed("receiver")
        if kind == 5:
            assert response.status_code == 200
        else:
            assert response.status_code in (200, 400, 413, 415), (kind, response.status_code)
        if kind == 4:
            assert response.status_code == 413
    receiver.stop()
    missing = sent_good - _stored(project)
    tally.lost("receiver", len(missing))
    assert not missing
    assert statuses.get(400, 0) > 0


def test_ten_thousand_tiny_requests_keep_memory_bounded(project, receiver):
    url = receiver.url + "/v1/traces"
    empty = trace_service_pb2.ExportTraceServiceRequest().SerializeToString()
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB

    def client(n: int) -> int:
        bad = 0
        with requests.Session() as session:
            for _ in range(n):
                if session.post(url, data=empty, headers=PROTOBUF, timeout=30).status_code != 200:
                    bad += 1
        return bad

    with ThreadPoolExecutor(4) as pool:
        bad = sum(pool.map(client, [2500] * 4))
    tally.tried("receiver", 10_000)
    ok = requests.post(url, data=sample(5, 5).SerializeToString(), headers=PROTOBUF, timeout=30)
    rss_growth_mib = (resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - rss_before) / 1024
    receiver.stop()
    assert bad == 0
    assert ok.status_code == 200
    assert rss_growth_mib < 200, f"memory grew {rss_growth_mib:.0f} MiB over 10k tiny requests"
    assert (5, 5) in _stored(project)
    tally.lost("receiver", 0 if (5, 5) in _stored(project) else 1)


def _raw_post_headers(receiver: OTLPReceiver, length: int) -> bytes:
    return (
        f"POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/x-protobuf\r\nContent-Length: {length}\r\n\r\n"
    ).encode()


def test_slow_client_and_vanishing_client_do_not_hold_up_others(project, receiver):
    url = receiver.url + "/v1/traces"
    slow_body = sample(2, 0).SerializeToString()
    slow = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
    slow.sendall(_raw_post_headers(receiver, len(slow_body)) + slow_body[:10])
    # A client that disappears mid-body.
    gone = socket.create_connection(("127.0.0.1", receiver.port), timeout=30)
    gone.sendall(_raw_post_headers(receiver, 10_000) + b"\x0a" * 100)
    gone.close()
    # Others are served while the slow client is still sending.
    for i in range(5):
        response = requests.post(
            url, data=sample(3, i).SerializeToString(), headers=PROTOBUF, timeout=30
        )
        assert response.status_code == 200
    for start in range(10, len(slow_body), 40):
        slow.sendall(slow_body[start : start + 40])
        time.sleep(0.02)
    reply = slow.recv(4096)
    slow.close()
    tally.tried("receiver", 7)
    assert reply.startswith(b"HTTP/1.1 200"), reply[:200]
    receiver.stop()
    expected = {(3, i) for i in range(5)} | {(2, 0)}
    missing = expected - _stored(project)
    tally.lost("receiver", len(missing))
    assert not missing


def test_concurrent_clients_at_the_body_limit(project, receiver):
    url = receiver.url + "/v1/traces"
    at_limit = [_body_of_size(4, i, LIMIT) for i in range(8)]
    over = _body_of_size(4, 99, LIMIT + 1)

    def send(body: bytes) -> int:
        return requests.post(url, data=body, headers=PROTOBUF, timeout=60).status_code

    with ThreadPoolExecutor(9) as pool:
        codes = list(pool.map(send, [*at_limit, over]))
    tally.tried("receiver", 9)
    receiver.stop()
    assert codes == [200] * 8 + [413]
    stored = _stored(project)
    missing = {(4, i) for i in range(8)} - stored
    tally.lost("receiver", len(missing))
    assert not missing
    assert (4, 99) not in stored
    assert all(len(t["spans"]) == 2 for t in read_traces(project, "r"))


def test_stop_is_idempotent_and_refuses_later_requests(project, receiver):
    receiver.stop()
    receiver.stop()
    with pytest.raises(requests.ConnectionError):
        requests.post(receiver.url + "/v1/traces", data=b"", headers=PROTOBUF, timeout=5)
