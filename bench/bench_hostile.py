"""Figure 12: what hostile and careless clients cost the receiver (CPU, peak RSS, other clients).

``otel-trackio serve`` in its own process (default limits); against it, one after the other:
gzip bodies of 1, 2 and 4 MB of empty members and a ``gzip, gzip`` body of a few KB; JSON nested
300 and 100,000 deep; 30 connections each holding a 19 MiB body minus its last byte; 8
connections sending headers at one byte per second; one span with 1,000,000 attributes (17 MB).
Measured from /proc: the receiver's CPU per bomb, its peak RSS (``VmHWM``) after each attack,
and whether (and how fast) a small batch of another client is answered during it.

``--source DIR`` runs the receiver of another checkout (e.g. ``git archive main`` unpacked) to
compare before/after with the same clients. The last line printed is the summary.
"""

from __future__ import annotations

import argparse
import gzip
import os
import socket
import sys
import threading
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
sys.path.insert(0, str(HERE.parent / "tests"))

import _workload as w  # noqa: E402 - sets a temp TRACKIO_DIR before trackio is imported
import requests  # noqa: E402
from hostile_clients import (  # noqa: E402
    EMPTY_GZIP_MEMBER,
    PROTOBUF,
    Served,
    answer,
    deep_kvlist_json,
    huge_json_span_request,
    huge_span_request,
    raw_headers,
    sample,
)

MIB = 1024 * 1024


def _small_batch(url: str, index: int) -> tuple[int, float]:
    """(status, seconds) of one small batch of another client."""
    started = time.perf_counter()
    response = requests.post(
        url + "/v1/traces",
        data=sample(1, index).SerializeToString(),
        headers=PROTOBUF,
        timeout=120,
    )
    return response.status_code, time.perf_counter() - started


def _post(url: str, body: bytes, headers: dict[str, str]) -> int:
    try:
        return requests.post(
            url + "/v1/traces", data=body, headers=headers, timeout=600
        ).status_code
    except requests.RequestException as exc:
        print(f"   request failed: {exc!r}")
        return 0


