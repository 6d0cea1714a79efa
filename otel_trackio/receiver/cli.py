"""``otel-trackio serve`` (the OTLP/HTTP receiver) and ``otel-trackio drain`` (log what a spool
holds, without serving) from the command line."""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from otel_trackio.receiver._auth import TOKEN_ENV, UPSTREAM_KEY_ENV, resolve_token
from otel_trackio.receiver._limits import DEFAULT_LIMITS, MIB, ReceiverLimits


def _print(line: str) -> None:
    print(line, flush=True)


def build_parser() -> argparse.ArgumentParser:
    """The ``otel-trackio`` argument parser: ``serve`` and ``drain``."""
    from otel_trackio import __version__

    parser = argparse.ArgumentParser(
        prog="otel-trackio", description="OpenTelemetry to Hugging Face Trackio."
    )
    parser.add_argument("--version", action="version", version=f"otel-trackio {__version__}")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser(
        "serve",
        help="receive OTLP (HTTP and gRPC) traces, metrics and logs into one Trackio run",
        description="Receive OTLP from any number of processes and log it into one Trackio run: "
        "OTLP/HTTP on --port (POST /v1/traces, /v1/metrics, /v1/logs; protobuf or JSON, gzip "
        "or deflate) and OTLP/gRPC on --grpc-port (gzip). GenAI log events join their "
        "samples. A request whose resource carries trackio.project / trackio.run goes to "
        "that project/run.",
    )
    serve.add_argument("--project", required=True, help="Trackio project")
    serve.add_argument("--name", default=None, help="Trackio run name (default: Trackio picks)")
    serve.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    serve.add_argument(
        "--port",
        type=_port,
        default=4318,
        help="OTLP/HTTP port (default 4318; 0: any free; off: no OTLP/HTTP)",
    )
    serve.add_argument(
        "--grpc-port",
        type=_port,
        default=4317,
        help="OTLP/gRPC port (default 4317; 0: any free; off: no OTLP/gRPC)",
    )
    serve.add_argument(
        "--token",
        default=None,
        help="require 'Authorization: Bearer TOKEN' (mandatory on a non-loopback --host; "
        f"visible in ps: prefer --token-file or {TOKEN_ENV})",
    )
    serve.add_argument(
        "--token-file",
        default=None,
        help=f"read the token from the first line of this file (else --token, else {TOKEN_ENV})",
    )
    serve.add_argument(
        "--upstream",
        default=None,
        metavar="URL",
        help="an OpenAI-compatible base URL (vLLM, SGLang, OpenAI): the HTTP port also answers "
        "model calls at /rollouts/STEP/SAMPLE_INDEX/v1, forwards them there and records each "
        "(docs/proxy.md)",
    )
    serve.add_argument(
        "--upstream-key-file",
        default=None,
        help="the upstream's API key, from the first line of this file (else "
        f"{UPSTREAM_KEY_ENV}; else the caller's own Authorization is forwarded)",
    )
    limits = DEFAULT_LIMITS
    serve.add_argument(
        "--max-body-mb",
        type=float,
        default=limits.max_body_bytes / MIB,
        help="largest body, compressed or decompressed, in MiB "
        f"(default {limits.max_body_bytes / MIB:g})",
    )
    serve.add_argument(
        "--max-inflight-mb",
        type=float,
        default=None,
        help="request bodies held at once across all connections, raw and decompressed, in MiB; "
        "past it 503 with Retry-After (default 64, or twice --max-body-mb when more)",
    )
    serve.add_argument(
        "--read-timeout-seconds",
        type=float,
        default=limits.read_timeout_seconds,
        help="longest silence while a request is read, and the time a request's headers may "
        f"take (default {limits.read_timeout_seconds:g})",
    )
    serve.add_argument(
        "--body-timeout-seconds",
        type=float,
        default=limits.body_timeout_seconds,
        help="the time one request's body may take in all "
        f"(default {limits.body_timeout_seconds:g})",
    )
    serve.add_argument(
        "--max-routes",
        type=int,
        default=limits.max_routes,
        help="distinct (trackio.project, trackio.run) routes served at most, the server's own "
        f"included; a new one past it gets 503 with Retry-After (default {limits.max_routes})",
    )
    serve.add_argument(
        "--route-idle-seconds",
        type=float,
        default=limits.route_idle_seconds,
        help="close a route (finish its run, free its memory) that received nothing for this "
        "long with nothing waiting in it; later data opens it again, continuing the same run "
        f"(default {limits.route_idle_seconds:g})",
    )
    serve.add_argument(
        "--max-span-attributes",
        type=int,
        default=None,
        help="keep the first N attributes of a span, event or log record, marking the cut "
        "(default 1024, or OTEL_EXPORTER_TRACKIO_MAX_SPAN_ATTRIBUTES)",
    )
    serve.add_argument(
        "--max-span-events",
        type=int,
        default=None,
        help="keep the first N events of a span, marking the cut (default 1024, or "
        "OTEL_EXPORTER_TRACKIO_MAX_SPAN_EVENTS)",
    )
    serve.add_argument(
        "--sample-grace-seconds",
        type=float,
        default=None,
        help="how long every completed sample waits for its spans arriving after its root "
        "(default: until the requests begun before it completed are in, at most 5, while the "
        "run shows no spans trailing their root, then 5; or "
        "OTEL_EXPORTER_TRACKIO_SAMPLE_GRACE_SECONDS)",
    )
    serve.add_argument(
        "--spool",
        default=None,
        help="spool directory (default: per project and run under "
        "OTEL_EXPORTER_TRACKIO_SPOOL_DIR, else otel-trackio-spool in the Trackio folder); a "
        "restart with the same spool logs what an earlier run left in it",
    )
    serve.add_argument(
        "--drain-seconds",
        type=float,
        default=30.0,
        help="on SIGTERM/SIGINT, how long to keep logging the spool before exiting (default 30; "
        "what is left stays spooled)",
    )
    serve.add_argument(
        "--summary-seconds",
        type=float,
        default=5.0,
        help="seconds between summary lines while data flows (default 5; 0: none)",
    )
    drain = commands.add_parser(
        "drain",
        help="log everything a spool holds into Trackio, then exit (no server)",
        description="Drain spools left behind. With no arguments: every offloading process's "
        "spool whose writer was killed with it, each into the run recorded in it. A receiver's: "
        "give --project and --name as you gave them to serve, or --spool. One offloading "
        "exporter's: --spool DIR/<project>/<run>/<host-pid-...>. Open samples are logged as "
        "partial at the end.",
    )
    drain.add_argument("--project", default=None, help="the receiver's Trackio project")
    drain.add_argument("--name", default=None, help="the receiver's run name")
    drain.add_argument("--spool", default=None, help="the spool directory")
    drain.add_argument(
        "--timeout",
        type=float,
        default=None,
        help="give up after this many seconds (exit status 1, what is left stays in the spool); "
        "default: until everything is stored",
    )
    ingest = commands.add_parser(
        "ingest",
        help="read an OpenTelemetry Collector's file exporter output into a run, then exit",
        description="Read the OTLP/JSON lines the Collector's file exporter wrote (traces, "
        "metrics and logs; rotated and gzip-compressed files too; a folder: its .json/.jsonl "
        "files, oldest first) into one Trackio run, as otel-trackio serve would have stored "
        "them. A line that is no OTLP/JSON request is said and skipped. Ingesting a file again "
        "stores nothing twice.",
    )
    ingest.add_argument("files", nargs="+", help="the Collector's output files (or folders)")
    ingest.add_argument("--project", required=True, help="Trackio project")
    ingest.add_argument("--name", default=None, help="Trackio run name (default: Trackio picks)")
    return parser


