"""Hostile and careless clients against a real receiver: compression bombs, deep nesting, bodies
and headers held open, a span with a million attributes, more runs than the route cap, odd
tokens and names. Each time the attack gets a clear 4xx/503 (never a 5xx, never a traceback),
the receiver's peak RSS stays bounded (read from /proc for a receiver process), and another
client's samples keep being stored meanwhile (read back from Trackio by (step, sample_index)).
"""

from __future__ import annotations

import gzip
import json
import logging
import socket
import time
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import requests
from conftest import read_traces, wait_until
from google.protobuf import json_format
from google.rpc import status_pb2
from hostile_clients import (
    EMPTY_GZIP_MEMBER,
    PROTOBUF,
    Served,
    answer,
    deep_kvlist_json,
    deep_protobuf,
    huge_span_request,
    kv,
    post_samples,
    raw_headers,
    sample,
)
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2
from opentelemetry.proto.trace.v1 import trace_pb2
from trackio.sqlite_storage import SQLiteStorage

from otel_trackio._codec.otlp import DROPPED_ATTRIBUTES, DROPPED_EVENTS, ItemLimits, decode_traces
from otel_trackio.receiver import _routing as routing
from otel_trackio.receiver._auth import TOKEN_ENV, BearerCheck, resolve_token
from otel_trackio.receiver._body import BodyBudget, decompress
from otel_trackio.receiver._decode import RequestError, parse_request
from otel_trackio.receiver._limits import MIB, ReceiverLimits
from otel_trackio.receiver._names import printable_name


def _stored(project: str, run: str = "r") -> list[tuple[int, int]]:
    """(step, sample_index) of every stored Trace of the run, duplicates included."""
    return sorted((t["step"], t["metadata"]["sample_index"]) for t in read_traces(project, run))


def _message(response: requests.Response) -> str:
    status = status_pb2.Status()
    status.ParseFromString(response.content)
    return str(status.message)


# -- a receiver process, for its RSS -------------------------------------------------------------


@pytest.fixture
def serve(project) -> Iterator:
    started: list[Served] = []

    def start(*options: str, env: dict[str, str] | None = None) -> Served:
        served = Served(project, *options, env=env)
        started.append(served)
        return served

    yield start
    for served in started:
        served.stop()


# -- gzip ----------------------------------------------------------------------------------------


_REAL_DECOMPRESSOBJ = zlib.decompressobj


class _CountingInflater:
    """A zlib decompressor counting the compressed bytes it is given."""

    fed = 0

    def __init__(self, wbits: int) -> None:
        self._inner = _REAL_DECOMPRESSOBJ(wbits)

    def decompress(self, data, max_length: int = 0) -> bytes:
        _CountingInflater.fed += len(data)
        return self._inner.decompress(data, max_length)

    def __getattr__(self, name: str):
        return getattr(self._inner, name)


def test_gzip_members_inflate_in_linear_time_with_caps_on_members_and_layers(monkeypatch):
    many = EMPTY_GZIP_MEMBER * 50_000  # 1 MB of empty members
    payload = b"otlp" * 1000
    members = gzip.compress(payload) * 3 + EMPTY_GZIP_MEMBER * 997
    monkeypatch.setattr(zlib, "decompressobj", _CountingInflater)
    relaxed = ReceiverLimits(max_body_bytes=4 * MIB, max_gzip_members=100_000)
    assert decompress(members, "gzip", relaxed) == payload * 3
    assert decompress(many, "gzip", relaxed) == b""
    # zlib is fed (and copies back) a few times the body at most: the quadratic version fed the
    # rest of the body again after each member, ~25 GB for this megabyte.
    assert _CountingInflater.fed <= 8 * (len(many) + len(members))
    monkeypatch.undo()

    limits = ReceiverLimits(max_body_bytes=4 * MIB)
    with pytest.raises(RequestError) as caught:
        decompress(many, "gzip", limits)
    assert caught.value.status == 413 and "64 gzip members" in caught.value.message
    with pytest.raises(RequestError) as caught:
        decompress(gzip.compress(gzip.compress(gzip.compress(payload))), "gzip, gzip, gzip", limits)
    assert caught.value.status == 400 and "content codings" in caught.value.message
    assert decompress(gzip.compress(gzip.compress(payload)), "gzip, gzip", limits) == payload
    assert decompress(gzip.compress(payload) + bytes(512), "gzip", limits) == payload  # padding
    with pytest.raises(RequestError) as caught:
        decompress(gzip.compress(payload) + b"\0junk", "gzip", limits)
    assert caught.value.status == 400