def bombs(served: Served) -> list[str]:
    lines = []
    layered = gzip_layered()
    cases = [
        *(
            (f"{mb} MB of empty gzip members", EMPTY_GZIP_MEMBER * (mb * MIB // 20), "gzip")
            for mb in (1, 2, 4)
        ),
        (f"'gzip, gzip' body of {len(layered) / 1000:.1f} KB", layered, "gzip, gzip"),
    ]
    for label, body, coding in cases:
        cpu = served.cpu_seconds()
        status = _post(served.url, body, {**PROTOBUF, "Content-Encoding": coding})
        lines.append(f"{label}: {status}, {served.cpu_seconds() - cpu:.2f} s receiver CPU")
    brackets = b'{"resourceSpans": ' + b"[" * 100_000 + b"]" * 100_000 + b"}"
    for label, body in (("kvlist 300 deep", deep_kvlist_json(300)), ("'[' 100,000 deep", brackets)):
        status = _post(served.url, body, {"Content-Type": "application/json"})
        lines.append(f"JSON {label}: {status}")
    return lines


def gzip_layered() -> bytes:
    """A few KB that inflate to 2 MB of empty gzip members (``Content-Encoding: gzip, gzip``)."""
    return gzip.compress(EMPTY_GZIP_MEMBER * (2 * MIB // 20), 9)


def held_bodies(served: Served) -> list[str]:
    before = served.rss_mib("VmRSS")
    size = 19 * MIB
    sockets = []
    for _ in range(30):
        sock = socket.create_connection(("127.0.0.1", served.port), timeout=120)
        sock.sendall(raw_headers(size, served.port))
        try:
            sock.sendall(b"\0" * (size - 1))
        except OSError:
            pass
        sockets.append(sock)
    status, seconds = _small_batch(served.url, 0)
    peak = served.rss_mib("VmHWM")
    started = time.perf_counter()
    closed = threading.Event()

    def drain() -> None:
        for sock in sockets:
            answer(sock, timeout=60)
        closed.set()

    threading.Thread(target=drain, daemon=True).start()
    held = "closed" if closed.wait(90) else "still open after 90 s"
    for sock in sockets:
        sock.close()
    return [
        f"30 connections holding 19 MiB bodies: RSS {before:.0f} -> {peak:.0f} MiB peak; "
        f"another client's batch {status} in {seconds:.2f} s; held connections {held} "
        f"({time.perf_counter() - started:.0f} s)"
    ]


def slow_headers(served: Served) -> list[str]:
    slow = [socket.create_connection(("127.0.0.1", served.port), timeout=120) for _ in range(8)]
    header = raw_headers(10, served.port)
    started = time.perf_counter()
    open_ = set(range(len(slow)))
    for position in range(min(len(header), 40)):
        for k in list(open_):
            try:
                slow[k].sendall(header[position : position + 1])
            except OSError:
                open_.discard(k)
        if not open_:
            break
        time.sleep(1.0)
    for sock in slow:
        sock.close()
    state = "all closed" if not open_ else f"{len(open_)} of 8 still open"
    return [
        f"8 connections at 1 byte/s of headers: {state} after {time.perf_counter() - started:.0f} s"
    ]


def _stored_indexes(project: str) -> set[int]:
    from trackio.sqlite_storage import SQLiteStorage

    try:
        traces = SQLiteStorage.get_traces(project, "r")
    except Exception:  # noqa: BLE001 - not created yet
        return set()
    return {t["metadata"].get("sample_index") for t in traces}


def huge_span(served: Served) -> list[str]:
    """One span with 1,000,000 attributes (protobuf)."""
    return _huge(served, huge_span_request(1_000_000), PROTOBUF, 99, "1,000,000 attributes")


def huge_json_span(served: Served) -> list[str]:
    """One span with 400,000 attributes (OTLP JSON: the most a 20 MB body holds)."""
    body = huge_json_span_request(400_000)
    headers = {"Content-Type": "application/json"}
    return _huge(served, body, headers, 98, "400,000 attributes in JSON")


def _huge(
    served: Served, body: bytes, headers: dict[str, str], index: int, label: str
) -> list[str]:
    """The huge span, then another client's batch: how long until that batch is *stored* (the
    drain logs the spool in order), the receiver's CPU and peak RSS once both are stored."""
    cpu = served.cpu_seconds()
    status_huge = _post(served.url, body, headers)
    started = time.perf_counter()
    status, _ = _small_batch(served.url, 1)
    stored_after = None
    deadline = started + 600
    while time.perf_counter() < deadline:
        stored = _stored_indexes(served.project)
        if stored_after is None and 1 in stored:
            stored_after = time.perf_counter() - started
        if {1, index} <= stored:
            break
        time.sleep(0.2)
    peak = served.rss_mib("VmHWM")
    delay = f"{stored_after:.1f} s" if stored_after is not None else "not within 600 s"
    return [
        f"one span with {label} ({len(body) / 1e6:.1f} MB): {status_huge}, "
        f"{served.cpu_seconds() - cpu:.1f} s receiver CPU, peak RSS {peak:.0f} MiB; another "
        f"client's batch {status}, stored {delay} after it was sent"
    ]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--source", type=Path, default=HERE.parent, help="checkout to run")
    parser.add_argument("--only", default=None, help="one attack: bombs, held_bodies, ...")
    args = parser.parse_args()
    lines: list[str] = []
    attacks = (bombs, held_bodies, slow_headers, huge_span, huge_json_span)
    for attack in (a for a in attacks if args.only in (None, a.__name__)):
        served = Served(f"bench-hostile-{attack.__name__}", source=args.source)
        try:
            found = attack(served)
        finally:
            served.stop()
        for line in found:
            print("  " + line, flush=True)
        lines.extend(found)
    w.write_result(
        "12. hostile clients (receiver CPU, peak RSS)", "; ".join(lines), "(recorded)", None
    )
    print("hostile clients: " + " | ".join(lines))


if __name__ == "__main__":
    main()
    os._exit(0)
