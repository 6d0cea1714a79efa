"""Figure 14: a vision rollout, every sample with a 1 MB inline image, through ``configure()``
(offload, the default): the rollout process's memory and the stored Trace rows stay bounded.

A child process (fresh interpreter) configures otel-trackio and runs ``--samples`` samples, each a
``rollout`` root with a ``chat`` span whose ``gen_ai.input.messages`` hold a question and a PNG of
about 1 MB as an OTel ``blob`` part (base64, about 1.3 MB of text; eight distinct images in turn).
Measured: the rollout process's peak RSS (``VmHWM``) minus its RSS after the first 20 samples; the
largest stored Trace row (messages + spans, bytes, read raw from SQLite); the image files saved;
every sample stored. The last line printed is the figure.
"""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

TARGET_RSS_MB = 128.0
TARGET_ROW_BYTES = 16 * 1024
WARMUP = 20


def _images(count: int) -> list[str]:
    """``count`` distinct PNGs of about 1 MB (noise does not compress), base64."""
    import base64
    import io
    import random

    from PIL import Image

    out = []
    for seed in range(count):
        noise = random.Random(seed).randbytes(580 * 580 * 3)
        buffer = io.BytesIO()
        Image.frombytes("RGB", (580, 580), noise).save(buffer, format="PNG")
        out.append(base64.b64encode(buffer.getvalue()).decode())
    return out


def _child(samples: int, project: str) -> None:
    import _workload as w
    from opentelemetry import trace

    import otel_trackio

    images = _images(8)
    handle = otel_trackio.configure(project, "vision")
    tracer = trace.get_tracer("bench")
    baseline = 0
    started = time.perf_counter()
    for i in range(samples):
        if i == WARMUP:
            baseline = w.proc_status_kb("VmRSS")
        user = {"role": "user", "parts": [
            {"type": "text", "content": f"what is in picture {i}?"},
            {"type": "blob", "modality": "image", "mime_type": "image/png",
             "content": images[i % len(images)]},
        ]}  # fmt: skip
        attributes = {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "vlm",
            "gen_ai.input.messages": json.dumps([user]),
            "gen_ai.output.messages": json.dumps(
                [{"role": "assistant", "parts": [{"type": "text", "content": "noise"}]}]
            ),
        }
        with tracer.start_as_current_span(
            "rollout", attributes={"step": i // 100, "sample_index": i % 100}
        ):
            with tracer.start_as_current_span("chat vlm", attributes=attributes):
                pass
    rollout_seconds = time.perf_counter() - started
    peak = w.proc_status_kb("VmHWM")
    handle.shutdown()
    image_mb = len(images[0]) * 3 / 4 / 1e6
    print(json.dumps({
        "rss_growth_mb": (peak - baseline) / 1024,
        "rollout_seconds": rollout_seconds,
        "image_mb": image_mb,
    }))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--child", nargs=2, metavar=("SAMPLES", "PROJECT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _child(int(args.child[0]), args.child[1])
        return

    import _workload as w

    with tempfile.TemporaryDirectory(prefix="otel-trackio-bench-images-") as folder:
        env = dict(os.environ, TRACKIO_DIR=folder, TRACKIO_DISABLE_TELEMETRY="1")
        # 1,000 samples of 1.3 MB of text each outgrow the spool's default bound (1 GB) when
        # the rollout outruns the writer: room for all of them, the figure is about memory.
        env["OTEL_EXPORTER_TRACKIO_SPOOL_MAX_MB"] = "4096"
        env.pop("OTEL_EXPORTER_TRACKIO_OFFLOAD", None)
        project = "bench-images"
        proc = subprocess.run(
            [sys.executable, __file__, "--child", str(args.samples), project],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0:
            sys.exit(proc.stderr[-4000:])
        child = json.loads(proc.stdout.strip().splitlines()[-1])
        with sqlite3.connect(Path(folder) / f"{project}.db") as db:
            rows = db.execute("SELECT length(messages) + length(spans) FROM traces").fetchall()
        stored = len(rows)
        largest = max((r[0] for r in rows), default=0)
        files = [p for p in Path(folder).rglob("*.png")]
        saved_mb = sum(p.stat().st_size for p in files) / 1e6

    growth = child["rss_growth_mb"]
    met = stored == args.samples and growth <= TARGET_RSS_MB and largest <= TARGET_ROW_BYTES
    print(
        f"{args.samples} samples with a {child['image_mb']:.1f} MB image each "
        f"(rollout {child['rollout_seconds']:.1f} s): {stored} stored, {len(files)} image files "
        f"({saved_mb:.0f} MB); rollout peak RSS growth {growth:.1f} MB (target <= "
        f"{TARGET_RSS_MB:.0f} MB); largest Trace row {largest:,} bytes (target <= "
        f"{TARGET_ROW_BYTES:,})"
    )
    w.write_result(
        "14. vision rollout, a 1 MB image per sample: rollout RSS growth / largest row",
        f"{growth:.1f} MB / {largest:,} B, {stored}/{args.samples} stored",
        f"<= {TARGET_RSS_MB:.0f} MB / <= {TARGET_ROW_BYTES:,} B, all stored",
        met,
    )


if __name__ == "__main__":
    main()