def _port(text: str) -> int | None:
    """A port number, or None for ``off``/``none``."""
    if text.strip().lower() in ("off", "none", "no"):
        return None
    try:
        port = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a port: {text!r} (a number, or off)") from None
    if not 0 <= port <= 65535:
        raise argparse.ArgumentTypeError(f"not a port: {port} (0-65535, or off)")
    return port


def _drain(args: argparse.Namespace) -> int:
    from pathlib import Path

    from otel_trackio._offload.protocol import CONFIG_FILE, FINISH_FLAG
    from otel_trackio._offload.writer import ORPHAN_FLAG, TIMEOUT_FLAG
    from otel_trackio._offload.writer import main as drain_offload_spool
    from otel_trackio._settings import TrackioSettings
    from otel_trackio._spool.paths import spool_root
    from otel_trackio.receiver._routing import Router

    bound = [] if args.timeout is None else [TIMEOUT_FLAG, str(max(0.0, args.timeout))]
    if args.spool and (Path(args.spool) / CONFIG_FILE).exists():
        return drain_offload_spool([args.spool, ORPHAN_FLAG, FINISH_FLAG, *bound])
    if not args.project and not args.spool:
        return _drain_abandoned(spool_root(TrackioSettings.from_env()), bound)
    router = Router(args.project, args.name, settings=TrackioSettings.from_env(), spool=args.spool)
    deadline = None if args.timeout is None else time.monotonic() + max(0.0, args.timeout)
    while not router.drained():
        waiting, behind = router.backlog()
        if deadline is not None and time.monotonic() >= deadline:
            router.shutdown(0)  # what is left stays in the spool for the next drain
            why = router.stalled or "storing had not finished"
            _print(
                f"otel-trackio drain: stopped after {args.timeout:g} s ({why}) with {waiting} "
                f"bytes left in {router.spool_path}; run it again to go on"
            )
            return 1
        stalled = f"; {router.stalled}" if router.stalled else ""
        _print(f"otel-trackio drain: {waiting} bytes left ({behind or 0:.0f} s behind){stalled}")
        router.wait_drained(5.0 if deadline is None else min(5.0, deadline - time.monotonic()))
    left = None if deadline is None else max(0.0, deadline - time.monotonic())
    # Handed over is not stored: the last writes are waited for (within what is left of the
    # timeout); what they could not store stays in the spool.
    if not router.shutdown(30.0 if left is None else left):
        why = router.stalled or "Trackio's storage did not take the last writes"
        _print(
            f"otel-trackio drain: stopped ({why}); what is not stored stays in "
            f"{router.spool_path}; run it again to go on"
        )
        return 1
    totals = router.totals()
    _print(
        f"otel-trackio drain: done; {totals.samples} samples logged "
        f"({totals.partial} partial), {totals.lost} lost, {totals.retried} retried, "
        f"{totals.torn_entries} torn spool entries skipped, {totals.metrics} metrics logged"
    )
    return 0