def test_gzip_bombs_get_4xx_and_other_clients_are_stored(project, start_receiver):
    receiver = start_receiver(sample_grace_seconds=0)
    url = receiver.url + "/v1/traces"
    limit = receiver.limits.max_body_bytes
    flat = EMPTY_GZIP_MEMBER * (4 * MIB // len(EMPTY_GZIP_MEMBER))  # 4 MB of empty members
    layered = gzip.compress(EMPTY_GZIP_MEMBER * (limit // len(EMPTY_GZIP_MEMBER)), 9)
    assert len(layered) < 64 * 1024  # "gzip, gzip": a few KB asking for a million members
    cases = [
        (flat, "gzip", 413),
        (layered, "gzip, gzip", 413),
        (gzip.compress(layered), "gzip, gzip, gzip", 400),
    ]
    for body, coding, status in cases:
        response = requests.post(
            url, data=body, headers={**PROTOBUF, "Content-Encoding": coding}, timeout=60
        )
        assert response.status_code == status, (coding, response.content[:200])
    assert post_samples(receiver.url, 1, range(3)) == [200] * 3
    receiver.stop()
    assert _stored(project) == [(1, 0), (1, 1), (1, 2)]


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_an_over_limit_body_written_whole_gets_its_413_not_a_reset(
    project, start_receiver, framing
):
    """Most clients write the whole body before they read the answer: the receiver reads and
    drops a body over the limit (up to a bound) before answering, so they read the 413."""
    receiver = start_receiver(limits=ReceiverLimits(max_body_bytes=4 * MIB))
    body = b"\0" * (15 * MIB)  # more than the sockets' buffers hold
    host, port = receiver.url.removeprefix("http://").rsplit(":", 1)
    if framing == "content-length":
        head = f"Content-Length: {len(body)}\r\n".encode()
        payload = body
    else:
        head = b"Transfer-Encoding: chunked\r\n"
        chunk = 64 * 1024
        payload = (
            b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + chunk]), body[i : i + chunk])
                for i in range(0, len(body), chunk)
            )
            + b"0\r\n\r\n"
        )
    with socket.create_connection((host, int(port)), timeout=30) as connection:
        connection.sendall(
            b"POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            + head
            + b"\r\n"
            + payload
        )  # a reset would fail here, or at the read
        answer = connection.recv(4096)
    assert answer.startswith(b"HTTP/1.1 413"), answer[:200]
    assert post_samples(receiver.url, 1, range(2)) == [200] * 2  # others go on


# -- nesting -------------------------------------------------------------------------------------


def test_deep_nesting_is_a_400_with_one_warning_line_and_no_traceback(
    project, start_receiver, caplog
):
    receiver = start_receiver(sample_grace_seconds=0)
    url = receiver.url + "/v1/traces"
    kvlist = deep_kvlist_json(300)
    brackets = b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    protobuf = deep_protobuf(300)
    with caplog.at_level(logging.DEBUG, logger="otel_trackio"):
        answers = [
            requests.post(
                url,
                data=kvlist,
                headers={"Content-Type": "application/json"},
                timeout=60,
            ),
            requests.post(
                url, data=brackets, headers={"Content-Type": "application/json"}, timeout=60
            ),
            requests.post(url, data=protobuf, headers=PROTOBUF, timeout=60),
        ]
        assert post_samples(receiver.url, 2, range(2)) == [200, 200]
        receiver.stop()
    assert [a.status_code for a in answers] == [400, 400, 400]
    assert "nested deeper than 128 levels" in answers[0].json()["message"]
    assert "nested deeper than 128 levels" in answers[1].json()["message"]
    ours = [r for r in caplog.records if r.name.startswith("otel_trackio")]
    assert not [r for r in ours if r.exc_info or r.levelno >= logging.ERROR]
    warned = [r for r in ours if r.levelno == logging.WARNING and "400" in r.getMessage()]
    assert len(warned) == 1 and "\n" not in warned[0].getMessage()
    assert _stored(project) == [(2, 0), (2, 1)]


