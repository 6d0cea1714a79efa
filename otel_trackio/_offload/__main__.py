"""``python -m otel_trackio._offload SPOOL_DIR``: the writer process of ``offload=True``."""

from __future__ import annotations

import sys

from otel_trackio._offload.writer import main

if __name__ == "__main__":
    sys.exit(main())