def _ingest(args: argparse.Namespace) -> int:
    from pathlib import Path

    try:
        from otel_trackio._settings import TrackioSettings
        from otel_trackio.receiver.ingest import ingest, progress_bar
    except ImportError as exc:  # pragma: no cover - depends on the install
        from otel_trackio.receiver import missing_extra

        print(f"otel-trackio ingest {missing_extra(exc)}", file=sys.stderr)
        return 2
    missing = [name for name in args.files if not Path(name).exists()]
    if missing:
        print(f"otel-trackio ingest: no such file: {', '.join(missing)}", file=sys.stderr)
        return 2
    result = ingest(
        args.files,
        args.project,
        args.name,
        settings=TrackioSettings.from_env(),
        report=_print,
        progress=progress_bar(),
    )
    _print(
        f"otel-trackio ingest: {_count(result.lines, 'line')} read, "
        f"{_count(result.requests, 'request')}, {_count(result.malformed, 'line')} skipped"
        + ("" if result.stored_everything else "; some data is left in the spool (drain it)")
    )
    return 0 if result.stored_everything else 1


def _count(number: int, thing: str) -> str:
    return f"{number} {thing}" + ("" if number == 1 else "s")


def _drain_abandoned(root: Path, bound: list[str]) -> int:
    """``otel-trackio drain`` with no arguments: every offload spool under ``root`` left by a
    writer killed with its rollout process, each into the run recorded in it (a writer process
    each, at this process's priority, one after the other; ``bound``: each gives up after
    ``--timeout`` seconds)."""
    import subprocess

    from otel_trackio._offload.client import writer_environment
    from otel_trackio._offload.protocol import FINISH_FLAG
    from otel_trackio._offload.writer import ORPHAN_FLAG, abandoned

    spools = [
        spool
        for folder in (sorted(root.iterdir()) if root.is_dir() else [])
        if folder.is_dir()
        for spool in abandoned(folder)
    ]
    failed = 0
    for spool in spools:
        _print(f"otel-trackio drain: storing {spool}")
        done = subprocess.run(
            [
                sys.executable,
                "-m",
                "otel_trackio._offload",
                str(spool),
                ORPHAN_FLAG,
                FINISH_FLAG,
                *bound,
            ],
            stdin=subprocess.DEVNULL,
            env=writer_environment(),
            check=False,
        )
        failed += done.returncode != 0
    _print(
        f"otel-trackio drain: {len(spools) - failed} of {len(spools)} abandoned spools under "
        f"{root} stored"
        + ("" if spools else " (nothing to do; a receiver's spool: give --project and --name)")
    )
    return 1 if failed else 0