# -- bodies and headers held open ----------------------------------------------------------------


def test_held_bodies_are_bounded_and_timed_out_while_others_are_stored(project, serve):
    served = serve("--read-timeout-seconds", "3", "--body-timeout-seconds", "6")
    held_size = 19 * MIB
    before = served.rss_mib("VmRSS")
    attackers: list[socket.socket] = []
    refused = 0
    for _ in range(30):
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=60)
        sock.sendall(raw_headers(held_size, served.port))
        try:
            sock.sendall(b"\0" * (held_size - 1))  # all but the last byte, then hold
        except (BrokenPipeError, ConnectionResetError):
            refused += 1
        attackers.append(sock)
    # Meanwhile small batches go straight through (the budget keeps headroom for them).
    assert post_samples(served.url, 3, range(10)) == [200] * 10
    peak_during = served.rss_mib("VmHWM")
    answers = [answer(sock) for sock in attackers]
    for sock in attackers:
        sock.close()
    statuses = sorted(a.split(b" ", 2)[1].decode() for a in answers if a)
    assert set(statuses) <= {"408", "503"}, statuses
    assert statuses.count("408") <= 3 and statuses.count("503") >= 27 - refused
    # Slow headers: eight connections at one byte per 0.3 s are closed after the deadline.
    slow = [socket.create_connection(("127.0.0.1", served.port), timeout=60) for _ in range(8)]
    header = raw_headers(10, served.port)
    closed: set[int] = set()
    for position in range(len(header)):
        for k, sock in enumerate(slow):
            if k in closed:
                continue
            try:
                sock.sendall(header[position : position + 1])
            except (BrokenPipeError, ConnectionResetError):
                closed.add(k)
        if len(closed) == len(slow):
            break
        time.sleep(0.3)
    slow_answers = [answer(sock) for sock in slow]
    for sock in slow:
        sock.close()
    assert all(a.startswith(b"HTTP/1.1 408") for a in slow_answers), slow_answers
    # An endless header section is cut at 64 KiB.
    endless = socket.create_connection(("127.0.0.1", served.port), timeout=60)
    try:
        endless.sendall(b"POST /v1/traces HTTP/1.1\r\nX-Filler: " + b"x" * (1024 * 1024))
    except (BrokenPipeError, ConnectionResetError):
        pass
    too_big = answer(endless)
    endless.close()
    assert too_big.startswith(b"HTTP/1.1 431"), too_big[:100]
    assert post_samples(served.url, 3, range(10, 20)) == [200] * 10
    peak = served.rss_mib("VmHWM")
    output = served.stop()
    print(f"receiver RSS {before:.0f} MiB before, peak {peak_during:.0f} / {peak:.0f} MiB")
    assert peak < before + 200, output  # 30 x 19 MiB held took it from 84 to 654 MiB before
    assert _stored(project) == [(3, i) for i in range(20)]
    assert "Traceback" not in output


# -- a span with a million attributes ------------------------------------------------------------


