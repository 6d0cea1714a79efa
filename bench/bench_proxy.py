"""Figure 17: what ``otel-trackio serve --upstream`` adds to a model call.

An upstream on loopback answers a small chat completion at once (and a stream of three events,
5 ms apart); ``otel-trackio serve --upstream`` runs as a process in front of it. In one run:

- **added latency**: the same small non-streamed call made direct and through the proxy,
  alternated call by call (``--calls`` each, one keep-alive client each); the medians and 99th
  percentiles, and their differences;
- **time to first chunk**: the same for a stream's first event;
- **throughput**: ``--callers`` concurrent callers through the proxy for ``--seconds``: calls per
  second, and the receiver's CPU per call (its process's user + system time, from /proc).

Targets: added median at most 1 ms, added p99 at most 5 ms, first chunk at most 1 ms later.
The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import httpx

ANSWER = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "model": "m",
    "choices": [
        {"index": 0, "message": {"role": "assistant", "content": "4"}, "finish_reason": "stop"}
    ],
    "usage": {"prompt_tokens": 11, "completion_tokens": 1, "total_tokens": 12},
}
REQUEST = {"model": "m", "messages": [{"role": "user", "content": "what is 2+2?"}]}


def upstream_app() -> object:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import Response, StreamingResponse
    from starlette.routing import Route

    body = json.dumps(ANSWER).encode()

    async def chat(request: Request) -> Response:
        asked = json.loads(await request.body())
        if not asked.get("stream"):
            return Response(body, media_type="application/json")

        async def events():  # type: ignore[no-untyped-def]
            for text in ("2", "+2", "=4"):
                delta = {"index": 0, "delta": {"content": text}, "finish_reason": None}
                yield f"data: {json.dumps({'id': 'c', 'model': 'm', 'choices': [delta]})}\n\n"
                await asyncio.sleep(0.005)
            yield "data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_upstream(port: int) -> threading.Thread:
    import uvicorn

    config = uvicorn.Config(upstream_app(), host="127.0.0.1", port=port, log_level="warning")
    thread = threading.Thread(target=uvicorn.Server(config).run, daemon=True)
    thread.start()
    return thread


def wait_for(url: str) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        try:
            httpx.post(url, json=REQUEST, timeout=1)
            return
        except httpx.HTTPError:
            time.sleep(0.1)
    raise RuntimeError(f"{url} never answered")


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(share * len(ordered)))]


def latency(direct: str, proxied: str, calls: int, stream: bool) -> tuple[list[float], list[float]]:
    """Per-call seconds (to the whole answer, or to a stream's first chunk), alternated."""
    times: tuple[list[float], list[float]] = ([], [])
    body = {**REQUEST, "stream": True} if stream else REQUEST
    with httpx.Client(timeout=30) as a, httpx.Client(timeout=30) as b:
        for _ in range(calls):
            for arm, (client, url) in enumerate(((a, direct), (b, proxied))):
                started = time.perf_counter()
                if stream:
                    with client.stream("POST", url, json=body) as response:
                        chunks = response.iter_raw()
                        next(chunks)
                        times[arm].append(time.perf_counter() - started)
                        for _ in chunks:
                            pass
                else:
                    client.post(url, json=body).raise_for_status()
                    times[arm].append(time.perf_counter() - started)
    return times


def throughput(proxy: str, callers: int, seconds: float) -> int:
    done = [0] * callers
    stop = time.monotonic() + seconds

    def caller(index: int) -> None:
        with httpx.Client(timeout=30) as client:
            while time.monotonic() < stop:
                url = f"{proxy}/rollouts/0/{index}/v1/chat/completions"
                client.post(url, json=REQUEST).raise_for_status()
                done[index] += 1

    threads = [threading.Thread(target=caller, args=(i,)) for i in range(callers)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return sum(done)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=2000)
    parser.add_argument("--callers", type=int, default=64)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    upstream_port, proxy_port = free_port(), free_port()
    start_upstream(upstream_port)
    upstream = f"http://127.0.0.1:{upstream_port}/v1"
    with tempfile.TemporaryDirectory() as folder:
        env = {**os.environ, "TRACKIO_DIR": folder, "TRACKIO_DISABLE_TELEMETRY": "1"}
        serve = subprocess.Popen(
            [sys.executable, "-m", "otel_trackio", "serve", "--project", "bench-proxy",
             "--name", "r", "--port", str(proxy_port), "--grpc-port", "off",
             "--summary-seconds", "0", "--upstream", upstream],
            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            proxy = f"http://127.0.0.1:{proxy_port}"
            direct = f"{upstream}/chat/completions"
            proxied = f"{proxy}/rollouts/0/0/v1/chat/completions"
            wait_for(direct)
            wait_for(proxied)
            whole = latency(direct, proxied, args.calls, stream=False)
            first = latency(direct, proxied, max(1, args.calls // 4), stream=True)
            cpu_before = cpu_seconds(serve.pid)
            started = time.monotonic()
            calls = throughput(proxy, args.callers, args.seconds)
            elapsed = time.monotonic() - started
            cpu = cpu_seconds(serve.pid) - cpu_before
        finally:
            serve.terminate()
            serve.wait(timeout=120)
    ms = 1000.0
    added = statistics.median(whole[1]) - statistics.median(whole[0])
    added_p99 = percentile(whole[1], 0.99) - percentile(whole[0], 0.99)
    added_first = statistics.median(first[1]) - statistics.median(first[0])
    print(
        f"direct median {statistics.median(whole[0]) * ms:.2f} ms, p99 "
        f"{percentile(whole[0], 0.99) * ms:.2f} ms; proxied median "
        f"{statistics.median(whole[1]) * ms:.2f} ms, p99 {percentile(whole[1], 0.99) * ms:.2f} ms"
    )
    print(
        f"figure 17: added latency median {added * ms:+.2f} ms (target <= 1), p99 "
        f"{added_p99 * ms:+.2f} ms (target <= 5); first chunk {added_first * ms:+.2f} ms "
        f"(target <= 1); {args.callers} callers: {calls / elapsed:.0f} calls/s, "
        f"{cpu / max(1, calls) * 1e3:.2f} ms CPU per call"
    )


if __name__ == "__main__":
    main()
