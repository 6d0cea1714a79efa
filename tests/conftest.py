"""Shared test setup: one temp TRACKIO_DIR for the whole session, set before trackio is imported.

Trackio reads ``TRACKIO_DIR`` once at import time, so it is set here at module import. Tests keep
apart by using unique project names (the ``project`` fixture).
"""

from __future__ import annotations

import os
import sys
import tempfile
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

# A child process of the test session that imports a test module (and so this one) keeps the
# TRACKIO_DIR it was given: otel-trackio reads the variable when an exporter is built, not when
# Trackio happens to be imported.
_SESSION = "OTEL_TRACKIO_TEST_SESSION"
if os.environ.get(_SESSION) and os.environ.get("TRACKIO_DIR"):
    _TRACKIO_DIR = os.environ["TRACKIO_DIR"]
else:
    _TRACKIO_DIR = tempfile.mkdtemp(prefix="otel-trackio-tests-")
    os.environ["TRACKIO_DIR"] = _TRACKIO_DIR
    os.environ[_SESSION] = "1"
os.environ.setdefault("TRACKIO_DISABLE_TELEMETRY", "1")
# The suite runs what ships: exporters offload by default. Tests of the in-process engine itself ask
# for it by name (the ``in_process`` fixture).
os.environ.pop("OTEL_EXPORTER_TRACKIO_OFFLOAD", None)

#: the real TRL on CPU torch, in an environment of its own (`make test-packages` makes it)
TRL_PYTHON = Path(__file__).resolve().parents[1] / ".venv" / "trl-env" / "bin" / "python"

import pytest  # noqa: E402
from trackio import context_vars  # noqa: E402
from trackio.sqlite_storage import SQLiteStorage  # noqa: E402

from otel_trackio import _settings as settings  # noqa: E402
from otel_trackio._engine import steps as _steps  # noqa: E402

# The fault suite's tally (inputs tried / crashes / samples lost), printed after the run.
pytest_plugins = ["fault_tally"]


@pytest.fixture
def trackio_dir() -> str:
    """The session's Trackio folder."""
    return _TRACKIO_DIR


@pytest.fixture(autouse=True)
def _no_writer_outlives_its_test(monkeypatch):
    """The offload writer of an exporter a test left open is shut down with the test (else it
    lives, polling its spool, as long as the session: the test process is its parent)."""
    from otel_trackio._offload.client import OffloadClient

    made: list[OffloadClient] = []
    build = OffloadClient.__init__

    def init(self, *args, **kwargs):
        build(self, *args, **kwargs)
        made.append(self)

    monkeypatch.setattr(OffloadClient, "__init__", init)
    yield
    for client in made:
        if not client.closed:
            client.shutdown(5.0)


@pytest.fixture
def in_process(monkeypatch):
    """The in-process engine for every exporter the test builds (``offload=False`` through its
    environment variable): for tests of the engine's own behaviour in this process. Every other
    test runs the shipped default, offload."""
    monkeypatch.setenv("OTEL_EXPORTER_TRACKIO_OFFLOAD", "false")
    return "in-process"


@pytest.fixture
def project() -> str:
    """A Trackio project name no other test uses."""
    return f"test-{uuid.uuid4().hex[:12]}"


@pytest.fixture(autouse=True)
def _isolate_global_state():
    """No test inherits an active Trackio run or a latest step from another."""
    token = context_vars.current_run.set(None)
    _steps.reset_steps()
    settings._active = None
    yield
    context_vars.current_run.reset(token)
    _steps.reset_steps()
    settings._active = None


@pytest.fixture
def tracer_provider():
    """An SDK ``TracerProvider`` (not the global one), shut down at the end of the test. Add the
    processor under test: ``tracer_provider.add_span_processor(SimpleSpanProcessor(exporter))``."""
    from opentelemetry.sdk.trace import TracerProvider

    provider = TracerProvider()
    yield provider
    provider.shutdown()


@pytest.fixture
def start_receiver(project):
    """Start receivers on free ports; every one is stopped at the end of the test."""
    from otel_trackio.receiver import OTLPReceiver

    started: list[OTLPReceiver] = []

    def start(**kwargs) -> OTLPReceiver:
        kwargs.setdefault("summary_interval", 0)
        receiver = OTLPReceiver(
            project, kwargs.pop("name", "r"), port=0, grpc_port=0, **kwargs
        ).start()
        started.append(receiver)
        return receiver

    yield start
    for receiver in started:
        receiver.stop()


def wait_until(condition, what: str = "the condition", timeout: float = 90.0) -> None:
    """Wait until ``condition()`` is true; fail after ``timeout`` seconds (a bound for a busy
    machine: a test waits only as long as the state takes). Tests wait for states, never for
    fixed sleeps; this is the suite's one waiting helper."""
    import time

    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out after {timeout:.0f} s waiting for {what}"
        time.sleep(0.05)


