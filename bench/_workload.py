"""The benchmark workload shared by the bench scripts: RL rollout samples with GenAI spans.

Importing this module points ``TRACKIO_DIR`` at a fresh temp folder (before trackio is imported),
so no benchmark writes to ``~/.cache``. One sample is 5 spans, like an agentic rollout:

    rollout (step, sample_index, rollout_n, validate)
    ├── chat         gen_ai.* model, usage, input/output messages (asks for a tool call)
    ├── execute_tool gen_ai.tool.* arguments and result
    ├── chat         the tool result in, the final answer out
    └── reward       reward.score
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

TRACKIO_DIR = tempfile.mkdtemp(prefix="otel-trackio-bench-")
os.environ["TRACKIO_DIR"] = TRACKIO_DIR
os.environ.setdefault("TRACKIO_DISABLE_TELEMETRY", "1")

SPANS_PER_SAMPLE = 5
SAMPLES_PER_STEP = 100
MODEL = "Qwen/Qwen2.5-7B-Instruct"
SYSTEM = "You are a careful math assistant. Use the calculator tool for arithmetic."


def sample_payload(i: int) -> dict[str, Any]:
    """The per-sample contents (different text per sample, like real rollouts)."""
    a, b = 17 + i % 89, 3 + i % 31
    question = f"Problem {i}: a train leaves at {a} km/h for {b} hours. How far does it go?"
    call = {
        "type": "tool_call",
        "id": f"call_{i}",
        "name": "calculator",
        "arguments": {"expr": f"{a}*{b}"},
    }
    answer = f"The train travels {a * b} km."
    return {
        "question": question,
        "answer": answer,
        "expr": f"{a}*{b}",
        "result": str(a * b),
        "in1": json.dumps(
            [
                {"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
                {"role": "user", "parts": [{"type": "text", "content": question}]},
            ]
        ),
        "out1": json.dumps([{"role": "assistant", "parts": [call], "finish_reason": "tool_call"}]),
        "in2": json.dumps(
            [
                {"role": "system", "parts": [{"type": "text", "content": SYSTEM}]},
                {"role": "user", "parts": [{"type": "text", "content": question}]},
                {"role": "assistant", "parts": [call]},
                {
                    "role": "tool",
                    "parts": [{"type": "tool_call_response", "id": f"call_{i}", "response": a * b}],
                },
            ]
        ),
        "out2": json.dumps(
            [
                {
                    "role": "assistant",
                    "parts": [{"type": "text", "content": answer}],
                    "finish_reason": "stop",
                }
            ]
        ),
    }


def chat_attributes(i: int, payload: dict[str, Any], turn: int) -> dict[str, Any]:
    """GenAI semantic-convention attributes of one model call."""
    return {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "vllm",
        "gen_ai.request.model": MODEL,
        "gen_ai.response.model": MODEL,
        "gen_ai.usage.input_tokens": 60 + turn * 40 + i % 7,
        "gen_ai.usage.output_tokens": 20 + i % 13,
        "gen_ai.input.messages": payload["in1" if turn == 1 else "in2"],
        "gen_ai.output.messages": payload["out1" if turn == 1 else "out2"],
    }


def emit_sample(tracer: Any, i: int, step: int, model_latency: float = 0.0) -> None:
    """Emit one 5-span rollout sample with the OTel API (what the rollout thread does).

    ``model_latency`` seconds are slept inside each model call, as a rollout waits for its
    inference server (the GIL is free meanwhile); 0 makes a pure span storm.
    """
    payload = sample_payload(i)
    with tracer.start_as_current_span(
        "rollout",
        attributes={"step": step, "sample_index": i, "rollout_n": i % 4, "validate": False},
    ):
        with tracer.start_as_current_span(
            "chat " + MODEL, attributes=chat_attributes(i, payload, 1)
        ):
            if model_latency:
                time.sleep(model_latency)
        with tracer.start_as_current_span(
            "execute_tool calculator",
            attributes={
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "calculator",
                "gen_ai.tool.call.id": f"call_{i}",
                "gen_ai.tool.call.arguments": json.dumps({"expr": payload["expr"]}),
                "gen_ai.tool.call.result": payload["result"],
            },
        ):
            pass
        with tracer.start_as_current_span(
            "chat " + MODEL, attributes=chat_attributes(i, payload, 2)
        ):
            if model_latency:
                time.sleep(model_latency)
        with tracer.start_as_current_span("reward", attributes={"reward.score": float(i % 2)}):
            pass


def emit_workload(tracer: Any, samples: int, first: int = 0, model_latency: float = 0.0) -> None:
    """``samples`` samples, ``SAMPLES_PER_STEP`` per training step."""
    for i in range(first, first + samples):
        emit_sample(tracer, i, i // SAMPLES_PER_STEP, model_latency)


def collect_spans(samples: int) -> list[Any]:
    """The finished SDK spans of the workload (built untimed, for end-to-end comparisons)."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    emit_workload(provider.get_tracer("bench"), samples)
    spans = list(memory.get_finished_spans())
    provider.shutdown()
    return spans


def chunks(items: list[Any], size: int = 512) -> Iterator[list[Any]]:
    """Batches like a BatchSpanProcessor hands them to an exporter (512 by default)."""
    for start in range(0, len(items), size):
        yield items[start : start + size]


