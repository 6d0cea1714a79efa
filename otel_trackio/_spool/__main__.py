"""``python -m otel_trackio._spool SPOOL_DIR``: the writer process of ``offload=True``."""

from __future__ import annotations

import sys

from .writer import main

if __name__ == "__main__":
    sys.exit(main())