def test_a_span_with_a_million_attributes_is_cut_with_bounded_memory(project, serve):
    served = serve()
    body = huge_span_request(1_000_000)
    assert 15 * MIB < len(body) < 20 * MIB  # 17 MB in the issue
    before = served.rss_mib("VmRSS")
    response = requests.post(served.url + "/v1/traces", data=body, headers=PROTOBUF, timeout=120)
    assert response.status_code == 200
    assert post_samples(served.url, 5, range(5)) == [200] * 5
    wait_until(lambda: len(_stored(project)) == 6)
    peak = served.rss_mib("VmHWM")
    output = served.stop()
    print(f"receiver RSS {before:.0f} MiB before, peak {peak:.0f} MiB")
    assert peak < before + 250, output  # ~1 GB before the cap
    assert _stored(project) == [(4, 99), *((5, i) for i in range(5))]
    (huge,) = [t for t in read_traces(project, "r") if t["step"] == 4]
    (span,) = huge["spans"]
    assert span["metadata"][DROPPED_ATTRIBUTES] == 1_000_002 - 1024
    # The first 1024 attributes, the cut's marker and the trace id the tree's first span carries.
    kept = {k for k in span["metadata"] if k not in (DROPPED_ATTRIBUTES, "otel.trace_id")}
    assert len(kept) <= 1024


def test_attribute_and_event_caps_keep_the_first_and_mark_the_cut():
    span = trace_pb2.Span(
        trace_id=b"\x01" * 16,
        span_id=b"\x02" * 8,
        name="s",
        attributes=[kv(f"a{i}", i) for i in range(10)],
        dropped_attributes_count=5,  # the sender's SDK cut some already
        events=[
            trace_pb2.Span.Event(name=f"e{i}", attributes=[kv(f"x{j}", j) for j in range(4)])
            for i in range(6)
        ],
    )
    request = trace_service_pb2.ExportTraceServiceRequest()
    request.resource_spans.add().scope_spans.add().spans.append(span)
    (record,) = decode_traces(request, ItemLimits(attributes=3, events=2)).by_route[(None, None)]
    assert record.attributes == {
        "a0": 0,
        "a1": 1,
        "a2": 2,
        DROPPED_ATTRIBUTES: 12,
        DROPPED_EVENTS: 4,
    }
    assert [e.name for e in record.events] == ["e0", "e1"]
    assert record.events[0].attributes == {"x0": 0, "x1": 1, "x2": 2, DROPPED_ATTRIBUTES: 1}
    (whole,) = decode_traces(request).by_route[(None, None)]
    assert len(whole.attributes) == 11 and len(whole.events) == 6  # 10 + the sender's cut

    # OTLP JSON is cut while parsing, before the (costly) message is built
    document = json_format.MessageToDict(request)
    (as_dict,) = document["resourceSpans"][0]["scopeSpans"][0]["spans"]
    as_dict.update(traceId="01" * 16, spanId="02" * 8)  # OTLP JSON ids are hex
    as_json = json.dumps(document)
    limits = ItemLimits(attributes=3, events=2)
    parsed = parse_request(
        as_json.encode(), "json", trace_service_pb2.ExportTraceServiceRequest, limits=limits
    )
    (cut,) = parsed.resource_spans[0].scope_spans[0].spans
    assert (len(cut.attributes), cut.dropped_attributes_count) == (3, 12)
    assert (len(cut.events), cut.dropped_events_count) == (2, 4)
    (from_json,) = decode_traces(parsed, limits).by_route[(None, None)]
    assert from_json.attributes == record.attributes and from_json.events == record.events


# -- the body budget -----------------------------------------------------------------------------


def test_the_body_budget_keeps_headroom_for_small_requests():
    budget = BodyBudget(8 * MIB)  # 6 MiB for large requests, 2 more for small ones
    large = [budget.claim() for _ in range(3)]
    large[0].take(3 * MIB)
    large[1].take(3 * MIB)
    with pytest.raises(RequestError) as caught:
        large[2].take(2 * MIB)
    assert caught.value.status == 503 and caught.value.headers["Retry-After"]
    small = [budget.claim() for _ in range(2)]
    for claim in small:
        claim.take(MIB)  # small requests still fit
    with pytest.raises(RequestError):
        budget.claim().take(1)
    large[0].release()
    large[0].release()  # idempotent
    large[2].take(2 * MIB)
    assert budget.used == 3 * MIB + 2 * MIB + 2 * MIB
    for claim in (*large, *small):
        claim.release()
    assert budget.used == 0