def project_db_rows(project: str, sql: str, params: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The rows of one SQL query on a project's Trackio database, read raw (every run, whatever
    its name: ``get_traces`` shows one of several runs sharing a name)."""
    import sqlite3

    with sqlite3.connect(SQLiteStorage.get_project_db_path(project)) as db:
        return db.execute(sql, params).fetchall()


# Trackio's own warning of the write that storage_write_failing makes fail.
TRACKIO_WRITE_WARNING = pytest.mark.filterwarnings("ignore:trackio failed to flush:UserWarning")


@contextmanager
def storage_write_failing(project: str) -> Iterator[None]:
    """Trackio's storage refuses writes: its project lock file cannot be opened (a directory
    stands in its place), so every ``bulk_log`` fails at once, as a held lock does after 10 s."""
    lock = Path(SQLiteStorage._get_process_lock(project).lockfile_path)
    lock.unlink(missing_ok=True)
    lock.mkdir()
    try:
        yield
    finally:
        lock.rmdir()


@contextmanager
def storage_lock_held(project: str) -> Iterator[None]:
    """Another process holds the project's storage lock: a write waits for it (Trackio gives up
    after 10 s), so nothing is stored meanwhile, whatever the machine's speed."""
    import fcntl

    with open(SQLiteStorage._get_process_lock(project).lockfile_path, "w") as lock:
        fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(lock.fileno(), fcntl.LOCK_UN)


def trackio_dir_path() -> Path:
    """The session's Trackio folder."""
    return Path(_TRACKIO_DIR)


def _sample_order(index: Any) -> tuple[int, Any]:
    return (0, index) if isinstance(index, int) else (1, str(index))


def read_traces(project: str, run: str | None = None) -> list[dict]:
    """Every Trace stored for a project (of one run, or of all its runs), oldest first."""
    runs = [run] if run is not None else SQLiteStorage.get_runs(project)
    traces = [t for name in runs for t in SQLiteStorage.get_traces(project, name)]
    # Two log calls stored in one write share a timestamp and an index (each its list's first):
    # then sample order, which is what those calls logged.
    return sorted(
        traces,
        key=lambda t: (
            t["step"],
            t["timestamp"],
            t["index"],
            _sample_order(t["metadata"].get("sample_index")),
        ),
    )


def trace_usage(trace: dict) -> dict[str, int]:
    """A Trace's token counts, summed over its spans (the Tokens chip)."""
    totals: dict[str, int] = {}
    for span in trace["spans"]:
        for key, value in (span.get("usage") or {}).items():
            totals[key] = totals.get(key, 0) + value
    return totals


def stored(trace: dict) -> list[dict[str, Any]]:
    """A Trace's conversation, checked to hold only what was sent: no text written into a
    tool-call turn (people replay these messages as training data)."""
    for message in trace["messages"]:
        content = message.get("content")
        assert not (isinstance(content, str) and content.startswith("[tool call] ")), message
    return trace["messages"]


def root_span_id(trace: dict) -> str | None:
    """The id of the sample root a Trace shows: its root span in the tree, or the
    ``root_span_id`` of a part logged apart from its root."""
    if "root_span_id" in trace["metadata"]:
        return trace["metadata"]["root_span_id"]
    roots = [s for s in trace["spans"] if s["parent_id"] is None]
    return roots[0]["id"] if len(roots) == 1 else None


def trace_id(trace: dict) -> str:
    """The OTel trace id of a Trace (on the spans its tree starts at)."""
    (found,) = {s["metadata"]["otel.trace_id"] for s in trace["spans"] if s["parent_id"] is None}
    return found


def read_logs(project: str, run: str | None = None) -> list[dict]:
    """Every metrics log row stored for a project (and run)."""
    return SQLiteStorage.get_logs(project, run)


SERVE = [sys.executable, "-m", "otel_trackio", "serve", "--summary-seconds", "0"]
SERVE += ["--port", "0", "--grpc-port", "0"]
"""``otel-trackio serve`` on free ports (both protocols), quiet; add ``--project`` and the rest."""


def wait_for_file(path: Path, process: Any, seconds: float = 120.0) -> None:
    """Wait until ``process`` (a ``Popen`` signalling through files) has made ``path``; fail
    if it exits or takes longer than ``seconds``."""
    import time

    deadline = time.monotonic() + seconds
    while not path.exists():
        assert process.poll() is None, process.communicate()
        assert time.monotonic() < deadline, f"{path} not made in {seconds:.0f} s"
        time.sleep(0.05)


def _python_env(trackio_dir: str, env: dict[str, str]) -> dict[str, str]:
    return {**os.environ, "TRACKIO_DIR": trackio_dir, "TRACKIO_DISABLE_TELEMETRY": "1", **env}


