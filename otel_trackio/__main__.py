"""``python -m otel_trackio serve ...``: same as the ``otel-trackio`` command."""

from __future__ import annotations

import sys

from otel_trackio.receiver.cli import main

if __name__ == "__main__":
    sys.exit(main())