# -- routes --------------------------------------------------------------------------------------


def _poster(url: str) -> Callable[[trace_service_pb2.ExportTraceServiceRequest], requests.Response]:
    """Post a trace request to the receiver at ``url`` (protobuf), answer returned as it is."""

    def post(request: trace_service_pb2.ExportTraceServiceRequest) -> requests.Response:
        return requests.post(
            url + "/v1/traces", data=request.SerializeToString(), headers=PROTOBUF, timeout=60
        )

    return post


def test_an_exhausted_route_cap_is_a_retryable_503_with_a_warning(project, start_receiver, caplog):
    receiver = start_receiver(max_routes=2, sample_grace_seconds=0)  # its own run + one more
    post = _poster(receiver.url)

    assert post(sample(6, 0)).status_code == 200
    assert post(sample(6, 1, run="a")).status_code == 200
    with caplog.at_level(logging.WARNING, logger="otel_trackio"):
        refused = post(sample(6, 2, run="b"))
        # one request for a served run and a new one: refused whole, nothing of it spooled
        both = sample(6, 3, run="a")
        both.resource_spans.extend(sample(6, 4, run="c").resource_spans)
        refused_both = post(both)
    assert refused.status_code == 503 and refused.headers["Retry-After"] == "30"
    assert "max-routes" in _message(refused)
    assert refused_both.status_code == 503
    assert [r for r in caplog.records if "routes are in use" in r.getMessage()]
    assert post(sample(6, 5, run="a")).status_code == 200
    receiver.stop()
    assert _stored(project) == [(6, 0)]
    assert _stored(project, "a") == [(6, 1), (6, 5)]
    assert _stored(project, "b") == [] and _stored(project, "c") == []


def test_an_idle_route_is_closed_and_data_for_it_opens_it_again_into_the_same_run(
    project, start_receiver
):
    """A receiver serving run after run: a route idle for ``route_idle_seconds``, nothing
    waiting in it, is closed (its memory freed); the next data for it continues the run."""
    receiver = start_receiver(limits=ReceiverLimits(route_idle_seconds=0.5), sample_grace_seconds=0)
    post = _poster(receiver.url)

    assert post(sample(6, 1, run="a")).status_code == 200
    wait_until(lambda: _stored(project, "a") == [(6, 1)])
    wait_until(lambda: receiver.router.totals().runs == 1)  # only the server's own is left
    assert post(sample(7, 2, run="a")).status_code == 200
    receiver.stop()
    assert _stored(project, "a") == [(6, 1), (7, 2)]
    assert SQLiteStorage.get_runs(project).count("a") == 1
    (a,) = [s for s in receiver.router.run_summaries() if s.run == "a"]
    assert a.stats.samples_logged == 2  # both openings of the route, in one summary
    assert receiver.router.totals().samples == 2


def test_a_full_route_table_makes_room_by_closing_the_least_recent_quiet_route(
    project, start_receiver, monkeypatch
):
    monkeypatch.setattr(routing, "ROOM_IDLE_SECONDS", 0.0)  # no wait in a test
    receiver = start_receiver(max_routes=2, sample_grace_seconds=0)  # its own run + one more
    post = _poster(receiver.url)

    assert post(sample(6, 0, run="a")).status_code == 200
    wait_until(lambda: _stored(project, "a") == [(6, 0)])

    def retried_until_taken(request: trace_service_pb2.ExportTraceServiceRequest) -> list[int]:
        statuses: list[int] = []
        wait_until(lambda: statuses.append(post(request).status_code) or statuses[-1] == 200)
        return statuses

    assert retried_until_taken(sample(6, 1, run="b"))[0] == 503  # then "a" made room for it
    wait_until(lambda: _stored(project, "b") == [(6, 1)])
    assert retried_until_taken(sample(6, 2, run="a"))[0] == 503  # then "b" made room
    receiver.stop()
    assert _stored(project, "a") == [(6, 0), (6, 2)]
    assert _stored(project, "b") == [(6, 1)]
    # Each opened again, not anew (and the server's own run "r", made as it started).
    assert sorted(SQLiteStorage.get_runs(project)) == ["a", "b", "r"]


