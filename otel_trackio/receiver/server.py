"""``OTLPReceiver``: the router, the app and a uvicorn server, in the foreground or a thread."""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import ipaddress
import logging
import os
import signal
import socket
import threading
import time
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

import uvicorn

from otel_trackio._engine.report import server_address
from otel_trackio._settings import TrackioSettings
from otel_trackio.receiver._body import BodyBudget
from otel_trackio.receiver._grpc import GrpcListener
from otel_trackio.receiver._limits import DEFAULT_LIMITS, ReceiverLimits
from otel_trackio.receiver._protocol import guarded_protocol
from otel_trackio.receiver._routing import Router
from otel_trackio.receiver._summary import Summary, rejected, report_runs, troubles
from otel_trackio.receiver.app import create_app
from otel_trackio.receiver.proxy import ModelProxy

PROXY_TTL_SHARE = 0.8
"""A proxied sample idle for this share of the sample TTL is ended (partial): its calls' spans,
waiting for their root, would be logged without it at the TTL."""

_logger = logging.getLogger("otel_trackio.receiver")


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    return bool(infos) and all(
        ipaddress.ip_address(str(info[4][0]).split("%", 1)[0]).is_loopback for info in infos
    )


class OTLPReceiver:
    """An OTLP server (HTTP and gRPC) logging everything it receives into Trackio.

    Requests are answered as soon as their data is in the receiver's spool; a drain thread logs
    it to Trackio. ``start()`` runs it on a background thread (``port=0`` picks a free port; see
    ``url``); ``serve_forever()`` runs it in the calling thread until SIGINT/SIGTERM. Stopping
    either way stops taking data, drains the spool for up to ``drain_seconds``, logs the open
    samples as partial and finishes the runs it started; what was not drained stays in the spool
    for the next start. Also a context manager (``with OTLPReceiver(...).start() as r:``).

    Args:
        project, name: the server's Trackio project and run; a request whose resource carries
            ``trackio.project`` / ``trackio.run`` goes to that project/run instead.
        host, port: where to listen for OTLP/HTTP (``port=None``: not at all). A non-loopback
            host needs a ``token``.
        grpc_port: where to listen for OTLP/gRPC on the same host (``otel-trackio serve``: 4317;
            here None, not at all, unless asked; 0: a free port, see ``grpc_port`` once built).
            Not in a process that then calls ``ray.init()``: Ray's node does not start beside a
            running gRPC server of the same process (run ``otel-trackio serve`` apart instead).
        token: required ``Authorization: Bearer <token>`` of every request.
        limits: what one request may cost (:class:`~otel_trackio.receiver.ReceiverLimits`:
            body sizes, body bytes held across connections, encoding layers, gzip members,
            JSON depth, header and body timeouts, routes).
        max_body_bytes, max_routes: shorthands for those two ``limits``.
        summary_interval: seconds between summary lines while data flows (0: none).
        report: where the start-up and summary lines go (default: the ``otel_trackio.receiver``
            logger at INFO).
        spool: the spool directory (default: per project and run under ``spool_dir``).
        drain_seconds: how long stopping waits for the spool to drain.
        settings: a :class:`~otel_trackio.TrackioSettings` for every route.
        upstream: an OpenAI-compatible base URL: the HTTP port then also answers model calls
            under ``/rollouts/{step}/{sample_index}/v1`` and records them
            (:mod:`otel_trackio.receiver.proxy`); needs ``port``.
        upstream_key: the key sent to the upstream (default: the caller's ``Authorization``).
        **options: settings by name (``sample_grace_seconds``, ``key``, ...); anything else is
            passed to ``trackio.init``.
    """

    def __init__(
        self,
        project: str,
        name: str | None = None,
        *,
        host: str = "127.0.0.1",
        port: int | None = 4318,
        grpc_port: int | None = None,
        token: str | None = None,
        limits: ReceiverLimits | None = None,
        max_body_bytes: int | None = None,
        summary_interval: float = 5.0,
        report: Callable[[str], None] | None = None,
        max_routes: int | None = None,
        spool: Path | str | None = None,
        drain_seconds: float = 30.0,
        settings: TrackioSettings | None = None,
        upstream: str | None = None,
        upstream_key: str | None = None,
        **options: Any,
    ) -> None:
        if not token and not is_loopback(host):
            raise ValueError(
                f"refusing to listen on non-loopback address {host!r} without a token: "
                "pass --token-file, OTEL_TRACKIO_RECEIVER_TOKEN or --token (clients send "
                "'Authorization: Bearer <token>')"
            )
        limits = limits or DEFAULT_LIMITS
        shorthands = {"max_body_bytes": max_body_bytes, "max_routes": max_routes}
        limits = dataclasses.replace(
            limits, **{k: v for k, v in shorthands.items() if v is not None}
        )
        self.limits = limits
        self.project = project
        self.name = name
        self.host = host
        self.token = token
        self.max_body_bytes = limits.max_body_bytes
        self.summary_interval = summary_interval
        self.drain_seconds = drain_seconds
        self._report = report or (lambda line: _logger.info("%s", line))
        if port is None and grpc_port is None:
            raise ValueError("the receiver needs a port: OTLP/HTTP, OTLP/gRPC or both")
        # Both ports first: a busy one is said before any run is opened.
        self._socket = _bind(host, port, "OTLP/HTTP", "--port") if port is not None else None
        if grpc_port:  # (0 picks a free one: nothing to check)
            try:
                _bind(host, grpc_port, "OTLP/gRPC", "--grpc-port").close()
            except OSError:
                if self._socket is not None:
                    self._socket.close()
                raise
        self.port: int | None = self._socket.getsockname()[1] if self._socket else None
        self._grpc: GrpcListener | None = None
        try:
            self.router = Router(
                project,
                name,
                settings=settings,
                spool=spool,
                max_routes=limits.max_routes,
                route_idle_seconds=limits.route_idle_seconds,
                **options,
            )
            budget = BodyBudget(limits.inflight_bytes)  # the bodies held, both doors together
            if grpc_port is not None:
                self._grpc = GrpcListener(
                    self.router,
                    host=host,
                    port=grpc_port,
                    token=token,
                    limits=limits,
                    budget=budget,
                )
        except BaseException:
            if self._socket is not None:
                self._socket.close()
            if getattr(self, "router", None) is not None and self._grpc is None:
                self.router.shutdown(0)
            raise
        self.grpc_port: int | None = self._grpc.port if self._grpc is not None else None
        if upstream is not None and port is None:
            raise ValueError("--upstream answers on the OTLP/HTTP port: give it one")
        self.proxy = (
            None
            if upstream is None
            else ModelProxy(
                upstream,
                self.router,
                upstream_key=upstream_key,
                token=token,
                max_body_bytes=limits.max_body_bytes,
                # ended before the spans' own TTL would log the calls apart from their root
                ttl_seconds=self.router.settings.sample_ttl_seconds * PROXY_TTL_SHARE,
            )
        )
        self.app = create_app(
            self.router,
            token=token,
            limits=limits,
            on_shutdown=self._finish,
            budget=budget,
            proxy=self.proxy,
        )
        config = uvicorn.Config(
            self.app,
            log_level="warning",
            log_config=None,  # leave the process's logging configuration alone
            access_log=False,
            lifespan="on",
            timeout_graceful_shutdown=30,
            http=guarded_protocol(limits, on_http2=self._grpc_at_the_http_port),
            h11_max_incomplete_event_size=limits.max_header_bytes,
        )
        self._server = uvicorn.Server(config)
        self._thread: threading.Thread | None = None
        self._stop_summary = threading.Event()
        self._summary_thread: threading.Thread | None = None
        self._finish_lock = threading.Lock()
        self._finished = False

    # -- public API ----------------------------------------------------------------------------

    @property
    def url(self) -> str:
        """Base URL of the OTLP/HTTP server, e.g. ``http://127.0.0.1:4318`` (append
        ``/v1/traces``); empty when HTTP is off."""
        if self.port is None:
            return ""
        return f"http://{self._host_part}:{self.port}"

    @property
    def grpc_endpoint(self) -> str:
        """The OTLP/gRPC endpoint, e.g. ``http://127.0.0.1:4317`` (what
        ``OTEL_EXPORTER_OTLP_ENDPOINT`` takes); empty when gRPC is off."""
        if self.grpc_port is None:
            return ""
        return f"http://{self._host_part}:{self.grpc_port}"

    @property
    def _host_part(self) -> str:
        return f"[{self.host}]" if ":" in self.host else self.host

    @property
    def run_name(self) -> str:
        """The server's own Trackio run name."""
        return self.router.run_name

    def start(self, timeout: float = 30.0) -> OTLPReceiver:
        """Serve on a daemon thread; return once it accepts connections."""
        if self._thread is not None:
            return self
        errors: list[BaseException] = []

        if self._grpc is not None:
            self._grpc.start()

        def run() -> None:
            try:
                asyncio.run(self._serve())
            except BaseException as exc:  # noqa: BLE001 - reported to start() / stop()
                errors.append(exc)
            finally:
                self._finish()

        self._thread = threading.Thread(target=run, name="otel-trackio-receiver", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started and self._thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        if not self._server.started:
            self.stop()
            raise RuntimeError(
                f"the OTLP receiver did not start: {errors[0] if errors else 'timeout'}"
            )
        self._on_started()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until SIGINT/SIGTERM (or ``stop()`` from another thread)."""
        main = threading.current_thread() is threading.main_thread()
        previous: dict[int, Any] = {}
        if main:
            # uvicorn re-raises the signal it caught once it is done; by then the runs are
            # finished, so let that re-raise be a no-op and return normally.
            for signum in (signal.SIGINT, signal.SIGTERM):
                previous[signum] = signal.signal(signum, lambda *_: None)
        if self._grpc is not None:
            self._grpc.start()
        self._on_started_when_ready()
        try:
            asyncio.run(self._serve())
        finally:
            self._finish()
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def stop(self, timeout: float = 60.0) -> None:
        """Stop serving, log open samples as partial, finish the runs. Idempotent."""
        self._server.should_exit = True
        thread = self._thread
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout)
        self._finish()

    def __enter__(self) -> OTLPReceiver:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # -- internals ---------------------------------------------------------------------------

    async def _serve(self) -> None:
        """uvicorn on the HTTP socket; with HTTP off, only the app's lifespan (its shutdown is
        the receiver's) until asked to stop."""
        if self._socket is not None:
            await self._server.serve(sockets=[self._socket])
            return
        config = self._server.config
        if not config.loaded:
            config.load()
        self._server.lifespan = config.lifespan_class(config)
        await self._server.startup(sockets=[])
        while not self._server.should_exit:
            await asyncio.sleep(0.05)
        await self._server.shutdown(sockets=None)

    def _grpc_at_the_http_port(self, client: str) -> None:
        """A gRPC (HTTP/2) client reached the OTLP/HTTP port: say where gRPC is, count it."""
        self.router.count_refused(0, why="gRPC sent to the HTTP port")
        where = (
            f"OTLP/gRPC is served at {self.grpc_endpoint}"
            if self.grpc_endpoint
            else "this receiver does not serve OTLP/gRPC (start it with --grpc-port)"
        )
        _logger.warning(
            "otel-trackio serve: %s sent OTLP/gRPC (HTTP/2) to the OTLP/HTTP port %s: %s; or set "
            "OTEL_EXPORTER_OTLP_PROTOCOL=http/protobuf for this port",
            client,
            self.port,
            where,
        )

    def _on_started_when_ready(self) -> None:
        def wait() -> None:
            while not self._server.started and not self._finished:
                if self._stop_summary.wait(0.02):
                    return
            if self._server.started:
                self._on_started()

        threading.Thread(target=wait, name="otel-trackio-receiver-ready", daemon=True).start()

    def _on_started(self) -> None:
        auth = ", bearer token required" if self.token else ""
        doors = [
            f"{url} ({kind})"
            for url, kind in ((self.url, "OTLP/HTTP"), (self.grpc_endpoint, "OTLP/gRPC"))
            if url
        ]
        self._report(
            f"otel-trackio serve: listening on {' and '.join(doors)} for traces, metrics and "
            f"logs{auth} -> Trackio project {self.project!r}, run {self.run_name!r}"
            + (
                " (resumed: it finishes what an earlier start left in the spool "
                f"{self.router.spool_path})"
                if self.router.resumed
                else ""
            )
            + (
                f"; model calls at {self.url}/rollouts/STEP/SAMPLE_INDEX/v1 -> "
                f"{server_address(self.proxy.upstream)}"
                if self.proxy is not None
                else ""
            )
        )
        if self.summary_interval > 0 and self._summary_thread is None:
            self._summary_thread = threading.Thread(
                target=self._summarize, name="otel-trackio-receiver-summary", daemon=True
            )
            self._summary_thread.start()

    def _summarize(self) -> None:
        summary = Summary(self.router)
        while not self._stop_summary.wait(self.summary_interval):
            try:
                line = summary.line()
            except Exception as exc:  # noqa: BLE001 - a summary must never stop the server
                _logger.debug("otel-trackio: summary failed: %r", exc)
                continue
            if line:
                self._report(line)

    def _finish(self) -> None:
        """Flush and finish every run once; called by the app's shutdown and after serving."""
        with self._finish_lock:
            if self._finished:
                return
            self._finished = True
        self._stop_summary.set()
        if self._grpc is not None:
            self._grpc.stop()  # no new calls; those in progress are answered
        drained = self.router.shutdown(self.drain_seconds)
        totals = self.router.totals()
        left = (
            ""
            if drained
            else f"; {totals.backlog_bytes} bytes left in the spool {self.router.spool_path}"
        )
        resent = troubles(totals, only=("resent", "already_stored"))
        self._report(
            f"otel-trackio serve: stopped; {totals.spans} spans, {totals.samples} samples "
            f"logged ({totals.partial} partial), {totals.lost} lost, "
            f"{totals.retried} retried, {totals.metrics} metrics logged, "
            f"{rejected(totals)}{resent}{left}"
        )
        if not totals.requests:
            grpc_door = f"{self.grpc_endpoint} (gRPC)" if self.grpc_endpoint else ""
            doors = " or ".join(door for door in (self.url, grpc_door) if door)
            self._report(
                f"otel-trackio serve: nothing arrived; point the OTLP exporters at {doors}"
            )
        self._report_runs()
        if self._socket is not None:
            try:
                self._socket.close()
            except OSError:
                pass

    def _report_runs(self) -> None:
        """The end-of-run summary of each run the receiver logged into, then how to open them."""
        report_runs(self.router, self._report)


def _bind(host: str, port: int, door: str = "", flag: str = "") -> socket.socket:
    """A listening socket on (host, port); port 0 picks a free one. A port that cannot be had
    is said with the ``door`` it is for and the ``flag`` that chooses another."""
    family = socket.AF_INET6 if ":" in host.strip("[]") else socket.AF_INET
    try:
        infos = socket.getaddrinfo(host.strip("[]"), port, type=socket.SOCK_STREAM)
        family = infos[0][0]
    except OSError:
        pass
    try:
        sock = socket.create_server((host.strip("[]"), port), family=family, backlog=2048)
    except OSError as exc:
        said = f"cannot listen on {host}:{port}"
        if door:
            said += f" for {door}"
        said += f": {os.strerror(exc.errno) if exc.errno else exc}"
        if door and exc.errno == errno.EADDRINUSE:
            said += f" (another program has it: {flag} 0 picks a free port, {flag} off turns "
            said += f"{door} off)"
        refused = OSError(said)
        refused.errno = exc.errno
        raise refused from exc
    sock.set_inheritable(True)
    return sock