def _limits(args: argparse.Namespace) -> ReceiverLimits:
    """The receiver's limits from ``serve``'s options (``ValueError`` when one is not valid)."""
    inflight = args.max_inflight_mb
    return ReceiverLimits(
        max_body_bytes=max(1, int(args.max_body_mb * MIB)),
        max_inflight_bytes=None if inflight is None else max(1, int(inflight * MIB)),
        read_timeout_seconds=args.read_timeout_seconds,
        body_timeout_seconds=args.body_timeout_seconds,
        max_routes=args.max_routes,
        route_idle_seconds=args.route_idle_seconds,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the CLI; returns the exit status."""
    args = build_parser().parse_args(argv)
    if args.command == "drain":
        return _drain(args)
    if args.command == "ingest":
        return _ingest(args)
    try:
        from otel_trackio._settings import TrackioSettings
        from otel_trackio._spool.segments import SpoolInUse
        from otel_trackio.receiver.server import OTLPReceiver
    except ImportError as exc:  # pragma: no cover - depends on the install
        from otel_trackio.receiver import missing_extra

        print(f"otel-trackio serve {missing_extra(exc)}", file=sys.stderr)
        return 2
    overrides: dict[str, Any] = {
        name: value
        for name in ("sample_grace_seconds", "max_span_attributes", "max_span_events")
        if (value := getattr(args, name)) is not None
    }
    try:
        receiver = OTLPReceiver(
            args.project,
            args.name,
            host=args.host,
            port=args.port,
            grpc_port=args.grpc_port,
            token=resolve_token(args.token, args.token_file),
            limits=_limits(args),
            summary_interval=args.summary_seconds,
            report=_print,
            settings=TrackioSettings.from_env(**overrides),
            spool=args.spool,
            drain_seconds=args.drain_seconds,
            upstream=args.upstream,
            upstream_key=resolve_token(None, args.upstream_key_file, env=UPSTREAM_KEY_ENV),
        )
    except (ValueError, OSError) as exc:  # TrackioConfigError is a ValueError
        print(f"otel-trackio serve: {exc}", file=sys.stderr)
        return 2
    except SpoolInUse as exc:
        print(
            f"otel-trackio serve: {exc} (another receiver of this project and run?); stop it, "
            "or give this one its own --spool",
            file=sys.stderr,
        )
        return 2
    from otel_trackio._offload.writer import adopt_abandoned
    from otel_trackio._spool.paths import project_spools

    # What offloading processes of this project killed with their writers left: each into its run.
    adopt_abandoned(project_spools(TrackioSettings.from_env(**overrides), args.project))
    receiver.serve_forever()
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