def run_python(script: str, trackio_dir: str, **env: str):
    """Run ``python -c script`` from the repository with ``TRACKIO_DIR`` (and ``env``); the
    completed process, its output captured as text."""
    import subprocess
    import sys

    return subprocess.run(
        [sys.executable, "-c", script],
        env=_python_env(trackio_dir, env),
        cwd=Path(__file__).resolve().parent.parent,
        capture_output=True,
        text=True,
        timeout=120,
    )


def start_python(script: str, trackio_dir: str, *args: str, **env: str):
    """Start ``python -c script args`` from the repository with ``TRACKIO_DIR`` (and ``env``),
    its output piped as text; the running process (``communicate()`` it)."""
    import subprocess
    import sys

    return subprocess.Popen(
        [sys.executable, "-c", script, *args],
        env=_python_env(trackio_dir, env),
        cwd=Path(__file__).resolve().parent.parent,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


# -- spans of whole samples, sent as clients send them ------------------------------------------


def memory_tracer(resource: Any = None) -> tuple[Any, Any]:
    """A tracer of the real SDK whose finished spans are kept in memory: (tracer, its
    ``InMemorySpanExporter``)."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=resource or Resource.create({}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    return provider.get_tracer("rollout"), memory


def sample_spans(step: int, indexes: Any, *, resource: Any = None, children: int = 1) -> list[Any]:
    """Finished SDK spans of whole samples (a root and ``children`` model calls each)."""
    tracer, memory = memory_tracer(resource)
    for index in indexes:
        with tracer.start_as_current_span(
            "rollout", attributes={"step": step, "sample_index": index}
        ):
            for _ in range(children):
                with tracer.start_as_current_span("generate"):
                    pass
    return list(memory.get_finished_spans())


def send_over_http(url: str, spans: Any, timeout: float = 20.0) -> bool:
    """Export with the official OTLP/HTTP exporter (it retries 429/503); True = acknowledged."""
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter

    exporter = OTLPSpanExporter(endpoint=url + "/v1/traces", timeout=timeout)
    try:
        return exporter.export(spans).name == "SUCCESS"
    finally:
        exporter.shutdown()


# -- the JS clients -------------------------------------------------------------------------------

JS = Path(__file__).resolve().parent / "js"
"""The JS clients' folder (the AI SDK, the OTel JS SDK), installed by :func:`npm_ci`."""


def npm_ci() -> None:
    """``npm ci`` from the committed lockfile, unless node_modules already holds that lockfile's
    install (a stamp with the lockfile's hash)."""
    import hashlib
    import shutil
    import subprocess

    lock = (JS / "package-lock.json").read_bytes()
    stamp = JS / "node_modules" / ".otel-trackio-lock-sha256"
    digest = hashlib.sha256(lock).hexdigest()
    if stamp.is_file() and stamp.read_text() == digest:
        return
    npm = shutil.which("npm")
    assert npm is not None, "node is installed but npm is not"
    result = subprocess.run(
        [npm, "ci", "--no-audit", "--no-fund", "--loglevel=error"],
        cwd=JS,
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    stamp.write_text(digest)


class OffloadWithLogEvents:
    """An offloading span exporter on ``tracer_provider`` with a ``TrackioLogExporter`` feeding
    its writer, as a process sending GenAI log events runs them: ``tracer`` and ``logger`` to
    emit with, :meth:`send_log_events` to export the events emitted so far (what the log
    processor does on its schedule)."""

    def __init__(self, project: str, name: str, tracer_provider: Any) -> None:
        from opentelemetry.sdk._logs import LoggerProvider
        from opentelemetry.sdk._logs.export import (
            InMemoryLogRecordExporter,
            SimpleLogRecordProcessor,
        )
        from opentelemetry.sdk.trace.export import SimpleSpanProcessor

        from otel_trackio import TrackioLogExporter, TrackioSpanExporter

        self.spans = TrackioSpanExporter(project, name, offload=True)
        self.logs = TrackioLogExporter(self.spans)  # the writer holds samples for their events
        tracer_provider.add_span_processor(SimpleSpanProcessor(self.spans))
        self.tracer = tracer_provider.get_tracer("t")
        self._recorded = InMemoryLogRecordExporter()
        logger_provider = LoggerProvider()
        logger_provider.add_log_record_processor(SimpleLogRecordProcessor(self._recorded))
        self.logger = logger_provider.get_logger("genai")

    def send_log_events(self) -> None:
        self.logs.export(self._recorded.get_finished_logs())
        self._recorded.clear()


def run_node_script(node: str, script: str, plan: dict[str, Any]) -> Any:
    """``node tests/js/<script>`` reading ``plan`` as JSON on stdin, without the OTel variables of
    this environment; the completed process (its output as text)."""
    import json
    import os
    import subprocess

    return subprocess.run(
        [node, str(JS / script)],
        input=json.dumps(plan),
        env={k: v for k, v in os.environ.items() if not k.startswith("OTEL_")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