def test_route_names_are_escaped_before_they_reach_a_terminal(project, start_receiver, capfd):
    receiver = start_receiver(sample_grace_seconds=0)
    hostile = "run\x1b[2J\x1b]0;pwned\x07\rhidden\u202eevil"
    request = sample(7, 0, run=hostile)
    response = requests.post(
        receiver.url + "/v1/traces", data=request.SerializeToString(), headers=PROTOBUF, timeout=60
    )
    assert response.status_code == 200
    receiver.stop()
    printed = capfd.readouterr()
    safe = printable_name(hostile)
    assert safe in printed.out  # Trackio printed the run's name, escaped
    for text in (printed.out, printed.err):  # (Trackio's own colours use ANSI escapes)
        for raw in ("\x1b[2J", "\x1b]0;", "\x07", "\r", "\u202e"):
            assert raw not in text, raw
    assert safe == "run\\x1b[2J\\x1b]0;pwned\\x07\\x0dhidden\\u202eevil"
    assert _stored(project, safe) == [(7, 0)]
    assert printable_name("plain run-1 é") == "plain run-1 é"


# -- the token -----------------------------------------------------------------------------------


def test_token_from_env_or_file_and_the_bearer_scheme_in_any_case(
    project, start_receiver, tmp_path
):
    token_file = tmp_path / "token"
    token_file.write_text("from-file\n")
    assert resolve_token(None, token_file, environ={}) == "from-file"
    assert resolve_token(None, None, environ={TOKEN_ENV: " from-env "}) == "from-env"
    assert resolve_token("given", None, environ={TOKEN_ENV: "from-env"}) == "given"
    assert resolve_token(None, None, environ={}) is None
    (tmp_path / "empty").write_text("\n")
    for bad in (tmp_path / "empty", tmp_path / "missing"):
        with pytest.raises(ValueError, match="token file"):
            resolve_token(None, bad, environ={})
    with pytest.raises(ValueError, match="not both"):
        resolve_token("given", token_file)

    check = BearerCheck("s3cret")
    assert check.allows("Bearer s3cret") and check.allows("bearer s3cret")
    assert check.allows("BEARER  s3cret ")
    assert not check.allows("Basic s3cret") and not check.allows("Bearer nope")
    assert not check.allows(None) and not check.allows("s3cret")

    receiver = start_receiver(token="s3cret", sample_grace_seconds=0)
    body = sample(8, 0).SerializeToString()
    url = receiver.url + "/v1/traces"
    lower = requests.post(
        url, data=body, headers={**PROTOBUF, "Authorization": "bearer s3cret"}, timeout=60
    )
    basic = requests.post(
        url, data=body, headers={**PROTOBUF, "Authorization": "Basic s3cret"}, timeout=60
    )
    assert (lower.status_code, basic.status_code) == (200, 401)
    receiver.stop()
    assert _stored(project) == [(8, 0)]


def test_serve_takes_its_token_from_the_environment_not_the_command_line(project, serve):
    served = serve(env={TOKEN_ENV: "s3cret-from-env"})
    command_line = Path(f"/proc/{served.process.pid}/cmdline").read_bytes()
    assert b"s3cret" not in command_line  # what ps shows
    body = sample(9, 0).SerializeToString()
    url = served.url + "/v1/traces"
    missing = requests.post(url, data=body, headers=PROTOBUF, timeout=60)
    given = requests.post(
        url, data=body, headers={**PROTOBUF, "Authorization": "Bearer s3cret-from-env"}, timeout=60
    )
    assert (missing.status_code, given.status_code) == (401, 200)
    output = served.stop()
    assert "bearer token required" in output
    assert _stored(project) == [(9, 0)]