class NoOpSpanExporter:
    """A SpanExporter that drops everything: the baseline for 'tracing is on, export is free'."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans: Any) -> Any:
        from opentelemetry.sdk.trace.export import SpanExportResult

        self.spans += len(spans)
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


@contextmanager
def quiet_stdout() -> Iterator[None]:
    """Hide Trackio's prints (``* Trackio project initialized ...``) from the figures."""
    saved = sys.stdout
    sys.stdout = open(os.devnull, "w")
    try:
        yield
    finally:
        sys.stdout.close()
        sys.stdout = saved


def timed(fn: Callable[[], Any]) -> float:
    """Wall seconds of ``fn()``."""
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def count_traces(project: str, run: str) -> int:
    """How many Traces are stored for a run (read back from Trackio's storage)."""
    from trackio.sqlite_storage import SQLiteStorage

    return len(SQLiteStorage.get_traces(project, run))


def proc_status_kb(field: str) -> int:
    """A field of this process's ``/proc/self/status`` in kB (``VmRSS``, ``VmHWM``); 0 if absent."""
    with open("/proc/self/status", encoding="ascii") as fh:
        for line in fh:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    return 0


def write_result(figure: str, measured: str, target: str, met: bool | None) -> None:
    """Hand a figure to bench/run_all.py (when it set ``BENCH_RESULTS``); stdout stays human."""
    path = os.environ.get("BENCH_RESULTS")
    if not path:
        return
    row = {"figure": figure, "measured": measured, "target": target, "met": met}
    with open(path, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(row) + "\n")


class Receiver:
    """``otel-trackio serve`` in its own process (own GIL), on a free loopback port."""

    def __init__(self, project: str, *args: str, name: str = "r") -> None:
        import socket
        import subprocess

        with socket.socket() as sock, socket.socket() as other:
            sock.bind(("127.0.0.1", 0))
            other.bind(("127.0.0.1", 0))
            self.port = sock.getsockname()[1]
            self.grpc_port = other.getsockname()[1]
        self.project = project
        self.url = f"http://127.0.0.1:{self.port}"
        self.grpc_url = f"http://127.0.0.1:{self.grpc_port}"
        become_subreaper()
        self.process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "otel_trackio",
                "serve",
                "--project",
                project,
                "--name",
                name,
                "--port",
                str(self.port),
                "--grpc-port",
                str(self.grpc_port),
                "--summary-seconds",
                "0",
                *args,
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        self.output: list[str] = []
        import threading

        self.stored = threading.Event()  # its "stopped" line: everything stored, runs finished

        def read() -> None:
            for line in self.process.stdout or ():
                self.output.append(line)
                if line.startswith("otel-trackio serve: stopped;"):
                    self.stored.set()
            self.stored.set()

        threading.Thread(target=read, daemon=True).start()
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if all(_listening(port) for port in (self.port, self.grpc_port)):
                return
            time.sleep(0.1)
        raise RuntimeError("otel-trackio serve did not start")

    def stop_until_stored(self, timeout: float = 1200) -> None:
        """SIGTERM, and wait for its "stopped" line: it has drained its spool (up to its
        --drain-seconds), stored everything and finished its runs; its process may still be
        ending (as Trackio alone is timed up to ``run.finish()``, not its interpreter's exit)."""
        import signal

        self._children = children(self.process.pid)  # its store process, reaped by stop()
        self.process.send_signal(signal.SIGTERM)
        if not self.stored.wait(timeout):
            raise RuntimeError("otel-trackio serve did not stop")

    def stop(self, timeout: float = 1200) -> None:
        """:meth:`stop_until_stored`, then wait for its process, and its store's, to end (their
        CPU time then counts in this process's children's)."""
        if self.process.poll() is None and not self.stored.is_set():
            self.stop_until_stored(timeout)
        self.process.wait(timeout=timeout)
        reap(getattr(self, "_children", ()))


def reap(orphans: Iterable[int], timeout: float = 30) -> None:
    """Wait for these grandchildren, reparented to this process (see :func:`become_subreaper`)
    when their parent ended first, to end, and reap them: their CPU time then counts in this
    process's children's."""
    deadline = time.monotonic() + timeout
    for child in orphans:
        while time.monotonic() < deadline:
            try:
                if os.waitpid(child, os.WNOHANG)[0]:
                    break
            except ChildProcessError:
                break  # not this process's to reap (no subreaper): it ended elsewhere
            time.sleep(0.01)


def children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux)."""
    found: list[int] = []
    try:
        for task in os.listdir(f"/proc/{pid}/task"):
            with open(f"/proc/{pid}/task/{task}/children") as handle:
                found.extend(int(child) for child in handle.read().split())
    except OSError:
        pass
    return found


def become_subreaper() -> None:
    """Orphaned descendants (a receiver's store process ending after it) are reparented to this
    process instead of init, so it reaps them and their CPU time counts (Linux; else nothing)."""
    import ctypes

    try:
        ctypes.CDLL(None, use_errno=True).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
    except (OSError, AttributeError):
        pass


def _listening(port: int) -> bool:
    import socket

    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def cleanup() -> None:
    """Remove the temp Trackio folder."""
    shutil.rmtree(TRACKIO_DIR, ignore_errors=True)
